"""docs/ops_cuda.md (every CPU op with its CUDA kernels and dtypes) matches the kernel
registry with the CUDA plugin loaded; regenerate with scripts/gen_ops_cuda_doc.py.
Skips where the build has no CUDA plugin (the plugin registers its kernels without a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from xpuruntime import _core

ROOT = Path(__file__).resolve().parents[2]


def _gen():
    spec = importlib.util.spec_from_file_location(
        "gen_ops_cuda_doc", ROOT / "scripts" / "gen_ops_cuda_doc.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _plugin_loaded() -> bool:
    _core.DeviceManager.instance().get_device_count()  # loads the device plugins once
    return any(s.get("name") == "cuda" and s.get("loaded") for s in _core.plugin_statuses())


def _has_cudnn() -> bool:
    from xpuruntime.kernels import list_kernels

    return any(k.name == "cudnn" for k in list_kernels("conv", "cuda"))


@pytest.mark.skipif(not _plugin_loaded(), reason="this build has no loadable CUDA plugin")
def test_ops_cuda_doc_matches_the_registry() -> None:
    if not _has_cudnn():
        pytest.skip("this build's CUDA plugin has no cuDNN (Conv); docs/ops_cuda.md is generated with it")
    text = _gen().render()
    assert (ROOT / "docs" / "ops_cuda.md").read_text() == text, "run python scripts/gen_ops_cuda_doc.py"
    # The core ops of every model family have a CUDA kernel taking the 16-bit floats.
    for op in ("MatMul", "Gemm", "Conv", "LayerNormalization", "Softmax", "Add", "Gather", "Transpose"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {op} |"))
        assert "CPU only" not in row and ("float16" in row or "| any |" in row), row
