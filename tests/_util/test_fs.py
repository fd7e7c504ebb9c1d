"""``_util.fs``: the one atomic write. What it wrote survives (read back, across a SIGKILL), a failure
leaves the old file whole, and no ``os.replace`` in src goes around it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eidetica._util.fs import replace, write_atomic

SRC = Path(__file__).resolve().parents[2] / "src" / "eidetica"


def test_write_then_read_back(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    write_atomic(target, '{"x": 1}')
    assert target.read_text() == '{"x": 1}'
    write_atomic(target, b"bytes")
    assert target.read_bytes() == b"bytes"
    write_atomic(target, [b"one ", memoryview(b"two")])
    assert target.read_bytes() == b"one two"
    assert os.listdir(tmp_path) == ["a.json"]  # no temporary file left behind
    assert (target.stat().st_mode & 0o777) == 0o600


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    write_atomic(target, "old content")

    def chunks():
        yield b"half of the new"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, chunks())
    assert target.read_text() == "old content"
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_replace_moves_a_directory(tmp_path: Path) -> None:
    (tmp_path / "staging").mkdir()
    (tmp_path / "staging" / "f").write_text("in it")
    replace(tmp_path / "staging", tmp_path / "final")
    assert (tmp_path / "final" / "f").read_text() == "in it"
    assert not (tmp_path / "staging").exists()


_CHILD = """
import sys
from eidetica._util.fs import write_atomic
target = sys.argv[1]
i = 0
print("ready", flush=True)
while True:
    i += 1
    write_atomic(target, (str(i % 10) * 200_000).encode())
"""


def test_content_survives_a_sigkill_mid_write(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    write_atomic(target, b"0" * 200_000)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(target)], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
    time.sleep(0.3)  # many writes in flight
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    data = target.read_bytes()
    assert len(data) == 200_000 and len(set(data)) == 1  # one whole version, never a torn mix


def test_no_os_replace_outside_util_fs() -> None:
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.relative_to(SRC).as_posix() != "_util/fs.py"
                 and re.search(r"\bos\.(replace|rename)\(|\.rename\(", p.read_text(encoding="utf-8"))]
    assert offenders == []
