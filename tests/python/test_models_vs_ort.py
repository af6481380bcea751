"""Whole models through the native engine against ONNX Runtime's CPU provider (fp32).

Models (random weights, fixed seeds; architectures from tests/python/model_zoo.py):
ResNet-18 (64×64 input, 100 classes), MobileNetV3-Small (64×64, 100 classes), a ViT
(32×32, patch 8, 2 layers, 2 heads, hidden 64, MLP 128), BERT (2 layers, hidden 64,
2 heads, intermediate 128, vocab 1000, seq 16, padded attention mask) and GPT-2
(2 layers, n_embd 64, 2 heads, vocab 1000, seq 16). Each is exported by
``torch.onnx.export(..., dynamo=False)`` inside the test at opsets 17 and 18 with
dynamic batch (and sequence) axes, then run at batch 2 on fresh random inputs.
Bar: max |native - ort| / max |ort| <= 1e-4.
"""

from __future__ import annotations

import gc
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).parent))
import model_zoo
import xpuruntime as xrt


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions (and their arenas) before other modules run, so
    allocator-statistics tests elsewhere never see them released mid-test."""
    yield
    gc.collect()


REL_TOL = 1e-4
OPSETS = (17, 18)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Exports each (model, opset) once per module run."""
    cache: dict[tuple[str, int], Path] = {}
    root = tmp_path_factory.mktemp("models")

    def get(name: str, opset: int) -> Path:
        key = (name, opset)
        if key not in cache:
            spec = model_zoo.ZOO[name]
            module = model_zoo.torch_module(name)
            example = spec.inputs(np.random.default_rng(0), 1)
            path = root / f"{name}_opset{opset}.onnx"
            fast = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)  # the fused MHA path has no export
            try:
                with warnings.catch_warnings(), torch.no_grad():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(
                        module,
                        tuple(torch.from_numpy(example[n]) for n in spec.input_names),
                        str(path),
                        dynamo=False,
                        opset_version=opset,
                        input_names=list(spec.input_names),
                        output_names=list(spec.output_names),
                        dynamic_axes=spec.dynamic_axes,
                    )
            finally:
                torch.backends.mha.set_fastpath_enabled(fast)
            cache[key] = path
        return cache[key]

    return get


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", model_zoo.MODELS)
def test_matches_onnxruntime(exported, name: str, opset: int) -> None:  # type: ignore[no-untyped-def]
    path = exported(name, opset)
    spec = model_zoo.ZOO[name]
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native")
    ref_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in (1, 2):
        feeds = spec.inputs(np.random.default_rng(seed), 2)
        ours = sess.run(feeds)
        ref = dict(zip([o.name for o in ref_sess.get_outputs()], ref_sess.run(None, feeds)))
        for out_name in spec.output_names:
            a, b = ours[out_name], ref[out_name]
            assert a.shape == b.shape and a.dtype == b.dtype
            rel = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
            assert rel <= REL_TOL, f"{name} opset {opset}: relative error {rel:.3g} > {REL_TOL}"
    # Every node went through the dispatcher and is in the plan's decisions.
    assert len(sess.plan.decisions) >= len(sess.plan.steps)
