"""First-divergence bisection and compare's tolerances (issues 32 and 34).

The lossy side is ONNX Runtime at precision int8 (dynamic quantization of the MatMul
weights) against the same engine at fp32: the elementwise nodes before the first MatMul
agree bit for bit, so that MatMul is the first node beyond the tolerance. The memory
cap is set so that the intermediates are exposed over several chunks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime.inference.bisect import Side, bisect, format_result

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

BATCH, WIDTH = 8, 256
ROW_BYTES = BATCH * WIDTH * 4  # one intermediate: 8 KiB


def _model(path: Path) -> Path:
    """x -> Mul -> Add -> Relu -> Sigmoid -> MatMul "mm_first" -> Tanh -> MatMul -> Relu."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "s"),
        numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "t"),
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / 16, "w1"),
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / 16, "w2"),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["a"], name="scale"),
        helper.make_node("Add", ["a", "t"], ["b"], name="shift"),
        helper.make_node("Relu", ["b"], ["c"], name="relu0"),
        helper.make_node("Sigmoid", ["c"], ["d"], name="sig"),
        helper.make_node("MatMul", ["d", "w1"], ["e"], name="mm_first"),
        helper.make_node("Tanh", ["e"], ["f"], name="tanh"),
        helper.make_node("MatMul", ["f", "w2"], ["g"], name="mm_second"),
        helper.make_node("Relu", ["g"], ["y"], name="relu_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, WIDTH])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    return _model(tmp_path / "chain.onnx")


def _feeds(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((BATCH, WIDTH)).astype(np.float32)}


def _sides() -> tuple[Side, Side]:
    return (
        Side("fp32", "onnxruntime"),
        Side("int8", "onnxruntime", exec_policy=xrt.ExecutionPolicy(precision="int8")),
    )


def test_bisect_reports_the_lossy_node_first_within_the_memory_cap(model: Path) -> None:
    a, b = _sides()
    cap = 6 * ROW_BYTES  # three intermediates per side at once
    res = bisect(str(model), a, b, _feeds(), atol=1e-4, rtol=1e-3, max_memory=cap)
    assert res.node == "mm_first" and res.op_type == "MatMul" and res.index == 4
    assert res.chunks >= 2 and 0 < res.peak_exposed_bytes <= cap // 2
    assert res.nodes_checked == 5
    out = res.outputs["e"]
    assert out["max_abs"] > 1e-4 and out["cosine"] > 0.9  # lossy, not broken
    assert res.inputs["d"]["max_abs"] == 0.0  # its input agrees bit for bit
    assert res.inputs["w1"].startswith("constant")
    text = format_result(res, a.label, b.label)
    assert "first divergence: node mm_first (MatMul)" in text
    assert "decisions of fp32" in text and "decisions of int8" in text


def test_bisect_of_agreeing_runs_finds_nothing(model: Path) -> None:
    res = bisect(
        str(model), Side("ort", "onnxruntime"), Side("native", "native"), _feeds(1), atol=1e-4, rtol=1e-4
    )
    assert res.node == "" and res.nodes_checked == 8
    assert "no node differs" in format_result(res, "ort", "native")


def test_bisect_refuses_a_cap_below_one_tensor(model: Path) -> None:
    a, b = _sides()
    with pytest.raises(xrt.InvalidArgumentError, match="raise --max-memory"):
        bisect(str(model), a, b, _feeds(), max_memory=ROW_BYTES)


def test_bisect_names_both_sides_decisions_for_native_policies(model: Path) -> None:
    # Two native runs whose matmul policies differ, compared bit for bit: the elementwise
    # nodes before the first MatMul run the same kernels, so a divergence can only start
    # at a MatMul, and its report carries each side's kernel for that node.
    res = bisect(
        str(model),
        Side("blas", "native", kernel_policy=xrt.KernelPolicy(matmul=["cpu_blas", "auto"])),
        Side("blocked", "native", kernel_policy=xrt.KernelPolicy(matmul=["cpu_blocked", "auto"])),
        _feeds(2),
        atol=0.0,
        rtol=0.0,
    )
    if not res.node:
        assert res.nodes_checked == 8  # both kernels gave the same bits everywhere
        return
    assert res.op_type == "MatMul" and res.node in ("mm_first", "mm_second")
    chosen = {label: {d.chosen for d in decs if d.op == "matmul"} for label, decs in res.decisions.items()}
    assert chosen == {"blas": {"cpu_blas"}, "blocked": {"cpu_blocked"}}, chosen


def test_cli_bisect_prints_the_node_and_exits_1(model: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from xpuruntime.cli.main import main

    js = tmp_path / "bisect.json"
    rc = main(
        [
            "compare",
            str(model),
            "--engines",
            "onnxruntime",
            "--precisions",
            "fp32,int8",
            "--bisect",
            "--tolerance",
            "1e-4",
            "--max-memory",
            "48K",
            "--json",
            str(js),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "first divergence: node mm_first (MatMul)" in out
    doc = json.loads(js.read_text())
    assert doc["node"] == "mm_first" and doc["peak_exposed_bytes"] <= 24 * 1024


def test_cli_bisect_needs_exactly_one_varied_axis(model: Path) -> None:
    from xpuruntime.cli.main import main

    with pytest.raises(SystemExit, match="exactly one of"):
        main(
            [
                "compare",
                str(model),
                "--engines",
                "native,onnxruntime",
                "--precisions",
                "fp32,int8",
                "--bisect",
            ]
        )


def test_compare_tolerance_sets_the_exit_status(model: Path, tmp_path: Path) -> None:
    from xpuruntime.cli.compare import compare, main

    feeds = tmp_path / "in.npz"
    np.savez(feeds, **_feeds(3))
    rows, _ = compare(
        str(model), ["native", "onnxruntime"], inputs=dict(np.load(feeds)), iterations=1, warmup=0
    )
    exact = rows[1].diffs["y"]["max_abs"] == 0.0
    strict = main(
        [
            str(model),
            "--engines",
            "native,onnxruntime",
            "--inputs",
            str(feeds),
            "--atol",
            "0",
            "--rtol",
            "0",
            "--iterations",
            "1",
            "--warmup",
            "0",
        ]
    )
    assert strict == (0 if exact else 1)
    loose = main(
        [
            str(model),
            "--engines",
            "native,onnxruntime",
            "--inputs",
            str(feeds),
            "--tolerance",
            "1e-3",
            "--threads",
            "1",
            "--iterations",
            "1",
            "--warmup",
            "0",
        ]
    )
    assert loose == 0
    lossy = main(
        [
            str(model),
            "--engines",
            "onnxruntime",
            "--precision",
            "int8",
            "--inputs",
            str(feeds),
            "--iterations",
            "1",
            "--warmup",
            "0",
        ]
    )
    assert lossy == 0  # one engine: nothing to be outside of


def test_within_and_threads() -> None:
    from xpuruntime.cli.compare import _exec_policy, within

    ref = np.array([1.0, 2.0, np.nan], dtype=np.float32)
    assert within(ref + np.array([1e-4, 0, 0], dtype=np.float32), ref, 1e-3, 0)
    assert not within(ref + np.array([1e-2, 0, 0], dtype=np.float32), ref, 1e-3, 1e-3)
    assert not within(np.array([1.0, 2.0, 0.0]), ref, 1.0, 1.0)  # NaN positions differ
    assert not within(np.zeros(2), np.zeros(3), 1, 1)
    assert _exec_policy(None, 3).threads == 3 and _exec_policy(None, None) is None
