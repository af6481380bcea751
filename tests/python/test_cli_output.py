"""Decision output, the demo-model default and bench's figures (stdout is not a terminal
here, so tables come out as plain text)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")

from xpuruntime.cli import main


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    yield
    gc.collect()


def _width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_decisions_chosen_is_compact(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    assert "decisions (" in out and "chosen" in out and "rule" in out and "layernorm" in out
    assert "device_mismatch" not in out and "rejected" not in out
    assert _width(out) <= 100
    assert len(out.splitlines()) < 40


def test_decisions_all_and_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--decisions", "all"]) == 0
    out = capsys.readouterr().out
    assert "inputs: float32[1, 3, 32, 32]" in out and _width(out) <= 100
    assert main(["run", "--decisions", "all", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert _width(verbose) <= 100
    # Candidates for device kinds absent here show only with --verbose.
    if "device_mismatch" in verbose:
        assert "hidden; --verbose shows them" in out and verbose.count("device_mismatch") > out.count(
            "device_mismatch"
        )
    assert main(["run", "--decisions", "none"]) == 0
    assert "decisions" not in capsys.readouterr().out


def test_explain_and_compare_default_to_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--decisions", "none"]) == 0
    assert "ExecutionPlan" in capsys.readouterr().out
    assert main(["compare", "--engines", "native", "--iterations", "1", "--warmup", "0"]) == 0
    assert "native" in capsys.readouterr().out


def test_bench_json_carries_samples_statistics_and_configuration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "b.json"
    trace = tmp_path / "trace.json"
    argv = ["bench", "--duration", "0.5", "--warmup", "1", "--batch", "2", "--threads", "1"]
    assert main([*argv, "--precision", "fp32", "--profile", str(trace), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    for col in ("min", "mean", "stddev", "p50", "p90", "p95", "p99", "max", "items/s", "build", "first run"):
        assert col in text
    data = json.loads(out_json.read_text())
    samples = data["samples_ms"]
    assert len(samples) == data["iterations"] >= 1 and all(s > 0 for s in samples)
    assert data["wall_s"] >= 0.5
    assert data["min_ms"] == pytest.approx(min(samples)) and data["max_ms"] == pytest.approx(max(samples))
    assert data["min_ms"] <= data["p50_ms"] <= data["p90_ms"] <= data["p99_ms"] <= data["max_ms"]
    assert data["build_ms"] > 0 and data["first_run_ms"] > 0 and data["batch"] == 2
    cfg = data["configuration"]
    assert cfg["inputs_resolved"]["image"]["shape"] == [2, 3, 32, 32]
    assert cfg["threads"] == 1 and cfg["precision"] == "fp32" and cfg["duration"] == 0.5
    events = json.loads(trace.read_text())
    assert events  # a Chrome trace of the profiled runs


def test_bench_iterations(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--iterations", "3", "--warmup", "0", "--json", str(tmp_path / "b.json")]) == 0
    capsys.readouterr()
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["iterations"] == 3 and len(data["samples_ms"]) == 3


def test_devices_fits_100_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "native" in out and "onnxruntime" in out and _width(out) <= 100
