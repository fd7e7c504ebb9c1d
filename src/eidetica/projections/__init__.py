"""What we know: folds of the event log that can be dropped and rebuilt by replay.

* ``StateProjection`` - in-memory sessions, summaries, facts, notes, schedules.
* ``ChunkIndex`` - LanceDB vectors + Tantivy BM25 over ``ChunksEmbedded`` rows, hybrid search.
* ``Projector`` - tails the log, applies batches, saves checkpoints after output, rebuilds.
* ``LocalViews`` - the assembly a store serves: state + the current model's index + projector.

lancedb is imported lazily (when a ``ChunkIndex`` is opened), never by importing this
package: Ray forks its workers later, and lancedb warns about fork.
"""

from ._base import Projection, SearchHit
from ._index import ChunkIndex
from ._projector import Projector
from ._state import FactInfo, ItemInfo, MessageInfo, NoteInfo, ScheduleInfo, SessionInfo, StateProjection
from ._views import LocalViews, ModelView, Views, model_slug

__all__ = [
    "Projection",
    "SearchHit",
    "StateProjection",
    "SessionInfo",
    "MessageInfo",
    "FactInfo",
    "NoteInfo",
    "ScheduleInfo",
    "ItemInfo",
    "ChunkIndex",
    "Projector",
    "LocalViews",
    "Views",
    "ModelView",
    "model_slug",
]
