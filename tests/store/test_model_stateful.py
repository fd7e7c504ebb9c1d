"""The store against the reference model (tests/support/model.py): a bounded slice of ``make soak``.

Three faces, each a few random runs of the state machine in tests/support/stateful.py:
embedded ``open`` and ``AsyncMemory`` in a child process SIGKILLed between steps, and a real
``eidetica serve`` through ``connect``. The long runs are ``scripts/soak.py`` (``make soak``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.support.stateful import machine_for

STEPS = int(os.environ.get("EIDETICA_MODEL_STEPS", "30"))  # make test: a bounded slice (make soak runs long)
# scripts/mutants.py: a failure is enough there, its shrinking (process restarts) would take minutes
SHRINK = os.environ.get("EIDETICA_MODEL_SHRINK", "1") != "0"
FACES = os.environ.get("EIDETICA_MODEL_FACES", "sync,async,server").split(",")  # scripts/mutants.py: one face


@pytest.mark.crash  # SIGKILLs the process holding the store: the crash tests' deadline (conftest)
@pytest.mark.parametrize("face", ["sync", "async", "server"])
def test_the_store_agrees_with_the_model(face: str) -> None:
    if face not in FACES:
        pytest.skip(f"EIDETICA_MODEL_FACES={','.join(FACES)}")
    run_state_machine_as_test(machine_for(face), settings=settings(
        max_examples=2, stateful_step_count=STEPS, deadline=None, database=None,
        phases=[Phase.generate, Phase.shrink] if SHRINK else [Phase.generate],
        suppress_health_check=list(HealthCheck)))
