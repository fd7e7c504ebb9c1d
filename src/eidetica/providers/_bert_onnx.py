"""A BERT encoder with mean pooling as an ONNX graph, built in memory from safetensors weights.

The float32 graph uses standard ONNX ops only (opset 17: ``LayerNormalization``, ``Erf`` GELU), with
dynamic batch and sequence axes and an ``attention_mask`` input; onnxruntime fuses it at session
creation (graph optimisation level ALL: bias+GELU, matmul+scale, ...). Measured on this machine's
EPYC for one 12-token text: 4.5 ms CPU against 8.7 ms for the former hand-written NumPy forward;
``onnxruntime.transformers.optimizer``'s BERT fusions (Attention, SkipLayerNorm) made no further
difference, so they are not used (see BENCHMARKS.md, issue 25).

The float32 weights are not copied into the protobuf: each initializer is an EXTERNAL
placeholder, and the arrays are handed to the session with
``SessionOptions.add_external_initializers``, which keeps the build cheap (serialising 90 MB of
weights into a ModelProto and parsing it back cost ~0.5 s).

With ``int8`` (the default of ``LocalEmbedder``), the attention output and feed-forward products
run as ``com.microsoft.MatMulNBits`` with 8-bit blockwise weights (their 8 MB of codes are in the
protobuf) and int8 arithmetic on activations quantised per block at run time. Per-channel
``quantize_dynamic`` (one activation scale per tensor) had given 0.987-0.994 cosine; blocks of
16 keep every one of LoCoMo's 8,608 texts within 1e-3 cosine of float32 (worst 0.99919,
"Thanks!"), at 15-20% less CPU per text (issue 25, BENCHMARKS.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["build_bert_graph"]

OPSET = 17
# MatMulNBits block along the input dimension: with every product in int8, blocks of 16 kept 300
# bench texts at worst 0.99966 cosine of float32 against 0.99941 with 32, and ran faster too.
INT8_BLOCK = 16


def quantize_blocks(wt: np.ndarray, block: int = INT8_BLOCK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``[K, N]`` float weight as MatMulNBits takes it: uint8 ``[N, K/block, block]``, scales and zero points ``[N*K/block]``.

    Asymmetric (each block's own zero point): the lowest and highest weight of a block both map
    to a code, which kept the worst LoCoMo text at 0.99919 cosine against 0.99902 symmetric.
    """
    k, n = wt.shape
    blocks = np.ascontiguousarray(wt.T, dtype=np.float32).reshape(n, k // block, block)
    lo = np.minimum(blocks.min(axis=2, keepdims=True), 0)
    hi = np.maximum(blocks.max(axis=2, keepdims=True), 0)
    scale = (hi - lo) / 255.0
    scale[scale == 0] = 1.0
    zero = np.clip(np.rint(-lo / scale), 0, 255)
    q = np.clip(np.rint(blocks / scale) + zero, 0, 255)
    return q.astype(np.uint8), scale.reshape(-1).astype(np.float32), zero.reshape(-1).astype(np.uint8)


def _constants(hidden: int, heads: int, head_dim: int) -> dict[str, np.ndarray]:
    """The graph's small constants, by name."""
    return {
        "c_0": np.array([0], np.int64),
        "c_1": np.array([1], np.int64),
        "c_2": np.array([2], np.int64),
        "c_one": np.array(1.0, np.float32),
        "c_mask": np.array(-10000.0, np.float32),
        "c_sqrt_d": np.array(math.sqrt(head_dim), np.float32),
        "c_sqrt_2": np.array(math.sqrt(2.0), np.float32),
        "c_half": np.array(0.5, np.float32),
        "c_heads": np.array([0, 0, heads, head_dim], np.int64),
        "c_hidden": np.array([0, 0, hidden], np.int64),
    }


def _serialize(nodes: list[Any], small: list[Any], external: dict[str, np.ndarray], hidden: int, int8: bool) -> bytes:
    """The model around ``nodes``: the big weights as external-data placeholders (filled in memory at load)."""
    from onnx import TensorProto, helper

    placeholders = []
    for name, arr in external.items():
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=arr.shape, data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "eidetica-in-memory"), ("offset", "0"), ("length", str(arr.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        placeholders.append(t)
    graph = helper.make_graph(
        nodes,
        "bert_mean_pooling",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])],
        initializer=small + placeholders,
    )
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if int8 else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="eidetica")
    model.ir_version = 8  # the oldest IR with opset 17, read by every onnxruntime that runs it
    out: bytes = model.SerializeToString()
    return out


