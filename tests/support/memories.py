"""How the shared ``mem`` fixture opens a store on each runtime (used by conftest.py and by reopening tests)."""

from __future__ import annotations

import os
from typing import Any


def ray_options(runtime: str) -> dict[str, Any]:
    """EIDETICA_TEST_VIEWS_REPLICAS=N runs the Ray side of the suite on N view replicas."""
    n = os.environ.get("EIDETICA_TEST_VIEWS_REPLICAS")
    return {"views_replicas": int(n)} if runtime == "ray" and n else {}
