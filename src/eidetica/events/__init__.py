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
                       (delete_note; a revert's retractions: ``reason``)
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
LlmCalled              facts:<tenant>:<user>       actors.FactCurator            nobody: ``Memory.usage`` scans them
                       (extract, decide, reextract; in the append of the facts it produced)
                       summary:<tenant>:<sid>      actors.Summarizer             (in the summary's own append)
EmbedderChanged        meta:embedder               actors.EmbedderRecord         state, EmbedderRecord.check
Redacted               (in place of any payload)   events.ArrowLog.redact        nobody: a redacted event folds to nothing
=====================  ==========================  ============================  ==============================================

Provenance: where a fact, note or summary came from and who changed it (``_audit.explain``
reads it back; nothing is stored twice). Every envelope has ``time`` and ``event_id``; an
extracted fact's ``FactAsserted`` is dated at its source message (when it held:
``valid_from``), the ``ExtractionCompleted`` naming it at when the store learned it. Fields:

=====================  ==========================================================================
event type             provenance fields
=====================  ==========================================================================
MessageAppended        session_id, sequence, user_id, role, metadata: the origin the others name
FactAsserted           sources (each: its message's metadata + session_id, sequence; [] for
                       ``remember``), request_id (a ``remember`` call's), attribute (what it sets)
FactReinforced         sources (the message that said it again), request_id
FactSuperseded         by (the newer fact: its ``FactAsserted`` sources name the message)
FactPruned             reason ("decayed" | "max_memories")
FactDeleted            reason ("" forget | "revert" | "erasure" | "reextract"), request (the
                       request id), by (a server's API key name), session_id (a revert's)
ExtractionCompleted    session_id, sequences -> facts, extractor (``offline:rules-<hash>`` or
                       ``llm:<model>:prompt-<hash>``)
SummaryCommitted       sources (the summarised messages' metadata + sequence), upto_sequence,
                       rewritten (summarised again without forgotten messages)
ChunksEmbedded         source_id, kind, session_id, model_id; ``metadata["sources"]`` on a fact's
                       or summary's rows
NoteStored             session_id (the session it was written during; None: none, or an older log)
NoteDeleted            reason ("" delete_note | "revert"), request, by, session_id (a revert's)
MessageRetracted       session_id, sequence, message_id (the retracted event's id)
ItemDeleted            reason ("" | "expired")
ScheduleRun            run_id, run_at, status
LlmCalled              model, purpose, prompt_version, input/output tokens, latency_ms, outcome,
                       user_id, session_id: what a model call the store used cost (no prompt text)
=====================  ==========================================================================

The others (SessionStarted, FactDecayed, NoteUpdated, the other Schedule* and Item* events,
the tombstones, EmbedderChanged, Redacted) carry no more than their envelope: not who asked.

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
