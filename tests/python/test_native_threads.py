"""ExecutionPolicy(threads=N) on the native CPU engine (issue 18 §3): each run of the
plan uses at most N host threads in the native kernels, the blocked GEMM's OpenMP team
and OpenBLAS; the count is in the plan (``plan.threads``, its summary) and in
``explain()`` as an engine-policy decision, like the other engines' thread knobs. The
GEMM's micro-kernel ISA is chosen at run time, the widest the CPU has, and recorded.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    yield
    gc.collect()


def _mlp(hidden: int = 384) -> bytes:
    """x[b, 256] -> MatMul -> Relu -> MatMul -> Softmax: big enough to run in parallel."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((256, hidden)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 64)) / 16).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["z"], name="mm2"),
        helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 64])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _session(threads: int, **kw: object) -> xrt.InferenceSession:
    return xrt.InferenceSession(
        _mlp(), device="cpu", engine="native", exec_policy=xrt.ExecutionPolicy(threads=threads), **kw
    )


def _reference(x: np.ndarray) -> np.ndarray:
    m = onnx.load_from_string(_mlp())
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    z = np.maximum(x.astype(np.float64) @ w["w1"], 0) @ w["w2"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("threads", [0, 1, 2, 3])
def test_threads_are_recorded_and_results_match(threads: int) -> None:
    x = np.random.default_rng(threads).standard_normal((512, 256)).astype(np.float32)
    sess = _session(threads)
    y = sess.run({"x": x})["y"]
    np.testing.assert_allclose(y, _reference(x), rtol=1e-4, atol=1e-6)
    plan = sess.plan
    assert plan.threads == threads
    want = f"threads: {threads} (ExecutionPolicy.threads)" if threads else "threads: default"
    assert want in plan.summary()
    rec = [d for d in sess.explain() if d.op == "engine.policy" and d.node == "native:threads"]
    assert len(rec) == 1
    assert rec[0].chosen == (f"threads={threads}" if threads else "threads=default")
    assert rec[0].rule == ("policy.threads" if threads else "default")


def test_saved_plan_keeps_its_threads(tmp_path: Path) -> None:
    sess = _session(2, input_shapes={"x": [4, 256]})
    path = tmp_path / "mlp.xrtplan"
    sess.save_plan(str(path))
    loaded = xrt._core.graph.ExecutionPlan.load(str(path))
    assert loaded.threads == 2 and "threads: 2" in loaded.summary()


def test_one_thread_runs_are_bit_identical_to_each_other() -> None:
    x = np.random.default_rng(7).standard_normal((256, 256)).astype(np.float32)
    sess = _session(1)
    a, b = sess.run({"x": x})["y"], sess.run({"x": x})["y"]
    np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc (Linux)")
def test_more_threads_than_the_default_start_more_workers() -> None:
    """A cap above the pool's default grows the pool: the process gains threads."""
    x = np.random.default_rng(3).standard_normal((1024, 256)).astype(np.float32)
    _session(0).run({"x": x})  # the default pools are started
    before = len(os.listdir("/proc/self/task"))
    want = before + 4  # more than any pool this process has started so far
    sess = _session(want)
    sess.run({"x": x})
    assert len(os.listdir("/proc/self/task")) > before


def test_gemm_isa_is_the_widest_the_cpu_has() -> None:
    info = xrt.ops.cpu_gemm_info()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    flags_line = next((ln for ln in flags.splitlines() if ln.startswith("flags")), "")
    have = set(flags_line.split())
    if "avx512f" in have:
        assert info["isa"] == "avx512"
    elif {"avx2", "fma"} <= have:
        assert info["isa"] == "avx2"
    elif flags_line:
        assert info["isa"] == "portable"
    # the blocked GEMM's registry entry says which micro-kernel it runs
    blocked = [k for k in xrt.kernels.list_kernels("matmul", "cpu") if k.name == "cpu_blocked"]
    assert len(blocked) == 1 and f"{info['isa']} micro-kernel" in blocked[0].description


def test_vector_isa_and_onednn_are_recorded() -> None:
    # The vectorized loops' clone is the widest x86-64 level the CPU has (x86-64-v4 needs
    # AVX-512 F/BW/CD/DQ/VL); a build without clones says "baseline".
    info = xrt.ops.cpu_gemm_info()
    flags_line = (
        next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
        if Path("/proc/cpuinfo").is_file()
        else ""
    )
    have = set(flags_line.split())
    assert info["vector_isa"] in ("x86-64-v4", "x86-64-v3", "baseline")
    if info["vector_isa"] == "x86-64-v4":
        assert {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= have
    elif info["vector_isa"] == "x86-64-v3":
        assert {"avx2", "fma", "bmi2"} <= have
    assert info["onednn"].startswith("oneDNN ") or "without oneDNN" in info["onednn"]
