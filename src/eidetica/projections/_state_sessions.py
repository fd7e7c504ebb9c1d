"""The state's sessions: messages (sequence, time, log offset; bodies read from the log), summaries, speakers, pending extractions (a part of ``StateProjection``, issue 41).

Folds of the ``sessions`` events, and the queries on them; the tombstones, the lock and the log are
``StateBase``'s. ``StateProjection`` composes the five aggregates and routes each event to its fold.
"""

from __future__ import annotations

import datetime as dt

from ..events import RecordedEvent
from ..events import types as ev
from ._ranking import speaker_label
from ._records import MessageInfo, SessionInfo
from ._state_base import StateBase
from ._state_rows import _from_us, _Session, _us


class SessionFolds(StateBase):
    """The sessions aggregate of the state: its maps, folds and queries."""

    _sessions: dict[tuple[str, str], _Session]
    _user_sessions: dict[tuple[str, str], set[str]]
    # user messages no ExtractionCompleted covers yet, per (tenant, session): what a crash between an
    # append and its extraction leaves (resumed at open); ``_early``: completions folded before their
    # message (another partition's tail applied first)
    _todo: dict[tuple[str, str], set[int]]
    _early: dict[tuple[str, str], set[int]]

    def _reset_sessions(self) -> None:
        """Empty this aggregate."""
        self._sessions = {}
        self._user_sessions = {}
        self._todo = {}
        self._early = {}

    def _learn_session(self, tenant: str, session_id: str, user_id: str) -> None:
        """Record which user a session belongs to; purge a summary a user forget covers."""
        if not user_id:
            return
        key = (tenant, session_id)
        if self._session_user.get(key) == user_id:
            return
        self._session_user[key] = user_id
        self._user_sessions.setdefault((tenant, user_id), set()).add(session_id)
        s = self._sessions.get(key)
        if s is not None and not s.user_id:
            s.user_id = user_id
        if s is not None and s.summary is not None and self._user_dead(tenant, user_id, "sessions", s.summary[3]):
            s.summary = None
            if not s.seqs and not s.forgotten:
                del self._sessions[key]

    def _session(self, tenant: str, session_id: str, user_id: str, time: dt.datetime) -> _Session:
        key = (tenant, session_id)
        s = self._sessions.get(key)
        if s is None:
            s = self._sessions[key] = _Session(user_id or self._session_user.get(key, ""), time)
        elif time < s.started:
            s.started = time
        return s

    def _on_session_started(self, rec: RecordedEvent, e: ev.SessionStarted) -> None:
        self._learn_session(rec.tenant, e.session_id, e.user_id)
        if self._dead(rec.tenant, e.user_id, e.session_id, rec.time):
            return
        s = self._session(rec.tenant, e.session_id, e.user_id, rec.time)
        if s.forgotten:
            s.forgotten = False
        s.last = max(s.last, rec.time)

    def _on_message(self, rec: RecordedEvent, e: ev.MessageAppended) -> None:
        self._learn_session(rec.tenant, e.session_id, e.user_id)
        if self._dead(rec.tenant, e.user_id, e.session_id, rec.time):
            return
        s = self._session(rec.tenant, e.session_id, e.user_id, rec.time)
        s.forgotten = False
        # keyed by sequence, first one wins; the session actor appends increasing sequences,
        # so the linear membership test only runs for out-of-order histories (imports)
        if e.sequence > s.top or e.sequence not in s.seqs:
            us = _us(rec.time)
            s.top = max(s.top, e.sequence)
            s.seqs.append(e.sequence)
            s.times.append(us)
            s.offsets.append(rec.offset)
            if self._log is not None:
                s.part = self._log.partition_of(rec.stream)
            if self._bodies is not None:
                self._bodies[(rec.tenant, e.session_id, e.sequence)] = e
            name = e.metadata.get("name") if e.metadata else None
            if isinstance(name, str) and name.strip():
                s.names[name.strip()] = max(s.names.get(name.strip(), us), us)
            elif (label := speaker_label(e.content)) is not None:
                s.labels[e.sequence] = label
                s.label_n[label] = s.label_n.get(label, 0) + 1
            if e.extract:
                key = (rec.tenant, e.session_id)
                early = self._early.get(key)
                if early is not None and e.sequence in early:
                    early.discard(e.sequence)
                    if not early:
                        del self._early[key]
                else:
                    self._todo.setdefault(key, set()).add(e.sequence)
        s.last = max(s.last, rec.time)

    def _on_extraction(self, rec: RecordedEvent, e: ev.ExtractionCompleted) -> None:
        key = (rec.tenant, e.session_id)
        todo = self._todo.get(key, set())
        s = self._sessions.get(key)
        for q in e.sequences:
            if q in todo:
                todo.discard(q)
            elif s is None or q > s.top:  # its message is not folded yet (another partition)
                self._early.setdefault(key, set()).add(q)
        if key in self._todo and not todo:
            del self._todo[key]

    def _prune_todo(self, key: tuple[str, str]) -> None:
        """Keep only pending extractions of messages still live (after a retraction or a forget)."""
        todo = self._todo.get(key)
        if todo is None:
            return
        s = self._sessions.get(key)
        live = todo & set(s.seqs) if s is not None and not s.forgotten else set()
        if live:
            self._todo[key] = live
        else:
            del self._todo[key]

    def _on_message_retracted(self, rec: RecordedEvent, e: ev.MessageRetracted) -> None:
        s = self._sessions.get((rec.tenant, e.session_id))
        if s is not None:
            s.retract(e.sequence)
            self._prune_todo((rec.tenant, e.session_id))
            if self._bodies is not None:
                self._bodies.pop((rec.tenant, e.session_id, e.sequence), None)
            s.last = max(s.last, rec.time)

    def _on_summary(self, rec: RecordedEvent, e: ev.SummaryCommitted) -> None:
        if self._dead(rec.tenant, None, e.session_id, rec.time):
            return
        s = self._session(rec.tenant, e.session_id, "", rec.time)
        if s.summary is None or e.epoch >= s.summary[0]:
            s.summary = (e.epoch, e.text, e.upto_sequence, rec.time)
        s.last = max(s.last, rec.time)

    def _on_session_forgotten(self, rec: RecordedEvent, e: ev.SessionForgotten) -> None:
        key = (rec.tenant, e.session_id)
        self._learn_session(rec.tenant, e.session_id, e.user_id)
        prev = self._session_tomb.get(key)
        self._session_tomb[key] = rec.time if prev is None else max(prev, rec.time)
        s = self._sessions.get(key)
        user = e.user_id or self._session_user.get(key, "")
        if s is None:
            if self._dead(rec.tenant, user or None, None, rec.time):
                return
            s = self._sessions[key] = _Session(user, rec.time)
        s.keep_after(rec.time)
        if s.summary is not None and s.summary[3] <= rec.time:
            s.summary = None
        if not s.seqs:
            s.forgotten = True
        self._prune_todo(key)
        s.last = max(s.last, rec.time)

    def _forget_user_sessions(self, rec: RecordedEvent, t: str, u: str) -> None:
        for sid in list(self._user_sessions.get((t, u), ())):
            s = self._sessions.get((t, sid))
            if s is None:
                continue
            s.keep_after(rec.time)
            if s.summary is not None and s.summary[3] <= rec.time:
                s.summary = None
            if not s.seqs and s.summary is None:
                del self._sessions[(t, sid)]
            self._prune_todo((t, sid))

    def sessions(self, tenant: str, user_id: str | None = None, *, include_forgotten: bool = False) -> list[SessionInfo]:
        """Sessions of a tenant (optionally one user's), most recently updated first."""
        with self._lock:
            if user_id is None:
                items = [(sid, s) for (t, sid), s in self._sessions.items() if t == tenant]
            else:
                ids = self._user_sessions.get((tenant, user_id), ())
                items = [(sid, self._sessions[(tenant, sid)]) for sid in ids if (tenant, sid) in self._sessions]
                items = [(sid, s) for sid, s in items if s.user_id == user_id]
            out = [self._session_info(sid, s) for sid, s in items if include_forgotten or not s.forgotten]
        out.sort(key=lambda i: (i.last_time, i.session_id), reverse=True)
        return out

    def _session_info(self, sid: str, s: _Session) -> SessionInfo:
        return SessionInfo(
            session_id=sid,
            user_id=s.user_id,
            message_count=len(s.seqs),
            last_time=s.last,
            started_time=s.started,
            forgotten=s.forgotten,
        )

    def session(self, tenant: str, session_id: str) -> SessionInfo | None:
        """One session's info (forgotten ones too), or None when unknown."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            return None if s is None else self._session_info(session_id, s)

    def messages(self, tenant: str, session_id: str, sequences: set[int] | None = None) -> list[MessageInfo]:
        """A session's messages in sequence order (only ``sequences`` when given; [] when unknown or forgotten);
        bodies come from the log."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            if s is None or s.forgotten:
                return []
            rows = sorted(r for r in zip(s.seqs, s.times, s.offsets) if sequences is None or r[0] in sequences)
            part = s.part
            if self._bodies is not None:
                bodies = {q: self._bodies[(tenant, session_id, q)] for q, _, _ in rows}
        if self._bodies is None:
            by_offset = {r.offset: r for r in self._log.read_offsets([o for _, _, o in rows], partition=part)}  # type: ignore[union-attr]
            bodies = {}
            for q, _, o in rows:
                r = by_offset.get(o)
                e = r.decode() if r is not None and r.type == "MessageAppended" else None
                if isinstance(e, ev.MessageAppended) and e.session_id == session_id and r.tenant == tenant:  # type: ignore[union-attr]
                    bodies[q] = e
        return [
            MessageInfo(session_id=session_id, user_id=b.user_id, role=b.role, content=b.content, sequence=q,
                        time=_from_us(tm), metadata=dict(b.metadata))
            for q, tm, _ in rows if (b := bodies.get(q)) is not None
        ]

    def pending_extractions(self) -> list[tuple[str, MessageInfo]]:
        """(tenant, message) of every live user message no ``ExtractionCompleted`` covers yet, oldest first per session."""
        with self._lock:
            todo = [(k, set(v)) for k, v in self._todo.items()]
        return [(t, m) for (t, sid), seqs in todo for m in self.messages(t, sid, seqs)]

    def names(self, tenant: str, session_id: str) -> set[str]:
        """The participant names (``metadata["name"]``) of a session's live messages."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            return set() if s is None or s.forgotten else set(s.names)

    def labels(self, tenant: str, session_id: str) -> dict[str, int]:
        """Speaker labels (``"Name: "``) that start a session's live messages without ``metadata["name"]``, with counts."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            return {} if s is None or s.forgotten else dict(s.label_n)

    def participants(self, tenant: str, user_id: str) -> tuple[set[str], dict[str, int]]:
        """A user's participant names: ``metadata["name"]`` of every live session, and the
        speaker-label counts of the sessions that have no metadata name (one lock, no log read)."""
        names: set[str] = set()
        labels: dict[str, int] = {}
        with self._lock:
            for sid in self._user_sessions.get((tenant, user_id), ()):
                s = self._sessions.get((tenant, sid))
                if s is None or s.forgotten or s.user_id != user_id:
                    continue
                if s.names:
                    names.update(s.names)
                else:
                    for label, c in s.label_n.items():
                        labels[label] = labels.get(label, 0) + c
        return names, labels

    def summary(self, tenant: str, session_id: str) -> tuple[int, str | None, int]:
        """(epoch, text, upto_sequence) of the session's latest summary; (0, None, -1) when none."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            if s is None or s.summary is None:
                return (0, None, -1)
            return (s.summary[0], s.summary[1], s.summary[2])
