"""TensorRT adapter on a CUDA device: build, correctness, the engine cache across
builds (hit, corruption → rebuild with the reason), device-pointer inputs.

Skips with the reason where TensorRT or a GPU is missing (the cache itself is
covered without TensorRT in test_trt_cache.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from engine_testlib import assert_close_to, build, exec_policy, tiny_mlp, tiny_mlp_reference
from xpuruntime.engines import registry

AV = registry.availability("tensorrt")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not AV.available, reason=f"TensorRT not usable here: {AV.reason}"),
]


def test_build_run_and_cache_hit(tmp_path: Path) -> None:
    model = tiny_mlp()
    opts = {"cache_dir": str(tmp_path), "input_shapes": {"x": [4, 16]}, "progress": False}
    eng = build("tensorrt", model, device="cuda", policy=exec_policy(), **opts)
    first = next(d for d in eng.decisions() if d.op == "engine.cache")
    assert first.rule == "cache.miss"
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    y = eng.run({"x": x})["y"]
    assert_close_to(
        y, tiny_mlp_reference(model, x), "tensorrt fp32 (TF32 off)", rtol=1e-4, atol_fraction=1e-5
    )
    again = build("tensorrt", model, device="cuda", policy=exec_policy(), **opts)
    assert next(d for d in again.decisions() if d.op == "engine.cache").rule == "cache.hit"
    np.testing.assert_array_equal(again.run({"x": x})["y"], y)  # same engine, same bits


def test_corrupt_cache_is_rebuilt_with_the_reason(tmp_path: Path) -> None:
    model = tiny_mlp()
    opts = {"cache_dir": str(tmp_path), "input_shapes": {"x": [2, 16]}, "progress": False}
    eng = build("tensorrt", model, device="cuda", policy=exec_policy(), **opts)
    payload = next(Path(tmp_path).rglob("*.engine"))
    raw = bytearray(payload.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    payload.write_bytes(bytes(raw))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = build("tensorrt", model, device="cuda", policy=exec_policy(), **opts)
    assert any("SHA-256" in str(w.message) for w in caught)
    assert next(d for d in rebuilt.decisions() if d.op == "engine.cache").rule == "cache.corrupt"
    assert eng.cache_key == rebuilt.cache_key


def test_fp16_and_device_inputs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA: no device tensors to pass")
    model = tiny_mlp()
    eng = build(
        "tensorrt",
        model,
        device="cuda",
        policy=exec_policy(precision="fp16"),
        cache_dir=str(tmp_path),
        input_shapes={"x": [8, 16]},
        progress=False,
    )
    x = torch.randn(8, 16, device="cuda")
    out = eng.run({"x": x})["y"]  # bound by pointer: a device output comes back
    y = torch.as_tensor(out, device="cuda").cpu().numpy()
    ref = tiny_mlp_reference(model, x.cpu().numpy())
    assert np.abs(y - ref).max() < 2e-2 * np.abs(ref).max()
