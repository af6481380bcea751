"""Common-subexpression elimination in the native compiler (cpp/src/graph/cse.cpp).

A node computing what an earlier node computes (same op, attributes and inputs, equal
small constants counting as the same input) is dropped and its readers rewired - the
per-layer attention-mask computation ALBERT's export repeats. Outputs match ONNX Runtime
on random inputs; a node whose output is a graph output keeps it; fold=False (no
constant folding) leaves the graph as written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes: list[Any], outputs: list[str], inits: dict[str, np.ndarray]) -> bytes:
    g = helper.make_graph(
        nodes,
        "cse",
        [helper.make_tensor_value_info("x", F, [3, 8]), helper.make_tensor_value_info("m", TensorProto.BOOL, [3, 8])],
        [helper.make_tensor_value_info(o, F, [3, 8]) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _repeated_masks(layers: int = 4) -> bytes:
    """Each 'layer' recomputes Where(m, 0, -inf) from its own copies of the constants."""
    nodes, inits, cur = [], {}, "x"
    for i in range(layers):
        inits[f"zero{i}"] = np.array(0.0, np.float32)
        inits[f"ninf{i}"] = np.array(-np.inf, np.float32)
        nodes.append(helper.make_node("Where", ["m", f"zero{i}", f"ninf{i}"], [f"mask{i}"]))
        nodes.append(helper.make_node("Add", [cur, f"mask{i}"], [f"s{i}"]))
        nodes.append(helper.make_node("Softmax", [f"s{i}"], [f"p{i}"], axis=-1))
        cur = f"p{i}"
    return _model(nodes, [cur], inits)


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = rng.random((3, 8)) < 0.7
    m[:, 0] = True  # every row keeps a key
    return {"x": rng.standard_normal((3, 8)).astype(np.float32), "m": m}


def test_repeated_mask_computation_runs_once_and_matches_ort() -> None:
    model = _repeated_masks()
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    assert "common-subexpression elimination (nodes merged): 3" in sess.plan.pass_log
    assert [s["op_type"] for s in sess.plan.steps].count("Where") == 1
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for seed in (1, 2):
        feeds = _feeds(seed)
        np.testing.assert_allclose(sess.run(feeds)["p3"], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-7)


def test_fold_false_keeps_the_graph_as_written() -> None:
    sess = xrt.InferenceSession(_repeated_masks(), device="cpu", engine="native", fold=False)
    assert [s["op_type"] for s in sess.plan.steps].count("Where") == 4


def test_a_graph_output_keeps_its_node() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["x"], ["b"]),  # a graph output: keeps its own node
        helper.make_node("Relu", ["x"], ["c"]),  # an intermediate: merged into a
        helper.make_node("Neg", ["c"], ["d"]),
    ]
    sess = xrt.InferenceSession(_model(nodes, ["a", "b", "d"], {}), device="cpu", engine="native")
    ops = [s["op_type"] for s in sess.plan.steps]
    assert ops.count("Relu") == 2 and "common-subexpression elimination (nodes merged): 1" in sess.plan.pass_log
    out = sess.run(_feeds(3))
    x = _feeds(3)["x"]
    np.testing.assert_array_equal(out["a"], np.maximum(x, 0))
    np.testing.assert_array_equal(out["b"], np.maximum(x, 0))
    np.testing.assert_array_equal(out["d"], -np.maximum(x, 0))
