"""The `eidetica` console script for tests: in a subprocess (``spawn``) or in this process (``run``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from eidetica import cli

BIN = Path(sys.executable).with_name("eidetica")


def _env(store: Path | None, env: dict | None) -> dict[str, str]:
    e = {"EIDETICA_MODEL": "hash-64", "COLUMNS": "200"}
    e.update(env or {})
    if store is not None:
        e["EIDETICA_PATH"] = str(store)
    return e


def spawn(*args: str, store: Path | None = None, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the installed console script in a subprocess with a small deterministic embedder."""
    e = dict(os.environ, **_env(store, env))
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, input=input, env=e, timeout=300)


def run(*args: str, store: Path | None = None, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the console script's entry point (``eidetica.cli.main``) in this process."""
    runner = CliRunner()
    code = 0
    with runner.isolation(input=input, env=_env(store, env)) as (out, err, _):
        old_argv = sys.argv
        sys.argv = ["eidetica", *args]
        try:
            cli.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = old_argv
        return subprocess.CompletedProcess(
            list(args), code, out.getvalue().decode(), err.getvalue().decode()
        )
