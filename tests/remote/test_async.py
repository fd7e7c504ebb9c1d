"""The async API (issue 34): ``connect_async`` against a real server process, ``AsyncMemory`` embedded.

Both faces mirror the sync classes method for method (same names, same signatures), run the
sync code's behaviour (validation, error mapping, retries), and never run the engine or a
request on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

import eidetica
from eidetica._remote.client import RemoteItems, RemoteMemory, RemoteSchedules, RemoteSession
from eidetica._store.items import Items
from eidetica.actors.schedules import Schedules
from eidetica.errors import InvalidInput, NotFound
from eidetica.memory import Memory, SessionHandle
from eidetica.providers import HashEmbedder


def _public(cls: type) -> dict[str, Any]:
    return {n: f for n, f in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


@pytest.mark.parametrize("sync_cls", [Memory, SessionHandle, Items, Schedules,
                                      RemoteMemory, RemoteSession, RemoteItems, RemoteSchedules])
def test_every_public_method_is_mirrored_as_a_coroutine_with_the_same_signature(sync_cls) -> None:
    from eidetica._remote.aio import AsyncFace

    face = AsyncFace.of(object.__new__(sync_cls), None)  # type: ignore[arg-type]
    for name, fn in _public(sync_cls).items():
        mirrored = getattr(type(face), name)
        assert inspect.iscoroutinefunction(mirrored), name
        assert inspect.signature(mirrored) == inspect.signature(fn), name


def _user_flow_checks() -> Any:
    """The same behaviours, awaited, on either face."""

    async def run(m: Any) -> None:
        loop_thread = threading.get_ident()
        fid = await m.remember("likes green tea", "food", user="ada")
        hits = await m.recall("tea", user="ada")
        assert [h.id for h in hits] == [fid]
        s = await m.session("c1", user="ada")
        await s.extend([{"role": "user", "content": "book a table at the ramen place"},
                        {"role": "assistant", "content": "done, 7pm"}])
        assert await s.length() == 2
        assert [x.content for x in await s.history()] == ["book a table at the ramen place", "done, 7pm"]
        assert (await s.pop()).content == "done, 7pm"
        assert [h.text for h in await m.search("ramen", user="ada")][:1] == ["book a table at the ramen place"]
        await m.items.put([{"namespace": ("ada", "prefs"), "key": "k", "value": {"v": 1}, "user": "ada", "texts": None}])
        assert (await m.items.get(("ada", "prefs"), "k")).value == {"v": 1}
        # the sync code's validation and the server's error mapping, raised from the coroutine
        with pytest.raises(InvalidInput) as e:
            await m.recall("tea", top_k=0, user="ada")
        assert e.value.field == "top_k"
        with pytest.raises(NotFound):
            await m.forget("fact-nope", user="ada")
        await m.forget(fid, user="ada")
        assert fid not in [h.id for h in await m.recall("tea", user="ada")]
        assert threading.get_ident() == loop_thread

    return run


def test_connect_async_runs_the_client_behaviours_against_a_server(served) -> None:
    async def main() -> None:
        m = await eidetica.connect_async(served.url, api_key=served.tenant())
        async with m:
            await _user_flow_checks()(m)

    asyncio.run(main())


def test_async_memory_runs_the_same_behaviours_embedded(tmp_path) -> None:
    async def main() -> None:
        m = eidetica.AsyncMemory(eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)))
        async with m:
            await _user_flow_checks()(m)

    asyncio.run(main())


def test_embedded_calls_never_run_on_the_event_loop_thread(tmp_path) -> None:
    """The engine is sync: the face runs it on its bounded pool, so the loop stays free."""
    async def main() -> None:
        m = eidetica.AsyncMemory(eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)), max_workers=2)
        loop_thread = threading.get_ident()
        ran_on = await asyncio.gather(*[m.run_sync(threading.get_ident) for _ in range(8)])
        assert loop_thread not in ran_on and len(set(ran_on)) <= 2
        await m.close()

    asyncio.run(main())


def test_concurrent_async_requests_take_no_thread_each(served) -> None:
    """100 concurrent searches from one loop: no thread is started for them (greenback portals)."""
    async def main() -> None:
        m = await eidetica.connect_async(served.url, api_key=served.tenant())
        s = await m.session("conc", user="bo")
        await s.extend([{"role": "user", "content": f"note {i} about kites"} for i in range(5)])
        # a first burst opens the pool's connections (asyncio may resolve the address on a few pool threads)
        await asyncio.gather(*[m.search("kites", user="bo") for _ in range(100)])
        before = threading.active_count()
        results = await asyncio.gather(*[m.search("kites", user="bo") for _ in range(100)])
        assert threading.active_count() <= before  # none per request (an earlier test's pool threads may still exit)
        assert results[0] and all([h.id for h in r] == [h.id for h in results[0]] for r in results)
        await m.close()

    asyncio.run(main())


def test_async_memory_refuses_what_is_not_an_embedded_memory() -> None:
    with pytest.raises(InvalidInput) as e:
        eidetica.AsyncMemory("not a memory")  # type: ignore[arg-type]
    assert e.value.field == "memory"
