"""CPU ReduceSum/ReduceMean over a run of axes with kept axes after it ([O, R, I], a
channels-last global pool) sum contiguous rows instead of gathering strided elements.

Each case is compared with NumPy in float64 on fresh random inputs, and bit for bit with
the same reduction over the transposed input (reduced axes last: the general path, which
sums in the same order in double). Cases the fast path does not take (two runs of axes,
the last axis reduced, integers, ReduceMax) are checked against NumPy as well.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng()
ONNX_TYPE = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16}


def _run(op: str, x: np.ndarray, axes: list[int], keepdims: int = 1) -> np.ndarray:
    t = ONNX_TYPE.get(str(x.dtype), TensorProto.INT32)
    out_shape = (
        [1 if i in axes else d for i, d in enumerate(x.shape)]
        if keepdims
        else [d for i, d in enumerate(x.shape) if i not in axes]
    )
    inits = []
    if op == "ReduceSum":  # opset 13+: axes as input 1
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    else:
        node = helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=keepdims)
    graph = helper.make_graph(
        [node],
        "r",
        [helper.make_tensor_value_info("x", t, list(x.shape))],
        [helper.make_tensor_value_info("y", t, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = xrt.InferenceSession(
        model.SerializeToString(), device="cpu", engine="native", exec_policy=xrt.ExecutionPolicy(threads=2)
    )
    return sess.run({"x": x})["y"]


CASES = [
    ((1, 7, 7, 1280), [1, 2]),  # MnasNet's channels-last mean
    ((2, 5, 3, 300), [1, 2]),
    ((4, 9, 33), [0]),
    ((3, 4, 5, 6), [1]),
    ((2, 3, 1000), [1]),  # inner block of 256 plus a tail
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("shape,axes", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_outer_run_matches_float64_and_the_general_path_bit_for_bit(op, dtype, shape, axes):
    x = RNG.standard_normal(shape).astype(dtype)
    got = _run(op, x, axes)
    ref = getattr(np, "mean" if op == "ReduceMean" else "sum")(
        x.astype(np.float64), axis=tuple(axes), keepdims=True
    )
    tol = {"float32": 1e-6, "float64": 1e-13, "float16": 1e-3}[dtype]
    assert got.shape == ref.shape
    assert np.abs(got.astype(np.float64) - ref).max() <= tol * max(np.abs(ref).max(), 1.0)
    # The general path: the same axes moved last, summed in the same order in double.
    kept = [i for i in range(len(shape)) if i not in axes]
    moved = np.ascontiguousarray(np.transpose(x, kept + axes))
    general = _run(op, moved, list(range(len(kept), len(shape))), keepdims=0)
    assert np.array_equal(got.reshape(general.shape), general)


@pytest.mark.parametrize(
    "op,dtype,shape,axes",
    [
        ("ReduceMean", "float32", (2, 3, 4, 5), [1, 3]),  # two runs of axes
        ("ReduceSum", "float32", (6, 7, 8), [2]),  # the last axis
        ("ReduceSum", "int32", (2, 9, 40), [1]),  # integers wrap, general path
        ("ReduceMax", "float32", (2, 9, 40), [1]),
    ],
)
def test_shapes_outside_the_fast_path_still_match_numpy(op, dtype, shape, axes):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    got = _run(op, x, axes)
    fn = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max}[op]
    ref = fn(x.astype(np.float64), axis=tuple(axes), keepdims=True)
    assert np.abs(got.astype(np.float64) - ref).max() <= 1e-5 * max(np.abs(ref).max(), 1.0)


def test_nan_propagates_through_the_fast_path():
    x = RNG.standard_normal((1, 4, 4, 64)).astype(np.float32)
    x[0, 2, 3, 10] = np.nan
    got = _run("ReduceMean", x, [1, 2])
    assert np.isnan(got[0, 0, 0, 10]) and np.isfinite(np.delete(got.ravel(), 10)).all()
