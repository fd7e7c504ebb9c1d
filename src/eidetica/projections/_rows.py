"""Chunk rows, delete predicates and filters, shared by the LanceDB and Tantivy sides.

A row is keyed by ``key = tenant + "\\x1f" + chunk id`` so that two tenants can never
overwrite each other's rows even if their chunk ids collide. ``etime`` is the log time
(microseconds) of the event that produced the row; deletes only remove rows whose
``etime`` is not after the deleting event, which makes the fold independent of how
partitions are interleaved.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from ..errors import InvalidInput

__all__ = ["Row", "Pred", "Filters", "sql_str", "make_key", "to_us", "from_us", "term_value", "SEP", "KINDS", "check_kinds",
           "message_sequence"]

KINDS = ("message", "summary", "fact", "note", "item")  # what a row (a searchable chunk) can be

SEP = "\x1f"
_MSGPACK = msgspec.msgpack.Encoder()
_UNPACK = msgspec.msgpack.Decoder()


def make_key(tenant: str, chunk_id: str) -> str:
    """The internal, tenant-scoped row key."""
    return f"{tenant}{SEP}{chunk_id}"


def to_us(t: dt.datetime) -> int:
    """Microseconds since the epoch of a timezone-aware (or naive = UTC) datetime."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def from_us(us: int) -> dt.datetime:
    """A UTC datetime from microseconds since the epoch."""
    return _EPOCH + dt.timedelta(microseconds=int(us))


def sql_str(value: str) -> str:
    """A SQL string literal for LanceDB (DataFusion): single quotes doubled.

    DataFusion does not treat backslashes as escapes in '...' literals, so doubling the
    single quote is the whole escape. Values are still checked to be ``str``.
    """
    if not isinstance(value, str):
        raise InvalidInput("filter", f"must be a string, not {type(value).__name__}", value)
    return "'" + value.replace("'", "''") + "'"


def term_value(value: str) -> str:
    """The indexed form of a raw keyword value in Tantivy: never empty, never over-long."""
    if len(value) <= 50:  # at most 200 UTF-8 bytes: the common, cheap case
        return "=" + value
    raw = "=" + value
    if len(raw.encode("utf-8", "surrogatepass")) > 200:
        raw = "#" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return raw


# dict=True: an instance __dict__ holds the parsed metadata (see meta_dict); fields alone
# decide equality, repr, encoding and copies, so the memo never shows.
class Row(msgspec.Struct, kw_only=True, dict=True):
    """One searchable chunk (the vector travels separately, as a numpy row)."""

    key: str
    id: str
    tenant: str
    user_id: str
    session_id: str
    kind: str
    source_id: str
    text: str
    category: str
    confidence: float
    ts: int  # the source's time (µs): what `since`/`until` filter and recency sorts on
    etime: int  # the log time (µs) of the event that wrote the row
    metadata: bytes  # msgpack of the metadata dict
    vector: Any = None  # np.ndarray float32[dim] or None

    def pack(self) -> bytes:
        """The row without its vector, as msgpack (what Tantivy stores)."""
        return _MSGPACK.encode(
            (self.key, self.id, self.tenant, self.user_id, self.session_id, self.kind, self.source_id,
             self.text, self.category, self.confidence, self.ts, self.etime, self.metadata)
        )

    @classmethod
    def unpack(cls, data: bytes) -> Row:
        """Inverse of :meth:`pack`."""
        k, i, t, u, s, kind, src, text, cat, conf, ts, et, meta = _UNPACK.decode(data)
        return cls(key=k, id=i, tenant=t, user_id=u, session_id=s, kind=kind, source_id=src, text=text,
                   category=cat, confidence=conf, ts=ts, etime=et, metadata=meta)

    def meta_dict(self) -> dict[str, Any]:
        """The metadata as a dict, parsed once per row and shared by every later call: do not mutate it."""
        # Search reads it for sequences, speakers and the hit. Only `confidence` is ever
        # reassigned on a row, never `metadata`, so the memo cannot go stale. (The key must
        # not name a method: instance __dict__ entries shadow them.)
        memo = self.__dict__
        out = memo.get("_meta")
        if out is None:
            out = memo["_meta"] = _decode_meta(self.metadata)
        return out


def message_sequence(r: Row) -> int | None:
    """A message row's ``sequence`` (from its metadata), None for other rows."""
    if r.kind != "message" or not r.session_id:
        return None
    q = r.meta_dict().get("sequence")
    return q if isinstance(q, int) and not isinstance(q, bool) else None


def _decode_meta(blob: bytes) -> dict[str, Any]:
    """Metadata msgpack -> dict; {} when empty, undecodable or not a map."""
    if not blob:
        return {}
    try:
        out = _UNPACK.decode(blob)
    except msgspec.DecodeError:
        return {}
    return out if isinstance(out, dict) else {}


_FIELDS = ("source_id", "session_id", "user_id")


