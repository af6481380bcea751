"""BatchNormalization folded into the MatMul before it (graph/fold_batchnorm_matmul.cpp):
a linear layer over the last axis whose output reaches an inference-mode BN through at most
a bias Add and a Reshape/Flatten to [rows, C] (LeViT's ``bn(x.flatten(0, 1))``). Outputs
are compared with ONNX Runtime and a NumPy float64 reference on fresh random inputs; the
plan is checked for what it holds (no BN left where the channel axis is W's column axis,
the BN kept where it is not)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(36)


def _bn_params(c: int):
    scale = RNG.uniform(0.5, 1.5, c).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    mean = RNG.standard_normal(c).astype(np.float32)
    var = RNG.uniform(0.2, 2.0, c).astype(np.float32)
    return scale, bias, mean, var


def _bn_ref(x: np.ndarray, p, eps: float = 1e-5) -> np.ndarray:
    s, b, m, v = (t.astype(np.float64) for t in p)
    shape = [1, -1] + [1] * (x.ndim - 2)
    return (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + eps) * s.reshape(shape) + b.reshape(shape)


def _model(nodes, inits, x_shape, y_shape) -> bytes:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _levit(b: int, n: int, k: int, c: int, with_bias: bool, flatten: bool = False):
    """MatMul [B,N,K]x[K,C] (+ bias) -> Reshape [B*N, C] -> BN -> Reshape [B,N,C]."""
    w = (RNG.standard_normal((k, c)) / np.sqrt(k)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    p = _bn_params(c)
    inits = {"w": w, "s": p[0], "bb": p[1], "mu": p[2], "var": p[3]}
    inits["flat"] = np.array([-1, c], np.int64)
    inits["back"] = np.array([b, n, c], np.int64)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"])]
    src = "mm"
    if with_bias:
        inits["bias"] = bias
        nodes.append(helper.make_node("Add", ["bias", "mm"], ["mmb"]))  # bias first: either side
        src = "mmb"
    if flatten:
        nodes.append(helper.make_node("Flatten", [src], ["f"], axis=2))
    else:
        nodes.append(helper.make_node("Reshape", [src, "flat"], ["f"]))
    nodes += [
        helper.make_node("BatchNormalization", ["f", "s", "bb", "mu", "var"], ["bn"], epsilon=1e-5),
        helper.make_node("Reshape", ["bn", "back"], ["y"]),
    ]
    model = _model(nodes, inits, [b, n, k], [b, n, c])

    def ref(x):
        y = x.astype(np.float64) @ w.astype(np.float64)
        if with_bias:
            y = y + bias
        return _bn_ref(y.reshape(-1, c), p).reshape(b, n, c)

    return model, ref


def _check(model: bytes, x: np.ndarray, ref: np.ndarray, bn_folded: bool):
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    (y,) = sess.run({"x": x}).values()
    y = np.asarray(y)
    ops = [s["op_type"] for s in sess.plan.steps]
    assert ("BatchNormalization" not in ops) == bn_folded, ops
    (y_ort,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    tol = 2e-5 * max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=tol)
    np.testing.assert_allclose(y, y_ort, rtol=2e-5, atol=tol)
    return sess, ops


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("b,n,k,c", [(2, 7, 16, 24), (1, 49, 33, 17), (3, 5, 8, 1)])
def test_levit_linear_bn_folds_and_matches(b, n, k, c, with_bias):
    model, ref = _levit(b, n, k, c, with_bias)
    x = RNG.standard_normal((b, n, k)).astype(np.float32)
    sess, ops = _check(model, x, ref(x), bn_folded=True)
    assert any(
        line == "batchnorm folding into MatMul (BatchNormalization folded): 1" for line in sess.plan.pass_log
    )
    # The shift became a bias the epilogue fusion takes: no Add step survives on its own.
    assert "Add" not in ops, ops


def test_flatten_to_rows_folds():
    model, ref = _levit(2, 6, 12, 10, with_bias=True, flatten=True)
    x = RNG.standard_normal((2, 6, 12)).astype(np.float32)
    _check(model, x, ref(x), bn_folded=True)


def test_two_d_matmul_then_bn_folds_and_nan_propagates():
    m, k, c = 9, 13, 11
    w = RNG.standard_normal((k, c)).astype(np.float32)
    p = _bn_params(c)
    inits = {"w": w, "s": p[0], "bb": p[1], "mu": p[2], "var": p[3]}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("BatchNormalization", ["mm", "s", "bb", "mu", "var"], ["y"], epsilon=1e-3),
    ]
    model = _model(nodes, inits, [m, k], [m, c])
    x = RNG.standard_normal((m, k)).astype(np.float32)
    x[3, 4] = np.nan  # row 3 of the result is NaN, the others are not
    ref = _bn_ref(x.astype(np.float64) @ w.astype(np.float64), p, eps=1e-3)
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    y = np.asarray(next(iter(sess.run({"x": x}).values())))
    assert "BatchNormalization" not in [s["op_type"] for s in sess.plan.steps]
    assert np.isnan(y[3]).all() and not np.isnan(np.delete(y, 3, axis=0)).any()
    np.testing.assert_allclose(np.delete(y, 3, 0), np.delete(ref, 3, 0), rtol=2e-5, atol=2e-4)


def test_bn_over_a_row_axis_is_kept():
    """[B, C, L] = W'[C, K] applied as x[B, C, K] @ W[K, L]: BN's axis 1 is a row axis."""
    b, c, k, l_ = 2, 6, 5, 7
    w = RNG.standard_normal((k, l_)).astype(np.float32)
    p = _bn_params(c)
    inits = {"w": w, "s": p[0], "bb": p[1], "mu": p[2], "var": p[3]}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("BatchNormalization", ["mm", "s", "bb", "mu", "var"], ["y"]),
    ]
    model = _model(nodes, inits, [b, c, k], [b, c, l_])
    x = RNG.standard_normal((b, c, k)).astype(np.float32)
    _check(model, x, _bn_ref(x.astype(np.float64) @ w.astype(np.float64), p), bn_folded=False)


def test_reshape_that_moves_columns_is_kept():
    """[B, N, C] -> [B*N*2, C/2]: BN's channels are half-columns, not W's columns."""
    b, n, k, c = 2, 3, 4, 8
    w = RNG.standard_normal((k, c)).astype(np.float32)
    p = _bn_params(c // 2)
    inits = {"w": w, "s": p[0], "bb": p[1], "mu": p[2], "var": p[3], "flat": np.array([-1, c // 2], np.int64)}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Reshape", ["mm", "flat"], ["f"]),
        helper.make_node("BatchNormalization", ["f", "s", "bb", "mu", "var"], ["y"]),
    ]
    model = _model(nodes, inits, [b, n, k], [b * n * 2, c // 2])
    x = RNG.standard_normal((b, n, k)).astype(np.float32)
    ref = _bn_ref((x.astype(np.float64) @ w.astype(np.float64)).reshape(-1, c // 2), p)
    _check(model, x, ref, bn_folded=False)


def test_matmul_output_read_elsewhere_is_kept():
    m, k, c = 4, 6, 5
    w = RNG.standard_normal((k, c)).astype(np.float32)
    p = _bn_params(c)
    inits = {"w": w, "s": p[0], "bb": p[1], "mu": p[2], "var": p[3]}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("BatchNormalization", ["mm", "s", "bb", "mu", "var"], ["bn"]),
        helper.make_node("Add", ["bn", "mm"], ["y"]),
    ]
    model = _model(nodes, inits, [m, k], [m, c])
    x = RNG.standard_normal((m, k)).astype(np.float32)
    mm = x.astype(np.float64) @ w.astype(np.float64)
    _check(model, x, _bn_ref(mm, p) + mm, bn_folded=False)
