"""The CPU's separable AveragePool (pool.cpp avgpool2d: 1-D and 2-D windows, every padding
mode) and its row-wise GatherElements (data_ops.cpp), against a NumPy float64 reference and
ONNX Runtime on fresh random inputs: odd sizes, asymmetric pads, strides, dilations,
ceil_mode, count_include_pad 0 and 1, NaN; GatherElements on every axis, negative and int32
indices, indices smaller than the data, 1- to 8-byte elements, and the out-of-range error;
Gather (rows of one scalar, as LeViT's attention-bias tables, and wider rows), with int64
indices read in place, negative and int32 indices, and the out-of-range error."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(3636)
NP_TO_ONNX = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.float16: TensorProto.FLOAT16,
    np.int64: TensorProto.INT64,
    np.int8: TensorProto.INT8,
    np.bool_: TensorProto.BOOL,
}


def _model(node, inputs, out_dtype, inits=(), opset=19) -> bytes:
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype.type], a.shape) for n, a in inputs],
        [
            helper.make_tensor_value_info(
                "y", NP_TO_ONNX[out_dtype], [f"y{i}" for i in range(inputs[0][1].ndim)]
            )
        ],
        initializer=list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m.SerializeToString()


def _native(model: bytes, feeds: dict) -> np.ndarray:
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    return np.asarray(next(iter(sess.run(feeds).values())))


def _ort(model: bytes, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


# ----------------------------------------------------------------------------- AveragePool


def _avgpool_ref(x, k, s, d, pads, ceil, include_pad):
    """float64 AveragePool over x's trailing len(k) dims (ONNX semantics: with
    count_include_pad the divisor counts positions inside input + pads)."""
    x = x.astype(np.float64)
    nd = len(k)
    sp = x.shape[2:]
    pb, pe = pads[:nd], pads[nd:]
    out = []
    for i in range(nd):
        span = sp[i] + pb[i] + pe[i] - ((k[i] - 1) * d[i] + 1)
        o = (-(-span // s[i]) if ceil else span // s[i]) + 1
        if ceil and (o - 1) * s[i] >= sp[i] + pb[i]:  # a window must start inside input + lead pad
            o -= 1
        out.append(o)
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in itertools.product(*[range(v) for v in out]):
        total = np.zeros(x.shape[:2])
        cnt = cnt_pad = 1
        idx = []
        for i in range(nd):
            pos = [o[i] * s[i] - pb[i] + t * d[i] for t in range(k[i])]
            valid = [p for p in pos if 0 <= p < sp[i]]
            cnt *= len(valid)
            cnt_pad *= sum(1 for p in pos if p < sp[i] + pe[i])
            idx.append(valid)
        for p in itertools.product(*idx):
            total += x[(slice(None), slice(None)) + p]
        div = cnt_pad if include_pad else cnt
        y[(slice(None), slice(None)) + o] = total / div if div else 0.0
    return y


POOLS = [
    # shape, kernel, strides, dilations, pads, ceil_mode
    ((2, 3, 14, 14), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0),  # PoolFormer's token mixer
    ((1, 5, 13, 11), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0),  # odd sizes
    ((1, 4, 9, 10), (3, 2), (2, 2), (1, 1), (1, 0, 0, 1), 0),  # strides, asymmetric pads
    ((1, 2, 11, 12), (3, 3), (2, 3), (1, 1), (1, 1, 1, 1), 1),  # ceil_mode
    ((1, 3, 12, 13), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 0),  # dilation
    ((2, 3, 7, 8), (7, 8), (1, 1), (1, 1), (0, 0, 0, 0), 0),  # the whole plane
    ((1, 2, 5, 6), (2, 2), (1, 1), (1, 1), (0, 0, 0, 0), 0),  # no pads
    ((1, 3, 4, 5), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 0),  # window larger than the input
    ((2, 3, 17), (3,), (1,), (1,), (1, 1), 0),  # 1-D
    ((1, 2, 3, 2), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0),  # no interior column
]


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("case", POOLS, ids=[f"{c[0]}k{c[1]}s{c[2]}d{c[3]}p{c[4]}c{c[5]}" for c in POOLS])
def test_averagepool_matches_numpy_and_ort(case, include_pad):
    shape, k, s, d, pads, ceil = case
    x = RNG.standard_normal(shape).astype(np.float32)
    node = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=list(k),
        strides=list(s),
        dilations=list(d),
        pads=list(pads),
        ceil_mode=ceil,
        count_include_pad=include_pad,
    )
    model = _model(node, [("x", x)], np.float32)
    y = _native(model, {"x": x})
    ref = _avgpool_ref(x, k, s, d, pads, ceil, include_pad)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    if not ceil:  # ONNX Runtime's ceil_mode windows count pads differently at the far edge
        np.testing.assert_allclose(y, _ort(model, {"x": x}), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_averagepool_other_float_dtypes(dtype):
    x = RNG.standard_normal((1, 3, 10, 9)).astype(dtype)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = _native(_model(node, [("x", x)], dtype), {"x": x})
    ref = _avgpool_ref(x, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0, 0)
    tol = 2e-3 if dtype == np.float16 else 1e-12
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)


def test_averagepool_nan_stays_in_its_windows():
    x = RNG.standard_normal((1, 2, 8, 9)).astype(np.float32)
    x[0, 1, 4, 4] = np.nan
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = _native(_model(node, [("x", x)], np.float32), {"x": x})
    nan = np.zeros_like(y, dtype=bool)
    nan[0, 1, 3:6, 3:6] = True
    np.testing.assert_array_equal(np.isnan(y), nan)


# -------------------------------------------------------------------------- GatherElements


def _take(data, idx, axis):
    """NumPy reference: data cut to the indices' extents on the other axes, then take_along_axis."""
    cut = tuple(slice(None) if i == axis % data.ndim else slice(0, n) for i, n in enumerate(idx.shape))
    return np.take_along_axis(data[cut], idx.astype(np.int64), axis=axis)


