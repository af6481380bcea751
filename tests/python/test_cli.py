"""The ``xpuruntime`` command line (run in-process through ``xpuruntime.cli.main``;
stdout is not a terminal here, so tables come out as plain text)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

from xpuruntime.cli import main
from xpuruntime.models import demo_model_path


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions (and their arenas) before other modules run, so
    allocator-statistics tests elsewhere never see them released mid-test."""
    yield
    gc.collect()


DEMO = str(demo_model_path())


def test_run_defaults_to_the_demo_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "--save-outputs", str(tmp_path / "out.npz")]) == 0
    out = capsys.readouterr().out
    assert "demo.onnx" in out and "logits" in out and "float32[1, 10]" in out
    assert "latency:" in out and "decisions" in out and "layernorm" in out
    # The stem's Conv: onednn where the build has oneDNN, else cpu_direct (AVX2/FMA) or cpu_im2col.
    assert any(k in out for k in ("onednn", "cpu_direct", "cpu_im2col"))
    with np.load(tmp_path / "out.npz") as z:
        assert z["logits"].shape == (1, 10)


def test_run_with_npz_inputs_is_deterministic(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32), dtype=np.float32)
    np.savez(tmp_path / "in.npz", image=x)
    for k in (1, 2):
        assert (
            main(
                [
                    "run",
                    DEMO,
                    "--inputs",
                    str(tmp_path / "in.npz"),
                    "--save-outputs",
                    str(tmp_path / f"o{k}.npz"),
                ]
            )
            == 0
        )
    capsys.readouterr()
    with np.load(tmp_path / "o1.npz") as a, np.load(tmp_path / "o2.npz") as b:
        assert a["logits"].shape == (2, 10)
        np.testing.assert_array_equal(a["logits"], b["logits"])


def test_explain_prints_plan_and_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", DEMO, "--dim", "batch=2"]) == 0
    out = capsys.readouterr().out
    assert "ExecutionPlan" in out and "arena" in out and "FusedAttention" in out
    # The MLP's decomposed erf GELU: one Gelu node, then folded into fc1's epilogue.
    assert "gelu pattern fusion (subgraphs fused): 1" in out and "Erf" not in out
    assert "auto.first_supported" in out


def test_bench_reports_percentiles(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        main(["bench", DEMO, "--warmup", "1", "--iterations", "5", "--json", str(tmp_path / "b.json")]) == 0
    )
    out = capsys.readouterr().out
    assert "p50 ms" in out and "p99 ms" in out and "items/s" in out
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["iterations"] == 5 and 0 < data["p50_ms"] <= data["p99_ms"]


def test_policy_validate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"preferences": {"matmul": "cpu_blocked"}}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"preferences": {"matmul": "cpu_blass"}}))
    assert main(["policy", "validate", str(good)]) == 0
    assert "valid KernelPolicy" in capsys.readouterr().out
    assert main(["policy", "validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "cpu_blass" in err and "cpu_blas" in err


def test_policy_file_changes_decisions(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pol = tmp_path / "p.json"
    pol.write_text(json.dumps({"preferences": {"matmul": "cpu_blocked"}}))
    assert main(["run", "--policy", str(pol)]) == 0
    out = capsys.readouterr().out
    assert "cpu_blocked" in out and "policy.prefer" in out


def test_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "native" in out


def test_errors_exit_with_code_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["run", str(bad)]) == 2
    assert "InvalidModelError" in capsys.readouterr().err


def test_console_entry_point_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "xpuruntime.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0 and "bench" in proc.stdout and "policy" in proc.stdout
