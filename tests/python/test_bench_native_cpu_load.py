"""benchmarks/bench_native_cpu_load.py (issue 36): its goals, its bounded background load,
and one end-to-end run of the loaded phase on the bundled demo model."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its sibling modules
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_native_cpu_load", ROOT / "benchmarks" / "bench_native_cpu_load.py"
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A reaped-but-listed zombie counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_load_goal_counts_every_model_and_misses_failures() -> None:
    bench = _bench()
    phases = {
        "loaded": {
            "load_average_at_start": (4.0, 3.0, 2.0),
            "models": {
                "a": {"ratio_native_over_ort": 0.9},
                "b": {"ratio_native_over_ort": 1.4},
            },
        },
        "idle": {
            "load_average_at_start": (0.1, 0.1, 0.1),
            "models": {"a": {"ratio_native_over_ort": 0.7}, "b": {"ratio_native_over_ort": 1.1}},
        },
    }
    checks = {"a": {"matches_ort": True}, "b": {"matches_ort": True}}
    load, idle = bench.goals(phases, ["a", "b"], checks)
    assert load["met"] and load["value"] == pytest.approx(1.4)
    assert idle["value"] == pytest.approx(0.9) and not idle["met"]
    phases["loaded"]["models"]["b"]["ratio_native_over_ort"] = 1.6
    assert not bench.goals(phases, ["a", "b"], checks)[0]["met"]
    # A model that did not match ORT (or did not build) is a miss, not left out.
    phases["loaded"]["models"]["b"]["ratio_native_over_ort"] = 1.0
    load = bench.goals(phases, ["a", "b"], {"a": {"matches_ort": True}, "b": {"error": "x"}})[0]
    assert not load["met"] and load["per_model"]["b"] is None


def test_background_load_is_bounded() -> None:
    bench = _bench()
    with bench.background_load(2, 60.0) as pids:
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)  # stopped with the block
    # Each process also stops by itself at its deadline (a killed benchmark leaves none).
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", bench._SPIN, "0.3"], check=True, timeout=30)
    assert time.monotonic() - t0 >= 0.3


def test_loaded_run_on_the_demo_writes_goals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openvino")
    pytest.importorskip("onnxruntime")
    bench = _bench()
    out = tmp_path / "load.json"
    argv = ["bench_native_cpu_load.py", "--models", "demo", "--no-idle", "--rounds", "1", "--busy", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--cache", str(tmp_path), "--out", str(out)])
    assert bench.main() == 0
    res = json.loads(out.read_text())
    assert res["checks"]["demo"]["matches_ort"]
    row = res["phases"]["loaded"]["models"]["demo"]
    assert row["native_p50_ms"] > 0 and row["ort_p50_ms"] > 0 and row["openvino_p50_ms"] > 0
    assert row["native_p99_ms"] >= row["native_p50_ms"]
    assert len(res["phases"]["loaded"]["load_average_at_start"]) == 3
    goal = res["goals"][0]
    assert goal["name"].startswith("under the bounded background load") and "demo" in goal["per_model"]