def build_bert_graph(
    weights: dict[str, np.ndarray], cfg: dict[str, Any], int8: bool = False
) -> tuple[bytes, dict[str, np.ndarray]]:
    """The serialised graph ``(input_ids, attention_mask) -> pooled`` and its external initializers.

    ``int8``: the attention output and feed-forward layers run as onnxruntime's ``MatMulNBits``
    (8-bit weights in blocks of 16 along the input, activations quantised per row and block at
    run time, int8 products): 15-20% less CPU per text, every LoCoMo text within 1e-3 cosine.
    """
    from onnx import TensorProto, helper, numpy_helper

    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    external: dict[str, np.ndarray] = {}
    small: list[Any] = []
    nodes: list[Any] = []

    def w(name: str) -> np.ndarray:
        return np.asarray(weights[prefix + name], dtype=np.float32)

    def big(name: str, arr: np.ndarray) -> str:
        external[name] = np.ascontiguousarray(arr, dtype=np.float32)
        return name

    def const(name: str, arr: np.ndarray) -> str:
        small.append(helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape, arr.flatten().tolist()))
        return name

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def dense(x: str, name: str, quantize: bool = False) -> str:
        # torch Linear stores [out, in]; MatMul wants [in, out]
        wt = w(name + ".weight").T
        bias = big(name + ".bias", w(name + ".bias"))
        if not (int8 and quantize and wt.shape[0] % INT8_BLOCK == 0):
            return op("Add", [op("MatMul", [x, big(name + ".weight", wt)]), bias])
        q, scales, zero = quantize_blocks(wt)
        # in the graph, not external: onnxruntime 1.32 crashed prepacking external MatMulNBits weights
        small.extend(numpy_helper.from_array(a, f"{name}.{part}") for a, part in ((q, "q"), (scales, "scales"), (zero, "zero")))
        out = f"MatMulNBits_{len(nodes)}"
        nodes.append(helper.make_node(
            "MatMulNBits", [x, name + ".q", name + ".scales", name + ".zero"], [out], name=out, domain="com.microsoft",
            K=wt.shape[0], N=wt.shape[1], bits=8, block_size=INT8_BLOCK, accuracy_level=4,
        ))
        return op("Add", [out, bias])

    def layer_norm(x: str, name: str) -> str:
        return op("LayerNormalization", [x, big(name + ".weight", w(name + ".weight")), big(name + ".bias", w(name + ".bias"))], axis=-1, epsilon=eps)

    consts = _constants(hidden, heads, head_dim)
    for cname, cvalue in consts.items():
        const(cname, cvalue)

    # Embeddings: word + position[:T] + token type 0, then layer norm.
    seq = op("Slice", [op("Shape", ["input_ids"]), "c_1", "c_2"])
    x = op("Gather", [big("embeddings.word_embeddings.weight", w("embeddings.word_embeddings.weight")), "input_ids"], axis=0)
    x = op("Add", [x, op("Slice", [big("embeddings.position_embeddings.weight", w("embeddings.position_embeddings.weight")), "c_0", seq, "c_0"])])
    x = op("Add", [x, big("embeddings.token_type_0", w("embeddings.token_type_embeddings.weight")[0])])
    x = layer_norm(x, "embeddings.LayerNorm")
    # Padding keys get -10000 added to their scores: exp underflows to exactly 0 after softmax.
    mask = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    key_bias = op("Mul", [op("Sub", ["c_one", op("Unsqueeze", [op("Unsqueeze", [mask, "c_1"]), "c_1"])]), "c_mask"])
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{i}."

        def split_heads(name: str, perm: list[int]) -> str:
            return op("Transpose", [op("Reshape", [dense(x, p + name), "c_heads"])], perm=perm)  # noqa: B023 (built within the iteration)

        q = split_heads("attention.self.query", [0, 2, 1, 3])
        k = split_heads("attention.self.key", [0, 2, 3, 1])
        v = split_heads("attention.self.value", [0, 2, 1, 3])
        scores = op("Add", [op("Div", [op("MatMul", [q, k]), "c_sqrt_d"]), key_bias])
        ctx = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), "c_hidden"])
        # int8 for the attention output and the feed-forward (75% of the products); the query,
        # key and value projections stay float32: quantised, they put short texts ("Thanks!")
        # outside 1e-3 cosine of the float32 model (0.9985)
        x = layer_norm(op("Add", [dense(ctx, p + "attention.output.dense", True), x]), p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense", True)
        # exact (erf) GELU, the pattern onnxruntime fuses into BiasGelu
        h = op("Mul", [op("Mul", [h, op("Add", [op("Erf", [op("Div", [h, "c_sqrt_2"])]), "c_one"])]), "c_half"])
        x = layer_norm(op("Add", [dense(h, p + "output.dense", True), x]), p + "output.LayerNorm")
    # Mean over real tokens (a row of padding only would divide by 1, not 0).
    m = op("Unsqueeze", [mask, "c_2"])
    total = op("ReduceSum", [op("Mul", [x, m]), "c_1"], keepdims=0)
    count = op("Max", [op("ReduceSum", [m, "c_1"], keepdims=0), "c_one"])
    nodes.append(helper.make_node("Div", [total, count], ["pooled"], name="pooled"))

    return _serialize(nodes, small, external, hidden, int8), external
