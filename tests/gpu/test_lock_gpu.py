"""Lock replay on CUDA (issue 32, GPU part): a native CUDA plan compiled under
``best_performance`` (every GEMM tuned among cuBLAS/cuBLASLt and their algorithms) is
locked in one process and replayed in a fresh one: same kernels and algorithms per
node, bit-identical outputs, and the lock shows each tuned decision's timing margin.
Skips without a CUDA device."""

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

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parent.parent / "python"))

REPO = Path(__file__).parent.parent.parent

_REPLAY = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch  # first, as tests/gpu/conftest.py does: both processes load torch's cuDNN
    import xpuruntime as xrt
    model, lock, feeds, out = sys.argv[1:5]
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    sess = xrt.InferenceSession(model, lock=lock, frozen=True, kernel_policy=pol)
    with np.load(feeds) as z:
        res = sess.run({k: z[k] for k in z.files})
    np.savez(out, **{k: np.asarray(v) for k, v in res.items()})
    print(json.dumps([[d.node, d.op, d.chosen, d.algorithm] for d in sess.decisions() if d.op != "engine"]))
    """
)


def _need_cuda() -> None:
    if xrt.get_device_count() == 0:
        pytest.skip(f"no CUDA device: {xrt._core.DeviceManager.instance().cuda_unavailable_reason()}")


@pytest.mark.parametrize("name", ["bert_tiny", "resnet18"])
def test_best_performance_lock_replays_bit_identically_on_cuda(name: str, tmp_path: Path) -> None:
    _need_cuda()
    pytest.importorskip("torch")
    import model_zoo

    path = str(model_zoo.export(name))
    feeds = model_zoo.sample_inputs(name, np.random.default_rng(4), batch=2)
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    sess = xrt.InferenceSession(path, device="cuda", engine="native", kernel_policy=pol)
    ref = sess.run(feeds)
    lock_path = tmp_path / "cuda.lock.json"
    lock = sess.lock(lock_path)
    assert lock.device_info["kind"] == "cuda" and lock.device_info.get("compute_capability")
    for field in ("gpu_arch", "cuda_runtime", "cublaslt", "cudnn"):
        assert lock.libraries.get(field), (field, lock.libraries)
    # A tuned node (more than one candidate timed) carries its timing margin in the lock;
    # a case with a single candidate is decided by best_performance without timing.
    tuned = [
        n
        for b in lock.buckets
        for n in b["nodes"]
        if n["rule"] == "auto.best_performance" and len(n.get("timings_ms") or {}) > 1
    ]
    assert tuned, [n["rule"] for b in lock.buckets for n in b["nodes"]]
    for n in tuned:
        assert n.get("margin") is not None and (n["margin"] or n.get("tie")), n
    want = [[d.node, d.op, d.chosen, d.algorithm] for d in sess.decisions() if d.op != "engine"]
    np.savez(tmp_path / "feeds.npz", **feeds)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(xrt.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _REPLAY,
            path,
            str(lock_path),
            str(tmp_path / "feeds.npz"),
            str(tmp_path / "o.npz"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [tuple(g) for g in json.loads(proc.stdout.strip().splitlines()[-1])] == [tuple(w) for w in want]
    with np.load(tmp_path / "o.npz") as z:
        for k, v in ref.items():
            np.testing.assert_array_equal(z[k], np.asarray(v), err_msg=f"{name} output {k}")


def test_best_performance_plan_records_tuned_margins_in_the_lock(tmp_path: Path) -> None:
    """The bar's "the lock shows each tuned decision's timing margin": at least one GEMM of a
    best_performance CUDA plan must be tuned (rule auto.best_performance, timings and margin).
    Fails, naming the rules seen, where the native compile only takes cached winners."""
    _need_cuda()
    pytest.importorskip("torch")
    import model_zoo

    path = str(model_zoo.export("bert_tiny"))
    feeds = model_zoo.sample_inputs("bert_tiny", np.random.default_rng(6), batch=2)
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    sess = xrt.InferenceSession(path, device="cuda", engine="native", kernel_policy=pol)
    sess.run(feeds)
    lock = sess.lock(tmp_path / "tuned.lock.json")
    nodes = [n for b in lock.buckets for n in b["nodes"] if n["op"] == "matmul"]
    tuned = [n for n in nodes if n["rule"] == "auto.best_performance"]
    assert tuned, f"no matmul of the CUDA plan was tuned: rules {sorted({n['rule'] for n in nodes})}"
    for n in tuned:
        assert n["timings_ms"] and n["margin"], n


def test_cuda_lock_refuses_another_cublaslt(tmp_path: Path) -> None:
    _need_cuda()
    pytest.importorskip("torch")
    import model_zoo

    path = str(model_zoo.export("bert_tiny"))
    feeds = model_zoo.sample_inputs("bert_tiny", np.random.default_rng(5), batch=1)
    sess = xrt.InferenceSession(path, device="cuda", engine="native")
    sess.run(feeds)
    lock_path = tmp_path / "l.json"
    sess.lock(lock_path)
    data = json.loads(lock_path.read_text())
    data["libraries"]["cublaslt"] = "1"
    lock_path.write_text(json.dumps(data))
    locked = xrt.InferenceSession(path, lock=lock_path)
    with pytest.raises(xrt.LockViolationError, match="libraries.cublaslt"):
        locked.run(feeds)


# ------------------------------------------------------------- routed torch matmuls
_ROUTED_SHAPES = [[[64, 256], [256, 128]], [[4, 96, 64], [64, 80]], [[256, 512], [512, 256]]]

_ROUTED_REPLAY = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    import xpuruntime.pytorch as xpt
    lock, shapes, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    xpt.set_kernel_policy(lock=lock, frozen=True)
    g = torch.Generator().manual_seed(9)
    outs = []
    for a, b in shapes:
        x = torch.randn(*a, generator=g).half().cuda()
        y = torch.randn(*b, generator=g).half().cuda()
        outs.append(torch.matmul(x, y).float().cpu().numpy())
    np.savez(out, *outs)
    print(json.dumps([[d.key, d.chosen, d.algorithm, d.rule] for d in xpt.decision_log()]))
    """
)


