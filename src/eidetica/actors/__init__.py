"""The actors layer: who decides. Plain classes whose state is a fold of the log."""

from ._config import STRATEGIES, MemoryConfig
from ._owner import EmbedderRecord, StreamOwner
from ._records import Hit, Message
from ._snapshots import ActorSnapshots
from .curator import FactCurator
from .items import ItemsActor
from .notes import NotesActor
from .runtime import LocalRuntime, Runtime
from .schedules import ScheduleInfo, Schedules, SchedulesActor
from .session import ROLES, SUMMARY_PREFIX, SessionActor
from .summarizer import Summarizer, SummaryResult

__all__ = [
    "MemoryConfig",
    "ActorSnapshots",
    "EmbedderRecord",
    "StreamOwner",
    "STRATEGIES",
    "Hit",
    "Message",
    "FactCurator",
    "NotesActor",
    "ItemsActor",
    "LocalRuntime",
    "Runtime",
    "Schedules",
    "SchedulesActor",
    "ScheduleInfo",
    "SessionActor",
    "ROLES",
    "SUMMARY_PREFIX",
    "Summarizer",
    "SummaryResult",
]
