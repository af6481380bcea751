"""The rotary position embedding pattern (graph/fusion_rotary.cpp): torch's export of
``q * cos + rotate_half(q) * sin`` (Llama, Qwen, Mistral, GPT-NeoX) becomes one
RotaryHalf node, recorded as a fusion Decision, and matches ONNX Runtime on the unfused
graph within 1e-5 relative on random inputs, with cos/sin as graph inputs or as
constants, [S, d] or [B, 1, S, d], and the operands in either order. Near-misses (wrong
half bounds, the halves swapped, the sign on the other half, a product read elsewhere)
are left alone and still match. The offline CUDA preview fuses it in fp16 and bf16.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime import _core

F = TensorProto.FLOAT
B, H, S, D = 2, 3, 5, 16
INT_MAX = np.iinfo(np.int64).max


def _rope(
    table: str = "input",
    swap_mul: bool = False,
    swap_add: bool = False,
    ends_max: bool = True,
    bad_half: bool = False,
    swapped_halves: bool = False,
    neg_other: bool = False,
    leak: bool = False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    half = D // 2 + (1 if bad_half else 0)
    inits: dict[str, Any] = {
        "z": np.array([0], np.int64),
        "h": np.array([half], np.int64),
        "e": np.array([INT_MAX if ends_max else D], np.int64),
        "ax": np.array([-1], np.int64),
    }
    cs_shape = [S, D] if table == "input" else [1, 1, S, D]
    inputs = [helper.make_tensor_value_info("x", F, [B, H, S, D])]
    if table == "input":
        inputs += [helper.make_tensor_value_info(n, F, cs_shape) for n in ("cos", "sin")]
    else:
        ang = rng.uniform(-3, 3, (1, 1, S, D // 2))
        ang = np.concatenate([ang, ang], -1)
        inits["cos"], inits["sin"] = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    nodes = [
        helper.make_node("Slice", ["x", "z", "h", "ax"], ["x1"]),
        helper.make_node("Slice", ["x", "h", "e", "ax"], ["x2"]),
    ]
    if neg_other:
        nodes += [
            helper.make_node("Neg", ["x1"], ["n"]),
            helper.make_node("Concat", ["n", "x2"], ["rot"], axis=-1),
        ]
    elif swapped_halves:
        nodes += [
            helper.make_node("Neg", ["x2"], ["n"]),
            helper.make_node("Concat", ["x1", "n"], ["rot"], axis=-1),
        ]
    else:
        nodes += [
            helper.make_node("Neg", ["x2"], ["n"]),
            helper.make_node("Concat", ["n", "x1"], ["rot"], axis=-1),
        ]
    nodes += [
        helper.make_node("Mul", ["cos", "x"] if swap_mul else ["x", "cos"], ["xc"]),
        helper.make_node("Mul", ["sin", "rot"] if swap_mul else ["rot", "sin"], ["rs"]),
        helper.make_node("Add", ["rs", "xc"] if swap_add else ["xc", "rs"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", F, [B, H, S, D])]
    if leak:
        nodes.append(helper.make_node("Identity", ["xc"], ["xc_out"]))
        outputs.append(helper.make_tensor_value_info("xc_out", F, [B, H, S, D]))
    g = helper.make_graph(
        nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    feeds = {"x": rng.standard_normal((B, H, S, D)).astype(np.float32)}
    if any(i.name == "cos" for i in m.graph.input):
        ang = rng.uniform(-3, 3, (S, D))
        feeds["cos"], feeds["sin"] = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    return feeds


def _run(m: onnx.ModelProto) -> Any:
    feeds = _feeds(m)
    sess = xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native")
    ours = sess.run(feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for name, b in zip([o.name for o in ref.get_outputs()], ref.run(None, feeds)):
        a = np.asarray(ours[name]).astype(np.float64)
        assert float(np.abs(a - b).max() / np.abs(b).max()) <= 1e-5, name
    return sess


def _ops(sess: Any) -> list[str]:
    return [s["op_type"] for s in sess.plan.steps]


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"table": "constant"},
        {"swap_mul": True, "swap_add": True},
        {"ends_max": False},
    ],
    ids=["table_input", "table_constant", "operands_swapped", "end_is_d"],
)
def test_rotary_embedding_is_fused(variant):
    sess = _run(_rope(**variant))
    ops = _ops(sess)
    assert ops.count("RotaryHalf") == 1, ops
    assert not {"Slice", "Neg", "Concat", "Mul", "Add"} & set(ops), ops
    fused = [d for d in sess.explain() if d.op == "fusion" and "rotary" in d.detail]
    assert fused, [d.detail for d in sess.explain() if d.op == "fusion"]


@pytest.mark.parametrize(
    "variant",
    [{"bad_half": True}, {"swapped_halves": True}, {"neg_other": True}, {"leak": True}],
    ids=["wrong_half", "halves_swapped", "sign_on_other_half", "product_read_elsewhere"],
)
def test_rotary_near_misses_are_not_fused(variant):
    assert "RotaryHalf" not in _ops(_run(_rope(**variant)))


@pytest.mark.skipif("cuda" not in _core.graph.providers(), reason="this build has no CUDA execution provider")
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_cuda_preview_fuses_the_rotary_embedding(precision):
    from xpuruntime.engines.native.preview import preview_plan

    pv = preview_plan(
        _rope(table="constant").SerializeToString(),
        device="cuda",
        target="sm_90",
        exec_policy=xrt.ExecutionPolicy(precision=precision),
    )
    steps = [s for s in pv.steps if s["op_type"] == "RotaryHalf"]
    assert len(steps) == 1 and steps[0]["kernel"] == "cuda", [s["op_type"] for s in pv.steps]
