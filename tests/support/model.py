"""A reference model of what eidetica's public API promises, in plain Python (no eidetica import).

The stateful test (``tests/support/stateful.py``) drives a real store and this model with the
same operations and compares every answer. Where the store is exact (histories, facts by id,
notes, items, windows, as_of) the model predicts the answer; where it is heuristic (extraction,
ranking) the model states invariants instead:

* a unique token written and not forgotten is found by ``search``;
* a forgotten one is never returned, nor a hit of another user or tenant;
* ``read()`` returns every turn the summary does not cover;
* after ``compact`` no file of the store holds a forgotten token.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Model", "Msg", "Tokens"]


class Tokens:
    """Unique random words: no two share a trigram by design of chance (10 letters), none is a substring of another."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def new(self) -> str:
        """A fresh word; a fixed length and a closing 'q' keep one from being a prefix of another."""
        while True:
            t = "zq" + "".join(self.rng.choice("bcdfghjklmnprstvwxy") for _ in range(9)) + "q"
            if t not in self.seen:
                self.seen.add(t)
                return t


@dataclass
class Msg:
    """One stored message as the model knows it."""

    sequence: int
    role: str
    content: str
    metadata: dict[str, Any]
    token: str


@dataclass
class Session:
    """A session: its owner, its live messages, its last sequence, its summary boundary."""

    user: str
    messages: list[Msg] = field(default_factory=list)
    last_sequence: int = -1  # the first message is sequence 0
    forgotten: bool = False


