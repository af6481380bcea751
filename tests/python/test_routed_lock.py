"""Locks for routed PyTorch calls (issue 32), on CPU torch: save_lock records every routed
case, set_kernel_policy(lock=...) replays it in a fresh process (pinned, the same kernels,
the same bits), and refuses a changed library, another engine's lock, an edited kernel that
cannot run here, and (frozen) a case the lock does not cover, naming the field.
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

torch = pytest.importorskip("torch")

import xpuruntime as xrt
import xpuruntime.pytorch as xpt
from xpuruntime.lock import LockFile, LockViolationError

REPO = Path(__file__).parent.parent.parent
SHAPES = [((8, 16), (16, 4)), ((3, 5, 7), (7, 2))]


pytestmark = pytest.mark.usefixtures("clean_kernel_policy")


def _inputs(seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*a, generator=g), torch.randn(*b, generator=g)) for a, b in SHAPES]


def _locked(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    xpt.set_kernel_policy(xrt.KernelPolicy(matmul="auto", auto_strategy="best_performance"))
    outs = [torch.matmul(a, b).numpy() for a, b in _inputs()]
    path = tmp_path / "routed.lock.json"
    lock = xpt.save_lock(path)
    assert lock.engine == "pytorch" and lock.device == "cpu"
    assert lock.libraries["torch"] == torch.__version__
    nodes = lock.buckets[0]["nodes"]
    assert len(nodes) == len(SHAPES) and all(n["op"] == "matmul" and n["kernel"] for n in nodes)
    assert {n["key"] for n in nodes} == {d.key for d in xpt.decision_log()}
    return path, outs


_REPLAY = textwrap.dedent(
    """
    import json, sys
    import numpy as np, torch
    import xpuruntime.pytorch as xpt
    xpt.set_kernel_policy(lock=sys.argv[1], frozen=True)
    g = torch.Generator().manual_seed(0)
    shapes = json.loads(sys.argv[2])
    outs = []
    for a, b in shapes:
        x, y = torch.randn(*a, generator=g), torch.randn(*b, generator=g)
        outs.append(torch.matmul(x, y).numpy())
    np.savez(sys.argv[3], *outs)
    print(json.dumps([[d.key, d.chosen, d.rule] for d in xpt.decision_log()]))
    """
)


def test_routed_lock_replays_in_a_fresh_process(tmp_path: Path) -> None:
    path, outs = _locked(tmp_path)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(xrt.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _REPLAY, str(path), json.dumps(SHAPES), str(tmp_path / "o.npz")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    replayed = json.loads(proc.stdout.strip().splitlines()[-1])
    locked = {n["key"]: n["kernel"] for n in LockFile.load(path).buckets[0]["nodes"]}
    assert {k: c for k, c, _ in replayed} == locked
    assert {r for _, _, r in replayed} == {"pinned"}
    with np.load(tmp_path / "o.npz") as z:
        for i, want in enumerate(outs):
            np.testing.assert_array_equal(z[f"arr_{i}"], want)


def test_frozen_refuses_a_case_the_lock_does_not_cover(tmp_path: Path) -> None:
    path, _ = _locked(tmp_path)
    xpt.set_kernel_policy(lock=path, frozen=True)
    a, b = _inputs()[0]
    np.testing.assert_array_equal(torch.matmul(a, b).numpy(), (a @ b).numpy())
    with pytest.raises(LockViolationError, match=r"not covered") as e:
        torch.matmul(torch.randn(4, 9), torch.randn(9, 3))
    assert any("float32[4,9],float32[9,3]" in line and "not in the lock" in line for line in e.value.diff)
    # unfrozen, a new case decides as usual
    xpt.set_kernel_policy(lock=path)
    torch.matmul(torch.randn(4, 9), torch.randn(9, 3))


def test_an_edited_kernel_that_cannot_run_here_is_refused(tmp_path: Path) -> None:
    path, _ = _locked(tmp_path)
    data = json.loads(path.read_text())
    for n in data["buckets"][0]["nodes"]:
        n["kernel"] = "cublasLt"  # a CUDA kernel: CPU tensors cannot run it
    path.write_text(json.dumps(data))
    xpt.set_kernel_policy(lock=path)
    a, b = _inputs()[0]
    with pytest.raises(LockViolationError, match="decided differently") as e:
        torch.matmul(a, b)
    assert any("kernel cublasLt →" in line for line in e.value.diff), e.value.diff


def test_changed_library_policy_and_engine_are_refused(tmp_path: Path) -> None:
    path, _ = _locked(tmp_path)
    data = json.loads(path.read_text())
    data["libraries"]["torch"] = "1.0.0"
    path.write_text(json.dumps(data))
    with pytest.raises(LockViolationError, match="libraries.torch") as e:
        xpt.set_kernel_policy(lock=path)
    assert any(line.startswith("libraries.torch: 1.0.0 →") for line in e.value.diff)
    path, _ = _locked(tmp_path)
    with pytest.raises(LockViolationError, match="auto_strategy"):
        xpt.set_kernel_policy(xrt.KernelPolicy(matmul="auto"), lock=path)
    data = json.loads(path.read_text())
    data["engine"] = "native"
    path.write_text(json.dumps(data))
    with pytest.raises(LockViolationError, match="engine 'native'") as e:
        xpt.set_kernel_policy(lock=path)
    assert e.value.diff == ["engine: native → pytorch"]


def test_bad_use_raises_typed_errors() -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="needs lock=FILE"):
        xpt.set_kernel_policy(xrt.KernelPolicy(matmul="auto"), frozen=True)
    with pytest.raises(xrt.InvalidArgumentError, match="no kernel policy is set"):
        xpt.save_lock("/nonexistent/x.json")
    xpt.set_kernel_policy(xrt.KernelPolicy(matmul="auto"))
    with pytest.raises(xrt.InvalidArgumentError, match="nothing to lock yet"):
        xpt.save_lock("/nonexistent/x.json")
