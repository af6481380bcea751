"""cpu_gemv: one float32 row against weights stored N x K (Gemm transB, a classifier's
head at batch 1) as one AVX2 dot product per output.

Checked against float64 NumPy on fresh random inputs; the plan's choice and its reasons
(onednn and cpu_packed refuse one-row products, cpu_gemv ranks above cpu_blas), with a
fused Relu too; what it refuses (two rows, B stored K x N); a policy that requires cpu_blas
still runs the case; a saved plan replays the same kernel and bits.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng()
TOL = 2e-6  # float32 dot products of up to 2048 terms, relative to max |ref|


def _gemm(
    m: int, k: int, n: int, trans_b: int = 1, relu: bool = False
) -> tuple[bytes, np.ndarray, np.ndarray]:
    w = RNG.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["g" if relu else "y"], transB=trans_b)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), w, b


def _session(model: bytes, kernel_policy: xrt.KernelPolicy | None = None) -> xrt.InferenceSession:
    return xrt.InferenceSession(
        model,
        device="cpu",
        engine="native",
        exec_policy=xrt.ExecutionPolicy(threads=2),
        kernel_policy=kernel_policy,
    )


def _gemm_step(sess: xrt.InferenceSession) -> dict:
    (step,) = [s for s in sess.plan.steps if s["op_type"] == "Gemm"]
    return step


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


def _needs_gemv() -> None:
    s = _session(_gemm(1, 64, 64)[0])
    if _gemm_step(s)["kernel"] != "cpu_gemv":
        why = [c for d in s.explain() if d.op == "matmul" for c in d.candidates if c.kernel == "cpu_gemv"]
        pytest.skip(f"cpu_gemv does not run here: {why[0].detail if why else 'not registered'}")


@pytest.mark.parametrize(
    "k,n,relu",
    [
        (1280, 1000, False),
        (2048, 1000, False),
        (768, 3072, True),
        (31, 257, False),
        (1, 1, False),
        (513, 65, True),
    ],
)
def test_one_row_head_runs_on_cpu_gemv_and_matches_float64(k, n, relu):
    """A Relu after the Gemm is fused into the step and applied by the Gemm node's own
    epilogue pass, so the head still runs on cpu_gemv."""
    _needs_gemv()
    model, w, b = _gemm(1, k, n, relu=relu)
    sess = _session(model)
    assert _gemm_step(sess)["kernel"] == "cpu_gemv"
    assert [s["op_type"] for s in sess.plan.steps if not s["view"]] == ["Gemm"]
    x = RNG.standard_normal((1, k)).astype(np.float32)
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + b
    if relu:
        ref = np.maximum(ref, 0.0)
    (y,) = sess.run({"x": x}).values()
    assert y.shape == (1, n)
    assert _rel(y, ref) <= TOL
    (d,) = [d for d in sess.explain() if d.op == "matmul"]
    reasons = {c.kernel: (c.verdict, c.detail) for c in d.candidates}
    assert d.chosen == "cpu_gemv" and d.rule == "auto.first_supported"
    for refused in ("onednn", "cpu_packed"):
        if refused in reasons and reasons[refused][0] == "rejected":
            assert "cpu_gemv" in reasons[refused][1], reasons[refused]
    blas = reasons.get("cpu_blas")  # ranked below, still able (where the build has CBLAS)
    assert blas is None or blas[0] == "supported" or "BLAS" in blas[1], blas


@pytest.mark.parametrize(
    "m,trans_b,why", [(2, 1, "rows"), (1, 0, "N x K")], ids=["two_rows", "weights_k_by_n"]
)
def test_what_cpu_gemv_refuses_runs_elsewhere_and_still_matches(m, trans_b, why):
    _needs_gemv()
    model, w, b = _gemm(m, 300, 200, trans_b)
    sess = _session(model)
    step = _gemm_step(sess)
    (d,) = [d for d in sess.explain() if d.op == "matmul"]
    assert step["kernel"] != "cpu_gemv"
    (cand,) = [c for c in d.candidates if c.kernel == "cpu_gemv"]
    assert cand.verdict == "rejected" and why in cand.detail, cand.detail
    x = RNG.standard_normal((m, 300)).astype(np.float32)
    ref = x.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64) + b
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL


def test_a_policy_requiring_cpu_blas_still_runs_the_head(tmp_path):
    _needs_gemv()
    model, w, b = _gemm(1, 1280, 1000)
    x = RNG.standard_normal((1, 1280)).astype(np.float32)
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + b
    blas = _session(model, xrt.KernelPolicy(matmul="cpu_blas", mode="require"))
    if not any(
        c.kernel == "cpu_blas" and c.verdict == "supported" for d in blas.explain() for c in d.candidates
    ):
        pytest.skip("this build has no CBLAS")
    assert _gemm_step(blas)["kernel"] == "cpu_blas"
    assert _rel(next(iter(blas.run({"x": x}).values())), ref) <= TOL
    # A saved plan replays cpu_gemv, with the same bits.
    gemv = _session(model)
    want = next(iter(gemv.run({"x": x}).values()))
    path = tmp_path / "head.xrtplan"
    gemv.save_plan(str(path))
    loaded = xrt.InferenceSession.load_plan(str(path), exec_policy=xrt.ExecutionPolicy(threads=2))
    assert _gemm_step(loaded)["kernel"] == "cpu_gemv"
    assert np.array_equal(next(iter(loaded.run({"x": x}).values())), want)