@dataclass
class Model:
    """What the store must hold, per tenant: sessions, facts, notes, items; and the tokens forgotten."""

    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)
    facts: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (tenant, user) -> id -> content
    notes: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (tenant, user) -> id -> text
    items: dict[tuple[str, tuple[str, ...], str], dict[str, Any]] = field(default_factory=dict)  # (tenant, ns, key)
    item_users: dict[tuple[str, tuple[str, ...], str], str] = field(default_factory=dict)
    # token -> (tenant, user): live tokens a search by that user must find
    live: dict[str, tuple[str, str]] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)  # tokens an imported tenant holds (never forgotten there)
    # as_of: offset -> (tenant, session id, contents then) / (tenant, user, fact ids then)
    past_sessions: dict[int, tuple[str, dict[str, list[str]]]] = field(default_factory=dict)
    past_facts: dict[int, tuple[str, str, set[str]]] = field(default_factory=dict)

    # -- sessions ------------------------------------------------------------------------
    def session(self, tenant: str, sid: str, user: str) -> Session:
        """The session (made on first use); a forgotten id starts afresh."""
        s = self.sessions.get((tenant, sid))
        if s is None or s.forgotten:
            s = self.sessions[(tenant, sid)] = Session(user, last_sequence=s.last_sequence if s else -1)
        return s

    def append(self, tenant: str, sid: str, user: str, msgs: list[tuple[str, str, dict[str, Any], str]],
               offset: int | None) -> None:
        """Messages (role, content, metadata, token) appended in one acknowledged write."""
        s = self.session(tenant, sid, user)
        for role, content, meta, token in msgs:
            s.last_sequence += 1
            s.messages.append(Msg(s.last_sequence, role, content, dict(meta), token))
            self.live[token] = (tenant, user)
        if offset is not None and offset >= 0:  # every session of the tenant then: a later message is seen
            self.past_sessions[offset] = (tenant, {i: [m.content for m in x.messages]
                                                   for (t, i), x in self.sessions.items() if t == tenant and not x.forgotten})

    def history(self, tenant: str, sid: str) -> list[Msg]:
        """Live messages of a session, oldest first."""
        s = self.sessions.get((tenant, sid))
        return [] if s is None or s.forgotten else list(s.messages)

    def window(self, tenant: str, sid: str, n: int) -> list[Msg]:
        """``read(strategy="sliding_window", window=n)``: the last n messages (short texts always fit the budget)."""
        return self.history(tenant, sid)[-n:]

    def forget_message(self, tenant: str, sid: str, sequence: int) -> None:
        """One message gone (its sequence is not reused)."""
        s = self.sessions[(tenant, sid)]
        gone = [m for m in s.messages if m.sequence == sequence]
        s.messages = [m for m in s.messages if m.sequence != sequence]
        self._forget_tokens([m.token for m in gone])

    def forget_session(self, tenant: str, sid: str) -> None:
        """A whole session gone."""
        s = self.sessions[(tenant, sid)]
        self._forget_tokens([m.token for m in s.messages])
        s.messages, s.forgotten = [], True

    # -- facts and notes -----------------------------------------------------------------
    def remember(self, tenant: str, user: str, fid: str, content: str, token: str, offset: int | None = None) -> None:
        """A fact written (or the same request id repeated: same id, same content)."""
        self.facts.setdefault((tenant, user), {})[fid] = content
        self.live[token] = (tenant, user)
        if offset is not None:
            self.past_facts[offset] = (tenant, user, set(self.facts[(tenant, user)]))

    def forget_fact(self, tenant: str, user: str, fid: str) -> None:
        """A fact deleted."""
        content = self.facts[(tenant, user)].pop(fid)
        self._forget_tokens(content.split())

    def store_note(self, tenant: str, user: str, nid: str, text: str, token: str) -> None:
        """A note stored."""
        self.notes.setdefault((tenant, user), {})[nid] = text
        self.live[token] = (tenant, user)

    def update_note(self, tenant: str, user: str, nid: str, text: str, token: str) -> None:
        """A note's text replaced: the old text's token is no longer the note's (forgotten only after compact)."""
        old = self.notes[(tenant, user)][nid]
        self.notes[(tenant, user)][nid] = text
        self.live[token] = (tenant, user)
        for t in old.split():
            self.live.pop(t, None)

    def delete_note(self, tenant: str, user: str, nid: str) -> None:
        """A note deleted."""
        text = self.notes[(tenant, user)].pop(nid)
        self._forget_tokens(text.split())

    # -- items (LangGraph's store) --------------------------------------------------------
    def put_item(self, tenant: str, user: str, ns: tuple[str, ...], key: str, value: dict[str, Any] | None) -> None:
        """LangGraph ``put``: None deletes; a put replaces the whole value."""
        k = (tenant, ns, key)
        if value is None:
            self.items.pop(k, None)
            self.item_users.pop(k, None)
        else:
            self.items[k] = copy.deepcopy(value)
            self.item_users[k] = user

    def get_item(self, tenant: str, ns: tuple[str, ...], key: str) -> dict[str, Any] | None:
        """LangGraph ``get``: the value or None."""
        return self.items.get((tenant, ns, key))

    def search_items(self, tenant: str, prefix: tuple[str, ...], flt: dict[str, Any] | None) -> set[tuple[tuple[str, ...], str]]:
        """LangGraph ``search`` without a query: every item under the prefix whose value equals the filter's pairs."""
        return {(ns, key) for (t, ns, key), v in self.items.items()
                if t == tenant and ns[:len(prefix)] == prefix and all(v.get(a) == b for a, b in (flt or {}).items())}

    def namespaces(self, tenant: str) -> list[tuple[str, ...]]:
        """Namespaces holding an item, sorted."""
        return sorted({ns for (t, ns, _k) in self.items if t == tenant})

    # -- whole-store operations -----------------------------------------------------------
    def forget_user(self, tenant: str, user: str) -> None:
        """Every session, fact, note and item of the user gone."""
        for (t, sid), s in self.sessions.items():
            if t == tenant and s.user == user and not s.forgotten:
                self.forget_session(t, sid)
        for fid in list(self.facts.get((tenant, user), {})):
            self.forget_fact(tenant, user, fid)
        for nid in list(self.notes.get((tenant, user), {})):
            self.delete_note(tenant, user, nid)
        for k in [k for k, u in self.item_users.items() if k[0] == tenant and u == user]:
            self.items.pop(k)
            self.item_users.pop(k)

    def tenant_copy(self, src: str, dst: str) -> None:
        """``export`` from ``src`` then ``import_`` into a fresh ``dst``: the same content, re-keyed to ``dst``.

        ``dst`` is never written again; its tokens stay on disk, so they leave the erasure scan.
        """
        for (t, sid), s in list(self.sessions.items()):
            if t == src and not s.forgotten and s.messages:
                self.sessions[(dst, sid)] = copy.deepcopy(s)
                self.held.update(m.token for m in s.messages)
        for (t, u), fs in list(self.facts.items()):
            if t == src and fs:
                self.facts[(dst, u)] = dict(fs)
                self.held.update(w for c in fs.values() for w in c.split())
        for (t, u), ns in list(self.notes.items()):
            if t == src and ns:
                self.notes[(dst, u)] = dict(ns)
                self.held.update(w for c in ns.values() for w in c.split())
        for (t, ns_, k), v in list(self.items.items()):
            if t == src:
                self.items[(dst, ns_, k)] = copy.deepcopy(v)
                self.item_users[(dst, ns_, k)] = self.item_users[(t, ns_, k)]

    def erased(self) -> set[str]:
        """Tokens no tenant holds any more: after ``compact`` no file of the store may contain them."""
        return self.forgotten - self.held - set(self.live)

    def _forget_tokens(self, tokens: list[str]) -> None:
        for t in tokens:
            if t.startswith("zq"):
                self.live.pop(t, None)
                self.forgotten.add(t)
        # a past view may show what is forgotten until compact erases it: stop predicting those
        self.past_sessions.clear()
        self.past_facts.clear()

    # -- invariants ------------------------------------------------------------------------
    def owner(self, token: str) -> tuple[str, str] | None:
        """(tenant, user) whose search must find this live token; None if not live."""
        return self.live.get(token)

    def read_ok(self, tenant: str, sid: str, got: list[tuple[str, int, str]]) -> str | None:
        """``read()`` (summarizing): a summary, if any, first; then every live turn after the summary's boundary.

        ``got``: (role, sequence, content) as read returned them. None when consistent, else why not.
        """
        live = self.history(tenant, sid)
        turns = [g for g in got if g[0] != "system"]
        summary = [g for g in got if g[0] == "system"]
        upto = summary[0][1] if summary else -1
        want = [(m.role, m.sequence, m.content) for m in live if m.sequence > upto]
        if not summary:
            want = want[-10:]  # no summary: the configured window (10) of short turns
        if turns != want:
            return f"read() turns {turns} != expected {want} (summary up to {upto if summary else None})"
        return None
