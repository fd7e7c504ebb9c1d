"""Domain events: what happened, as frozen tagged msgspec structs.

Schema evolution follows msgspec's rules: a new field needs a default; never reorder
or retype a field. A breaking change gets a new tag plus an upcaster registered with
:func:`register_upcaster`.

Framework items and retractions (event -> stream -> its one writer -> folded by):

* ``ItemPut`` / ``ItemDeleted`` / ``ItemTouched`` -> ``items:<tenant>:<user>`` -> ``ItemsActor``
  -> ``StateProjection`` (values, times, TTL) and ``ChunkIndex`` (an ``ItemPut`` replaces the
  item's rows, the ``ChunksEmbedded`` of kind ``item`` beside it brings the new ones;
  ``ItemDeleted`` removes them); ``UserForgotten`` in the same stream ends them all.
* ``MessageRetracted`` -> ``session:<tenant>:<session>`` -> ``SessionActor`` -> ``StateProjection``
  (the message leaves the session) and ``ChunkIndex`` (its rows go); ``compact`` redacts the
  retracted message.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Union

import msgspec

from ..errors import UnknownEventType

__all__ = [
    "Event",
    "SessionStarted",
    "MessageAppended",
    "ChunksEmbedded",
    "SummaryCommitted",
    "FactAsserted",
    "FactReinforced",
    "FactSuperseded",
    "FactDecayed",
    "FactPruned",
    "FactDeleted",
    "NoteStored",
    "NoteDeleted",
    "NoteUpdated",
    "ScheduleCreated",
    "ScheduleUpdated",
    "ScheduleDeleted",
    "ScheduleRun",
    "ExtractionCompleted",
    "SessionForgotten",
    "UserForgotten",
    "EmbedderChanged",
    "Redacted",
    "ItemPut",
    "ItemDeleted",
    "ItemTouched",
    "MessageRetracted",
    "LlmCalled",
    "EVENT_TYPES",
    "encode",
    "decode",
    "event_type_name",
    "register_upcaster",
]


class Event(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """Base of every domain event; the tag is the class name."""


class SessionStarted(Event, frozen=True):
    """A conversation session began for a user."""

    session_id: str
    user_id: str
    metadata: dict[str, Any] = {}


class MessageAppended(Event, frozen=True):
    """One message of a session, with its monotonic sequence number."""

    session_id: str
    user_id: str
    role: str
    content: str
    sequence: int
    metadata: dict[str, Any] = {}
    # the writer's store extracts facts from it (a user message with auto_extract on): until an
    # ExtractionCompleted covers it, an open resumes its extraction (a crash came in between)
    extract: bool = False


class ChunksEmbedded(Event, frozen=True):
    """Searchable chunks of one source (message, fact, note, summary) with their vectors.

    Self-contained on purpose: a projection builds index rows from this event alone, and
    replay never calls a model.
    """

    model_id: str
    dim: int
    chunk_ids: list[str]
    vectors: bytes  # float32 little-endian, len(chunk_ids) * dim values
    texts: list[str] = []
    source_id: str = ""
    kind: str = "message"  # message | fact | note | summary
    user_id: str = ""
    session_id: str = ""
    category: str = ""
    confidence: float = 1.0
    time: dt.datetime | None = None  # the source's time; the envelope time when None
    metadata: dict[str, Any] = {}  # the source's metadata (a message's, or a fact's sources)


class SummaryCommitted(Event, frozen=True):
    """A rolling summary for a session, committed at summary epoch ``epoch``."""

    session_id: str
    epoch: int
    text: str
    upto_sequence: int
    sources: list[dict[str, Any]] = []
    rewritten: bool = False  # written again without forgotten messages: ``compact`` redacts the session's earlier summaries


class FactAsserted(Event, frozen=True):
    """A new fact about a user."""

    fact_id: str
    user_id: str
    content: str
    category: str = "general"
    confidence: float = 1.0
    sources: list[dict[str, Any]] = []
    request_id: str = ""  # the caller's id for the remember() call: retries are exactly-once
    metadata: dict[str, Any] = {}  # the caller's (remember(..., metadata=)); recall/list_memories filter on it
    attribute: str = ""  # the single-valued attribute of the user it sets ("diet", "residence", ...); "" when none


class FactReinforced(Event, frozen=True):
    """A fact was stated again; its confidence rose."""

    fact_id: str
    confidence: float
    sources: list[dict[str, Any]] = []
    request_id: str = ""


class FactSuperseded(Event, frozen=True):
    """A fact was replaced by a newer, conflicting one."""

    fact_id: str
    by: str


class FactDecayed(Event, frozen=True):
    """A fact's confidence decayed for lack of reinforcement."""

    fact_id: str
    confidence: float


