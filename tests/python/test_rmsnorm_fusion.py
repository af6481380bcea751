"""RMSNormalization (ONNX opset 23) and the decomposed RMSNorm pattern
(graph/fusion_rmsnorm.cpp).

The op itself runs on the CPU against a float64 NumPy reference and ONNX's reference
implementation. The decomposed forms torch exports (Llama/Qwen: Pow, ReduceMean, Add,
Sqrt, Reciprocal or Div(1, .), Mul, Mul(gamma), with the model's own float32 Casts; T5:
Div by the Sqrt) become one RMSNormalization node, recorded as a fusion Decision, and
match ONNX Runtime on the unfused graph within 1e-5 relative on random inputs. The
near-misses (mean over another axis, a non-constant eps, an intermediate read
elsewhere, LayerNorm's Sub(x, mean)) are left alone and still match. The offline CUDA
preview fuses it in fp16 and bf16 plans.
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
D = 48


def _model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 23 else 8
    onnx.checker.check_model(m)
    return m


def _rms_ref(x: np.ndarray, gamma: np.ndarray | None, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + eps)
    return y * gamma.astype(np.float64) if gamma is not None else y


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def _decomposed(
    form: str = "reciprocal",
    gamma: bool = True,
    casts: bool = False,
    axis: int = -1,
    eps_input: bool = False,
    leak: bool = False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits: dict[str, Any] = {
        "two": np.array(2.0, np.float32),
        "axes": np.array([axis], np.int64),
        "one": np.array(1.0, np.float32),
        "gamma": (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32),
    }
    inputs = {"x": [2, 7, D]}
    if eps_input:
        inputs["eps"] = []
    else:
        inits["eps"] = np.array(1e-6, np.float32)
    nodes = []
    x = "x"
    if casts:  # Llama's hidden_states.to(torch.float32) in an fp32 export
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=F))
        x = "xf"
    nodes += [
        helper.make_node("Pow", [x, "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["a"]),
        helper.make_node("Sqrt", ["a"], ["s"]),
    ]
    if form == "div":
        nodes.append(helper.make_node("Div", [x, "s"], ["n"]))
    elif form == "one_over":
        nodes += [helper.make_node("Div", ["one", "s"], ["inv"]), helper.make_node("Mul", [x, "inv"], ["n"])]
    else:
        nodes += [helper.make_node("Reciprocal", ["s"], ["inv"]), helper.make_node("Mul", ["inv", x], ["n"])]
    last = "n"
    if casts:
        nodes.append(helper.make_node("Cast", ["n"], ["nc"], to=F))
        last = "nc"
    outputs = {"y": [2, 7, D]}
    if gamma:
        nodes.append(helper.make_node("Mul", ["gamma", last], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    if leak:
        outputs["ms_out"] = [2, 7, 1]
        nodes.append(helper.make_node("Identity", ["ms"], ["ms_out"]))
    return _model(nodes, inputs, outputs, inits, opset=18)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    feeds = {"x": (3.0 * rng.standard_normal((2, 7, D)) + 0.5).astype(np.float32)}
    if any(i.name == "eps" for i in model.graph.input):
        feeds["eps"] = np.array(1e-6, np.float32)
    return feeds


def _run(model: onnx.ModelProto) -> tuple[Any, dict[str, np.ndarray]]:
    feeds = _feeds(model)
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    ours = sess.run(feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for name, b in zip([o.name for o in ref.get_outputs()], ref.run(None, feeds)):
        assert _rel(np.asarray(ours[name]), b.astype(np.float64)) <= 1e-5, name
    return sess, feeds


def _ops(sess: Any) -> list[str]:
    return [s["op_type"] for s in sess.plan.steps]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rmsnormalization_op_matches_numpy_and_the_onnx_reference(dtype):
    from onnx.reference import ReferenceEvaluator

    t = F if dtype == np.float32 else TensorProto.FLOAT16
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 5, D)).astype(dtype)
    scale = (1 + 0.2 * rng.standard_normal(D)).astype(dtype)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-5)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", t, [3, 5, D])],
        [helper.make_tensor_value_info("y", t, [3, 5, D])],
        [numpy_helper.from_array(scale, "scale")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    y = np.asarray(
        xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native").run({"x": x})["y"]
    )
    tol = 1e-6 if dtype == np.float32 else 2e-3
    assert _rel(y, _rms_ref(x, scale, 1e-5)) <= tol
    (ref,) = ReferenceEvaluator(m).run(None, {"x": x})
    assert _rel(y, ref.astype(np.float64)) <= tol


def test_rmsnormalization_over_two_axes_with_a_broadcast_scale():
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 6, 8)).astype(np.float32)
    scale = rng.standard_normal(8).astype(np.float32)  # broadcast over the 6 x 8 rows
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=1, epsilon=1e-3)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [4, 6, 8])],
        [helper.make_tensor_value_info("y", F, [4, 6, 8])],
        [numpy_helper.from_array(scale, "scale")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    y = xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native").run({"x": x})["y"]
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64**2).mean(axis=(1, 2), keepdims=True) + 1e-3) * scale
    assert _rel(np.asarray(y), ref) <= 1e-6


def test_a_scale_of_the_wrong_size_is_a_typed_error():
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 10])],
        [helper.make_tensor_value_info("y", F, [2, 10])],
        [numpy_helper.from_array(np.ones(3, np.float32), "scale")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    with pytest.raises(xrt.InvalidModelError, match="scale has 3 elements"):
        xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native")


@pytest.mark.parametrize(
    "variant",
    [
        {"form": "reciprocal"},
        {"form": "div"},
        {"form": "one_over"},
        {"form": "reciprocal", "casts": True},
        {"form": "div", "gamma": False},
    ],
    ids=["llama", "t5", "one_over", "llama_casts", "no_gamma"],
)
def test_decomposed_rmsnorm_is_fused(variant):
    sess, _ = _run(_decomposed(**variant))
    ops = _ops(sess)
    assert ops.count("RMSNormalization") == 1, ops
    assert not {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div"} & set(ops), ops
    fusions = [d for d in sess.explain() if d.op == "fusion" and d.chosen == "RMSNormalization"]
    assert fusions and "decomposed RMSNorm" in fusions[0].detail


@pytest.mark.parametrize(
    "variant",
    [{"axis": 1}, {"eps_input": True}, {"leak": True}],
    ids=["other_axis", "eps_not_constant", "intermediate_read_elsewhere"],
)
def test_rmsnorm_near_misses_are_not_fused(variant):
    sess, _ = _run(_decomposed(**variant))
    assert "RMSNormalization" not in _ops(sess)


def test_layernorm_is_not_taken_for_an_rmsnorm():
    # LayerNorm's variance half (ReduceMean(Pow(x - mean, 2)) ... Div(x - mean, Sqrt))
    # is an RMSNorm of x - mean; the LayerNorm fusion runs first and takes it whole.
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["v"], keepdims=1),
        helper.make_node("Add", ["v", "eps"], ["a"]),
        helper.make_node("Sqrt", ["a"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["y"]),
    ]
    inits = {
        "axes": np.array([-1], np.int64),
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
    }
    sess, _ = _run(_model(nodes, {"x": [2, 7, D]}, {"y": [2, 7, D]}, inits, opset=18))
    ops = _ops(sess)
    assert "LayerNormalization" in ops and "RMSNormalization" not in ops, ops


@pytest.mark.skipif("cuda" not in _core.graph.providers(), reason="this build has no CUDA execution provider")
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_cuda_preview_fuses_rmsnorm_in_every_precision(precision):
    from xpuruntime.engines.native.preview import preview_plan

    pv = preview_plan(
        _decomposed(form="reciprocal", casts=True).SerializeToString(),
        device="cuda",
        target="sm_90",
        exec_policy=xrt.ExecutionPolicy(precision=precision),
    )
    steps = [s for s in pv.steps if s["op_type"] == "RMSNormalization"]
    assert len(steps) == 1 and steps[0]["kernel"] == "cuda", [s["op_type"] for s in pv.steps]