def test_routed_torch_matmul_lock_replays_bit_identically(tmp_path: Path) -> None:
    """A lock of routed fp16 torch matmuls tuned under best_performance (cuBLASLt, cuBLAS,
    torch timed with CUDA events) replays in a fresh process: the same kernels, pinned,
    bit-identical outputs; the lock shows each tuned case's timing margin."""
    _need_cuda()
    torch = pytest.importorskip("torch")
    import xpuruntime.pytorch as xpt

    xpt.clear_kernel_policy()
    xpt.clear_decision_log()
    try:
        xpt.set_kernel_policy(xrt.KernelPolicy(matmul="auto", auto_strategy="best_performance"))
        g = torch.Generator().manual_seed(9)
        ref = []
        for a, b in _ROUTED_SHAPES:
            x = torch.randn(*a, generator=g).half().cuda()
            y = torch.randn(*b, generator=g).half().cuda()
            ref.append(torch.matmul(x, y).float().cpu().numpy())
        lock_path = tmp_path / "routed.lock.json"
        lock = xpt.save_lock(lock_path)
    finally:
        xpt.clear_kernel_policy()
    assert lock.engine == "pytorch" and lock.device_info.get("compute_capability")
    nodes = lock.buckets[0]["nodes"]
    assert len(nodes) == len(_ROUTED_SHAPES)
    tuned = [n for n in nodes if n["rule"] == "auto.best_performance"]
    assert tuned, [(n["rule"], n["kernel"]) for n in nodes]
    for n in tuned:
        assert len(n["timings_ms"]) >= 2 and "margin_pct" in n and n["margin"], n
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(xrt.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _ROUTED_REPLAY,
            str(lock_path),
            json.dumps(_ROUTED_SHAPES),
            str(tmp_path / "o.npz"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    replayed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: c for k, c, _, _ in replayed} == {n["key"]: n["kernel"] for n in nodes}
    assert {r for *_, r in replayed} == {"pinned"}
    with np.load(tmp_path / "o.npz") as z:
        for i, want in enumerate(ref):
            np.testing.assert_array_equal(z[f"arr_{i}"], want, err_msg=f"routed matmul {_ROUTED_SHAPES[i]}")
