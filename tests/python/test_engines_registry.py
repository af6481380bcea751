"""The engine registry: names, availability, and the deterministic engine/device choice."""

from __future__ import annotations

import platform

import pytest
import xpuruntime as xrt
from engine_testlib import exec_policy
from xpuruntime.engines import registry


def _has(engine: str, device: str) -> bool:
    av = registry.availability(engine)
    return av.available and device in av.devices and device not in av.simulated


# ------------------------------------------------------------------ names
@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("onnxrt", "onnxruntime"),
        ("ORT", "onnxruntime"),
        ("ov", "openvino"),
        ("trt", "tensorrt"),
        ("OpenVINO", "openvino"),
        ("qnn", "qnn"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert registry.canonical_name(alias) == name


def test_every_engine_is_listed() -> None:
    assert set(registry.list_engines()) >= {"native", "onnxruntime", "openvino", "tensorrt", "qnn"}


def test_unknown_engine_lists_the_valid_ones() -> None:
    with pytest.raises(xrt.InvalidArgumentError, match=r"unknown engine 'onnxrun'.*onnxruntime.*openvino"):
        registry.canonical_name("onnxrun")
    with pytest.raises(xrt.InvalidArgumentError):
        registry.select_engine("tensorflow", "cpu", None)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "cuda:-1", ""])
def test_bad_device_strings(device: str) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="device"):
        registry.select_engine("onnxruntime", device or "gpu:", None)


def test_availability_reports_reason_and_hint() -> None:
    for name, av in registry.engine_table():
        if not av.available:
            assert av.reason, f"{name} is unavailable without a reason"
            assert av.install_hint.startswith(("pip install xpuruntime[", "reinstall")), (name, av)
    ort = registry.availability("onnxruntime")
    assert ort.available and "cpu" in ort.devices
    assert registry.availability("openvino").install_hint == "pip install xpuruntime[openvino]"


def test_missing_adapter_module_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._specs, "phantom", "xpuruntime.engines.does_not_exist:Phantom")
    av = registry.availability("phantom", refresh=True)
    assert not av.available and "could not be loaded" in av.reason
    with pytest.raises(xrt.BackendUnavailableError, match="phantom"):
        registry.get_engine_class("phantom")
    registry._avail_cache.pop("phantom", None)


# ------------------------------------------------------------------ selection
def test_auto_on_cpu_is_deterministic_and_recorded() -> None:
    results = [registry.select_engine("auto", "cpu", None) for _ in range(3)]
    assert len({(cls.name, dev) for cls, dev, _ in results}) == 1
    cls, dev, decisions = results[0]
    expected = next(n for n in registry.AUTO_ORDER["cpu"] if _has(n, "cpu"))
    assert (cls.name, dev) == (expected, "cpu")
    (d,) = decisions
    assert d.op == "engine" and d.rule == "auto.first_available" and d.chosen == f"{expected}@cpu"
    tried = [c.kernel for c in d.candidates]
    assert tried == [f"{n}@cpu" for n in registry.AUTO_ORDER["cpu"][: tried.index(d.chosen) + 1]]
    assert all(c.verdict == "rejected" and c.reason_code for c in d.candidates[:-1])


def test_named_engine_rule() -> None:
    cls, dev, (d,) = registry.select_engine("ort", "cpu", None)
    assert cls.name == "onnxruntime" and dev == "cpu" and d.rule == "policy.engine"


def test_policy_engine_and_target_are_used() -> None:
    cls, dev, (d,) = registry.select_engine(None, None, exec_policy(engine="openvino", target="cpu"))
    assert (cls.name, dev, d.rule) == ("openvino", "cpu", "policy.engine")


def test_conflicting_requests_raise() -> None:
    with pytest.raises(xrt.PolicyError, match="conflicts"):
        registry.select_engine("onnxruntime", "cpu", exec_policy(engine="openvino"))
    with pytest.raises(xrt.PolicyError, match="conflicts"):
        registry.select_engine("onnxruntime", "cuda", exec_policy(target="cpu"))


@pytest.mark.skipif(_has("openvino", "npu"), reason="this machine has an OpenVINO NPU")
def test_npu_without_npu_raises_unless_fallback_allowed() -> None:
    with pytest.raises(xrt.BackendUnavailableError) as info:
        registry.select_engine("openvino", "npu", exec_policy())
    text = str(info.value)
    assert "openvino@npu: device_unavailable" in text and "allow_fallback='cpu'" in text

    cls, dev, (d,) = registry.select_engine("openvino", "npu", exec_policy(allow_fallback="cpu"))
    assert (cls.name, dev, d.rule, d.chosen) == ("openvino", "cpu", "fallback", "openvino@cpu")
    assert [(c.kernel, c.verdict) for c in d.candidates] == [
        ("openvino@npu", "rejected"),
        ("openvino@cpu", "supported"),
    ]
    assert "allow_fallback='cpu'" in d.detail


@pytest.mark.skipif(_has("openvino", "npu"), reason="this machine has an OpenVINO NPU")
def test_strict_no_fallback_wins_over_allow_fallback() -> None:
    try:
        policy = exec_policy(allow_fallback="cpu", strict=["no_fallback"])
    except xrt.PolicyError:
        return  # the policy itself refuses the contradiction: also a build-time failure
    with pytest.raises(xrt.BackendUnavailableError, match="strict_no_fallback"):
        registry.select_engine("openvino", "npu", policy)


def test_auto_device_prefers_accelerators_then_cpu() -> None:
    _cls, dev, (d,) = registry.select_engine("auto", "auto", None)
    kinds = [k for k in registry.AUTO_DEVICE_ORDER if any(_has(n, k) for n in registry.AUTO_ORDER[k])]
    assert dev.split(":")[0] == kinds[0]
    assert d.rule == "auto.first_available"


@pytest.mark.skipif(platform.machine().lower() in ("aarch64", "arm64"), reason="HTP is real hardware on ARM")
def test_simulated_npu_is_never_chosen_automatically() -> None:
    av = registry.availability("qnn")
    if not av.available or "npu" not in av.simulated:
        pytest.skip(f"onnxruntime-qnn HTP simulator not here: {av.reason}")
    policy = exec_policy(precision="int8", static_shape=True)
    if not _has("openvino", "npu"):
        with pytest.raises(xrt.BackendUnavailableError, match="qnn@npu: simulated_device"):
            registry.select_engine("auto", "npu", policy)
    cls, dev, _ = registry.select_engine("qnn", "npu", policy)
    assert (cls.name, dev) == ("qnn", "npu")


def test_precision_refusals_are_unsupported_not_unavailable() -> None:
    policy = exec_policy(precision="fp16")
    usable = [n for n in registry.AUTO_ORDER["cpu"] if _has(n, "cpu")]
    accepting = [n for n in usable if registry.get_engine_class(n).supports("cpu", policy) is None]
    if accepting:
        cls, _, (d,) = registry.select_engine("auto", "cpu", policy)
        assert cls.name == accepting[0]
        for name in usable[: usable.index(accepting[0])]:
            assert d.candidate(f"{name}@cpu").reason_code == "dtype_unsupported"
        return
    with pytest.raises(xrt.UnsupportedOperationError) as info:
        registry.select_engine("auto", "cpu", policy)
    for name in usable:
        assert f"{name}@cpu: dtype_unsupported" in str(info.value)
