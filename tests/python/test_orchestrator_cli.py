"""The orchestrator's preview (issue 33): ``xpuruntime policy check`` exit codes, the
``explain --engines ... --dry-run`` output, and the coverage matrix of the test zoo
against a golden file (tests/python/golden/orchestrator_coverage.json; regenerate with
``XRT_UPDATE_GOLDEN=1`` and review the diff)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import orchestrator
from xpuruntime.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_orchestrator import gelu_model

pytest.importorskip("onnxruntime", reason="ONNX Runtime is one of the engines previewed")

GOLDEN = Path(__file__).parent / "golden" / "orchestrator_coverage.json"


@pytest.fixture
def model_path(tmp_path: Path) -> str:
    path = tmp_path / "gelu.onnx"
    path.write_bytes(gelu_model(batch="n").SerializeToString())
    return str(path)


def _policy(tmp_path: Path, **fields) -> str:
    path = tmp_path / "policy.json"
    xrt.ExecutionPolicy(**fields).save(path)
    return str(path)


def test_policy_check_exits_zero_when_the_budgets_hold(model_path, tmp_path, capsys):
    pol = _policy(tmp_path, engines=["native", "onnxruntime"], max_islands=3, max_fallback_nodes=1)
    assert main(["policy", "check", model_path, pol]) == 0
    out = capsys.readouterr().out
    assert "3 island(s): native@cpu (1 nodes), onnxruntime@cpu (1 nodes), native@cpu (3 nodes)" in out
    assert out.strip().endswith(f"ok: {model_path} under {pol} on cpu")


def test_policy_check_exits_non_zero_naming_each_violation(model_path, tmp_path, capsys):
    pol = _policy(tmp_path, engines=["native", "onnxruntime"], max_islands=1, max_copy_bytes=100)
    assert main(["policy", "check", model_path, pol, "--dim", "n=8"]) == 1
    out = capsys.readouterr().out
    assert "violation: 3 islands" in out and "'ms_gelu'" in out
    # --dim sizes the estimate: 8 x 32 float32 per boundary.
    assert "violation: 2048 bytes cross island boundaries per run, more than max_copy_bytes=100" in out
    assert "FAIL" in out
    # A node nobody may run is a violation too.
    pol = _policy(tmp_path, engines=["native", "onnxruntime"], forbid=["onnxruntime"])
    assert main(["policy", "check", model_path, pol, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["ok"] and "ms_gelu" in doc["problems"][0]


def test_policy_check_without_engines_is_a_usage_error(model_path, tmp_path, capsys):
    assert main(["policy", "check", model_path, _policy(tmp_path)]) == 2
    assert "lists no engines" in capsys.readouterr().err


def test_explain_dry_run_prints_coverage_partition_and_bytes(model_path, capsys):
    assert (
        main(["explain", model_path, "--engines", "native,onnxruntime", "--device", "cpu", "--dry-run"]) == 0
    )
    out = capsys.readouterr().out
    assert "coverage" in out and "no: op_unsupported" in out
    assert "island boundaries (estimated bytes per run)" in out
    assert (
        main(
            [
                "explain",
                model_path,
                "--engines",
                "native,onnxruntime",
                "--dry-run",
                "--format",
                "json",
                "--dim",
                "n=2",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    row = next(r for r in doc["coverage"] if r["node"] == "ms_gelu")
    assert row["engines"]["native@cpu"]["reason_code"] == "op_unsupported"
    assert row["engines"]["onnxruntime@cpu"]["supported"]
    assert [b["bytes"] for b in doc["partition"]["boundaries"]] == [2 * 32 * 4, 2 * 32 * 4]
    assert [i["place"] for i in doc["partition"]["islands"]] == [
        "native@cpu",
        "onnxruntime@cpu",
        "native@cpu",
    ]


def test_explain_with_engines_builds_and_shows_islands(model_path, capsys):
    assert main(["explain", model_path, "--engines", "native,onnxruntime", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "partition" in out and "onnxruntime@cpu" in out and "engine.copy" in out


def test_dry_run_for_cuda_needs_no_gpu(model_path):
    from xpuruntime import _core

    if "cuda" not in _core.graph.providers():
        _core.DeviceManager.instance().get_device_count()  # loads the CUDA plugin where it is built
    result = orchestrator.preview(model_path, ["native", "onnxruntime"], "cuda")
    native = {r["node"]: r["engines"]["native@cuda"] for r in result["coverage"]}
    if "cuda" in _core.graph.providers():
        # The CUDA plugin's registry answers without a device.
        assert native["fc1"]["supported"] and native["fc1"]["kernels"]
        assert native["ms_gelu"]["reason_code"] == "op_unsupported"
    else:
        assert native["fc1"]["reason_code"] == "backend_unavailable"


# ------------------------------------------------------------------ the zoo's golden
def _zoo_summary() -> dict:
    model_zoo = pytest.importorskip("model_zoo")
    pytest.importorskip("torch", reason="the zoo is exported from torch")
    out = {}
    for name in model_zoo.MODELS:
        result = orchestrator.preview(
            str(model_zoo.export(name)), ["native", "onnxruntime", "openvino"], "cpu"
        )
        out[name] = orchestrator.coverage_summary(result)
    # With an op the native engine lacks (com.microsoft's Gelu): three islands.
    result = orchestrator.preview(gelu_model(), ["native", "onnxruntime", "openvino"], "cpu")
    out["helper:gelu_mlp"] = orchestrator.coverage_summary(result)
    return out


def test_zoo_coverage_matrix_golden():
    from xpuruntime.engines import registry

    if not registry.availability("openvino").available:
        pytest.skip("OpenVINO is not installed (the golden matrix has its column)")
    got = _zoo_summary()
    text = json.dumps(got, indent=1, sort_keys=True) + "\n"
    if os.environ.get("XRT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert GOLDEN.exists(), f"golden file {GOLDEN} is missing: run with XRT_UPDATE_GOLDEN=1 to create it"
    want = json.loads(GOLDEN.read_text())
    assert got == want, "the coverage matrix changed: rerun with XRT_UPDATE_GOLDEN=1 and review the diff"
    # Independent of the golden text: the native engine runs every node of the zoo on the
    # CPU, so each model is one native island.
    helper = got.pop("helper:gelu_mlp")
    assert [i["place"] for i in helper["islands"]] == ["native@cpu", "onnxruntime@cpu", "native@cpu"]
    assert helper["ops"]["com.microsoft.Gelu"]["engines"]["native@cpu"] == {
        "reasons": ["op_unsupported"],
        "supported": 0,
    }
    for name, s in got.items():
        assert s["islands"] == [
            {"place": "native@cpu", "nodes": sum(o["nodes"] for o in s["ops"].values())}
        ], name


def test_coverage_reads_every_node():
    graph = orchestrator.ModelGraph.load(gelu_model())
    result = orchestrator.preview(gelu_model(), ["native", "onnxruntime"], "cpu")
    assert [r["node"] for r in result["coverage"]] == [n.name for n in graph.nodes]
    assert np.all([r["engines"]["onnxruntime@cpu"]["supported"] for r in result["coverage"]])
