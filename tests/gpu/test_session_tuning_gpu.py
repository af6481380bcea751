"""best_performance inside sessions on CUDA (issue 30, deliverable 4): a native CUDA plan
times every case's candidate kernels and algorithms (cuDNN convolution algorithms,
cuBLASLt heuristic algorithms, cuBLAS) with CUDA events on the plan's stream while it is
built, records timings and margin, and pins the winners (kernel + algorithm): export_pins
writes them, a saved plan and a session built from the pins (in this process and a fresh
one) choose the same kernels and algorithms and give bit-identical outputs.
Skips without a CUDA device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.gpu

REPO = Path(__file__).parent.parent.parent
BEST = "auto.best_performance"


def _need_cuda() -> None:
    if xrt.get_device_count() == 0:
        pytest.skip(f"no CUDA device: {xrt._core.DeviceManager.instance().cuda_unavailable_reason()}")


def convnet(path: Path, seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """x[8,16,32,32] -> Conv(32, 3x3, pad 1) + bias -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm(32 -> 256) -> Relu -> MatMul(256 -> 64)."""
    rng = np.random.default_rng(seed)
    w = {
        "wc": (rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32),
        "bc": (rng.standard_normal(32) / 10).astype(np.float32),
        "wg": (rng.standard_normal((32, 256)) / 6).astype(np.float32),
        "bg": (rng.standard_normal(256) / 10).astype(np.float32),
        "wm": (rng.standard_normal((256, 64)) / 16).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "wc", "bc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], name="gemm"),
        helper.make_node("Relu", ["g"], ["gr"], name="relu2"),
        helper.make_node("MatMul", ["gr", "wm"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path, w


def reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in w.items()}
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n, c, h, w, 3, 3
    c = np.einsum("nchwij,ocij->nohw", win, f["wc"]) + f["bc"][None, :, None, None]
    p = np.maximum(c, 0).mean(axis=(2, 3))
    g = np.maximum(p @ f["wg"] + f["bg"], 0)
    return g @ f["wm"]


def _policies(precision: str) -> tuple[xrt.KernelPolicy, xrt.ExecutionPolicy]:
    ep = xrt.ExecutionPolicy(allow_tf32=False, precision=precision)
    return xrt.KernelPolicy(auto_strategy="best_performance"), ep


def _choices(sess: xrt.InferenceSession) -> dict[str, tuple[str, str]]:
    return {
        f"{d.node}/{d.op}": (d.chosen, d.algorithm)
        for d in sess.decisions()
        if d.op not in ("engine", "engine.policy")
    }


_REPLAY = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import xpuruntime as xrt
    model, pins, feeds, out, precision = sys.argv[1:6]
    ep = xrt.ExecutionPolicy(allow_tf32=False, precision=precision)
    sess = xrt.InferenceSession(model, device="cuda", engine="native",
                                kernel_policy=xrt.KernelPolicy.load(pins), exec_policy=ep)
    with np.load(feeds) as z:
        res = sess.run({k: z[k] for k in z.files})
    np.savez(out, **{k: np.asarray(v) for k, v in res.items()})
    print(json.dumps({f"{d.node}/{d.op}": [d.chosen, d.algorithm, d.rule] for d in sess.decisions()
                      if d.op not in ("engine", "engine.policy")}))
    """
)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cuda_plan_tunes_cudnn_and_cublaslt_algorithms_and_replays_them(
    precision: str, tmp_path: Path
) -> None:
    _need_cuda()
    path, w = convnet(tmp_path / "convnet.onnx")
    kp, ep = _policies(precision)
    sess = xrt.InferenceSession(str(path), device="cuda", engine="native", kernel_policy=kp, exec_policy=ep)
    x = np.random.default_rng(3).standard_normal((8, 16, 32, 32)).astype(np.float32)
    out = np.asarray(sess.run({"x": x})["y"], dtype=np.float32)
    tol = 2e-3 if precision == "fp32" else 3e-2
    np.testing.assert_allclose(out, reference(x, w), rtol=tol, atol=tol)

    decisions = [d for d in sess.decisions() if d.rule == BEST]
    convs = [d for d in decisions if d.op in ("conv", "conv_nhwc")]
    gemms = [d for d in decisions if d.op == "matmul"]
    assert convs and gemms, sorted({(d.op, d.rule) for d in sess.decisions()})
    timed = [d for d in decisions if d.timings]
    assert timed
    for d in timed:
        assert "plan step, device events" in d.detail, d.detail
        assert "margin" in d.detail or "a tie" in d.detail or len(d.timings) == 1, d.detail
        assert d.pin == {"kernel": d.chosen, "algorithm": d.algorithm}
    # cuDNN's algorithms are each a candidate: the winner is pinned by name
    for d in convs:
        if d.chosen == "cudnn":
            assert d.algorithm, d.detail
            assert sum(k.startswith("cudnn/") for k in d.timings) >= 1, d.timings
    # cuBLASLt's heuristic algorithms too (ids of the heuristic's top candidates)
    lt = [k for d in gemms for k in d.timings if k.startswith("cublasLt/")]
    assert len(lt) >= 2, [d.timings for d in gemms]

    pins = sess.export_pins()
    for d in decisions:  # every best_performance case, its winner (kernel and algorithm)
        assert pins.pins[d.key] == {"kernel": d.chosen, "algorithm": d.algorithm}
    pins_file = tmp_path / "pins.json"
    pins.save(str(pins_file))

    plan_file = tmp_path / "convnet.xrtplan"
    sess.save_plan(plan_file)
    loaded = xrt.InferenceSession.load_plan(plan_file, kernel_policy=kp, exec_policy=ep)
    assert _choices(loaded) == _choices(sess)
    np.testing.assert_array_equal(np.asarray(loaded.run({"x": x})["y"]), np.asarray(sess.run({"x": x})["y"]))

    again = xrt.InferenceSession(
        str(path),
        device="cuda",
        engine="native",
        kernel_policy=xrt.KernelPolicy.load(str(pins_file)),
        exec_policy=ep,
    )
    assert _choices(again) == _choices(sess)
    assert all(d.rule == "pinned" for d in again.decisions() if d.key in pins.pins)
    ref = np.asarray(sess.run({"x": x})["y"])
    np.testing.assert_array_equal(np.asarray(again.run({"x": x})["y"]), ref)

    # a fresh process with the exported pins: the same kernels and algorithms, the same bits
    np.savez(tmp_path / "feeds.npz", x=x)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])
    )
    args = [str(path), str(pins_file), str(tmp_path / "feeds.npz"), str(tmp_path / "o.npz"), precision]
    proc = subprocess.run(
        [sys.executable, "-c", _REPLAY, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    replayed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: tuple(v[:2]) for k, v in replayed.items()} == _choices(sess)
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_array_equal(z["y"], ref)


def test_cuda_tuning_runs_once_per_case_in_a_process(tmp_path: Path) -> None:
    _need_cuda()
    path, _ = convnet(tmp_path / "convnet.onnx", seed=1)
    kp, ep = _policies("fp32")
    first = xrt.InferenceSession(str(path), device="cuda", engine="native", kernel_policy=kp, exec_policy=ep)
    second = xrt.InferenceSession(str(path), device="cuda", engine="native", kernel_policy=kp, exec_policy=ep)
    a = {d.key: d.timings for d in first.decisions() if d.rule == BEST}
    b = {d.key: d.timings for d in second.decisions() if d.rule == BEST}
    assert a and a == b  # the second build took the cached winners (the same measured times)
