"""Where the upstream tests construct a store or a session, they get eidetica's adapter instead.

Each name here stands in for the one a vendored file imported (``InMemoryStore``,
``SqliteStore``, ``AsyncSqliteStore``, ``PostgresStore``, ``AsyncPostgresStore``,
``SQLiteSession``, ``SimpleListSession``) and builds ``EideticaStore`` / ``EideticaSession`` on a
real eidetica store (Arrow log, LanceDB, Tantivy) under the test's tmp_path. Only construction
lives here: every call the tests make after it goes to the adapters unchanged.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import eidetica
from eidetica.integrations.langgraph import EideticaStore
from eidetica.integrations.openai_agents import EideticaSession, _message
from eidetica.providers import HashEmbedder

_root: list[Path] = []
_open: dict[str, Any] = {}  # a "connection string" -> the memory behind it, for this test


@contextlib.contextmanager
def stores(tmp_path: Path) -> Iterator[None]:
    """Stores built during a test live under ``tmp_path`` and are closed after it."""
    _root.append(tmp_path)
    try:
        yield
    finally:
        _root.pop()
        for m in _open.values():
            m.close()
        _open.clear()


def memory(conn: Any = None) -> Any:
    """The eidetica memory behind a connection string: a new store for None or ":memory:",
    the same store again for the same file name within a test (as reopening a database file)."""
    key = str(conn) if conn not in (None, ":memory:") else f":memory:{uuid.uuid4().hex}"
    if key not in _open:
        path = _root[-1] / ("m-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key)[-80:] + "-" + uuid.uuid4().hex[:6])
        # a store without an ``index`` config never embeds with the model: the fast hash embedder
        _open[key] = eidetica.open(path, embedder=HashEmbedder(dim=64))
    return _open[key]


class _Store(EideticaStore):
    """EideticaStore with the set-up calls the database stores' tests make (nothing to set up)."""

    MIGRATIONS: list[Any] = []  # the Postgres fixtures rewrite the store's migrations before setup()

    @contextlib.contextmanager
    def _cursor(self, **_: Any) -> Iterator[Any]:
        """The Postgres fixtures drop the migrations table through this; any other SQL is refused."""
        yield _Admin()

    def setup(self) -> None:
        """Nothing to migrate."""

    async def asetup(self) -> None:
        """Nothing to migrate."""


class InMemoryStore(_Store):
    """A new store, as ``InMemoryStore(index=..., ttl=...)``."""

    def __init__(self, *, index: Any = None, ttl: Any = None) -> None:
        super().__init__(memory(), index=index, ttl=ttl)


class SqliteStore(_Store):
    """``SqliteStore.from_conn_string(conn, index=..., ttl=...)`` over eidetica."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: Any, *, index: Any = None, ttl: Any = None, **_: Any) -> Iterator[EideticaStore]:
        """The store for this connection string."""
        yield cls(memory(conn_string), index=index, ttl=ttl)


class AsyncSqliteStore(_Store):
    """``AsyncSqliteStore.from_conn_string(conn, index=..., ttl=...)`` over eidetica."""

    @contextlib.asynccontextmanager  # type: ignore[override]
    async def _cursor(self, **_: Any) -> AsyncIterator[Any]:
        """The Postgres fixtures drop the migrations table through this; any other SQL is refused."""
        yield _AsyncAdmin()

    # The async stores' set-up, sweeper start / stop and sweep are coroutines (plain calls on the
    # sync stores); one EideticaStore serves both, so these await the plain calls.
    async def setup(self) -> None:  # type: ignore[override]
        """Nothing to migrate."""

    async def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> Any:  # type: ignore[override]
        """``EideticaStore.start_ttl_sweeper``, awaited as the async stores' fixtures do."""
        return super().start_ttl_sweeper(sweep_interval_minutes)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """``EideticaStore.stop_ttl_sweeper``, awaited as the async stores' fixtures do."""
        return super().stop_ttl_sweeper(timeout)

    async def sweep_ttl(self) -> int:  # type: ignore[override]
        """``EideticaStore.sweep_ttl``, awaited as the async stores' tests do."""
        return super().sweep_ttl()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string: Any, *, index: Any = None, ttl: Any = None,
                               **_: Any) -> AsyncIterator[EideticaStore]:
        """The store for this connection string."""
        yield cls(memory(conn_string), index=index, ttl=ttl)


PostgresStore = SqliteStore
AsyncPostgresStore = AsyncSqliteStore


class SQLiteSession(EideticaSession):
    """``SQLiteSession(session_id, db_path, session_settings=...)`` over eidetica."""

    def __init__(self, session_id: str, db_path: Any = ":memory:", session_settings: Any = None) -> None:
        super().__init__(session_id, memory(db_path), user="upstream", session_settings=session_settings)

    def close(self) -> None:
        """The memory is closed after the test."""


def SimpleListSession(session_id: str = "test", history: Any = None) -> EideticaSession:  # noqa: N802
    """The SDK tests' ``SimpleListSession(session_id, history)``: a session of one store per test.

    Rehydrating (the same id again with the items read so far) is reopening the session:
    eidetica already holds those items, so ``history`` is written only to a session without any.
    """
    s = SQLiteSession(session_id, "SimpleListSession")
    if history and not len(s._handle):
        s._handle.extend([_message(i, item) for i, item in enumerate(history)])
    return s


def _construction_sql(sql: str) -> None:
    """The statements the Postgres tests' fixtures send while building a store (create or empty a
    database, drop the migrations table): nothing to do, each eidetica store is a new directory."""
    if not sql.strip().upper().startswith(("CREATE DATABASE", "DROP DATABASE", "DROP TABLE IF EXISTS STORE_MIGRATIONS",
                                           "DELETE FROM CHECKPOINT", "DELETE FROM STORE")):
        raise NotImplementedError(f"eidetica has no SQL tables; the test reads Postgres's own: {sql.strip()[:60]}")


class _Admin:
    """Stands in for the psycopg admin connection that creates and drops each test's database."""

    def __enter__(self) -> _Admin:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    async def __aenter__(self) -> _Admin:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def execute(self, sql: str, *args: Any) -> Any:
        """Accept the fixtures' CREATE / DROP DATABASE (each eidetica store is a new directory)."""
        _construction_sql(sql)
        return self._done()

    def _done(self) -> Any:
        return None


class _AsyncAdmin(_Admin):
    async def execute(self, sql: str, *args: Any) -> Any:  # type: ignore[override]
        """Accept the fixtures' CREATE / DROP DATABASE."""
        _construction_sql(sql)


class Connection:
    """``psycopg.Connection.connect(...)`` for the fixtures' admin connection."""

    def __class_getitem__(cls, _: Any) -> type:
        return cls

    @staticmethod
    def connect(*_: Any, **__: Any) -> _Admin:
        """An admin connection that only creates and drops databases."""
        return _Admin()


class AsyncConnection:
    """``psycopg.AsyncConnection.connect(...)`` for the fixtures' admin connection."""

    def __class_getitem__(cls, _: Any) -> type:
        return cls  # annotated as AsyncConnection[DictRow]

    @staticmethod
    async def connect(*_: Any, **__: Any) -> _AsyncAdmin:
        """An admin connection that only creates and drops databases."""
        return _AsyncAdmin()