class FactPruned(Event, frozen=True):
    """A fact was dropped (too weak, or over the memory cap)."""

    fact_id: str
    reason: str = ""


class FactDeleted(Event, frozen=True):
    """A fact was explicitly forgotten, or retracted (a revert, a cascade of erasure, a re-extraction)."""

    fact_id: str
    reason: str = ""  # "" (forget) | "revert" | "erasure" | "reextract"
    request: str = ""  # the caller's request id (a server's X-Request-Id); not ``request_id``: that one names a remember
    by: str = ""  # who asked: on a server, the API key's name
    session_id: str = ""  # a revert's session


class NoteStored(Event, frozen=True):
    """A free-form note about a user."""

    note_id: str
    user_id: str
    text: str
    session_id: str | None = None  # the session it was written during (a revert of that session deletes it)


class NoteDeleted(Event, frozen=True):
    """A note was deleted, or retracted by a revert of the session it was written during."""

    note_id: str
    reason: str = ""  # "" (delete_note) | "revert"
    request: str = ""  # the caller's request id (a server's X-Request-Id)
    by: str = ""  # who asked: on a server, the API key's name
    session_id: str = ""  # a revert's session


class NoteUpdated(Event, frozen=True):
    """A note's text was replaced (same id; the old text stays in the log until the note is forgotten)."""

    note_id: str
    text: str


class ScheduleCreated(Event, frozen=True):
    """A reminder or recurring job was created."""

    schedule_id: str
    user_id: str
    name: str
    cadence: str  # cron | once | interval
    expression: str
    timezone: str = "UTC"
    payload: dict[str, Any] = {}
    next_run_at: dt.datetime | None = None


class ScheduleUpdated(Event, frozen=True):
    """Fields of a schedule changed."""

    schedule_id: str
    changes: dict[str, Any] = {}


class ScheduleDeleted(Event, frozen=True):
    """A schedule was deleted."""

    schedule_id: str


class ScheduleRun(Event, frozen=True):
    """A schedule ran once."""

    schedule_id: str
    run_at: dt.datetime
    status: str = "ok"
    result: str = ""
    next_run_at: dt.datetime | None = None
    output_summary: str = ""  # at most 500 characters, cut with a marker
    output: str = ""  # the whole output when the summary had to cut it ("" when the summary is all of it)
    run_id: str = ""  # "run-<uuid>" (older runs: their event id)


class ExtractionCompleted(Event, frozen=True):
    """The curator has extracted facts from these user messages (so a restart skips them)."""

    session_id: str
    sequences: list[int]
    facts: list[str] = []
    extractor: str = ""  # which extractor ran: ``offline:rules-<hash>`` or ``llm:<model>:prompt-<hash>``


class LlmCalled(Event, frozen=True):
    """One call to a language model whose result the store used: what it cost (never the prompt's text)."""

    model: str
    purpose: str  # extract | decide | contradict | summarise | reextract | budget (the offline fallback, no call)
    prompt_version: str = ""  # ``prompt-<hash>`` of the system prompt
    input_tokens: int = 0  # the response's usage.prompt_tokens
    output_tokens: int = 0  # the response's usage.completion_tokens
    latency_ms: float = 0.0
    outcome: str = "ok"  # ok | error | fallback (over llm_tokens_per_day: the offline extractor ran instead)
    user_id: str = ""
    session_id: str = ""


