"""``xpuruntime compare``: the difference metrics, the engine table and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from engine_testlib import tiny_mlp
from xpuruntime.cli import compare as cmp


def test_diff_metrics_against_hand_values() -> None:
    ref = np.array([1.0, -2.0, 4.0, 0.0], np.float32)
    out = np.array([1.5, -2.0, 3.0, 1e-3], np.float32)
    m = cmp.diff_metrics(out, ref)
    assert m["max_abs"] == pytest.approx(1.0)
    # |0.5|/1, 0, |1|/4, 1e-3 / max(0, 4e-6) = 250
    assert m["max_rel"] == pytest.approx(1e-3 / 4e-6, rel=1e-4)
    a, b = out.astype(np.float64), ref.astype(np.float64)
    assert m["cosine"] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    same = cmp.diff_metrics(ref, ref)
    assert same == {"max_abs": 0.0, "max_rel": 0.0, "cosine": pytest.approx(1.0)}
    assert cmp.diff_metrics(-ref, ref)["cosine"] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="shape mismatch"):
        cmp.diff_metrics(np.zeros(3), np.zeros(4))


def test_make_inputs_follows_dtypes_and_dims() -> None:
    from xpuruntime.engines.base import TensorInfo

    infos = [
        TensorInfo("a", ("batch", 3), "float32"),
        TensorInfo("ids", ("batch", "seq"), "int64"),
        TensorInfo("m", (2,), "bool"),
    ]
    feeds = cmp.make_inputs(infos, {"batch": 4, "seq": 7}, seed=1, int_high=5)
    assert feeds["a"].shape == (4, 3) and feeds["a"].dtype == np.float32
    assert feeds["ids"].shape == (4, 7) and feeds["ids"].dtype == np.int64 and feeds["ids"].max() < 5
    assert feeds["m"].dtype == bool
    again = cmp.make_inputs(infos, {"batch": 4, "seq": 7}, seed=1, int_high=5)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)


def test_compare_ort_openvino_and_an_unavailable_engine() -> None:
    rows, inputs = cmp.compare(
        tiny_mlp(), ["onnxruntime", "openvino", "tensorrt"], dims={"n": 3}, iterations=3
    )
    by = {r.engine: r for r in rows}
    assert rows[0].engine == "onnxruntime" and by["onnxruntime"].diffs["y"]["max_abs"] == 0.0
    ov = by["openvino"]
    assert ov.status == "ok" and ov.diffs["y"]["cosine"] > 0.999999 and ov.diffs["y"]["max_rel"] < 1e-3
    assert ov.latency_ms_median is not None and 0 < ov.latency_ms_median <= ov.latency_ms_p90
    assert inputs["x"].shape == (3, 16)
    if by["tensorrt"].status != "ok":
        assert "tensorrt" in by["tensorrt"].error
    table = cmp.format_table(rows, "onnxruntime")
    assert by["tensorrt"].status == "error" or by["tensorrt"].device.startswith("cuda")
    assert "onnxruntime (ref)" in table and "openvino" in table and "max_rel" in table


def test_engine_at_device_specs() -> None:
    rows, _ = cmp.compare(
        tiny_mlp(), ["ort@cpu", "openvino@npu", "openvino@cpu"], dims={"n": 2}, iterations=1
    )
    by = {r.engine: r for r in rows}
    assert list(by) == ["onnxruntime@cpu", "openvino@npu", "openvino@cpu"]
    assert by["openvino@cpu"].status == "ok" and by["openvino@cpu"].diffs["y"]["max_abs"] < 1e-4
    from xpuruntime.engines import registry

    if "npu" not in registry.availability("openvino").devices:
        assert (
            by["openvino@npu"].status == "error"
            and "openvino@npu: device_unavailable" in by["openvino@npu"].error
        )


def test_cli_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(tiny_mlp(), path)
    out_json = tmp_path / "cmp.json"
    rc = cmp.main(
        [
            str(path),
            "--engines",
            "ort,ov",
            "--reference",
            "openvino",
            "--dim",
            "n=2",
            "--iterations",
            "2",
            "--json",
            str(out_json),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "openvino (ref)" in printed
    data = json.loads(out_json.read_text())
    assert data["reference"] == "openvino"
    assert [r["engine"] for r in data["rows"]] == ["openvino", "onnxruntime"]
    assert data["rows"][1]["diffs"]["y"]["max_abs"] < 1e-4


def test_cli_rejects_bad_dims(tmp_path: Path) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="name=value"):
        cmp._parse_dims(["batch"])
