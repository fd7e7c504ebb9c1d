"""Pin the curated public API: adding or removing a name is a deliberate change here."""

import eidetica
import eidetica.errors as errors


def test_exported_names_are_pinned() -> None:
    assert sorted(eidetica.__all__) == sorted(
        [
            "__version__",
            "open",
            "connect",
            "connect_async",
            "AsyncMemory",
            "Memory",
            "SessionHandle",
            "MemoryConfig",
            "SearchOptions",
            "Hit",
            "Message",
            "EventLog",
            "ArrowLog",
            "InMemoryLog",
            "NewEvent",
            "RecordedEvent",
            "ANY",
            "NO_STREAM",
            "STREAM_EXISTS",
            "EideticaError",
            "InvalidInput",
            "WrongExpectedVersion",
            "EventIdConflict",
            "CorruptLog",
            "CorruptIndex",
            "UnknownEventType",
            "StoreLocked",
            "EmbeddingModelChanged",
            "DimensionMismatch",
            "NotFound",
            "ProviderError",
            "StorageError",
            "Unauthorized",
            "ReplicaBehind",
            "ReadOnly",
            "Unavailable",
        ]
    )
    for name in eidetica.__all__:
        assert hasattr(eidetica, name), name


def test_error_tree_is_flat_under_one_root() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.EideticaError)
        if cls is not errors.EideticaError:
            assert errors.EideticaError in cls.__mro__[1:3]


def test_every_public_function_is_documented_and_typed() -> None:
    import importlib
    import inspect
    import pkgutil

    missing = []
    for mod_info in pkgutil.walk_packages(eidetica.__path__, "eidetica."):
        mod = importlib.import_module(mod_info.name)
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            members = [(name, obj)]
            if inspect.isclass(obj):
                members += [
                    (f"{name}.{m}", f) for m, f in vars(obj).items()
                    if not m.startswith("_") and inspect.isfunction(f)
                ]
            for qual, fn in members:
                if inspect.isfunction(fn) or inspect.isclass(fn):
                    if not (fn.__doc__ or "").strip():
                        missing.append(f"{mod.__name__}.{qual}: no docstring")
                if inspect.isfunction(fn):
                    ann = fn.__annotations__
                    if "return" not in ann:
                        missing.append(f"{mod.__name__}.{qual}: no return annotation")
    assert not missing, "\n".join(missing)


def test_errors_survive_pickling_with_their_fields() -> None:
    import pickle

    cases = [
        errors.InvalidInput("user", "must be a string", 5),
        errors.WrongExpectedVersion("s", 1, 3),
        errors.CorruptLog("/x/seg", 10, "bad", offset=4),
        errors.UnknownEventType("Future"),
        errors.StoreLocked("/x"),
        errors.EmbeddingModelChanged("a", "b"),
        errors.DimensionMismatch(384, 12),
        errors.NotFound("fact", "f1"),
        errors.ProviderError("down"),
        errors.StorageError(28, "No space left on device", "/x/log"),
        errors.Unauthorized("revoked"),
        errors.ReplicaBehind("views:1", {0: 9}, {0: 3}, 0.5),
        errors.ReadOnly("store as of 2026-11-01"),
    ]
    for e in cases:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
        assert vars(back) == vars(e)


def test_docstrings_point_to_no_file_the_checkout_lacks() -> None:
    """A docstring naming DESIGN.md sends a reader to a file the package does not ship (issue #36)."""
    import importlib
    import inspect
    import pkgutil
    from pathlib import Path

    root = Path(eidetica.__file__).resolve().parents[2]
    bad = []
    for mod_info in pkgutil.walk_packages(eidetica.__path__, "eidetica."):
        mod = importlib.import_module(mod_info.name)
        for name, obj in vars(mod).items():
            doc = inspect.getdoc(obj) if (inspect.isclass(obj) or inspect.isfunction(obj)) else None
            if doc and "DESIGN.md" in doc and not (root / "DESIGN.md").exists():
                bad.append(f"{mod_info.name}.{name}")
    assert not bad, bad
