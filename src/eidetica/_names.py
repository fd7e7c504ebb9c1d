"""Participants' names in queries (kept in the projections layer, where a views replica plans its queries)."""

from .projections._names import name_pattern, names_in, strip_names

__all__ = ["name_pattern", "names_in", "strip_names"]
