"""The events layer: event types, the envelope, the log port and its implementations.

Every event type, the stream it lives in, its one writer, and where it is folded
(``state`` = ``projections.StateProjection``; ``index`` = ``projections.ChunkIndex``;
``compaction`` = the facade's ``_compaction.plan_compaction`` scan). An event appended
outside its stream's writer is a design bug. Streams: ``events.streams``.

=====================  ==========================  ============================  ==============================================
event type             stream                      its one writer                folded by
=====================  ==========================  ============================  ==============================================
SessionStarted         session:<tenant>:<sid>      actors.SessionActor           SessionActor, state
MessageAppended        session:<tenant>:<sid>      actors.SessionActor           SessionActor, state
ChunksEmbedded         session:... (messages)      actors.SessionActor           index (rows), state (text lookups), compaction
                       summary:... (summaries)     actors.Summarizer             (reembed keeps the live ones)
                       facts:<tenant>:<user>       actors.FactCurator
                       notes:<tenant>:<user>       actors.NotesActor
                       items:<tenant>:<user>       actors.ItemsActor
SummaryCommitted       summary:<tenant>:<sid>      actors.Summarizer             SessionActor (rolling summary), state,
                                                                                 compaction (``rewritten``: earlier ones go)
FactAsserted           facts:<tenant>:<user>       actors.FactCurator            FactCurator, state, compaction
FactReinforced         facts:<tenant>:<user>       actors.FactCurator            FactCurator, state, index (confidence), compaction
FactDecayed            facts:<tenant>:<user>       actors.FactCurator            FactCurator, state, index (confidence), compaction
FactSuperseded         facts:<tenant>:<user>       actors.FactCurator            FactCurator, state, index (rows go), compaction
FactPruned             facts:<tenant>:<user>       actors.FactCurator            FactCurator, state, index (rows go), compaction
FactDeleted            facts:<tenant>:<user>       actors.FactCurator            FactCurator, state, index (rows go), compaction
                       (forget; revert and erasure's retractions: ``reason``)
ExtractionCompleted    facts:<tenant>:<user>       actors.FactCurator            FactCurator (which messages are done)
NoteStored             notes:<tenant>:<user>       actors.NotesActor             NotesActor, state, compaction
NoteUpdated            notes:<tenant>:<user>       actors.NotesActor             NotesActor, state, compaction (old text goes)
NoteDeleted            notes:<tenant>:<user>       actors.NotesActor             NotesActor, state, index (rows go), compaction
ScheduleCreated        schedules:<tenant>:<user>   actors.SchedulesActor         SchedulesActor, state
ScheduleUpdated        schedules:<tenant>:<user>   actors.SchedulesActor         SchedulesActor, state
ScheduleDeleted        schedules:<tenant>:<user>   actors.SchedulesActor         SchedulesActor, state
ScheduleRun            schedules:<tenant>:<user>   actors.SchedulesActor         SchedulesActor, state
SessionForgotten       session:<tenant>:<sid>      actors.SessionActor           SessionActor, state, index (rows go), compaction
MessageRetracted       session:<tenant>:<sid>      actors.SessionActor           SessionActor, state, index (rows go), compaction
                       (``pop``, ``forget_message``)
ItemPut                items:<tenant>:<user>       actors.ItemsActor             ItemsActor, state, index (replaces rows), compaction
ItemTouched            items:<tenant>:<user>       actors.ItemsActor             ItemsActor, state (times, TTL), compaction
ItemDeleted            items:<tenant>:<user>       actors.ItemsActor             ItemsActor, state, index (rows go), compaction
UserForgotten          facts/notes/items:...       FactCurator/Notes/ItemsActor  the writer, state, index (its stream's rows go),
                       schedules:<tenant>:<user>   actors.SchedulesActor         compaction
EmbedderChanged        meta:embedder               actors.EmbedderRecord         state, EmbedderRecord.check
Redacted               (in place of any payload)   events.ArrowLog.redact        nobody: a redacted event folds to nothing
=====================  ==========================  ============================  ==============================================

Events the facade decides for others' streams (``reembed``'s vectors, an import's events) are
appended by each stream's writer (``actors.StreamOwner.record``, ``Summarizer.record``; routed by
``_owners.append_through_owner``), never by the facade itself.
"""

from .arrow_log import ArrowLog
from .envelope import ANY, LOG_SCHEMA, NO_STREAM, STREAM_EXISTS, NewEvent, RecordedEvent, utcnow
from .log import BatchLog, EventLog
from .memory_log import InMemoryLog
from .types import *  # noqa: F403
from .types import __all__ as _types_all

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "LOG_SCHEMA",
    "NewEvent",
    "RecordedEvent",
    "EventLog",
    "BatchLog",
    "InMemoryLog",
    "ArrowLog",
    "utcnow",
    *_types_all,
]
