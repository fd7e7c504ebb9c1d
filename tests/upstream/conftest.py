"""The frameworks' own test files run against eidetica's adapters (see README.md here).

pytest-asyncio's ``asyncio_mode = auto`` (what both upstream projects configure) holds for this
directory only: its coroutine tests get the ``asyncio`` mark and its async fixtures run on the
test's loop, while the rest of the suite keeps the plugin's default (strict) mode.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from . import _eidetica


@pytest.hookimpl(tryfirst=True, wrapper=True)
def pytest_pycollect_makeitem(collector: Any, name: str, obj: object) -> Any:
    """Mark coroutine tests of this directory as asyncio tests (auto mode, scoped here)."""
    if inspect.iscoroutinefunction(obj) and collector.funcnamefilter(name):
        pytest.mark.asyncio(obj)
    return (yield)


@pytest.hookimpl(tryfirst=True, wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Any:
    """Run this directory's async fixtures on the test's loop (auto mode, scoped here)."""
    func = fixturedef.func
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        func._force_asyncio_fixture = True  # pytest-asyncio's own flag for @pytest_asyncio.fixture
    return (yield)


@pytest.fixture(autouse=True)
def _eidetica_stores(tmp_path: Any) -> Any:
    """Every store or session an upstream test builds lives under its tmp_path, closed after it."""
    with _eidetica.stores(tmp_path):
        yield


# What the upstream files test of another backend's own behaviour (its SQL, its locks, its
# quirks), expected to fail here; strict, so a pass is reported. Keyed by file::test (all its
# parametrisations).
_SQLITE = "reads or writes SQLite's own tables, connections or locks"
_PG = "reads or writes Postgres's own tables through SQL"
_OTHER_BACKEND: dict[str, str] = {
    # LangGraph's SqliteStore
    "langgraph/checkpoint_sqlite/test_store.py::test_vector_store_initialization": _SQLITE,
    "langgraph/checkpoint_sqlite/test_store.py::test_sql_injection_vulnerability":
        "SqliteStore refuses filter keys that are not identifiers (ValueError); eidetica matches any key as data",
    "langgraph/checkpoint_sqlite/test_store.py::test_filter_keys_with_hyphens_and_digits":
        "SqliteStore reads dotted filter keys as JSON paths; eidetica (as InMemoryStore) reads them as literal keys",
    "langgraph/checkpoint_sqlite/test_async_store.py::test_no_running_loop":
        "AsyncSqliteStore refuses sync calls on the event loop (InvalidStateError); EideticaStore serves both",
    "langgraph/checkpoint_sqlite/test_ttl.py::test_ttl_override_default":
        "SqliteStore does not refresh a TTL on read unless asked; eidetica follows LangGraph's default (refresh_on_read)",
    # LangGraph's PostgresStore: these expire rows by SQL (UPDATE store SET expires_at = ...)
    **{f"langgraph/checkpoint_postgres/{f}::{t}": _PG for f in ("test_store.py", "test_async_store.py") for t in (
        "test_omit_expired_filters_read_paths",
        "test_omit_expired_disabled_preserves_expired_rows",
        "test_omit_expired_refresh_ttl_only_refreshes_live_rows",
        "test_omit_expired_search_pagination",
    )},
    "langgraph/checkpoint_postgres/test_async_store.py::test_no_running_loop":
        "AsyncPostgresStore refuses sync calls on the event loop (InvalidStateError); EideticaStore serves both",
    "langgraph/checkpoint_postgres/test_async_store.py::test_abatch_uses_single_pool_checkout":
        "counts checkouts of Postgres's connection pool",
    # the Agents SDK's SQLiteSession
    **{f"openai_agents/memory/test_session.py::{t}": _SQLITE for t in (
        "test_sqlite_session_close_closes_worker_thread_connections",
        "test_sqlite_session_closed_rejects_empty_add_items",
        "test_sqlite_session_pop_item_skips_corrupt_most_recent",
        "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows",
        "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows",
        "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows",
        "test_sqlite_session_file_lock_is_shared_across_instances",
        "test_sqlite_session_failed_add_items_releases_write_lock",
        "test_sqlite_session_failed_clear_session_rolls_back",
        "test_sqlite_session_failed_pop_item_releases_write_lock",
        "test_sqlite_session_rollback_failure_evicts_connection",
        "test_sqlite_session_close_retries_quarantined_connection",
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome",
    )},
}






# Long ones (TTL waits, thousands of single-op calls), marked slow; one is beyond the suite's budget.
_SLOW = {"test_large_batches", "test_large_batches_async", "test_store_ttl"}
_TOO_LONG = {
    "langgraph/checkpoint_postgres/test_async_store.py::test_large_batches_async":
        "60,000 concurrent single-op calls: about 10 min per parametrisation on this 2-core machine "
        "(the 6,000-call thread version and SQLite's async version run)",
}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark the tests of another backend's own behaviour xfail (strict), with the reason; mark the long ones."""
    for item in items:
        if "tests/upstream/" not in item.nodeid:
            continue
        rel = item.nodeid.split("tests/upstream/", 1)[-1].split("[", 1)[0]
        reason = _OTHER_BACKEND.get(rel)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        if rel in _TOO_LONG:
            item.add_marker(pytest.mark.skip(reason=_TOO_LONG[rel]))
        if rel.rsplit("::", 1)[-1] in _SLOW or "test_ttl.py" in rel:
            item.add_marker(pytest.mark.slow)
