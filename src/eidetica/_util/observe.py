"""Measurements the lower layers report (log commits and fsyncs, embedding batches, extractions in
flight), for whoever listens: a port with one process-wide sink.

Nothing is recorded until a sink is installed (``eidetica serve`` installs its Prometheus metrics,
``eidetica._server._metrics``), so the log, the embedders and the actors never import the server,
and a call costs one global read when nobody listens. Names carry no user data: they are fixed
strings, values are sizes and durations.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Sink", "install", "count", "observe", "add"]


class Sink(Protocol):
    """Where measurements go: counters, distributions (histograms) and levels (gauges)."""

    def count(self, name: str, n: float) -> None:
        """Add ``n`` to the counter ``name``."""

    def observe(self, name: str, value: float) -> None:
        """Record one sample of the distribution ``name``."""

    def add(self, name: str, delta: float) -> None:
        """Move the level ``name`` by ``delta`` (up while work is in flight, down when it is done)."""


_sink: Sink | None = None


def install(sink: Sink | None) -> Sink | None:
    """Make ``sink`` receive every measurement from now on (None: stop); returns the previous one."""
    global _sink
    old, _sink = _sink, sink
    return old


def count(name: str, n: float = 1.0) -> None:
    """Add ``n`` to a counter, if anyone listens."""
    s = _sink
    if s is not None:
        s.count(name, n)


def observe(name: str, value: float) -> None:
    """Record a sample, if anyone listens."""
    s = _sink
    if s is not None:
        s.observe(name, value)


def add(name: str, delta: float) -> None:
    """Move a level, if anyone listens."""
    s = _sink
    if s is not None:
        s.add(name, delta)
