"""ONNX Runtime's CUDA provider through the adapter: policy mappings read back,
placement, fp16, device tensors in and out, CUDA-graph replay.

Skips with the reason unless onnxruntime-gpu and a CUDA device are present."""

from __future__ import annotations

import numpy as np
import pytest
from engine_testlib import assert_close_to, build, exec_policy, tiny_mlp, tiny_mlp_reference
from xpuruntime.engines import registry

AV = registry.availability("onnxruntime")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        "cuda" not in AV.devices, reason=f"onnxruntime has no usable CUDA provider here: {AV.reason}"
    ),
]


def test_mappings_are_read_back_from_the_cuda_provider() -> None:
    eng = build(
        "onnxruntime", tiny_mlp(), device="cuda", policy=exec_policy(deterministic=True, cuda_graph=False)
    )
    opts = eng.session.get_provider_options()["CUDAExecutionProvider"]
    assert opts["cudnn_conv_algo_search"] == "DEFAULT"  # deterministic → a fixed algorithm
    assert opts["use_tf32"] == "0" and opts["enable_cuda_graph"] == "0"
    placed = {
        d.node: d.chosen for d in eng.decisions() if d.op in ("MatMul", "Add", "Relu", "Gemm", "FusedMatMul")
    }
    assert placed and set(placed.values()) == {"CUDAExecutionProvider"}
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    y = eng.run({"x": x})["y"]  # host in → host out
    assert isinstance(y, np.ndarray)
    assert_close_to(
        y, tiny_mlp_reference(tiny_mlp(), x), "ort cuda fp32 (TF32 off)", rtol=1e-4, atol_fraction=1e-5
    )


def test_fp16_conversion_runs_on_cuda() -> None:
    model = tiny_mlp()
    eng = build("onnxruntime", model, device="cuda", policy=exec_policy(precision="fp16"))
    assert any(d.chosen.startswith("model_conversion=float16") for d in eng.decisions())
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    ref = tiny_mlp_reference(model, x)
    assert np.abs(eng.run({"x": x})["y"] - ref).max() < 2e-2 * np.abs(ref).max()


def test_device_tensors_stay_on_the_device() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    model = tiny_mlp()
    eng = build("onnxruntime", model, device="cuda")
    x = torch.randn(3, 16, device="cuda")
    out = eng.run({"x": x})["y"]
    assert "cuda" in out.device_name().lower()
    y = torch.from_dlpack(out).cpu().numpy()
    assert_close_to(
        y, tiny_mlp_reference(model, x.cpu().numpy()), "ort cuda dlpack", rtol=1e-4, atol_fraction=1e-5
    )


def test_cuda_graph_replays_with_new_inputs() -> None:
    model = tiny_mlp(batch=4)
    eng = build("onnxruntime", model, device="cuda", policy=exec_policy(cuda_graph=True, static_shape=True))
    assert eng.session.get_provider_options()["CUDAExecutionProvider"]["enable_cuda_graph"] == "1"
    rng = np.random.default_rng(2)
    for _ in range(3):  # capture, then replays reading the same buffers with new contents
        x = rng.standard_normal((4, 16)).astype(np.float32)
        assert_close_to(
            eng.run({"x": x})["y"],
            tiny_mlp_reference(model, x),
            "ort cuda graph",
            rtol=1e-4,
            atol_fraction=1e-5,
        )
