"""Settings of the memory system; every default is documented and overridable."""

from __future__ import annotations

import msgspec

from ..errors import InvalidInput

__all__ = ["MemoryConfig", "STRATEGIES"]

STRATEGIES = ("simple", "sliding_window", "summarizing")


class MemoryConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Knobs of sessions, summaries, facts, snapshots and schedules; each default is documented beside it."""

    # sessions
    window: int = 10  # messages read() returns after the summary
    token_budget: int = 2000  # history budget read() fills and summaries keep under
    restore_messages: int = 20  # messages restore() resumes with
    strategy: str = "summarizing"  # simple | sliding_window | summarizing
    chunk_chars: int = 640
    chunk_overlap: int = 96
    # previous messages of the session whose text leads a message's embedding input (the
    # indexed text stays the message's own): a reply like "yes, last Tuesday" is found by
    # what it answers
    embed_context: int = 0
    max_sessions: int | None = None  # oldest sessions pruned beyond this (None: unlimited)
    # rolling summaries
    summary_trigger: float = 0.80  # summarise when history tokens exceed this share of the budget
    summary_target: float = 0.50  # ... down to this share
    min_turns_outside: int = 4  # and at least this many turns lie outside the window
    retain_recent: int = 6  # messages a compaction keeps verbatim
    emergency_factor: float = 1.5  # history over budget * this is critical: keep fewer
    # facts
    auto_extract: bool = True
    reinforce_threshold: float = 0.85
    supersede_threshold: float = 0.80
    reinforce_step: float = 0.1
    decay_after_days: float = 7.0
    decay_factor: float = 0.95
    prune_below: float = 0.3
    prune_after_days: float = 30.0
    # active facts per user; beyond it each remember() prunes the weakest fact (lowest
    # confidence, then least recently reinforced) in the same commit: raise it for users
    # with many facts (stats()["facts"] counts the pruned ones)
    max_memories: int = 1000
    # LLM tokens (input + output, as the model's usage reports them) a tenant may spend per UTC day;
    # past it, extraction runs the offline extractor instead, counted in usage()["fallbacks"] (None: no limit)
    llm_tokens_per_day: int | None = None
    # state snapshots: after this many events, or this many seconds with new events (a start
    # then replays only what follows the newest one)
    snapshot_events: int = 50_000
    snapshot_seconds: float = 300.0
    # an actor (session, curator; a user's notes, items, schedules) snapshots its fold once this many
    # of its stream's events are not covered by one (at first use and on close), so its next first
    # use replays only the tail
    actor_snapshot_events: int = 1_000
    # a housekeeping thread checks this often whether the log's recovery checkpoint or the
    # state snapshot is due (a process that only appends, like a server, writes them too); 0: off
    housekeeping_seconds: float = 1.0
    # schedules
    min_interval_seconds: int = 60
    max_run_history: int = 20

    def __post_init__(self) -> None:
        for name in ("window", "token_budget", "restore_messages", "chunk_chars", "max_memories", "retain_recent",
                     "snapshot_events", "actor_snapshot_events"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(name, "must be an int >= 1", v)
        if self.llm_tokens_per_day is not None and (isinstance(self.llm_tokens_per_day, bool) or not isinstance(
                self.llm_tokens_per_day, int) or self.llm_tokens_per_day < 1):
            raise InvalidInput("llm_tokens_per_day", "must be an int >= 1 or None", self.llm_tokens_per_day)
        if isinstance(self.embed_context, bool) or not isinstance(self.embed_context, int) or self.embed_context < 0:
            raise InvalidInput("embed_context", "must be an int >= 0", self.embed_context)
        if not 0 <= self.chunk_overlap < self.chunk_chars:
            raise InvalidInput("chunk_overlap", "must be >= 0 and below chunk_chars", self.chunk_overlap)
        if self.strategy not in STRATEGIES:
            raise InvalidInput("strategy", f"must be one of {', '.join(STRATEGIES)}", self.strategy)
        if not 0 < self.summary_target < self.summary_trigger <= 1.5:
            raise InvalidInput("summary_target", "must satisfy 0 < target < trigger")
        if isinstance(self.snapshot_seconds, bool) or not isinstance(self.snapshot_seconds, (int, float)) \
                or not self.snapshot_seconds > 0:
            raise InvalidInput("snapshot_seconds", "must be a number > 0", self.snapshot_seconds)
        if isinstance(self.housekeeping_seconds, bool) or not isinstance(self.housekeeping_seconds, (int, float)) \
                or self.housekeeping_seconds < 0:
            raise InvalidInput("housekeeping_seconds", "must be a number >= 0", self.housekeeping_seconds)
        if self.max_sessions is not None and self.max_sessions < 1:
            raise InvalidInput("max_sessions", "must be None or >= 1", self.max_sessions)
