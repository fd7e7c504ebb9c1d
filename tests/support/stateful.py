"""A hypothesis state machine that drives a real store (one face) and the reference model together.

Every rule runs one operation of the public API on the store (``model_faces``) and on the model
(``model``) and compares the answers. Rules cover sessions and messages, facts, notes, items,
tenants and users, export/import, as_of, compact with a scan of every file for erased tokens,
rebuild, bad input (refused naming its field), several clients at once, and crashes (SIGKILL
between two steps, or during a write) followed by a full check: acknowledged writes all there
exactly once; an unacknowledged write all there or not at all.

``COUNTS`` adds up operations and crashes over every run in this process (``scripts/soak.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from .model import Model, Tokens
from .model_checks import bad_inputs, scan_for_tokens
from .model_faces import make_face

__all__ = ["COUNTS", "StoreMachine", "machine_for"]

COUNTS = {"operations": 0, "crashes": 0}
TIMES: dict[str, list[float]] = {}  # op -> [calls, seconds]: where a soak's time goes
TENANTS = ("ta", "tb")
USERS = ("u1", "u2")
FILLER = ("apple", "river", "stone", "cloud", "lamp", "seven")
NAMESPACES = (("a",), ("a", "b"), ("c",))
EVERY_HEAVY = int(os.environ.get("EIDETICA_MODEL_HEAVY_EVERY", "150"))  # operations between compactions / rebuilds
TOKEN = re.compile(r"zq[a-z]{9}q")

tenants = st.sampled_from(TENANTS)
users = st.sampled_from(USERS)
picks = st.integers(0, 7)


class Divergence(AssertionError):
    """The store answered other than the model."""


class StoreMachine(RuleBasedStateMachine):
    """The store (``FACE``) against the model; subclasses fix the face."""

    FACE = "sync"
    CRASH_EVERY = int(os.environ.get("EIDETICA_MODEL_CRASH_EVERY", "40"))  # operations between crashes at least

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="eidetica-model-"))
        self.store = self.dir / "store"
        self.face = make_face(self.FACE, self.store)
        self.model = Model()
        self.tokens = Tokens(0)
        self.next_sid = 0
        self.imports = 0
        self.since_heavy = 0
        self.since_crash = self.since_rebuild = self.since_as_of = 0
        self.all_facts: dict[tuple[str, str], set[str]] = {}
        self.started = False  # the face starts on the first operation: hypothesis' first, empty run costs nothing

    def up(self) -> Any:
        """The face, started."""
        if not self.started:
            self.face.start()
            self.started = True
        return self.face

    def teardown(self) -> None:
        """Stop the face and remove the store."""
        try:
            self.face.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- plumbing --------------------------------------------------------------------------
    def ok(self, op: str, args: dict[str, Any]) -> Any:
        """Run ``op``; it must succeed."""
        COUNTS["operations"] += 1
        self.since_heavy += 1
        self.since_crash += 1
        self.since_rebuild += 1
        self.since_as_of += 1
        face = self.up()
        t0 = time.monotonic()
        status, value = face.call(op, args)
        took = TIMES.setdefault(op, [0, 0.0])
        took[0] += 1
        took[1] += time.monotonic() - t0
        if status != "ok":
            raise Divergence(f"{self.face.name}: {op}({args}) raised {value}")
        return value

    def check(self, cond: bool, what: str) -> None:
        """A divergence unless ``cond``."""
        if not cond:
            raise Divergence(f"{self.face.name}: {what}")

    def live_sessions(self, tenant: str) -> list[str]:
        return sorted(sid for (t, sid), s in self.model.sessions.items() if t == tenant and not s.forgotten)

    def pick_session(self, tenant: str, pick: int, user: str) -> tuple[str, str]:
        """An existing live session of the tenant (by ``pick``), or a new one for ``user``."""
        live = self.live_sessions(tenant)
        # mostly the first few sessions: conversations grow long enough for windows and summaries
        if live and pick < 7:
            sid = live[pick % min(len(live), 3)]
            return sid, self.model.sessions[(tenant, sid)].user
        self.next_sid += 1
        return f"s{self.next_sid}", user

    def text(self) -> tuple[str, str]:
        token = self.tokens.new()
        return f"{token} {FILLER[len(token) % len(FILLER)]} {FILLER[ord(token[3]) % len(FILLER)]}", token

    # -- sessions ----------------------------------------------------------------------------
    @initialize(seed=st.integers(0, 2**32 - 1))
    def seed_tokens(self, seed: int) -> None:
        """Tokens differ per run (and stay reproducible for a seed)."""
        self.tokens = Tokens(seed)

    @rule(tenant=tenants, pick=picks, user=users, role=st.sampled_from(["user", "assistant"]), meta=st.booleans())
    def append(self, tenant: str, pick: int, user: str, role: str, meta: bool) -> None:
        sid, user = self.pick_session(tenant, pick, user)
        content, token = self.text()
        metadata = {"tag": token[2:6], "n": len(content)} if meta else {}
        off = self.ok("append", {"tenant": tenant, "sid": sid, "user": user, "role": role, "content": content,
                                 "metadata": metadata})
        self.check(isinstance(off, int) and off >= 0, f"append returned {off!r}")
        self.model.append(tenant, sid, user, [(role, content, metadata, token)], off)

    @rule(tenant=tenants, pick=picks, user=users, n=st.integers(2, 4))
    def extend(self, tenant: str, pick: int, user: str, n: int) -> None:
        sid, user = self.pick_session(tenant, pick, user)
        msgs = self.new_messages(n)
        off = self.ok("extend", {"tenant": tenant, "sid": sid, "user": user, "messages": [m for m, _ in msgs]})
        self.model.append(tenant, sid, user, [(m["role"], m["content"], m["metadata"], t) for m, t in msgs], off)

    def new_messages(self, n: int) -> list[tuple[dict[str, Any], str]]:
        out = []
        for i in range(n):
            content, token = self.text()
            out.append(({"role": "user" if i % 2 == 0 else "assistant", "content": content,
                         "metadata": {"part": i, "tag": token[2:6]}}, token))
        return out

    @rule(tenant=tenants, pick=picks, user=users)
    def retried_append(self, tenant: str, pick: int, user: str) -> None:
        """The same event id twice (a client's retry): stored once, the same offset both times."""
        sid, user = self.pick_session(tenant, pick, user)
        content, token = self.text()
        args = {"tenant": tenant, "sid": sid, "user": user, "role": "user", "content": content,
                "event_id": str(uuid.uuid4())}
        first = self.ok("append", args)
        again = self.ok("append", args)
        self.check(first == again, f"a retried append got offset {again}, the first {first}")
        self.model.append(tenant, sid, user, [("user", content, {}, token)], first)
        self.check_history(tenant, sid)  # stored once

    @rule(tenant=tenants, pick=picks)
    def history(self, tenant: str, pick: int) -> None:
        live = self.live_sessions(tenant)
        if live:
            self.check_history(tenant, live[pick % len(live)])

    def check_history(self, tenant: str, sid: str) -> None:
        user = self.model.sessions[(tenant, sid)].user
        got = self.ok("history", {"tenant": tenant, "sid": sid, "user": user})
        want = self.model.history(tenant, sid)
        self.check([(g["sequence"], g["role"], g["content"]) for g in got]
                   == [(m.sequence, m.role, m.content) for m in want],
                   f"history of {tenant}/{sid}: {[(g['sequence'], g['content']) for g in got]} "
                   f"!= {[(m.sequence, m.content) for m in want]}")
        for g, m in zip(got, want):
            self.check(all(g["metadata"].get(k) == v for k, v in m.metadata.items()),
                       f"metadata of {tenant}/{sid}#{m.sequence}: {g['metadata']} lacks {m.metadata}")

    @rule(tenant=tenants, pick=picks, window=st.integers(1, 5))
    def read_window(self, tenant: str, pick: int, window: int) -> None:
        live = self.live_sessions(tenant)
        if not live:
            return
        sid = live[pick % len(live)]
        got = self.ok("read", {"tenant": tenant, "sid": sid, "user": self.model.sessions[(tenant, sid)].user,
                               "strategy": "sliding_window", "window": window})
        want = self.model.window(tenant, sid, window)
        self.check([g["sequence"] for g in got] == [m.sequence for m in want],
                   f"read(window={window}) of {tenant}/{sid}: {[g['sequence'] for g in got]} != {[m.sequence for m in want]}")

    @rule(tenant=tenants, pick=picks, summarize=st.booleans())
    def read(self, tenant: str, pick: int, summarize: bool) -> None:
        """read(): every turn the summary does not cover (after summarize(), if asked)."""
        live = self.live_sessions(tenant)
        if not live:
            return
        sid = live[pick % len(live)]
        args = {"tenant": tenant, "sid": sid, "user": self.model.sessions[(tenant, sid)].user}
        if summarize:
            self.ok("summarize", args)
        got = self.ok("read", args)
        why = self.model.read_ok(tenant, sid, [(g["role"], g["sequence"], g["content"]) for g in got])
        self.check(why is None, str(why))

    @rule(tenant=tenants, pick=picks, which=st.integers(0, 20))
    def forget_message(self, tenant: str, pick: int, which: int) -> None:
        live = [sid for sid in self.live_sessions(tenant) if self.model.history(tenant, sid)]
        if not live:
            return
        sid = live[pick % len(live)]
        msgs = self.model.history(tenant, sid)
        seq = msgs[which % len(msgs)].sequence
        self.ok("forget_message", {"tenant": tenant, "sid": sid, "user": self.model.sessions[(tenant, sid)].user,
                                   "sequence": seq})
        token = next(m.token for m in msgs if m.sequence == seq)
        self.model.forget_message(tenant, sid, seq)
        self.check_history(tenant, sid)
        self.after_forget(tenant, self.model.sessions[(tenant, sid)].user, [token])

    @rule(tenant=tenants, pick=picks)
    def forget_session(self, tenant: str, pick: int) -> None:
        live = self.live_sessions(tenant)
        if not live:
            return
        sid = live[pick % len(live)]
        tokens = [m.token for m in self.model.history(tenant, sid)]
        self.ok("forget_session", {"tenant": tenant, "sid": sid})
        self.model.forget_session(tenant, sid)
        self.after_forget(tenant, self.model.sessions[(tenant, sid)].user, tokens)

    # -- facts and notes ---------------------------------------------------------------------
    def fact_text(self) -> tuple[str, str]:
        a, b = self.tokens.new(), self.tokens.new()
        return f"{a} {b}", a

    @rule(tenant=tenants, user=users, retry=st.booleans())
    def remember(self, tenant: str, user: str, retry: bool) -> None:
        content, token = self.fact_text()
        args = {"tenant": tenant, "user": user, "content": content, "request_id": str(uuid.uuid4()) if retry else None}
        fid = self.ok("remember", args)
        if retry:
            again = self.ok("remember", args)
            self.check(again == fid, f"remember retried with its request id gave {again}, first {fid}")
        self.all_facts.setdefault((tenant, user), set()).add(fid)
        self.model.remember(tenant, user, fid, content, token)
        self.model.live[content.split()[1]] = (tenant, user)

    @rule(tenant=tenants, user=users, n=st.integers(2, 3))
    def remember_many(self, tenant: str, user: str, n: int) -> None:
        texts = [self.fact_text() for _ in range(n)]
        ids = self.ok("remember_many", {"tenant": tenant, "user": user, "items": [c for c, _ in texts]})
        self.check(isinstance(ids, list) and len(ids) == n and len(set(ids)) == n, f"remember_many gave {ids}")
        for fid, (c, t) in zip(ids, texts):
            self.all_facts.setdefault((tenant, user), set()).add(fid)
            self.model.remember(tenant, user, fid, c, t)
            self.model.live[c.split()[1]] = (tenant, user)

    @rule(tenant=tenants, user=users, pick=picks)
    def forget_fact(self, tenant: str, user: str, pick: int) -> None:
        ids = sorted(self.model.facts.get((tenant, user), {}))
        if not ids:
            return
        fid = ids[pick % len(ids)]
        tokens = self.model.facts[(tenant, user)][fid].split()
        self.ok("forget", {"tenant": tenant, "user": user, "fact_id": fid})
        self.model.forget_fact(tenant, user, fid)
        self.after_forget(tenant, user, tokens)

    @rule(tenant=st.sampled_from(TENANTS + ("imp0",)), user=users)
    def list_memories(self, tenant: str, user: str) -> None:
        self.check_facts(tenant, user)

    def check_facts(self, tenant: str, user: str) -> None:
        got = self.ok("list_memories", {"tenant": tenant, "user": user})
        ids = [g["id"] for g in got]
        self.check(len(ids) == len(set(ids)), f"a fact listed twice: {ids}")
        by_content = {g["content"]: g["id"] for g in got}
        for fid, content in self.model.facts.get((tenant, user), {}).items():
            # an imported tenant may re-key ids: there the content is what must be kept
            self.check(content in by_content, f"fact {fid} {content!r} of {tenant}/{user} missing from {got}")
        gone = set(self.model.forgotten) if tenant in TENANTS else set()  # an imported tenant keeps what it got
        self.check(not any(w in gone for g in got for w in g["content"].split()), f"a forgotten fact listed: {got}")

    @rule(tenant=tenants, user=users)
    def store_note(self, tenant: str, user: str) -> None:
        text, token = self.text()
        nid = self.ok("store_note", {"tenant": tenant, "user": user, "text": text})
        self.model.store_note(tenant, user, nid, text, token)

    @rule(tenant=tenants, user=users, pick=picks, delete=st.booleans())
    def change_note(self, tenant: str, user: str, pick: int, delete: bool) -> None:
        ids = sorted(self.model.notes.get((tenant, user), {}))
        if not ids:
            return
        nid = ids[pick % len(ids)]
        if delete:
            tokens = [w for w in self.model.notes[(tenant, user)][nid].split() if w.startswith("zq")]
            self.ok("delete_note", {"tenant": tenant, "user": user, "note_id": nid})
            self.model.delete_note(tenant, user, nid)
            self.after_forget(tenant, user, tokens)
        else:
            text, token = self.text()
            self.ok("update_note", {"tenant": tenant, "user": user, "note_id": nid, "text": text})
            self.model.update_note(tenant, user, nid, text, token)

    @rule(tenant=st.sampled_from(TENANTS + ("imp0",)), user=users)
    def list_notes(self, tenant: str, user: str) -> None:
        self.check_notes(tenant, user)

    def check_notes(self, tenant: str, user: str) -> None:
        got = self.ok("list_notes", {"tenant": tenant, "user": user})
        want = self.model.notes.get((tenant, user), {})
        self.check(sorted(g["text"] for g in got) == sorted(want.values()),
                   f"notes of {tenant}/{user}: {sorted(g['text'] for g in got)} != {sorted(want.values())}")

    # -- items (LangGraph's store) -------------------------------------------------------------
    @rule(tenant=tenants, user=users, ns=st.sampled_from(NAMESPACES), key=st.sampled_from(["k0", "k1", "k2"]),
          kind=st.sampled_from(["put", "put", "delete"]), tag=st.sampled_from(["x", "y"]))
    def item_put(self, tenant: str, user: str, ns: tuple[str, ...], key: str, kind: str, tag: str) -> None:
        value = None
        if kind == "put":
            _, token = self.text()
            value = {"v": token, "tag": tag, "nested": {"n": len(token)}}
        # LangGraph: the key belongs to its first owner here; another user's put would move it
        owner = self.model.item_users.get((tenant, ns, key), user)
        self.ok("items_put", {"tenant": tenant, "ops": [{"namespace": list(ns), "key": key, "value": value,
                                                         "user": owner, "texts": [value["v"]] if value else None}]})
        self.model.put_item(tenant, owner, ns, key, value)

    @rule(tenant=tenants, ns=st.sampled_from(NAMESPACES), key=st.sampled_from(["k0", "k1", "k2"]))
    def item_get(self, tenant: str, ns: tuple[str, ...], key: str) -> None:
        got = self.ok("items_get", {"tenant": tenant, "namespace": list(ns), "key": key})
        want = self.model.get_item(tenant, ns, key)
        self.check((got and got["value"]) == want, f"item {tenant}/{ns}/{key}: {got} != {want}")

    @rule(tenant=tenants, prefix=st.sampled_from([(), ("a",), ("c",), ("a", "b")]),
          flt=st.sampled_from([None, {"tag": "x"}, {"tag": "y"}]))
    def item_search(self, tenant: str, prefix: tuple[str, ...], flt: dict[str, Any] | None) -> None:
        got = self.ok("items_search", {"tenant": tenant, "prefix": list(prefix), "filter": flt})
        want = self.model.search_items(tenant, prefix, flt)
        self.check({(tuple(ns), k) for ns, k in got} == want and len(got) == len(want),
                   f"items under {prefix} {flt}: {got} != {sorted(want)}")
        nss = self.ok("items_namespaces", {"tenant": tenant})
        self.check([tuple(x) for x in nss] == self.model.namespaces(tenant), f"namespaces {nss}")

    # -- search: invariants, not rankings ------------------------------------------------------
    @rule(tenant=tenants, user=users, pick=st.integers(0, 10**6), kind=st.sampled_from(["own", "own", "other", "forgotten"]),
          mode=st.sampled_from(["hybrid", "text", "vector"]))
    def search(self, tenant: str, user: str, pick: int, kind: str, mode: str) -> None:
        """A live token of this user is found; a forgotten one, or another user's or tenant's, never."""
        live = sorted(self.model.live.items())
        pools = {"own": [t for t, o in live if o == (tenant, user)], "other": [t for t, o in live if o != (tenant, user)],
                 "forgotten": sorted(self.model.forgotten)}
        pool = pools[kind]
        if not pool:
            return
        token = pool[pick % len(pool)]
        self.check_search(tenant, user, token, mode, must_find=kind == "own" and mode != "vector")

    def check_search(self, tenant: str, user: str, token: str, mode: str, must_find: bool) -> None:
        hits = self.ok("search", {"tenant": tenant, "user": user, "query": token, "mode": mode})
        for h in hits:
            self.check(h["user_id"] in (user, None), f"search by {tenant}/{user} returned a hit of {h['user_id']}: {h}")
            for w in TOKEN.findall(h["text"]):
                self.check(w not in self.model.forgotten, f"search returned forgotten {w!r} ({mode}): {h}")
                owner = self.model.owner(w)
                self.check(owner is None or owner == (tenant, user), f"search by {tenant}/{user} returned {owner}'s {w!r}: {h}")
        if must_find:
            self.check(any(token in h["text"] for h in hits), f"live {token!r} of {tenant}/{user} not found ({mode}): {hits}")

    def after_forget(self, tenant: str, user: str, tokens: list[str]) -> None:
        """Each forgotten token, asked for at once, through both engines: nowhere."""
        for t in tokens[:2]:
            for mode in ("text", "vector"):
                self.check_search(tenant, user, t, mode, must_find=False)

    # -- tenants and users, export and import --------------------------------------------------
    @rule(tenant=tenants, user=users)
    def forget_user(self, tenant: str, user: str) -> None:
        before = set(self.model.forgotten)
        self.ok("forget_user", {"tenant": tenant, "user": user})
        self.model.forget_user(tenant, user)
        self.after_forget(tenant, user, sorted(self.model.forgotten - before))

    @precondition(lambda self: self.imports < 3)
    @rule(src=tenants)
    def export_import(self, src: str) -> None:
        """Export a tenant, import it into a fresh one: the same sessions (with metadata), facts, notes, items."""
        dst = f"imp{self.imports}"
        self.imports += 1
        path = str(self.dir / f"export-{dst}.jsonl")
        n = self.ok("export", {"tenant": src, "path": path})
        r = self.ok("import", {"tenant": dst, "path": path})
        self.check(r.get("written") == n and not r.get("skipped"), f"import of {n} events into {dst}: {r}")
        self.model.tenant_copy(src, dst)
        self.full_check((dst,))

    # -- compact, rebuild, as_of ---------------------------------------------------------------
    @precondition(lambda self: self.since_heavy >= EVERY_HEAVY)
    @rule(tenant=tenants)
    def compact(self, tenant: str) -> None:
        """compact(); then no file of the store (nor LanceDB's versions, nor Tantivy's terms) holds an erased token."""
        self.since_heavy = 0
        self.ok("compact", {"tenant": tenant})
        erased = self.model.erased()
        if erased:
            leaks = scan_for_tokens(self.store, erased)
            self.check(not leaks, f"erased tokens still on disk after compact: {leaks[:5]}")

    @precondition(lambda self: self.since_rebuild >= EVERY_HEAVY)
    @rule(tenant=tenants, user=users)
    def rebuild(self, tenant: str, user: str) -> None:
        """Rebuild the projections from the log: every answer as before."""
        self.since_rebuild = 0
        self.ok("rebuild", {"tenant": tenant})
        self.full_check((tenant,))

    @precondition(lambda self: self.since_as_of >= 20)
    @rule(pick=st.integers(0, 10**6))
    def as_of(self, pick: int) -> None:
        """The store at an earlier offset: a session exactly as it was then (later messages unseen)."""
        self.since_as_of = 0
        if not self.model.past_sessions:
            return
        offs = sorted(self.model.past_sessions)
        off = offs[pick % len(offs)]
        tenant, sessions = self.model.past_sessions[off]
        got = self.ok("as_of", {"tenant": tenant, "offset": off, "what": "histories",
                                "sessions": [[sid, self.model.sessions[(tenant, sid)].user] for sid in sorted(sessions)]})
        for sid, contents in sorted(sessions.items()):
            self.check([g["content"] for g in got[sid]] == contents, f"as_of({off}) of {tenant}/{sid}: "
                       f"{[g['content'] for g in got[sid]]} != {contents}")

    # -- bad input, several clients, crashes ----------------------------------------------------
    @rule(i=st.integers(0, 1000), tenant=tenants)
    def bad_input(self, i: int, tenant: str) -> None:
        """Refused with InvalidInput naming its field; the session it aimed at unchanged."""
        cases = bad_inputs(tenant, self.live_sessions(tenant), self.model)
        op, args, field = cases[i % len(cases)]
        COUNTS["operations"] += 1
        status, value = self.up().call(op, args)
        self.check(status == "err" and value["error"] == "InvalidInput" and value["field"] == field,
                   f"{op}({args}) should be refused naming {field!r}: {status} {value}")
        if "sid" in args and (tenant, args["sid"]) in self.model.sessions:
            self.check_history(tenant, args["sid"])

    @rule(tenant=tenants, n=st.integers(2, 6))
    def concurrent(self, tenant: str, n: int) -> None:
        """n clients at once: appends to their own sessions, facts, notes; each acknowledged, each there once."""
        reqs, apply = [], []
        for i in range(n):
            user = USERS[i % 2]
            content, token = self.text()
            if i % 3 == 0:
                reqs.append(("remember", {"tenant": tenant, "user": user, "content": f"{content.split()[0]} {self.tokens.new()}"}))
                apply.append(("fact", user, reqs[-1][1]["content"], token))
            elif i % 3 == 1:
                sid, _ = self.pick_session(tenant, 99, user)
                reqs.append(("append", {"tenant": tenant, "sid": sid, "user": user, "role": "user", "content": content}))
                apply.append(("msg", user, sid, (content, token)))
            else:
                reqs.append(("store_note", {"tenant": tenant, "user": user, "text": content}))
                apply.append(("note", user, content, token))
        COUNTS["operations"] += n
        out = self.up().many(reqs)
        for (status, value), (what, user, a, b) in zip(out, apply):
            self.check(status == "ok", f"concurrent {what} failed: {value}")
            if what == "fact":
                self.model.remember(tenant, user, value, a, b)
                self.model.live[a.split()[1]] = (tenant, user)
            elif what == "msg":
                self.model.append(tenant, a, user, [("user", b[0], {}, b[1])], value)
            else:
                self.model.store_note(tenant, user, value, a, b)

    @precondition(lambda self: self.since_crash >= self.CRASH_EVERY)
    @rule()
    def crash(self) -> None:
        """SIGKILL between two steps, reopen: every acknowledged write there, exactly once."""
        COUNTS["crashes"] += 1
        self.since_crash = 0
        self.up().restart()
        self.full_check(TENANTS)

    @precondition(lambda self: self.since_crash >= self.CRASH_EVERY)
    @rule(tenant=tenants, pick=picks, user=users, kind=st.sampled_from(["extend", "remember_many", "store_note"]),
          delay=st.sampled_from([0.0, 0.003, 0.01, 0.03, 0.1]))
    def crash_during_write(self, tenant: str, pick: int, user: str, kind: str, delay: float) -> None:
        """SIGKILL while a write is in flight: acknowledged, it is all there; else all there or not at all."""
        COUNTS["crashes"] += 1
        COUNTS["operations"] += 1
        self.since_crash = 0
        if kind == "extend":
            sid, user = self.pick_session(tenant, pick, user)
            msgs = self.new_messages(3)
            args = {"tenant": tenant, "sid": sid, "user": user, "messages": [m for m, _ in msgs]}
        elif kind == "remember_many":
            texts = [self.fact_text() for _ in range(3)]
            args = {"tenant": tenant, "user": user, "items": [c for c, _ in texts]}
        else:
            text, token = self.text()
            args = {"tenant": tenant, "user": user, "text": text}
        ans = self.up().crash_during(kind, args, delay)
        self.face.restart()
        acked = ans is not None and ans[0] == "ok"
        if kind == "extend":
            got = self.ok("history", {"tenant": tenant, "sid": sid, "user": user})
            before = len(self.model.history(tenant, sid))
            there = len(got) > before
            self.check(len(got) in ((before + 3,) if acked else (before, before + 3)),
                       f"{'acknowledged' if acked else 'unacknowledged'} extend of 3 left {len(got) - before} in {tenant}/{sid}")
            if there:
                self.model.append(tenant, sid, user, [(m["role"], m["content"], m["metadata"], t) for m, t in msgs],
                                  ans[1] if acked else None)
        elif kind == "remember_many":
            got = {g["content"]: g["id"] for g in self.ok("list_memories", {"tenant": tenant, "user": user})}
            n = sum(c in got for c, _ in texts)
            self.check(n in ((3,) if acked else (0, 3)), f"remember_many of 3 left {n} (acknowledged: {acked})")
            for c, t in texts if n else ():
                self.model.remember(tenant, user, got[c], c, t)
                self.model.live[c.split()[1]] = (tenant, user)
        else:
            got = {g["text"]: g["id"] for g in self.ok("list_notes", {"tenant": tenant, "user": user})}
            self.check(text in got or not acked, f"acknowledged note {text!r} lost")
            if text in got:
                self.model.store_note(tenant, user, got[text], text, token)
        self.full_check(TENANTS)

    def full_check(self, tenants_: tuple[str, ...]) -> None:
        """Every session, fact, note and item of these tenants as the model says."""
        for tenant in tenants_:
            for sid in self.live_sessions(tenant):
                self.check_history(tenant, sid)
            for user in USERS:
                self.check_facts(tenant, user)
                self.check_notes(tenant, user)
            got = self.ok("items_search", {"tenant": tenant, "prefix": [], "filter": None})
            want = self.model.search_items(tenant, (), None)
            self.check({(tuple(ns), k) for ns, k in got} == want, f"items of {tenant}: {got} != {sorted(want)}")
            for ns, key in sorted(want):
                got1 = self.ok("items_get", {"tenant": tenant, "namespace": list(ns), "key": key})
                self.check(got1 is not None and got1["value"] == self.model.get_item(tenant, ns, key),
                           f"item {tenant}/{ns}/{key}: {got1} != {self.model.get_item(tenant, ns, key)}")


class SyncMachine(StoreMachine):
    """Embedded ``eidetica.open`` in a child process."""

    FACE = "sync"


class AsyncMachine(StoreMachine):
    """``AsyncMemory`` over an embedded store in a child process."""

    FACE = "async"


class ServerMachine(StoreMachine):
    """A real ``eidetica serve`` through ``eidetica.connect``."""

    FACE = "server"


def machine_for(face: str) -> type[StoreMachine]:
    """The machine class of a face: ``sync`` | ``async`` | ``server``."""
    return {"sync": SyncMachine, "async": AsyncMachine, "server": ServerMachine}[face]
