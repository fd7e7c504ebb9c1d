"""Child process: re-extract a store with a new extractor that SIGKILLs its own process after N extractions."""

from __future__ import annotations

import os
import signal
import sys

import eidetica
from eidetica.providers import ExtractedFact, HashEmbedder, OfflineLLM


class NewExtractor(OfflineLLM):
    """A "better" extractor: the offline rules, minus pirate claims, plus violin playing."""

    extractor_version = "test:new-rules-2"

    def __init__(self, kill_after: int = -1) -> None:
        super().__init__()
        self.kill_after = kill_after
        self.calls = 0

    def extract_facts(self, text: str) -> list[ExtractedFact]:
        """The offline facts of ``text``, changed as above; dies (SIGKILL) on call ``kill_after``."""
        self.calls += 1
        if self.calls == self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        found = [f for f in super().extract_facts(text) if "pirate" not in f.content]
        if "violin" in text:
            found.append(ExtractedFact(content="Plays the violin.", category="hobby"))
        return found


if __name__ == "__main__":
    with eidetica.open(sys.argv[1], embedder=HashEmbedder(dim=64)) as m:
        print(m.reextract(llm=NewExtractor(int(sys.argv[2]))))
