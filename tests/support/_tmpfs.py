"""A small tmpfs for full-disk tests: mounted for the test (needs root), unmounted afterwards."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mounted_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (e.g. "2m") at ``where`` for a fixture; skip when this machine cannot."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("full-disk test needs root to mount a tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)
