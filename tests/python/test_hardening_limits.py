"""No input ends the process (issue 35 §4): thread counts are clamped to what the process
may start, the pinned-memory API takes only pointers it handed out, and the plan loader
checks a header's length before reading it."""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xpuruntime
import xpuruntime as xrt

mem = xrt._core.memory
Invalid = xrt._core.InvalidArgumentError
ROOT = Path(__file__).resolve().parents[2]


def test_freeing_a_pointer_not_handed_out_is_a_typed_error() -> None:
    p = mem.allocate_pinned(4096)
    for bogus in (1, 0x1234_5678, p + 64):
        with pytest.raises(Invalid, match="not a pinned block allocate_pinned handed out"):
            mem.free_pinned(bogus)
    mem.free_pinned(p)
    with pytest.raises(Invalid, match="freed already"):
        mem.free_pinned(p)  # a double free is refused, not passed to the allocator
    mem.free_pinned(0)  # null stays a no-op, as free(NULL)
    q = mem.allocate_pinned(1 << 20)
    arr = np.frombuffer((ctypes.c_uint8 * (1 << 20)).from_address(q), np.uint8)  # the block is usable
    arr[:] = 7
    assert int(arr.sum()) == 7 << 20
    mem.free_pinned(q)


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (an exit(1) there fails the test instead of ending pytest)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(pathlib.Path(xpuruntime.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a POSIX process to run in isolation")
def test_huge_thread_counts_are_clamped_not_fatal() -> None:
    """ExecutionPolicy(threads=2**31-1) runs (clamped, recorded) instead of libgomp's exit(1)."""
    r = _run_isolated(
        """
        import numpy as np, onnx, xpuruntime as xrt
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(3)
        w = rng.standard_normal((256, 128)).astype(np.float32)
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 128])],
            [numpy_helper.from_array(w, "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        s = xrt.InferenceSession(m, device="cpu", engine="native",
                                 exec_policy=xrt.ExecutionPolicy(threads=2**31 - 1))
        x = rng.standard_normal((512, 256)).astype(np.float32)
        y = s.run({"x": x})["y"]
        err = np.abs(y - x.astype(np.float64) @ w.astype(np.float64)).max()
        d = [d for d in s.explain() if d.node == "native:threads"][0]
        print("ERR", err, "|", d.chosen, "|", d.rule, "|", d.detail)
        """
    )
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("ERR"))
    err, chosen, rule, detail = (part.strip() for part in line[3:].split("|"))
    assert float(err) < 1e-3
    used = int(chosen.removeprefix("threads="))
    assert 1 <= used <= 1024 and rule == "policy.threads clamped" and "clamped to" in detail


def test_plan_header_length_of_2_pow_63_is_a_typed_error(tmp_path: Path) -> None:
    for version, at in ((b"2", 144), (b"1", 16)):
        for length in (2**63, 2**64 - 1, 2**40):
            data = b"XRTPLAN" + version + length.to_bytes(8, "little") + bytes(at - 16) + b'{"device":"cpu"}'
            path = tmp_path / "bad.xrtplan"
            path.write_bytes(data)
            with pytest.raises(xrt._core.InvalidModelError):
                xrt.InferenceSession.load_plan(str(path))
            with pytest.raises(xrt._core.InvalidModelError):
                xrt.InferenceSession.load_plan(data)
