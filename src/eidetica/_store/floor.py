"""A read floor (``min_offset``) as JSON carries it; the facade and the server both read this form."""

from __future__ import annotations

from typing import Any

__all__ = ["floor_from_json"]


def floor_from_json(value: Any) -> Any:
    """A ``min_offset`` as JSON carries it: an object's keys are strings, so ``{"0": 5}`` is ``{0: 5}``.

    Anything else passes unchanged, for the facade to accept or refuse exactly as embedded.
    """
    if not isinstance(value, dict):
        return value
    out = {(int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k): v for k, v in value.items()}
    return out if len(out) == len(value) else value  # "0" and "00" both: left for the facade to refuse
