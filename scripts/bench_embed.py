"""Throughput of the default (NumPy) embedder, and of sentence-transformers + torch when installed.

    python scripts/bench_embed.py [--quick] [--texts N] [--batch-size B]

Both run on the same deterministic short texts (sentences of 5-60 words). The last line of
output is one JSON object::

    {"default_texts_per_s": ..., "torch_texts_per_s": null|..., "max_abs_diff": null|...}

``max_abs_diff`` is the largest absolute difference between the two embedders' vectors. The
embedders' caches are off, so every text is really embedded. Run it with OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS unset: NumPy's BLAS then uses every core, as it would for a user.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time

import numpy as np

WORDS = """the of and to in is you that it he was for on are as with his they at be this have from or one
had by word but not what all were we when your can said there use an each which she do how their if will up
other about out many then them these so some her would make like him into time has look two more write go see
number no way could people my than first water been call who oil its now find long down day did get come made
may part memory agent user prefers lives works city coffee tea morning evening meeting project deadline doctor
allergic peanuts garden weekend travel flight hotel train museum river mountain lake forest music jazz guitar
piano novel author chapter library school teacher student lesson exam science history language french german
japanese spanish recipe dinner lunch breakfast kitchen restaurant market price budget salary bank account
phone laptop screen keyboard software engineer database server network cloud storage backup password email
message calendar reminder birthday anniversary wedding family sister brother mother father daughter son friend
neighbour dog cat bird horse car bicycle bus street house apartment room window door table chair bed lamp
summer winter spring autumn rain snow wind sun cloud weather temperature hospital medicine health exercise
running swimming football tennis yoga sleep dream holiday beach island village country border passport""".split()


def make_texts(n: int, seed: int = 7) -> list[str]:
    """``n`` deterministic sentences of 5-60 words."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(5, 60))]
        if len(words) > 12 and rnd.random() < 0.5:
            words[rnd.randrange(3, len(words) - 3)] += ","
        out.append(" ".join(words).capitalize() + rnd.choice([".", ".", ".", "?", "!"]))
    return out


def timed(fn, texts: list[str]) -> tuple[np.ndarray, float, float]:
    """Run ``fn(texts)`` once; return its result, the wall time and this process's CPU time in seconds."""
    c = time.process_time()
    t = time.perf_counter()
    out = fn(texts)
    return out, time.perf_counter() - t, time.process_time() - c


def load_note() -> str:
    """The 1-minute load average, flagged when other processes compete for the cores."""
    load = os.getloadavg()[0]
    busy = load > 0.5
    return f"load average {load:.2f}" + (" (other processes are using the CPUs: wall-clock rates are depressed)" if busy else "")


def main() -> None:
    """Run the benchmark and print the JSON summary as the last line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer texts; well under a minute")
    ap.add_argument("--texts", type=int, default=None, help="number of texts (default 2000, 300 with --quick)")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    n = args.texts or (300 if args.quick else 2000)

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            print(f"note: {var}={os.environ[var]} is set; the numbers are not the default configuration")

    from eidetica.providers import LocalEmbedder

    texts = make_texts(n)
    warm = make_texts(64, seed=99)
    n_words = [len(t.split()) for t in texts]
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs")
    print(f"{n} texts, {min(n_words)}-{max(n_words)} words (mean {sum(n_words) / n:.1f})")
    print(f"before: {load_note()}")

    t = time.perf_counter()
    local = LocalEmbedder(cache_size=0, batch_size=args.batch_size)
    print(f"default embedder: {local.model_id} ({local.dim}-d), loaded in {time.perf_counter() - t:.2f}s")
    tokens = [len(ids) for ids in local.tokenize(texts)]
    print(f"tokens per text: mean {sum(tokens) / n:.1f}, max {max(tokens)}")
    local.embed(warm)
    ours, secs, cpu = timed(local.embed, texts)
    default_rate = n / secs
    print(f"default (NumPy): {secs:.2f}s, {default_rate:.1f} texts/s; CPU {cpu:.2f}s = {n / cpu:.1f} texts per CPU-second")

    torch_rate = None
    max_diff = None
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        print("torch: skipped (sentence-transformers/torch not installed; pip install 'eidetica[torch]')")
    else:
        from eidetica.providers import SentenceTransformerEmbedder

        st = SentenceTransformerEmbedder(cache_size=0, batch_size=args.batch_size)
        st.embed(warm)
        theirs, tsecs, _ = timed(st.embed, texts)
        torch_rate = n / tsecs
        max_diff = float(np.abs(theirs - ours).max())
        print(f"torch (sentence-transformers): {tsecs:.2f}s, {torch_rate:.1f} texts/s; ratio {default_rate / torch_rate:.2f}x")
        print(f"max abs diff: {max_diff:.2e}")

    print(f"after: {load_note()}")
    sys.stdout.flush()
    print(
        json.dumps(
            {
                "default_texts_per_s": round(default_rate, 1),
                "torch_texts_per_s": None if torch_rate is None else round(torch_rate, 1),
                "max_abs_diff": max_diff,
            }
        )
    )


if __name__ == "__main__":
    main()
