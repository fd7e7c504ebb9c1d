"""Crash-test child: appends one user message, then stops where its extraction would start, so the
parent can SIGKILL it with the message committed and no ``ExtractionCompleted`` written."""

import sys
import time

import eidetica
from eidetica.actors.curator import FactCurator
from eidetica.providers import HashEmbedder


def _stall(self, messages):  # noqa: ANN001 - stands in for FactCurator.extract
    print("COMMITTED", flush=True)  # the append's commit returned: the message is in the log
    time.sleep(600)


def main() -> None:
    path, text = sys.argv[1], sys.argv[2]
    FactCurator.extract = _stall  # type: ignore[method-assign]
    with eidetica.open(path, embedder=HashEmbedder(dim=64)) as m:
        m.session("s1", user="ana").append("user", text)


if __name__ == "__main__":
    main()
