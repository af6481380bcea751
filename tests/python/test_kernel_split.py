"""One kernel name, split by device (issue 14): a native kernel (the CUDA plugin's
flash_v2 / fused KernelDefs) and the torch bridge's requested_only definition of the
same name (its CPU reference) stay one registry entry; each case goes to the part
that runs on its device, and the native engine never gets the bridge part."""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import _core

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _register(reg, device: str, requested_only: bool, supports=None, dtypes=None, replace=False, more=()):
    reg.register_python_kernel(
        "layernorm",
        "k",
        lambda *a, **kw: None,
        supports,
        device=device,
        dtypes=dtypes,
        numpy_io=False,
        requested_only=requested_only,
        replace=replace,
        more_devices=list(more),
    )


def _ctx(dtype: str, device: str):
    return _core.OpContext(
        "layernorm", [(dtype, [2, 8])], device=device, capability=90 if device == "cuda" else 0
    )


def test_a_native_and_a_bridge_kernel_of_one_name_split_by_device():
    reg = _core.KernelRegistry()
    _register(reg, "cuda", False, dtypes=["float16"])  # the plugin's def: CUDA, float16 only
    seen = []

    def bridge_supports(ctx):
        seen.append(ctx.device)
        return True

    _register(reg, "cpu", True, supports=bridge_supports)  # the bridge's CPU reference
    listed = sorted((tuple(d["devices"]), d["requested_only"]) for d in reg.list("layernorm"))
    assert listed == [(("cpu",), True), (("cuda",), False)]
    assert [d["devices"] for d in reg.list("layernorm", device="cpu")] == [["cpu"]]
    # Each case is checked by the part of its device, with that part's metadata.
    assert reg.check("layernorm", "k", _ctx("float64", "cpu"))[0] is True
    assert len(seen) == 1
    ok, code, _ = reg.check("layernorm", "k", _ctx("float64", "cuda"))
    assert (ok, code) == (False, "dtype_unsupported")
    assert reg.check("layernorm", "k", _ctx("float16", "cuda"))[0] is True
    assert len(seen) == 1  # the CUDA case never asked the bridge


def test_a_split_part_is_replaced_only_on_request():
    reg = _core.KernelRegistry()
    _register(reg, "cuda", False)
    _register(reg, "cpu", True, supports=lambda ctx: (False, "backend_unavailable", "first"))
    with pytest.raises(xrt.InvalidArgumentError, match="already has a kernel named 'k'"):
        _register(reg, "cpu", True)
    _register(reg, "cpu", True, supports=lambda ctx: (False, "shape_unsupported", "second"), replace=True)
    assert reg.check("layernorm", "k", _ctx("float32", "cpu"))[1:] == ("shape_unsupported", "second")
    assert len(reg.list("layernorm")) == 2
    # A kernel on devices a part already covers is no part: it needs replace, and replaces all.
    with pytest.raises(xrt.InvalidArgumentError, match="already has a kernel named 'k'"):
        _register(reg, "cpu", False, more=("cuda",))
    _register(reg, "cpu", False, more=("cuda",), replace=True)
    assert [d["devices"] for d in reg.list("layernorm")] == [["cpu", "cuda"]]
    with pytest.raises(xrt.InvalidArgumentError, match="on the same devices"):
        _register(reg, "cuda", True)
    assert reg.unregister("layernorm", "k") and reg.list("layernorm") == []


def test_routed_cpu_calls_run_the_reference_and_the_native_engine_keeps_its_cpu_kernel():
    import xpuruntime.pytorch as xt
    from onnx import TensorProto, helper, numpy_helper

    xt.clear_kernel_policy()
    xt.clear_decision_log()
    try:
        xt.set_kernel_policy(attention="flash_v2", layernorm="fused")
        x = torch.randn(3, 8, dtype=torch.float64)
        assert torch.allclose(F.layer_norm(x, (8,)), torch.nn.functional.layer_norm(x, (8,)), atol=1e-12)
        routed = {d.op: d for d in xt.decision_log()}
        assert (routed["layernorm"].chosen, routed["layernorm"].rule) == ("fused", "policy.prefer")
        # Whatever the plugin registered for CUDA, the name runs on the CPU through the bridge.
        devices = {
            dev for d in xrt.kernels.list_kernels("layernorm") if d.name == "fused" for dev in d.devices
        }
        assert "cpu" in devices

        g = helper.make_graph(
            [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln0", epsilon=1e-5)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
            [
                numpy_helper.from_array(np.full(8, 1.5, np.float32), "s"),
                numpy_helper.from_array(np.full(8, 0.25, np.float32), "b"),
            ],
        )
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        policy = xrt.KernelPolicy(layernorm="fused")
        sess = xrt.InferenceSession(model, device="cpu", engine="native", kernel_policy=policy)
        a = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
        y = sess.run({"x": a})["y"]
        a64 = a.astype(np.float64)
        ref = (a64 - a64.mean(-1, keepdims=True)) / np.sqrt(a64.var(-1, keepdims=True) + 1e-5) * 1.5 + 0.25
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
        native = [d for d in xrt.dispatch.explain() if d.node == "ln0"]
        assert native and native[-1].chosen != "fused"
        assert native[-1].candidate("fused").verdict == "rejected"
    finally:
        xt.clear_kernel_policy()
