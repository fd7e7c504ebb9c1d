"""Throughput of the default (onnxruntime) embedder, and of sentence-transformers + torch when installed.

    python scripts/bench_embed.py [--quick] [--texts N] [--batch-size B] [--variants]

Both run on the same deterministic short texts (sentences of 5-60 words). The last line of
output is one JSON object::

    {"default_texts_per_s": ..., "torch_texts_per_s": null|..., "max_abs_diff": null|...,
     "float32_texts_per_s": ..., "default_min_cosine_vs_float32": ...}

``max_abs_diff`` is the largest absolute difference between torch's vectors and our float32
path's (``int8=False``); ``default_min_cosine_vs_float32`` bounds the default's int8 products. The
embedders' caches are off, so every text is really embedded. Run it with OMP_NUM_THREADS unset:
the embedder then runs batches on every usable core, as it would for a user.

``--variants`` also measures the onnxruntime options weighed in issue 25, in CPU time per call
(which holds under load) for one 12-token text and per text in batches of 32 and 100, each with
its worst cosine against the float32 path: the float32 graph (standard ops, ORT level ALL) on 1 and 2
intra-op threads, the same graph after ``onnxruntime.transformers.optimizer`` (Attention,
SkipLayerNorm, BiasGelu fusions), dynamic int8 (all ops; weight MatMuls per channel), and the
default's blockwise int8 (MatMulNBits for the attention output and feed-forward). The
JSON then has a ``variants`` object.
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
    ap.add_argument("--variants", action="store_true", help="also time the onnxruntime variants (fused, int8, 2 threads)")
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
    print(f"default (onnxruntime): {secs:.2f}s, {default_rate:.1f} texts/s; CPU {cpu:.2f}s = {n / cpu:.1f} texts per CPU-second")
    # the default's int8 products against the float32 path (the bound: 1e-3 cosine)
    exact_emb = LocalEmbedder(cache_size=0, batch_size=args.batch_size, int8=False)
    exact_emb.embed(warm)
    exact, fsecs, fcpu = timed(exact_emb.embed, texts)
    min_cos = float((exact * ours).sum(1).min())
    print(f"float32 (int8=False): {fsecs:.2f}s, {n / fsecs:.1f} texts/s; CPU {fcpu:.2f}s = {n / fcpu:.1f} texts per "
          f"CPU-second; default's worst cosine to it {min_cos:.5f}")

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
        max_diff = float(np.abs(theirs - exact).max())  # torch against our float32 path
        print(f"torch (sentence-transformers): {tsecs:.2f}s, {torch_rate:.1f} texts/s; ratio {default_rate / torch_rate:.2f}x")
        print(f"max abs diff: {max_diff:.2e}")

    variants = measure_variants(exact_emb, local, texts) if args.variants else None
    print(f"after: {load_note()}")
    sys.stdout.flush()
    result: dict = {
        "default_texts_per_s": round(default_rate, 1),
        "torch_texts_per_s": None if torch_rate is None else round(torch_rate, 1),
        "max_abs_diff": max_diff,
        "float32_texts_per_s": round(n / fsecs, 1),
        "default_min_cosine_vs_float32": round(min_cos, 6),
    }
    if variants is not None:
        result["variants"] = variants
    print(json.dumps(result))


def measure_variants(local, default, texts: list[str]) -> dict:
    """CPU ms per call of onnxruntime variants of the model, and their worst cosine vs ``local`` (the float32 path).

    ``default`` is the default embedder: its own single-thread session is measured as it ships.
    """
    import tempfile

    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from safetensors.numpy import load_file

    from eidetica.providers._bert_onnx import build_bert_graph

    model = local._model
    graph, weights = build_bert_graph(load_file(str(model.model_dir / "model.safetensors")), model.cfg)
    proto = onnx.load_from_string(graph)
    # weights inside the proto: the optimizer and the quantizer read initializers
    from onnx import numpy_helper

    kept = [t for t in proto.graph.initializer if t.name not in weights]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept + [numpy_helper.from_array(a, name) for name, a in weights.items()])
    tmp = tempfile.mkdtemp(prefix="bench_embed_")
    plain = os.path.join(tmp, "plain.onnx")
    onnx.save(proto, plain)
    cfg = model.cfg
    fused = optimize_model(proto, model_type="bert", num_heads=int(cfg["num_attention_heads"]),
                           hidden_size=int(cfg["hidden_size"]), opt_level=0)
    fused_path = os.path.join(tmp, "fused.onnx")
    fused.save_model_to_file(fused_path)
    print("fused graph:", dict(sorted(fused.get_fused_operator_statistics().items())))
    int8_all = os.path.join(tmp, "int8.onnx")
    quantize_dynamic(plain, int8_all, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    inits = {t.name for t in proto.graph.initializer}
    weight_matmuls = [n.name for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    int8_w = os.path.join(tmp, "int8_weights.onnx")
    quantize_dynamic(plain, int8_w, weight_type=QuantType.QInt8, per_channel=True, nodes_to_quantize=weight_matmuls,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})

    def session(path: str, threads: int):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    one = ["My sister moved to Lisbon last spring for work."]
    sets = {"one": one, "b32": texts[:32], "b100": texts[:100]}

    def feeds(batch: list[str]) -> dict:
        ids = model.tokenize(batch)
        width = max(map(len, ids))
        a = np.zeros((len(ids), width), np.int64)
        m = np.zeros_like(a)
        for i, t in enumerate(ids):
            a[i, : len(t)] = t
            m[i, : len(t)] = 1
        return {"input_ids": a, "attention_mask": m}

    ref = {k: local.embed(v) for k, v in sets.items()}
    out: dict = {}
    for name, path, threads in [("ort_fp32_1t", plain, 1), ("ort_fp32_2t", plain, 2), ("ort_fused_fp32_1t", fused_path, 1),
                                ("ort_int8_all_1t", int8_all, 1), ("ort_int8_weights_1t", int8_w, 1),
                                ("ort_int8_blocks_1t (default)", None, 1)]:
        # None: the default's own session (int8 blocks, MatMulNBits), built as the embedder builds it
        sess = session(path, threads) if path is not None else default._model.session(threads)
        row: dict = {}
        worst = 1.0
        for key, batch in sets.items():
            f = feeds(batch)
            vec = sess.run(["pooled"], f)[0]
            vec /= np.linalg.norm(vec, axis=1, keepdims=True)
            worst = min(worst, float((vec * ref[key]).sum(1).min()))
            reps = 100 if key == "one" else 3
            c = time.process_time()
            for _ in range(reps):
                sess.run(["pooled"], f)
            per_call = (time.process_time() - c) / reps * 1000
            row[f"{key}_cpu_ms" if key == "one" else f"{key}_cpu_ms_per_text"] = round(per_call / len(batch), 2)
        row["min_cosine_vs_float32"] = round(worst, 6)
        print(f"{name}: {row}")
        out[name] = row
    return out


if __name__ == "__main__":
    main()
