"""Pad on the native CPU engine against numpy.pad on random inputs: every mode, pads on
every axis, negative pads (cropping), several dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

_ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8}
_NP_MODE = {"constant": "constant", "edge": "edge", "reflect": "reflect", "wrap": "wrap"}


def _pad_model(shape: tuple[int, ...], pads: list[int], mode: str, dtype: type, value: float) -> bytes:
    r = len(shape)
    out = [shape[i] + pads[i] + pads[i + r] for i in range(r)]
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    inputs = ["x", "pads"]
    if mode == "constant":
        inits.append(numpy_helper.from_array(np.array(value, dtype), "value"))
        inputs.append("value")
    node = helper.make_node("Pad", inputs, ["y"], mode=mode)
    graph = helper.make_graph(
        [node],
        "pad",
        [helper.make_tensor_value_info("x", _ONNX[dtype], list(shape))],
        [helper.make_tensor_value_info("y", _ONNX[dtype], out)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def _numpy_pad(x: np.ndarray, pads: list[int], mode: str, value: float) -> np.ndarray:
    r = x.ndim
    # Negative pads crop first, then numpy pads the rest.
    sl = tuple(slice(max(0, -pads[i]), x.shape[i] - max(0, -pads[i + r])) for i in range(r))
    x = x[sl]
    widths = [(max(0, pads[i]), max(0, pads[i + r])) for i in range(r)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=_NP_MODE[mode])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize("seed", range(4))
def test_pad_matches_numpy(mode: str, dtype: type, seed: int) -> None:
    rng = np.random.default_rng(seed + 17 * len(mode))
    r = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(2, 7, r))
    lo = -1 if mode == "constant" else 0  # numpy has no cropping for the other modes
    hi = min(shape) - 1 if mode == "reflect" else 4
    pads = [int(p) for p in rng.integers(lo, hi + 1, 2 * r)]
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    value = 7.0
    sess = xrt.InferenceSession(_pad_model(shape, pads, mode, dtype, value), device="cpu", engine="native")
    got = sess.run({"x": x})["y"]
    want = _numpy_pad(x, pads, mode, value)
    np.testing.assert_array_equal(got, want, err_msg=f"{mode} {shape} {pads}")


def test_pad_last_axis_cropped_both_sides_and_other_axis_padded() -> None:
    x = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    pads = [1, 0, -2, 0, 2, -3]
    sess = xrt.InferenceSession(
        _pad_model(x.shape, pads, "constant", np.float32, -1.0), device="cpu", engine="native"
    )
    np.testing.assert_array_equal(sess.run({"x": x})["y"], _numpy_pad(x, pads, "constant", -1.0))
