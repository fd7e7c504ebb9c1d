"""Crash-test child: a mixed workload through the public API, printing what was acknowledged."""

import random
import sys

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.providers import HashEmbedder


def main() -> None:
    path, rnd = sys.argv[1], int(sys.argv[2])
    rng = random.Random(rnd)
    cfg = MemoryConfig(window=4, token_budget=150, retain_recent=3)
    with eidetica.open(path, embedder=HashEmbedder(dim=64), config=cfg) as m:
        print("READY", flush=True)
        i = 0
        while True:
            i += 1
            op = rng.random()
            user = f"user{rng.randrange(3)}"
            if op < 0.6:
                sid = f"r{rnd}-s{rng.randrange(2)}"
                text = f"I live in city number {rnd}-{i}." if rng.random() < 0.3 else f"message {rnd}-{i} about things"
                m.session(sid, user=user).append("user", text)
                print(f"ACK msg {user} {sid} {text}", flush=True)
            elif op < 0.8:
                fid = m.remember(f"fact {rnd}-{i} about {user}", user=user)
                print(f"ACK fact {user} {fid}", flush=True)
            elif op < 0.9:
                nid = m.store_note(f"note {rnd}-{i}", user=user)
                print(f"ACK note {user} {nid}", flush=True)
            else:
                hits = m.recall(f"fact {rnd}", user=user)
                print(f"ACK query {len(hits)}", flush=True)


if __name__ == "__main__":
    main()
