"""The tests' clock: a settable one, so decay, schedules, TTLs and recency are tested without waiting."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc)


class Clock:
    """A clock the test sets (``clock.now = ...``); with ``tick``, every reading first moves it on by that much.

    A served store reads its time from a file: after ``follow(file)`` every change of ``now`` is
    written there, and ``release()`` empties it (the server's wall clock again).
    """

    def __init__(self, now: dt.datetime = T0, *, tick: dt.timedelta | None = None, sink: Path | None = None) -> None:
        self.sink = sink
        self.tick = tick
        self.now = now

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "now" and getattr(self, "sink", None) is not None:
            self.sink.write_text(value.isoformat())

    def __call__(self) -> dt.datetime:
        if self.tick is not None:
            self.now += self.tick
        return self.now

    def follow(self, sink: Path) -> None:
        """Make the server reading ``sink`` read this clock from now on."""
        self.sink = sink
        self.now = self.now

    def release(self) -> None:
        """Hand the server reading ``sink`` back its wall clock."""
        if self.sink is not None:
            self.sink.write_text("")
            self.sink = None
