"""The native engine and CUDA, as far as a machine without a usable CUDA device sees it
(issue 15): every request for CUDA is a typed error that says WHY CUDA is unavailable
(the DeviceManager's reason), engine="auto" never ranks native for CUDA here, and a
saved plan is run on the device its header names. The GPU side is
tests/gpu/test_native_cuda_gpu.py.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines import registry
from xpuruntime.engines.base import EngineOptions
from xpuruntime.engines.native import engine as native_engine
from xpuruntime.engines.native.onnx_backend import NativeBackend

CUDA_USABLE = "cuda" in native_engine.devices()
no_cuda = pytest.mark.skipif(CUDA_USABLE, reason="the native engine runs on CUDA here (see tests/gpu)")


def _why() -> str:
    """The DeviceManager's reason (or the provider registry's) that CUDA is unusable."""
    return native_engine.unavailable_reason("cuda")


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
            helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
            helper.make_node("Relu", ["hb"], ["y"], name="relu"),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        [w, b],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _patch_plan(data: bytes, **fields: object) -> bytes:
    """The plan bytes with header fields replaced (the constants blob kept, 64-aligned)."""
    # Container XRTPLAN3: magic, header length, two SHA-256 digests, then the header.
    hl = int.from_bytes(data[8:16], "little")
    header = json.loads(data[144 : 144 + hl])
    header.update(fields)
    blob = data[(144 + hl + 63) // 64 * 64 :]
    new = json.dumps(header).encode()
    out = data[:8] + len(new).to_bytes(8, "little") + data[16:144] + new
    out += b"\0" * ((-len(out)) % 64)
    # Resealed: the loader then checks the edited fields, not the checksum.
    return xrt._core.graph.seal_plan(out + blob)


def _cpu_plan(tmp_path) -> tuple[bytes, xrt.InferenceSession]:  # type: ignore[no-untyped-def]
    sess = xrt.InferenceSession(mlp().SerializeToString(), device="cpu", engine="native")
    sess.save_plan(tmp_path / "p.xrtplan")
    return (tmp_path / "p.xrtplan").read_bytes(), sess


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_native_on_cuda_without_a_device_says_why(device: str) -> None:
    why = _why()
    assert why, "the engine reports CUDA unusable, so it must say why"
    with pytest.raises(xrt.BackendUnavailableError) as err:
        xrt.InferenceSession(mlp().SerializeToString(), engine="native", device=device)
    msg = str(err.value)
    assert "native@cuda" in msg and why in msg, msg
    # The DeviceManager's own words are part of it (plugin missing, no driver, no GPU).
    dm_reason = xrt.runtime.device.cuda_unavailable_reason()
    if dm_reason:
        assert dm_reason in msg, msg


@no_cuda
def test_availability_and_supports_name_the_cuda_reason() -> None:
    av = registry.availability("native", refresh=True)
    assert av.available and "cuda" not in av.devices and "cpu" in av.devices
    assert f"cuda: {_why()}" in av.reason
    code, detail = native_engine.NativeEngine.supports("cuda:0", None)
    assert code == "device_unavailable" and _why() in detail
    assert native_engine.NativeEngine.supports("cpu", None) is None


@no_cuda
def test_auto_engine_on_cuda_does_not_rank_native_here() -> None:
    assert "native" not in registry.AUTO_ORDER["cuda"]
    with pytest.raises((xrt.BackendUnavailableError, xrt.UnsupportedOperationError)) as err:
        xrt.InferenceSession(mlp().SerializeToString(), engine="auto", device="cuda")
    assert "native@cuda" not in str(err.value)
    # allow_fallback='cpu': the CPU choice is recorded with the rule and why.
    policy = xrt.ExecutionPolicy(allow_fallback="cpu")
    sess = xrt.InferenceSession(mlp().SerializeToString(), engine="native", device="cuda", exec_policy=policy)
    first = sess.explain()[0]
    assert sess.device == "cpu" and first.chosen == "native@cpu" and first.rule == "fallback"
    assert any(c.kernel == "native@cuda" and c.reason_code == "device_unavailable" for c in first.candidates)


@no_cuda
def test_direct_engine_on_cuda_is_a_typed_error() -> None:
    with pytest.raises(xrt.BackendUnavailableError, match="cannot run on cuda:0") as err:
        native_engine.NativeEngine(mlp(), EngineOptions("cuda:0"))
    assert _why() in str(err.value)


@no_cuda
def test_cuda_plan_loads_as_unavailable_with_the_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, _ = _cpu_plan(tmp_path)
    cuda_plan = _patch_plan(data, device="cuda")
    assert native_engine.plan_device(cuda_plan) == "cuda"
    (tmp_path / "c.xrtplan").write_bytes(cuda_plan)
    assert native_engine.plan_device(tmp_path / "c.xrtplan") == "cuda"
    for source in (cuda_plan, tmp_path / "c.xrtplan", str(tmp_path / "c.xrtplan")):
        with pytest.raises(xrt.BackendUnavailableError, match="compiled for device 'cuda'") as err:
            xrt.InferenceSession.load_plan(source)
        assert _why() in str(err.value)


def test_saved_plan_runs_on_its_own_device(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data, sess = _cpu_plan(tmp_path)
    assert native_engine.plan_device(data) == "cpu"
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    want = sess.run({"x": x})["y"]
    loaded = xrt.InferenceSession.load_plan(data)
    assert loaded.device == "cpu" and loaded.plan.device == "cpu"
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], want)
    # A device no provider is named after is refused by the plan loader, naming it.
    with pytest.raises(xrt.InvalidModelError, match="compiled for device 'tpu'"):
        xrt.InferenceSession.load_plan(_patch_plan(data, device="tpu"))
    if CUDA_USABLE:
        return  # the header-patched plan below would load (tests/gpu covers CUDA plans)
    # Reading a plan for a device without a provider fails in the loader, typed.
    with pytest.raises((xrt.BackendUnavailableError, xrt.UnsupportedOperationError), match="'cuda'"):
        xrt._core.graph.ExecutionPlan.deserialize(_patch_plan(data, device="cuda"))


@pytest.mark.parametrize(
    "garbage", [b"", b"XRTPLAN", b"XRTPLAN1" + (10**9).to_bytes(8, "little"), b"nope" * 9]
)
def test_plan_device_of_garbage_is_none(garbage: bytes) -> None:
    assert native_engine.plan_device(garbage) is None


def test_cuda_provider_without_a_device_uses_the_device_managers_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A build with the CUDA plugin registers the CUDA provider even without a GPU:
    # the reason is then the DeviceManager's, not "no provider".
    if xrt.get_device_count() > 0:
        pytest.skip("a CUDA device is present")
    monkeypatch.setattr(native_engine, "_providers", lambda: ("cpu", "cuda"))
    dm_reason = xrt.runtime.device.cuda_unavailable_reason() or "no CUDA device was found"
    assert native_engine.unavailable_reason("cuda") == dm_reason
    assert native_engine.devices() == ("cpu",)
    code, detail = native_engine.NativeEngine.supports("cuda", None)
    assert code == "device_unavailable" and dm_reason in detail


def test_unknown_kinds_and_other_precisions_are_refused() -> None:
    kinds = ", ".join(sorted(xrt._core.device_kinds(), key=lambda k: k != "cpu"))  # the plugin table's
    assert f"runs on {kinds} only" in native_engine.unavailable_reason("npu")
    assert native_engine.NativeEngine.supports("npu", None)[0] == "device_unavailable"
    fp16 = xrt.ExecutionPolicy(precision="fp16")
    assert native_engine.NativeEngine.supports("cpu", fp16)[0] == xrt._core.reason.DTYPE_UNSUPPORTED


def test_onnx_backend_devices() -> None:
    assert NativeBackend.supports_device("CPU")
    assert NativeBackend.supports_device("CUDA") == CUDA_USABLE
    assert NativeBackend.supports_device("CUDA:0") == CUDA_USABLE
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    (y,) = NativeBackend.run_model(mlp(), [x], device="CPU")
    w = numpy_helper.to_array(mlp().graph.initializer[0]).astype(np.float64)
    b = numpy_helper.to_array(mlp().graph.initializer[1]).astype(np.float64)
    np.testing.assert_allclose(y, np.maximum(x.astype(np.float64) @ w + b, 0), rtol=1e-5, atol=1e-6)
