"""The Einsum lowering pass: two-operand Einsums become Transposes/Reshapes around one
(batched) MatMul, on every device. Outputs are compared with NumPy's einsum in float64
on fresh random inputs; the plan is checked for what it holds (no Einsum left where the
equation allows, the Einsum kernel kept where it does not), and the CUDA plan of the
same models is checked through the offline preview (CUDA has no Einsum kernel)."""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper
from xpuruntime import _core

# (equation, shape A, shape B): batch, contracted and free labels in every arrangement.
LOWERED = [
    ("ij,jk->ik", (7, 5), (5, 9)),
    ("ij,kj->ik", (7, 5), (9, 5)),
    ("bij,bjk->bik", (3, 7, 5), (3, 5, 9)),
    ("bhid,bhjd->bhij", (2, 3, 6, 8), (2, 3, 5, 8)),  # attention scores
    ("bhij,bhjd->bhid", (2, 3, 6, 5), (2, 3, 5, 8)),  # attention output
    ("bgqhd,bgkhd->bghqk", (2, 2, 4, 3, 8), (2, 2, 5, 3, 8)),  # 5-D grouped (the slow case)
    ("nchw,kc->nkhw", (2, 6, 4, 5), (3, 6)),  # a 1x1 convolution
    ("ik,jk->ji", (4, 6), (5, 6)),  # output order differs from the product's
    ("...ij,...jk->...ik", (2, 3, 4, 5), (2, 3, 5, 6)),  # ellipsis
    ("i,i->", (17,), (17,)),  # a dot product (no free labels)
    ("i,j->ij", (4,), (6,)),  # an outer product (no contracted labels)
    ("bij,bjk->bik", (1, 3, 4), (2, 4, 5)),  # b broadcasts: the MatMul broadcasts it
    ("bghid,bghjd->bghij", (2, 1, 3, 6, 8), (2, 4, 3, 5, 8)),  # 5-D, g broadcasts in A
    ("bghij,bghjd->bghid", (2, 4, 1, 6, 5), (1, 4, 3, 5, 8)),  # 5-D, b and h broadcast
]
# Left to the Einsum kernel: a diagonal, a label summed out of one operand, a broadcast
# contracted label.
KEPT = [
    ("ii,ij->ij", (4, 4), (4, 5)),
    ("ij,jk->k", (3, 4), (4, 5)),  # i summed out of A alone
    ("ij,jk->ik", (3, 1), (4, 5)),  # the contracted label broadcasts
]


def _model(eq: str, sa, sb, out_shape) -> bytes:
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq, name="einsum")
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, sa),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, sb),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _run(eq: str, sa, sb, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    ref = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
    sess = xrt.InferenceSession(_model(eq, sa, sb, list(ref.shape)), device="cpu", engine="native")
    (y,) = sess.run({"a": a, "b": b}).values()
    return sess, np.asarray(y), ref


@pytest.mark.parametrize("eq,sa,sb", LOWERED, ids=[c[0] for c in LOWERED])
def test_lowered_einsum_matches_numpy_and_runs_as_a_matmul(eq, sa, sb):
    sess, y, ref = _run(eq, sa, sb, seed=len(eq))
    ops = [s["op_type"] for s in sess.plan.steps]
    assert "Einsum" not in ops and ops.count("MatMul") + ops.count("Gemm") == 1, ops
    assert "Identity" not in ops, ops  # the last MatMul/Reshape/Transpose writes the output
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("eq,sa,sb", KEPT, ids=[c[0] for c in KEPT])
def test_other_equations_keep_the_einsum_kernel(eq, sa, sb):
    sess, y, ref = _run(eq, sa, sb, seed=3)
    assert "Einsum" in [s["op_type"] for s in sess.plan.steps]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_the_pass_is_logged():
    sess, _, _ = _run("bij,bjk->bik", (3, 7, 5), (3, 5, 9), seed=1)
    assert any(line.startswith("einsum lowering (Einsum to MatMul): 1") for line in sess.plan.pass_log)


@pytest.mark.skipif("cuda" not in _core.graph.providers(), reason="this build has no CUDA execution provider")
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cuda_plans_lower_einsum_and_refuse_what_stays(precision):
    from xpuruntime.engines.native.preview import preview_plan

    ep = xrt.ExecutionPolicy(precision=precision)
    eq, sa, sb = "bgqhd,bgkhd->bghqk", (2, 2, 4, 3, 8), (2, 2, 5, 3, 8)
    out = list(np.einsum(eq, np.zeros(sa), np.zeros(sb)).shape)
    pv = preview_plan(_model(eq, sa, sb, out), device="cuda", target="sm_90", exec_policy=ep)
    ops = [s["op_type"] for s in pv.steps]
    assert "Einsum" not in ops and "MatMul" in ops
    # A diagonal has no lowering and CUDA no Einsum kernel: the compile names the op.
    with pytest.raises(xrt.UnsupportedOperationError, match="Einsum"):
        preview_plan(
            _model("ii,ij->ij", (4, 4), (4, 5), [4, 5]), device="cuda", target="sm_90", exec_policy=ep
        )
