"""Helpers of the test suite: servers, child processes, fakes and clocks (no tests here).

Child scripts are run by path (``SUPPORT / "_crash_child.py"``) or as modules (``-m tests.support.X``
with the repository root as the working directory).
"""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]  # the repository: README.md, scripts/, src/