GATHERS = [
    # data shape, indices shape, axis
    ((2, 4, 49, 97), (2, 4, 49, 49), -1),  # relative-position attention: last axis
    ((3, 5, 7), (3, 5, 11), 2),
    ((6, 5, 7), (9, 5, 7), 0),
    ((4, 6, 5), (3, 8, 2), 1),  # indices smaller than data on the other axes
    ((13,), (21,), 0),
    ((2, 3), (2, 0), 1),  # empty
]


@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", GATHERS, ids=[f"{c[0]}-{c[1]}-a{c[2]}" for c in GATHERS])
def test_gather_elements_matches_numpy_and_ort(case, idx_dtype):
    ds, is_, axis = case
    data = RNG.standard_normal(ds).astype(np.float32)
    n = ds[axis]
    idx = RNG.integers(-n, n, size=is_).astype(idx_dtype)  # negative indices too
    node = helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=axis)
    g_inputs = [("data", data)]
    init = [numpy_helper.from_array(idx, "idx")] if idx_dtype == np.int32 else []
    if idx_dtype == np.int64:
        g_inputs.append(("idx", idx))
    model = _model(node, g_inputs, np.float32, inits=init, opset=13)
    feeds = {"data": data} | ({"idx": idx} if idx_dtype == np.int64 else {})
    y = _native(model, feeds)
    np.testing.assert_array_equal(y, _take(data, idx, axis))
    np.testing.assert_array_equal(y, _ort(model, feeds))


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.int8, np.bool_, np.float64])
def test_gather_elements_element_widths(dtype):
    data = (RNG.standard_normal((3, 4, 9)) * 50).astype(dtype)
    idx = RNG.integers(0, 9, size=(3, 4, 6)).astype(np.int64)
    node = helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=-1)
    y = _native(_model(node, [("data", data), ("idx", idx)], dtype, opset=13), {"data": data, "idx": idx})
    np.testing.assert_array_equal(y, _take(data, idx, -1))


@pytest.mark.parametrize("bad", [9, -10])
def test_gather_elements_index_out_of_range_is_a_typed_error(bad):
    data = RNG.standard_normal((2, 3, 9)).astype(np.float32)
    idx = RNG.integers(0, 9, size=(2, 3, 4)).astype(np.int64)
    idx[1, 2, 3] = bad
    node = helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=2)
    model = _model(node, [("data", data), ("idx", idx)], np.float32, opset=13)
    with pytest.raises(xrt.InvalidArgumentError, match=rf"index {bad} is out of range for axis 2 of size 9"):
        _native(model, {"data": data, "idx": idx})


# ----------------------------------------------------------------------------- Gather
GATHER = [
    # data shape, indices shape, axis
    ((4, 196), (196, 196), 1),  # LeViT's attention biases: one scalar per index
    ((7, 5, 3), (4,), 1),  # rows of 3 elements
    ((50, 16), (2, 9), 0),  # an embedding lookup
    ((3, 4, 6), (), 2),  # a scalar index
    ((5, 2), (0, 3), 0),  # empty
]


@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", GATHER, ids=[f"{c[0]}-{c[1]}-a{c[2]}" for c in GATHER])
def test_gather_matches_numpy_and_ort(case, idx_dtype):
    ds, is_, axis = case
    data = RNG.standard_normal(ds).astype(np.float32)
    n = ds[axis]
    idx = np.asarray(RNG.integers(-n, n, size=is_)).astype(idx_dtype)  # negative ones too
    want = np.take(data, idx.astype(np.int64), axis=axis)
    node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=axis)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, ds)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, want.shape)],
        initializer=[numpy_helper.from_array(idx, "idx")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 9
    model = m.SerializeToString()
    y = _native(model, {"data": data})
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(y, _ort(model, {"data": data}))


@pytest.mark.parametrize("inner", [1, 3])
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64, np.int64, np.bool_])
def test_gather_element_widths(dtype, inner):
    """Rows of 1, 2, 4 and 8 bytes take the typed copy; 3 elements a row the byte copy."""
    data = (RNG.standard_normal((6, 11, inner)) * 50).astype(dtype)
    idx = RNG.integers(0, 11, size=(5, 7)).astype(np.int64)
    node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=1)
    y = _native(_model(node, [("data", data), ("idx", idx)], dtype, opset=13), {"data": data, "idx": idx})
    np.testing.assert_array_equal(y, np.take(data, idx, axis=1))


@pytest.mark.parametrize("bad", [11, -12])
def test_gather_index_out_of_range_is_a_typed_error(bad):
    data = RNG.standard_normal((3, 11)).astype(np.float32)
    idx = RNG.integers(0, 11, size=(4, 5)).astype(np.int64)
    idx[3, 4] = bad
    node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=1)
    model = _model(node, [("data", data), ("idx", idx)], np.float32, opset=13)
    with pytest.raises(xrt.InvalidArgumentError, match=rf"index {bad} is out of range for axis 1 of size 11"):
        _native(model, {"data": data, "idx": idx})
