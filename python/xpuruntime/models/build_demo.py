"""Builds the bundled demo model ``demo.onnx`` (no downloads, deterministic).

A small image classifier with both halves of a modern network, so the README's main
command exercises the native engine end to end:

* convolutional stem: Conv 3→16 (3×3, stride 2) + BatchNormalization + Relu,
  Conv 16→32 (3×3, stride 2) + Relu  → 64 tokens of width 32 (an 8×8 grid);
* a learned positional embedding, then one pre-norm transformer encoder block:
  LayerNormalization, 2-head self-attention (MatMul, Softmax), residual Add,
  LayerNormalization, MLP 32→64→32 with erf-GELU, residual Add;
* mean over tokens and a linear head to 10 logits.

Input ``image``: float32 [batch, 3, 32, 32] (symbolic batch); output ``logits``:
float32 [batch, 10]. Weights come from ``numpy.random.default_rng(2024)``, so the
file is byte-identical on every run. Regenerate with::

    python -m xpuruntime.models.build_demo            # writes demo.onnx beside this file
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DEMO_PATH = Path(__file__).with_name("demo.onnx")
OPSET = 17


def build() -> object:
    """The demo model as an ``onnx.ModelProto``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2024)
    inits: list = []
    nodes: list = []

    def w(name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    d, heads, hd, tokens = 32, 2, 16, 64
    # --- convolutional stem
    x = node(
        "Conv",
        ["image", w("stem1.w", (16, 3, 3, 3)), w("stem1.b", (16,), 0.1)],
        "stem1",
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    bn = [
        const("bn.scale", (1 + 0.1 * rng.standard_normal(16)).astype(np.float32)),
        const("bn.bias", (0.1 * rng.standard_normal(16)).astype(np.float32)),
        const("bn.mean", (0.1 * rng.standard_normal(16)).astype(np.float32)),
        const("bn.var", (1 + 0.1 * np.abs(rng.standard_normal(16))).astype(np.float32)),
    ]
    x = node("BatchNormalization", [x, *bn], "stem1.bn", epsilon=1e-5)
    x = node("Relu", [x], "stem1.relu")
    x = node(
        "Conv",
        [x, w("stem2.w", (32, 16, 3, 3)), w("stem2.b", (32,), 0.1)],
        "stem2",
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    x = node("Relu", [x], "stem2.relu")
    # [B, 32, 8, 8] -> [B, 64, 32] tokens
    x = node("Reshape", [x, const("tok.shape", np.array([0, d, tokens], np.int64))], "tokens.flat")
    x = node("Transpose", [x], "tokens", perm=[0, 2, 1])
    x = node("Add", [x, w("pos", (1, tokens, d), 0.02)], "tokens.pos")
    # --- transformer encoder block (pre-norm)
    h = node(
        "LayerNormalization",
        [x, const("ln1.g", np.ones(d, np.float32)), const("ln1.b", np.zeros(d, np.float32))],
        "ln1",
        axis=-1,
    )
    split_heads = const("heads.shape", np.array([0, tokens, heads, hd], np.int64))
    qkv = []
    for t in ("q", "k", "v"):
        y = node("MatMul", [h, w(f"attn.{t}.w", (d, d))], f"attn.{t}")
        y = node("Add", [y, w(f"attn.{t}.b", (d,), 0.02)], f"attn.{t}.bias")
        y = node("Reshape", [y, split_heads], f"attn.{t}.heads")
        qkv.append(node("Transpose", [y], f"attn.{t}.t", perm=[0, 2, 1, 3]))  # [B, H, T, hd]
    q, k, v = qkv
    kt = node("Transpose", [k], "attn.kT", perm=[0, 1, 3, 2])
    s = node("MatMul", [q, kt], "attn.scores")
    s = node("Mul", [s, const("attn.scale", np.array(1 / np.sqrt(hd), np.float32))], "attn.scaled")
    p = node("Softmax", [s], "attn.probs", axis=-1)
    o = node("MatMul", [p, v], "attn.context")
    o = node("Transpose", [o], "attn.merge.t", perm=[0, 2, 1, 3])
    o = node("Reshape", [o, const("merge.shape", np.array([0, tokens, d], np.int64))], "attn.merge")
    o = node("MatMul", [o, w("attn.o.w", (d, d))], "attn.o")
    o = node("Add", [o, w("attn.o.b", (d,), 0.02)], "attn.o.bias")
    x = node("Add", [x, o], "res1")
    h = node(
        "LayerNormalization",
        [x, const("ln2.g", np.ones(d, np.float32)), const("ln2.b", np.zeros(d, np.float32))],
        "ln2",
        axis=-1,
    )
    h = node("MatMul", [h, w("mlp.fc1.w", (d, 2 * d))], "mlp.fc1")
    h = node("Add", [h, w("mlp.fc1.b", (2 * d,), 0.02)], "mlp.fc1.bias")
    # erf-GELU: 0.5 * h * (1 + erf(h / sqrt(2)))
    g = node("Div", [h, const("gelu.sqrt2", np.array(np.sqrt(2.0), np.float32))], "gelu.div")
    g = node("Erf", [g], "gelu.erf")
    g = node("Add", [g, const("gelu.one", np.array(1.0, np.float32))], "gelu.add")
    g = node("Mul", [h, g], "gelu.mul")
    g = node("Mul", [g, const("gelu.half", np.array(0.5, np.float32))], "gelu")
    g = node("MatMul", [g, w("mlp.fc2.w", (2 * d, d))], "mlp.fc2")
    g = node("Add", [g, w("mlp.fc2.b", (d,), 0.02)], "mlp.fc2.bias")
    x = node("Add", [x, g], "res2")
    # --- head
    x = node("ReduceMean", [x], "pool", axes=[1], keepdims=0)
    x = node("MatMul", [x, w("head.w", (d, 10))], "head")
    nodes.append(helper.make_node("Add", [x, w("head.b", (10,), 0.02)], ["logits"], name="head.bias"))

    graph = helper.make_graph(
        nodes,
        "xpuruntime_demo",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="xpuruntime.models.build_demo"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> int:
    """Write the demo model (default: demo.onnx beside this file)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DEMO_PATH
    out.write_bytes(build().SerializeToString())  # type: ignore[attr-defined]
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
