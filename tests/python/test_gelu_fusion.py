"""The decomposed GELU -> one Gelu node (graph/fusion_gelu.cpp).

torch exports F.gelu below opset 20 as Div(x, sqrt 2), Erf, Add 1, Mul x, Mul 0.5 and
transformers' gelu_new as the tanh approximation in eight ops. Each exported variant
(Div or Mul by 1/sqrt 2; the three orders of the final multiplications; Pow(x, 3) or
x*x*x) becomes one Gelu, recorded as a Decision with op "fusion", and the result matches
a float64 NumPy reference within 1e-5 absolute (the inputs reach |x| = 5, past where erf
rounds to 1). After a MatMul with a bias the Gelu joins the MatMul's epilogue. Near
misses (a wrong constant, an intermediate read elsewhere or returned) are left alone and
still compute the graph as written.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import xpuruntime as xrt
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from test_fusion_patterns import _model, _ops  # noqa: E402

SHAPE = [4, 6, 40]
ATOL = 1e-5


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def _gelu_ref(x: np.ndarray, tanh: bool) -> np.ndarray:
    x = x.astype(np.float64)
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _c(name: str, v: float) -> Any:
    return numpy_helper.from_array(np.array(v, np.float32), name)


def _gelu_model(
    kind: str = "div",
    tail: str = "x_then_half",
    cube: str = "pow",
    sqrt2: float = math.sqrt(2),
    extra_output: str | None = None,
    matmul: bool = False,
) -> onnx.ModelProto:
    """One GELU over x (or over MatMul(x, W) + b when `matmul`), written as exported."""
    nodes: list[Any] = []
    inits = {"sqrt2": np.float32(sqrt2), "rsqrt2": np.float32(1 / sqrt2), "one": np.float32(1),
             "half": np.float32(0.5), "three": np.float32(3), "k": np.float32(0.044715),
             "s": np.float32(math.sqrt(2 / math.pi))}
    x = "x"
    if matmul:
        rng = np.random.default_rng(5)
        inits["W"] = rng.standard_normal((SHAPE[-1], 24)).astype(np.float32) * 0.3
        inits["b"] = rng.standard_normal(24).astype(np.float32)
        nodes += [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["h"])]
        x = "h"
    if kind == "div":
        nodes += [helper.make_node("Div", [x, "sqrt2"], ["a"]), helper.make_node("Erf", ["a"], ["core"])]
    elif kind == "mul":
        nodes += [helper.make_node("Mul", ["rsqrt2", x], ["a"]), helper.make_node("Erf", ["a"], ["core"])]
    else:
        if cube == "pow":
            nodes.append(helper.make_node("Pow", [x, "three"], ["x3"]))
        else:
            nodes += [helper.make_node("Mul", [x, x], ["x2"]), helper.make_node("Mul", ["x2", x], ["x3"])]
        nodes += [
            helper.make_node("Mul", ["k", "x3"], ["kx3"]),
            helper.make_node("Add", [x, "kx3"], ["inner"]),
            helper.make_node("Mul", ["inner", "s"], ["a"]),
            helper.make_node("Tanh", ["a"], ["core"]),
        ]
    nodes.append(helper.make_node("Add", ["one", "core"], ["p"]))
    if tail == "x_then_half":
        nodes += [helper.make_node("Mul", [x, "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    elif tail == "half_x_first":
        nodes += [helper.make_node("Mul", ["half", x], ["hx"]), helper.make_node("Mul", ["hx", "p"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["p", "half"], ["ph"]), helper.make_node("Mul", [x, "ph"], ["y"])]
    out_shape = SHAPE[:-1] + [24] if matmul else SHAPE
    outputs = {"y": out_shape}
    if extra_output:
        outputs[extra_output] = out_shape
    return _model(nodes, {"x": SHAPE}, outputs, inits)


def _x(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(SHAPE) * 2.5).astype(np.float32)


def _session(model: onnx.ModelProto, **kw: Any) -> Any:
    return xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native", **kw)


@pytest.mark.parametrize(
    "kind,tail,cube",
    [
        ("div", "x_then_half", "pow"),
        ("div", "half_x_first", "pow"),
        ("mul", "half_last", "pow"),
        ("tanh", "half_x_first", "pow"),
        ("tanh", "x_then_half", "mul"),
        ("tanh", "half_last", "mul"),
    ],
)
def test_decomposed_gelu_is_one_gelu_node(kind: str, tail: str, cube: str) -> None:
    sess = _session(_gelu_model(kind, tail, cube))
    assert _ops(sess) == ["Gelu"]
    (d,) = [d for d in sess.explain() if d.op == "fusion"]
    assert d.chosen == "Gelu" and d.rule == "fusion.pattern"
    assert ("tanh-approximated" if kind == "tanh" else "erf GELU") in d.detail
    assert any("gelu pattern fusion (subgraphs fused): 1" == line for line in sess.plan.pass_log)
    for seed in (1, 2):
        x = _x(seed)
        np.testing.assert_allclose(sess.run({"x": x})["y"], _gelu_ref(x, kind == "tanh"), rtol=0, atol=ATOL)


@pytest.mark.parametrize("kind", ["div", "tanh"])
def test_gelu_after_matmul_and_bias_joins_its_epilogue(kind: str) -> None:
    model = _gelu_model(kind, matmul=True)
    sess = _session(model)
    assert _ops(sess) == ["MatMul"], _ops(sess)
    x = _x(3)
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "W")).astype(np.float64)
    b = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "b")).astype(np.float64)
    ref = _gelu_ref(x.astype(np.float64) @ w + b, kind == "tanh")
    np.testing.assert_allclose(sess.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "variant,reason",
    [
        ({"sqrt2": 2.0}, "Div by 2, not sqrt(2)"),
        ({"extra_output": "core"}, "Erf's result is also a graph output"),
        ({"extra_output": "p"}, "1 + erf is also a graph output"),
    ],
    ids=["wrong_constant", "core_returned", "sum_returned"],
)
def test_gelu_near_misses_compute_the_graph_as_written(variant: dict[str, Any], reason: str) -> None:
    sess = _session(_gelu_model("div", **variant))
    assert "Gelu" not in _ops(sess), reason
    assert not [d for d in sess.explain() if d.op == "fusion"]
    x = _x(4)
    sqrt2 = variant.get("sqrt2", math.sqrt(2))
    core = _erf(x / np.float64(np.float32(sqrt2)))
    out = sess.run({"x": x})
    np.testing.assert_allclose(out["y"], 0.5 * x * (1 + core), rtol=0, atol=ATOL)
    if variant.get("extra_output") == "core":
        np.testing.assert_allclose(out["core"], core, rtol=0, atol=ATOL)
    elif variant.get("extra_output") == "p":
        np.testing.assert_allclose(out["p"], 1 + core, rtol=0, atol=ATOL)


def test_a_constant_that_broadcasts_x_up_is_not_a_gelu() -> None:
    """0.5 given as a [1, 1, 1, 1] constant makes the result rank 4 (x is rank 3)."""
    model = _gelu_model("div")
    for init in model.graph.initializer:
        if init.name == "half":
            init.CopyFrom(numpy_helper.from_array(np.full((1, 1, 1, 1), 0.5, np.float32), "half"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1] + SHAPE))
    sess = _session(model)
    assert "Gelu" not in _ops(sess)
    x = _x(10)
    np.testing.assert_allclose(sess.run({"x": x})["y"], _gelu_ref(x, False)[None], rtol=0, atol=ATOL)


def test_fuse_false_keeps_the_decomposed_ops() -> None:
    model = _gelu_model("tanh", cube="mul")
    unfused = _session(model, fuse=False)
    assert "Gelu" not in _ops(unfused) and "Tanh" in _ops(unfused)
    x = _x(6)
    np.testing.assert_allclose(unfused.run({"x": x})["y"], _gelu_ref(x, True), rtol=0, atol=ATOL)


def _torch_gelu_export(opset: int) -> tuple[onnx.ModelProto, Any]:
    torch = pytest.importorskip("torch")
    import io
    import warnings

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(24, 32), torch.nn.GELU(), torch.nn.Linear(32, 16), torch.nn.GELU(approximate="tanh")
    ).eval()
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(3, 7, 24),), buf, dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue()), net


@pytest.mark.parametrize("opset", [17, 18])
def test_torch_gelu_exports_fuse_into_the_matmul_epilogues(opset: int) -> None:
    """nn.GELU() and nn.GELU(approximate="tanh") as torch exports them below opset 20."""
    torch = pytest.importorskip("torch")
    model, net = _torch_gelu_export(opset)
    written = {n.op_type for n in model.graph.node}
    assert "Gelu" not in written and {"Erf", "Tanh"} <= written
    sess = _session(model)
    assert [d.chosen for d in sess.explain() if d.op == "fusion"] == ["Gelu", "Gelu"]
    assert _ops(sess) == ["MatMul", "MatMul"], _ops(sess)
    x = (np.random.default_rng(8).standard_normal((3, 7, 24)) * 2.5).astype(np.float32)
    with torch.no_grad():
        ref = net.double()(torch.from_numpy(x.astype(np.float64))).numpy()
    np.testing.assert_allclose(sess.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-5)


def test_gelu_after_gemm_and_reshape_joins_the_gemm_epilogue() -> None:
    """GPT-2's Conv1D: Gemm on [B*S, K], Reshape to [B, S, N], then the tanh GELU."""
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((40, 24)) * 0.3).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    gelu = _gelu_model("tanh", "half_x_first")
    rename = {"x": "h"}
    tail = []
    for n in gelu.graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(n)
        node.input[:] = [rename.get(i, i) for i in n.input]
        tail.append(node)
    nodes = [
        helper.make_node("Gemm", ["x2d", "W", "b"], ["g"]),
        helper.make_node("Reshape", ["g", "shape"], ["h"]),
        *tail,
    ]
    inits = {i.name: numpy_helper.to_array(i) for i in gelu.graph.initializer}
    inits.update({"W": w, "b": b, "shape": np.array([4, 6, 24], np.int64)})
    model = _model(nodes, {"x2d": [24, 40]}, {"y": [4, 6, 24]}, inits)
    sess = _session(model)
    assert _ops(sess) == ["Gemm", "Reshape"], _ops(sess)
    assert [s["activation"] for s in sess.plan.steps if s["op_type"] == "Gemm"] == ["Gelu"]
    x = rng.standard_normal((24, 40)).astype(np.float32)
    ref = _gelu_ref(x.astype(np.float64) @ w + b, True).reshape(4, 6, 24)
    np.testing.assert_allclose(sess.run({"x2d": x})["y"], ref, rtol=1e-5, atol=1e-5)