class SessionForgotten(Event, frozen=True):
    """Tombstone: a session and everything derived from it is to be forgotten."""

    session_id: str
    user_id: str = ""


class UserForgotten(Event, frozen=True):
    """Tombstone: a user and everything about them is to be forgotten."""

    user_id: str


class Redacted(Event, frozen=True):
    """What compaction leaves of a forgotten event: its envelope stays, its content is gone."""

    original_type: str


class EmbedderChanged(Event, frozen=True):
    """The store's embedding model (id and dimension) was set or switched."""

    model_id: str
    dim: int
    previous_model_id: str = ""


class ItemPut(Event, frozen=True):
    """A framework store item (LangGraph ``BaseStore``) was written: the whole value, verbatim."""

    item_id: str  # derived from (namespace, key): the same item always has the same id
    user_id: str
    namespace: list[str]
    key: str
    value: dict[str, Any] = {}
    indexed: bool = True  # False: stored but not searchable by query (``put(..., index=False)``)
    ttl_minutes: float | None = None
    expires_at: dt.datetime | None = None
    # set when the item's vectors are written behind the put (a later ``ChunksEmbedded`` of the
    # item): the texts to embed, so a crash before that append is recovered by embedding them
    texts: list[str] | None = None


class ItemDeleted(Event, frozen=True):
    """A framework store item was deleted (by its owner, or by the TTL sweeper)."""

    item_id: str
    reason: str = ""  # "" (deleted) | "expired"


class ItemTouched(Event, frozen=True):
    """A framework store item's TTL was refreshed by a read."""

    item_id: str
    expires_at: dt.datetime | None = None


class MessageRetracted(Event, frozen=True):
    """The session's last message was taken back (an Agents SDK ``pop_item``): an event, not a rewrite."""

    session_id: str
    sequence: int
    message_id: str = ""  # the retracted MessageAppended's event id (hex): its chunks' source_id


EVENT_TYPES: tuple[type[Event], ...] = (
    SessionStarted,
    MessageAppended,
    ChunksEmbedded,
    SummaryCommitted,
    FactAsserted,
    FactReinforced,
    FactSuperseded,
    FactDecayed,
    FactPruned,
    FactDeleted,
    NoteStored,
    NoteDeleted,
    NoteUpdated,
    ScheduleCreated,
    ScheduleUpdated,
    ScheduleDeleted,
    ScheduleRun,
    ExtractionCompleted,
    SessionForgotten,
    UserForgotten,
    EmbedderChanged,
    Redacted,
    ItemPut,
    ItemDeleted,
    ItemTouched,
    MessageRetracted,
    LlmCalled,
)

_ENCODER = msgspec.msgpack.Encoder()
_DECODER: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Union[EVENT_TYPES])  # noqa: UP007 (a tuple of types)
_RAW_DECODER = msgspec.msgpack.Decoder(dict[str, Any])
_UPCASTERS: dict[str, Callable[[dict[str, Any]], Event]] = {}
_KNOWN_TAGS = frozenset(t.__struct_config__.tag for t in EVENT_TYPES)


def register_upcaster(tag: str, upcast: Callable[[dict[str, Any]], Event]) -> None:
    """Teach the decoder a retired tag: ``upcast`` turns its raw fields into a current event."""
    _UPCASTERS[tag] = upcast


def event_type_name(event: Event) -> str:
    """The tag an event is stored under (its class name)."""
    return type(event).__struct_config__.tag  # type: ignore[return-value]


def encode(event: Event) -> bytes:
    """Encode one event as msgpack (the tag travels inside the payload)."""
    return _ENCODER.encode(event)


def decode(payload: bytes) -> Event:
    """Decode one payload; unknown tags go through upcasters or raise ``UnknownEventType``."""
    try:
        return _DECODER.decode(payload)
    except msgspec.ValidationError:
        raw = _RAW_DECODER.decode(payload)
        tag = str(raw.get("type", ""))
        upcast = _UPCASTERS.get(tag)
        if upcast is not None:
            return upcast(raw)
        if tag not in _KNOWN_TAGS:
            raise UnknownEventType(tag) from None
        raise