@dataclass(frozen=True)
class Pred:
    """Delete rows of one tenant whose ``field`` equals ``value`` and that were written no later than ``time``."""

    tenant: str
    field: str  # source_id | session_id | user_id
    value: str
    time: int  # µs, inclusive
    kinds: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.field not in _FIELDS:
            raise ValueError(f"bad predicate field {self.field}")

    def matches(self, row: Row) -> bool:
        """Whether the predicate covers a row."""
        return (
            row.tenant == self.tenant
            and getattr(row, self.field) == self.value
            and row.etime <= self.time
            and (self.kinds is None or row.kind in self.kinds)
        )

    def sql(self) -> str:
        """The predicate as an escaped LanceDB filter."""
        s = f"(tenant = {sql_str(self.tenant)} AND {self.field} = {sql_str(self.value)} AND etime <= {int(self.time)}"
        if self.kinds is not None:
            s += " AND kind IN (" + ", ".join(sql_str(k) for k in self.kinds) + ")"
        return s + ")"


def check_kinds(kinds: Any) -> tuple[str, ...] | None:
    """None (every kind), or kinds of rows as a tuple; a string is one kind; anything else names ``kinds``."""
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    if not isinstance(kinds, (list, tuple, set, frozenset)) or not all(isinstance(k, str) for k in kinds):
        raise InvalidInput("kinds", f"must be a list of kinds ({', '.join(KINDS)})", kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise InvalidInput("kinds", f"{unknown[0]!r} is not a kind: use {', '.join(KINDS)}", list(kinds))
    return tuple(kinds)


@dataclass
class Filters:
    """Validated search filters, rendered for LanceDB (SQL) and Tantivy (term queries)."""

    tenant: str
    kinds: tuple[str, ...] | None = None
    user_id: str | None = None
    session_id: str | None = None
    exclude_session: str | None = None
    category: str | None = None
    since: int | None = None  # µs inclusive
    until: int | None = None  # µs exclusive
    impossible: bool = False  # a value no stored row can have (not encodable as UTF-8)

    @classmethod
    def build(
        cls,
        tenant: Any,
        kinds: Sequence[str] | None,
        user_id: Any,
        session_id: Any,
        exclude_session: Any,
        category: Any,
        since: Any,
        until: Any,
    ) -> Filters:
        """Check every filter's type (``InvalidInput`` names the field) and normalise it."""
        if not isinstance(tenant, str):
            raise InvalidInput("tenant", "is required and must be a string", tenant)
        for name, v in (("user_id", user_id), ("session_id", session_id),
                        ("exclude_session", exclude_session), ("category", category)):
            if v is not None and not isinstance(v, str):
                raise InvalidInput(name, f"must be a string, not {type(v).__name__}", v)
        ks = check_kinds(kinds)
        s = u = None
        for name, v in (("since", since), ("until", until)):
            if v is not None and not isinstance(v, dt.datetime):
                raise InvalidInput(name, f"must be a datetime, not {type(v).__name__}", v)
        if since is not None:
            s = to_us(since)
        if until is not None:
            u = to_us(until)
        out = cls(tenant, ks, user_id, session_id, exclude_session, category, s, u)
        values = [tenant, user_id, session_id, category, *(ks or ())]
        out.impossible = not all(_utf8(v) for v in values if v is not None)
        if exclude_session is not None and not _utf8(exclude_session):
            out.exclude_session = None  # excludes nothing that exists
        return out

    def empty(self) -> bool:
        """True when the filters can match nothing (empty kinds, since >= until, unencodable values)."""
        if self.impossible:
            return True
        if self.kinds is not None and not self.kinds:
            return True
        return self.since is not None and self.until is not None and self.since >= self.until

    def sql(self) -> str:
        """The filters as an escaped LanceDB WHERE clause (tenant always first)."""
        parts = [f"tenant = {sql_str(self.tenant)}"]
        if self.kinds is not None:
            parts.append("kind IN (" + ", ".join(sql_str(k) for k in self.kinds) + ")")
        if self.user_id is not None:
            parts.append(f"user_id = {sql_str(self.user_id)}")
        if self.session_id is not None:
            parts.append(f"session_id = {sql_str(self.session_id)}")
        if self.exclude_session is not None:
            parts.append(f"session_id <> {sql_str(self.exclude_session)}")
        if self.category is not None:
            parts.append(f"category = {sql_str(self.category)}")
        if self.since is not None:
            parts.append(f"ts >= {int(self.since)}")
        if self.until is not None:
            parts.append(f"ts < {int(self.until)}")
        return " AND ".join(parts)

    def matches(self, row: Row) -> bool:
        """Whether a row passes the filters (the reference semantics of both engines)."""
        return (
            row.tenant == self.tenant
            and (self.kinds is None or row.kind in self.kinds)
            and (self.user_id is None or row.user_id == self.user_id)
            and (self.session_id is None or row.session_id == self.session_id)
            and (self.exclude_session is None or row.session_id != self.exclude_session)
            and (self.category is None or row.category == self.category)
            and (self.since is None or row.ts >= self.since)
            and (self.until is None or row.ts < self.until)
        )


def _utf8(value: str) -> bool:
    """Whether a string is valid UTF-8 (no lone surrogates): only such values are ever stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def pack_meta(metadata: dict[str, Any]) -> bytes:
    """Metadata dict -> msgpack bytes (empty dict -> b'')."""
    return _MSGPACK.encode(metadata) if metadata else b""


def vectors_of(blob: bytes, n: int, dim: int) -> np.ndarray | None:
    """float32 little-endian bytes -> array [n, dim], or None when the size is wrong."""
    if len(blob) != n * dim * 4:
        return None
    return np.frombuffer(blob, dtype="<f4").reshape(n, dim)
