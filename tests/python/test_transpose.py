"""Transpose in the native engine against numpy.transpose: every permutation of ranks
1-5 on random shapes (size-1 dims included, so dims coalesce), the batched 2-D fast
path (NCHW <-> NHWC, 4-byte dtypes) with sizes that are not multiples of its 16x16
tiles, large tensors that split over threads, and 1-, 2-, 8-byte dtypes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper

DTYPES = {
    np.float32: TensorProto.FLOAT,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
    np.uint8: TensorProto.UINT8,
    np.float16: TensorProto.FLOAT16,
}


def transpose_model(shape: tuple[int, ...], perm: tuple[int, ...], elem: int) -> bytes:
    node = helper.make_node("Transpose", ["X"], ["Y"], perm=list(perm))
    out_shape = [shape[p] for p in perm]
    g = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("X", elem, list(shape))],
        [helper.make_tensor_value_info("Y", elem, out_shape)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def check(shape: tuple[int, ...], perm: tuple[int, ...], dtype=np.float32, seed: int = 0) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    sess = xrt.InferenceSession(transpose_model(shape, perm, DTYPES[dtype]), device="cpu", engine="native")
    got = np.asarray(sess.run({"X": x})["Y"])
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_every_permutation(rank: int) -> None:
    rng = np.random.default_rng(rank)
    for i, perm in enumerate(itertools.permutations(range(rank))):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=rank))
        check(shape, perm, seed=i)


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((1, 3, 224, 224), (0, 2, 3, 1)),  # image to channels-last
        ((2, 24, 17, 9), (0, 2, 3, 1)),
        ((3, 17, 9, 40), (0, 3, 1, 2)),  # back to NCHW, batch of 3
        ((1, 512, 3199), (0, 2, 1)),  # a Conv1d front end
        ((1, 5, 6, 7, 33), (0, 2, 3, 4, 1)),
        ((37, 29), (1, 0)),
        ((1, 12, 128, 64), (0, 2, 1, 3)),  # attention heads: contiguous rows
        ((4, 128, 12, 64), (0, 2, 3, 1)),
        ((1, 28, 28, 2, 58), (0, 1, 2, 4, 3)),  # ShuffleNet's channel shuffle, channels-last
        ((3, 7, 4, 33), (0, 1, 3, 2)),  # 4 columns, several batches
        ((2, 3, 1000), (0, 2, 1)),  # 3 columns
    ],
)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_layout_changes_and_attention_heads(shape, perm, dtype) -> None:  # type: ignore[no-untyped-def]
    check(shape, perm, dtype)
