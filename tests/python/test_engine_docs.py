"""docs/ops.md is generated from the kernel registry and must stay in sync."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gen():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_ops_doc", ROOT / "scripts" / "gen_ops_doc.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ops_doc_matches_the_registry() -> None:
    pytest.importorskip("onnx")
    text = _gen().render()
    committed = (ROOT / "docs" / "ops.md").read_text()
    assert committed == text, "docs/ops.md is stale: run python scripts/gen_ops_doc.py"


def test_ops_doc_lists_the_required_ops() -> None:
    pytest.importorskip("onnx")
    text = _gen().render()
    required = [
        "Conv",
        "BatchNormalization",
        "Gemm",
        "MatMul",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Sqrt",
        "Exp",
        "Log",
        "Erf",
        "Tanh",
        "Sigmoid",
        "Relu",
        "HardSigmoid",
        "HardSwish",
        "Gelu",
        "Neg",
        "Abs",
        "Reciprocal",
        "Where",
        "Equal",
        "Less",
        "Greater",
        "Not",
        "And",
        "Or",
        "Min",
        "Max",
        "Softmax",
        "LayerNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "Flatten",
        "Reshape",
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "Unsqueeze",
        "Squeeze",
        "Expand",
        "Shape",
        "Cast",
        "ConstantOfShape",
        "Constant",
        "Range",
        "Pad",
        "Clip",
        "Identity",
        "Dropout",
        "Trilu",
        "CumSum",
        "Tile",
    ]
    for op in required:
        assert f"| {op} |" in text, op
