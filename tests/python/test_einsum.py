"""Einsum on the native CPU engine against numpy.einsum (float64 reference) on random
inputs: explicit and implicit outputs, ellipses that broadcast, diagonals, traces,
several operands, size-1 broadcasting, empty extents, every float dtype; and the typed
errors of equations that do not fit their operands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper

_NP_TO_ONNX = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.float16: TensorProto.FLOAT16,
}


def _session(
    equation: str, shapes: list[tuple[int, ...]], dtype: type = np.float32, out_shape: Any = None
) -> xrt.InferenceSession:
    names = [f"x{i}" for i in range(len(shapes))]
    et = _NP_TO_ONNX[dtype]
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        "einsum",
        [helper.make_tensor_value_info(n, et, list(s)) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", et, out_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    return xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")


CASES = [
    ("ij,jk->ik", [(5, 7), (7, 3)]),  # matmul
    ("bhid,bhjd->bhij", [(2, 3, 5, 8), (2, 3, 6, 8)]),  # attention scores (MaxViT)
    ("bhij,bhjd->bhid", [(2, 3, 5, 6), (2, 3, 6, 8)]),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (3, 5, 2)]),  # ellipses of different ranks, broadcasting
    ("ii->i", [(6, 6)]),  # diagonal
    ("ii", [(6, 6)]),  # implicit: trace (a scalar)
    ("bii->bi", [(3, 4, 4)]),
    ("ij->ji", [(4, 9)]),
    ("ij", [(4, 9)]),  # implicit, alphabetical: the identity
    ("ji", [(4, 9)]),  # implicit, alphabetical: a transpose
    ("i,i", [(11,), (11,)]),  # inner product
    ("i,j->ij", [(4,), (5,)]),  # outer product
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),  # three operands
    ("ij->", [(3, 4)]),  # full sum
    ("...->...", [(2, 3)]),
    ("ij,ij->ij", [(3, 1), (3, 4)]),  # a size-1 extent broadcasts
    ("b i j, b j k -> b i k", [(2, 3, 4), (2, 4, 5)]),  # spaces
    ("ij,jk->ik", [(3, 0), (0, 4)]),  # an empty sum: zeros
    ("ij,jk->ik", [(0, 2), (2, 4)]),  # an empty output
]


@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_matches_numpy(equation: str, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(abs(hash(equation)) % 2**32)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ref = np.einsum(equation.replace(" ", ""), *[x.astype(np.float64) for x in xs])
    out = _session(equation, shapes, out_shape=list(ref.shape)).run({f"x{i}": x for i, x in enumerate(xs)})[
        "y"
    ]
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_dtypes(dtype: type) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 8, 4))
    out = _session("bij,bjk->bik", [a.shape, b.shape], dtype, [2, 3, 4]).run(
        {"x0": a.astype(dtype), "x1": b.astype(dtype)}
    )["y"]
    ref = np.einsum("bij,bjk->bik", a.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64))
    assert out.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 2e-3
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol * 10)


# (An ellipsis written "i..j" is not among them: onnx's own checker loops forever on it.)
BAD = [
    ("ij,jk->ik", [(2, 3)], [2, 3], "2 input terms but the node has 1"),
    ("ijk->i", [(2, 3)], [2], "rank 2 but its equation term 'ijk' has 3 labels"),
    ("ij,jk->ik", [(2, 3), (4, 5)], [2, 5], "label 'j' extent 4 where another operand gives 3"),
    ("i1->i", [(2, 3)], [2], "has the character '1'"),
    ("ij->ii", [(2, 3)], [2, 2], "repeats the output label 'i'"),
    ("ij->k", [(2, 3)], [2], "output label 'k' that no input has"),
]


@pytest.mark.parametrize(("equation", "shapes", "out_shape", "message"), BAD, ids=[b[3][:20] for b in BAD])
def test_bad_equations_are_typed_errors(
    equation: str, shapes: list[tuple[int, ...]], out_shape: list[int], message: str
) -> None:
    with pytest.raises(xrt.InvalidModelError) as e:
        _session(equation, shapes, out_shape=out_shape)
    assert message in str(e.value)
    assert "Einsum" in str(e.value) or "einsum" in str(e.value)
