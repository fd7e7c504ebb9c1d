"""Run the log conformance suite against every implementation."""

from __future__ import annotations

from typing import Any

import pytest

from eidetica.events import ArrowLog, EventLog, InMemoryLog
from tests.contracts.log import LogConformance


class TestInMemoryLog(LogConformance):
    def make_log(self, **kw: Any) -> EventLog:
        return InMemoryLog(**kw)


class TestArrowLog(LogConformance):
    @pytest.fixture(autouse=True)
    def _dir(self, tmp_path):
        self.tmp = tmp_path
        self.n = 0

    def make_log(self, **kw: Any) -> EventLog:
        self.n += 1
        return ArrowLog(self.tmp / f"log{self.n}", **kw)

    def reopen(self, log: EventLog) -> EventLog | None:
        assert isinstance(log, ArrowLog)
        return ArrowLog(log.path)


class TestArrowLogBatchFsync(TestArrowLog):
    def make_log(self, **kw: Any) -> EventLog:
        return super().make_log(fsync="batch", **kw)


class TestArrowLogPartitioned(TestArrowLog):
    def make_log(self, **kw: Any) -> EventLog:
        return super().make_log(partitions=3, **kw)


class TestInMemoryLogPartitioned(LogConformance):
    def make_log(self, **kw: Any) -> EventLog:
        return InMemoryLog(partitions=3, **kw)
