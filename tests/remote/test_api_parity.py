"""One API everywhere: ``eidetica.connect()`` offers every public method of ``eidetica.open()``'s
objects with the same parameters (names, kinds, defaults), or the method is listed here with why not."""

from __future__ import annotations

import inspect

import pytest

from eidetica._remote.client import RemoteItems, RemoteMemory, RemoteSchedules, RemoteSession
from eidetica._store.items import Items
from eidetica.actors import Schedules
from eidetica.memory import Memory, SessionHandle

PAIRS = [(Memory, RemoteMemory), (SessionHandle, RemoteSession), (Schedules, RemoteSchedules), (Items, RemoteItems)]

# what cannot exist over HTTP, and why (anything else missing remotely fails the test)
LOCAL_ONLY = {
    (Memory, "state"): "the in-process state folds: a client reads them through the API's methods",
    (Memory, "index"): "the in-process LanceDB/Tantivy index: a client searches through search/recall",
    (Memory, "projector"): "the in-process projector that feeds the views: the server runs it",
}


def _public(cls: type) -> dict[str, object]:
    return {n: inspect.getattr_static(cls, n) for n in dir(cls) if not n.startswith("_")}


def _shape(fn: object) -> list[tuple[str, object, object]]:
    """What a caller depends on: each parameter's name, kind and default (annotations may name other classes)."""
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


@pytest.mark.parametrize("local, remote", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_remote_classes_have_every_public_method_with_the_same_parameters(local: type, remote: type) -> None:
    here, there = _public(local), _public(remote)
    problems = []
    for name, attr in sorted(here.items()):
        if (local, name) in LOCAL_ONLY:
            assert name not in there, f"{remote.__name__}.{name} exists: take it off LOCAL_ONLY"
            continue
        if name not in there:
            problems.append(f"{remote.__name__} lacks {name}")
            continue
        other = there[name]
        if isinstance(attr, property) or isinstance(other, property):
            if type(attr) is not type(other):
                problems.append(f"{name}: a property on one side only")
            continue
        if callable(attr) or isinstance(attr, (staticmethod, classmethod)):
            if _shape(attr) != _shape(other):
                problems.append(f"{name}: {inspect.signature(attr)} != {inspect.signature(other)}")  # type: ignore[arg-type]
    for name in sorted(set(there) - set(here)):
        problems.append(f"{remote.__name__}.{name} has no counterpart on {local.__name__}")
    assert not problems, "\n".join(problems)


def test_a_refused_connection_raises_unavailable_saying_nothing_was_sent() -> None:
    import pickle

    import eidetica
    from tests.support.served import free_port

    with pytest.raises(eidetica.Unavailable) as e:
        eidetica.connect(f"http://127.0.0.1:{free_port()}", retries=1)
    assert e.value.sent is False and "nothing was sent" in str(e.value) and "GET /v1/stats" in str(e.value)
    assert isinstance(e.value, eidetica.EideticaError)
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is eidetica.Unavailable and again.sent is False


def test_a_server_that_never_answers_raises_unavailable_saying_what_to_retry() -> None:
    import socket
    import threading

    import eidetica

    quiet = socket.socket()
    quiet.bind(("127.0.0.1", 0))
    quiet.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # takes connections, reads nothing, answers nothing
        quiet.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(quiet.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        with pytest.raises(eidetica.Unavailable) as e:
            eidetica.connect(f"http://127.0.0.1:{quiet.getsockname()[1]}", timeout=0.3, retries=0)
        assert e.value.sent is True and "retry the call" in str(e.value) and "ReadTimeout" in str(e.value)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        quiet.close()
