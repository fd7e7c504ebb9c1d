"""The views suite on the views of an embedded store and on a past moment's views (``as_of``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.memory import Memory
from eidetica.projections import Views
from eidetica.providers import Embedder, HashEmbedder
from tests.contracts.views import ViewsConformance

CONFIG = MemoryConfig(auto_extract=False)


class TestLocalViews(ViewsConformance):
    local = True

    def open_store(self, path: Any) -> Memory:
        return eidetica.open(path, embedder=HashEmbedder(dim=32), config=CONFIG)


class TestPastViews(ViewsConformance):
    """A past moment's views: a copy of the log up to the moment, folded in a temporary directory."""

    local = True

    def open_store(self, path: Any) -> Memory:
        return eidetica.open(path, embedder=HashEmbedder(dim=32), config=CONFIG)

    def views_of(self, m: Memory) -> tuple[Views, Embedder, Callable[[], None]]:
        past = m.as_of(m.log.head(0) - 1)  # the moment of the last write: everything written so far
        m.session("later", user="u").append("user", "written after the moment, never seen by the past")
        return past.views, past.embedder, past.close
