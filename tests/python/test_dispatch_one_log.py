"""One selector, one log (issue 14): routed torch calls ask the C++ Dispatcher and land
in the log inference writes to; the Dispatcher's caller options (runnable kernels,
the fallback kernel, caller-measured timings, hit counts) behave as documented; the
names are C++'s; no Python module keeps a rule ladder of its own.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import _core

PKG = pathlib.Path(xrt.__file__).parent


# ---- the Dispatcher's caller options, on a private registry ---------------------------------
def _env():
    reg = _core.KernelRegistry()
    disp = _core.Dispatcher(reg)
    for name, prio in (("fast", 30), ("slow", 20), ("own", -100)):
        reg.register_python_kernel(
            "softmax",
            name,
            lambda x: x,
            None,
            device="cpu",
            priority=prio,
            numpy_io=True,
            requested_only=True,
        )
    reg.register_python_kernel("softmax", "engine_k", lambda x: x, None, device="cpu", priority=90)
    return reg, disp


def _ctx(shape=(4, 8)):
    return _core.OpContext("softmax", [("float32", list(shape))], device="cpu", node="n")


def test_runnable_limits_candidates_and_requested_only_hides_kernels():
    _, d = _env()
    plain = d.select(_ctx(), _core.KernelPolicy())
    assert [c.kernel for c in plain.candidates] == ["engine_k"]  # requested_only kernels stay out
    routed = d.select(_ctx(), _core.KernelPolicy(), runnable=["fast", "slow", "own", "absent"])
    assert [c.kernel for c in routed.candidates] == ["fast", "slow", "own", "absent"]
    assert routed.chosen == "fast" and routed.rule == "auto.first_supported"
    absent = routed.candidate("absent")
    assert absent.verdict == "rejected" and absent.reason_code == _core.reason.BACKEND_UNAVAILABLE


def test_fallback_kernel_is_what_the_fallback_rule_takes():
    reg, d = _env()
    reg.register_python_kernel(
        "softmax",
        "picky",
        lambda x: x,
        lambda ctx: (False, "shape_unsupported", "never"),
        device="cpu",
        requested_only=True,
    )
    policy = _core.KernelPolicy(softmax="picky")
    plain = d.select(_ctx(), policy, runnable=["picky", "fast", "own"])
    assert (plain.chosen, plain.rule) == ("fast", "fallback")  # highest priority without a fallback kernel
    routed = d.select(_ctx(), policy, runnable=["picky", "fast", "own"], fallback_kernel="own")
    assert (routed.chosen, routed.rule) == ("own", "fallback")
    assert routed.candidate("picky").reason_code == "shape_unsupported"  # the 3-tuple's code is kept
    required = _core.KernelPolicy(softmax="picky")
    required.mode = "require"
    with pytest.raises(xrt.UnsupportedOperationError, match=r"softmax.*picky.*shape_unsupported.*never"):
        d.select(_ctx(), required, runnable=["picky", "fast", "own"], fallback_kernel="own")


def test_caller_timings_choose_under_best_performance_and_become_pins():
    _, d = _env()
    policy = _core.KernelPolicy()
    policy.auto_strategy_name = "best_performance"
    run = {"runnable": ["fast", "slow", "own"]}
    preview = d.select(_ctx(), policy, record=False, **run)
    assert preview.rule == "auto.first_supported" and preview.seq == 0
    assert d.total_recorded == 0  # record=False leaves the log alone
    timed = d.select(_ctx(), policy, timings={"fast": 2.0, "slow": 0.5, "own": 3.0}, **run)
    assert (timed.chosen, timed.rule) == ("slow", "auto.best_performance")
    assert timed.timings == {"fast": 2.0, "slow": 0.5, "own": 3.0}
    assert timed.candidate("slow").time_ms == 0.5
    pins = d.export_pins(policy).pins
    assert pins[timed.key]["kernel"] == "slow"
    failed = d.select(_ctx((2, 2)), policy, timings={"fast": 1.0}, failures={"slow": "boom"}, **run)
    assert failed.chosen == "fast" and failed.candidate("slow").reason_code == _core.reason.RUN_FAILED
    skipped = d.select(_ctx((3, 3)), policy, untimed_reason="CPU tensors", **run)
    assert skipped.rule == "auto.first_supported" and "timing skipped (CPU tensors)" in skipped.detail


def test_hits_count_calls_of_one_recorded_case_and_record_appends():
    _, d = _env()
    first = d.select(_ctx(), _core.KernelPolicy(), note="precision_hint=bf16")
    assert first.hits == 1 and first.detail.startswith("precision_hint=bf16")
    assert d.add_hits(first.seq, 4)
    assert not d.add_hits(first.seq + 100, 1)  # not in the log
    (again,) = [x for x in d.explain() if x.seq == first.seq]
    assert again.hits == 5 and again.to_dict()["hits"] == 5
    assert "calls: 5" in str(again) and xrt.dispatch.Decision.from_dict(again.to_dict()).hits == 5
    made = xrt.dispatch.Decision("softmax", "cpu", ["float32"], [[1]], [], "own", "fallback", hits=2)
    seq = d.record(made)
    (stored,) = [x for x in d.explain() if x.seq == seq]
    assert (stored.chosen, stored.rule, stored.hits) == ("own", "fallback", 2)


def test_names_come_from_core():
    assert xrt.dispatch.RULES == tuple(_core.RULES)
    assert "policy.require" in _core.RULES and _core.rule.POLICY_REQUIRE == "policy.require"
    assert _core.reason.DEVICE_MISMATCH == "device_mismatch" and "run_failed" in xrt.dispatch.REASON_CODES
    assert _core.KernelRegistry.canonical_op_for_alias("sdpa") == "attention"
    assert _core.policy_util.op_aliases()["layer_norm"] == "layernorm"
    canonical = _core.policy_util.canonical_ops()
    assert "matmul" in canonical and "attention" in canonical
    with pytest.raises(xrt.InvalidArgumentError, match="canonical keys: " + ", ".join(canonical)):
        xrt.kernels.register("matmull", "k", lambda a: a)


# ---- routed torch calls and inference in one log -----------------------------------------------
torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.fixture
def xrt_torch():
    import xpuruntime.pytorch as xt

    xt.clear_kernel_policy()
    xt.clear_decision_log()
    xrt.dispatch.clear_log()
    yield xt
    xt.clear_kernel_policy()
    xt.clear_decision_log()


def _tiny_model():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm0")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_torch_calls_and_an_inference_session_share_one_log(xrt_torch):
    xrt_torch.set_kernel_policy(matmul="cublasLt", attention="flash_v2", layernorm="fused")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    x = torch.randn(3, 8, generator=g)
    lin = torch.nn.Linear(8, 4)
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v)
    F.layer_norm(x, (8,))
    lin(x)
    sess = xrt.InferenceSession(_tiny_model(), device="cpu", engine="native")
    out = sess.run({"x": np.ones((2, 8), np.float32)})["y"]
    assert out.shape == (2, 4)

    log = xrt.dispatch.explain()
    routed = {
        (d.op, d.node): d for d in log if d.node in ("scaled_dot_product_attention", "layer_norm", "linear")
    }
    assert routed[("attention", "scaled_dot_product_attention")].chosen == "flash_v2"
    assert routed[("attention", "scaled_dot_product_attention")].hits == 3  # one case, three calls
    assert routed[("layernorm", "layer_norm")].chosen == "fused"
    linear = routed[("matmul", "linear")]
    assert (linear.chosen, linear.rule) == ("torch", "fallback")
    assert linear.candidate("cublasLt").reason_code == "device_mismatch"
    native = [d for d in log if d.node == "mm0"]
    assert native and native[0].chosen in {c.kernel for c in native[0].candidates}
    # The native engine's choice never lists the torch-side kernels (requested_only).
    assert not {"torch", "math", "flash_v2"} & {c.kernel for c in native[0].candidates}
    # The torch view holds exactly the routed decisions, with the same hit counts.
    view = xrt_torch.decision_log()
    assert {d.seq for d in view} == {d.seq for d in routed.values()}
    assert xrt_torch.routing_counts()["attention:flash_v2"] == 3


def test_torch_side_kernel_names_are_declared_in_core():
    from xpuruntime.pytorch import _kernels

    reg = _core.KernelRegistry()  # a fresh registry knows only the names C++ declares
    for k in _kernels.KERNELS:
        assert reg.is_known_kernel_name(k.op, k.name), (k.op, k.name)


def test_list_kernels_shows_the_torch_side_kernels(xrt_torch):
    infos = {(k.op, k.name): k for k in xrt.kernels.list_kernels()}
    for name in ("cudnn", "torch_flash", "efficient", "math", "torch"):
        k = infos[("attention", name)]
        assert k.requested_only and k.provider == "python"
    assert infos[("attention", "math")].devices == ("cpu", "cuda")
    assert infos[("attention", "cudnn")].devices == ("cuda",)
    assert infos[("attention", "efficient")].deterministic is False
    # flash_v2 and the fused LayerNorm: the CUDA plugin's KernelDefs where it is loaded,
    # else the torch bridge's (CPU reference + CUDA through the bridge).
    for op, name in (("attention", "flash_v2"), ("layernorm", "fused"), ("matmul", "cublasLt")):
        assert (op, name) in infos
        assert name in xrt.kernels.known_kernel_names(op)
    ordered = [
        k.name for k in xrt.kernels.list_kernels("attention") if k.requested_only or k.name == "flash_v2"
    ]
    assert ordered.index("flash_v2") < ordered.index("cudnn") < ordered.index("math") < ordered.index("torch")


def test_dispatch_runs_torch_kernels_and_refuses_the_call_bound_ones(xrt_torch):
    g = np.random.default_rng(3)
    a, b = g.standard_normal((3, 4)), g.standard_normal((4, 2))
    required = xrt.KernelPolicy(matmul="torch", mode="require")
    (out,), dec = xrt.dispatch.dispatch("matmul", [a, b], policy=required)
    assert (dec.chosen, dec.rule) == ("torch", "policy.require")
    np.testing.assert_allclose(np.from_dlpack(out), a @ b, rtol=1e-12)
    # flash_v2's bridge decides on a routed call's tensors; a bare dispatch gets the reason.
    ctx = _core.OpContext("attention", [("float64", [1, 1, 2, 4])] * 3, device="cpu")
    policy = _core.KernelPolicy(attention=["flash_v2", "math"])
    dec = _core.Dispatcher.instance().select(ctx, policy)
    flash = dec.candidate("flash_v2")
    if flash.verdict == "rejected" and "routed torch call" in flash.detail:
        assert dec.chosen == "math" and flash.reason_code == "backend_unavailable"


def test_routed_contexts_speak_the_cpp_kernels_terms(xrt_torch):
    # The C++ kernels check the routed OpContext themselves (cuBLASLt reads it through the
    # same matmul layout reader as cpu_blas): an attribute they do not know, or a missing
    # output, would turn every routed matmul into a fallback on a GPU machine.
    from xpuruntime.pytorch import _routing

    x, w, bias = torch.randn(2, 5, 8), torch.randn(4, 8), torch.randn(4)
    call = _routing.parse_call(F.linear, (x, w, bias), {})
    ctx = _routing.context(call)
    assert ctx.attrs == {} and [o.shape for o in ctx.outputs] == [(2, 5, 4)]
    assert ctx.inputs[1].layout == "transposed"
    ok, code, detail = _core.KernelRegistry.instance().check("matmul", "cpu_blas", ctx)
    assert ok, (code, detail)
    ln = _routing.context(_routing.parse_call(F.layer_norm, (x, (8,), None, torch.zeros(8)), {}))
    assert ln.attrs == {"axis": -1, "epsilon": 1e-5}
    assert [i.shape for i in ln.inputs] == [(2, 5, 8), (0,), (8,)]  # no weight: a 0-element one
    sdpa = _routing.parse_call(
        F.scaled_dot_product_attention, (x[None], x[None], x[None]), {"is_causal": True}
    )
    assert _routing.context(sdpa).attrs == {"is_causal": 1, "dropout_p": 0.0}
    drop = _routing.context(
        _routing.parse_call(F.scaled_dot_product_attention, (x[None],) * 3, {"dropout_p": 0.1})
    )
    assert [(i.dtype, i.shape) for i in drop.inputs[3:]] == [("bool", (0,)), ("int64", (2,))]


def test_a_call_form_only_torch_runs_offers_only_torch(xrt_torch):
    xrt_torch.set_kernel_policy(matmul="cublasLt")
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5)
    out = torch.addmm(c, a, b, beta=0.5)
    assert torch.allclose(out, 0.5 * c + a @ b)
    (d,) = [x for x in xrt_torch.decision_log() if x.node == "addmm"]
    assert (d.chosen, d.rule) == ("torch", "fallback")
    assert [x.kernel for x in d.candidates] == ["cublasLt", "torch"]


# ---- no second ladder in Python ----------------------------------------------------------------
def _string_constants(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_no_python_module_declares_rules_reasons_or_kernel_tables():
    rules = set(_core.RULES) - {"none"}
    for name in ("_routing.py", "policy.py", "_kernels.py", "_log.py"):
        found = _string_constants(PKG / "pytorch" / name) & rules
        assert not found, f"pytorch/{name} spells rule names {found}; the Dispatcher owns the rules"
    reasons = set(_core.REASON_CODES)
    for path in [
        *(PKG / "pytorch").rglob("*.py"),
        *(PKG / "dispatch").rglob("*.py"),
        *(PKG / "engines").rglob("*.py"),
    ]:
        found = _string_constants(path) & reasons
        assert not found, f"{path.relative_to(PKG)} spells reason codes {found}; use _core.reason.*"
    for path in PKG.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for table in ("OP_KERNELS", "OP_ALIASES", "REASON_CODES = (", "RULES = ("):
            assert table not in text, f"{path.relative_to(PKG)} declares {table}"
