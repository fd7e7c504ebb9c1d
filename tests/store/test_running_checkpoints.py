"""Checkpoints while running: a process that keeps appending (a server) writes the log's recovery
checkpoint and the state snapshot as it goes, off the append path; after a SIGKILL the next
open scans only what followed the last checkpoint and loses no acknowledged event."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.events import ArrowLog
from eidetica.events.arrow_log import CHECKPOINT_MAGIC, CHECKPOINT_NAME
from eidetica.providers import HashEmbedder
from tests.support import SUPPORT

CHILD = SUPPORT / "_housekeep_child.py"
NS = uuid.UUID("6f1c0a4e-0000-4000-8000-00000000beef")
pytestmark = [pytest.mark.slow, pytest.mark.crash]


def _checkpoint_head(log_dir: Path) -> int:
    """The head the checkpoint on disk covers (its header's next_offset)."""
    with open(log_dir / "p000" / CHECKPOINT_NAME, "rb") as f:
        f.read(len(CHECKPOINT_MAGIC) + 65)
        return int(json.loads(f.readline())["next_offset"])


@pytest.mark.parametrize("acks", [400, 3000])
def test_checkpoints_cut_while_appending_survive_a_sigkill(tmp_path: Path, acks: int) -> None:
    path = tmp_path / "log"
    child = subprocess.Popen([sys.executable, str(CHILD), "log", str(path)], stdout=subprocess.PIPE, text=True)
    acked: list[tuple[int, int, int, int]] = []
    ckpts: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            kind, *nums = line.split()
            if kind == "ACK":
                acked.append(tuple(map(int, nums)))  # type: ignore[arg-type]
            else:
                ckpts.append(int(nums[0]))
            if len(acked) >= acks and ckpts:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    covered = _checkpoint_head(path)
    assert covered >= ckpts[-1] > 0  # the running checkpoints happened, and the newest is on disk
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checkpoint cut while commits went on is never refused
        log = ArrowLog(path)
    try:
        head = log.head(0)
        assert log.recovered_events[0] == head - covered  # only the tail after the checkpoint was scanned
        assert covered < head or covered == head
        by_offset = {r.offset: r for r in log.read(0)}
        for i, n, first, _last in acked:  # nothing acknowledged is lost, every event where it was acknowledged
            for k in range(n):
                r = by_offset[first + k]
                assert r.event_id == uuid.uuid5(NS, str(i + k)) and r.payload == f"{i + k}".encode()
    finally:
        log.close()


def test_a_server_that_only_appends_snapshots_and_checkpoints_before_a_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "store"
    child = subprocess.Popen([sys.executable, str(CHILD), "memory", str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        info = json.loads(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert info["done"]["log_checkpoints"] == 1 and info["done"]["state_snapshot"]
    assert 0 < info["log"] < info["head"] and 0 < info["state"] < info["head"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = eidetica.open(path, embedder=HashEmbedder(dim=16), config=MemoryConfig(housekeeping_seconds=0))
    try:
        assert m.log.recovered_events[0] == info["head"] - info["log"]  # the log scanned only its tail
        assert m.stats()["snapshot"]["tail_events"] == info["head"] - info["state"]  # the state replayed only its tail
        msgs = m.session("s1", user="u").history()
        assert [x.content for x in msgs] == [f"message number {i}" for i in range(180)]
    finally:
        m.close()
