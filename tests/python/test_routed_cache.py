"""A routed eager call is a cache hit (issue 17 §1-§3), on CPU torch.

Each case is decided once (the Dispatcher is asked on the miss only) and later calls
run the case's prepared launcher, which must give what the general path gives for
every call form; the key tells apart what the decision or the launch depends on
(strides, scalar arguments, autocast); a policy change or clear forgets the cases;
torch.compile decides at trace time without graph breaks; profile() sees each
routed call; best_performance ranks device times with ties within noise broken by
the candidates' order (fake timer).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime import _core
from xpuruntime.pytorch import _routing, policy


@pytest.fixture(autouse=True)
def _clean(clean_kernel_policy):
    _core.Dispatcher.instance().clear_tuning_cache()  # best_performance winners are process-wide


@pytest.fixture
def selects(monkeypatch):
    """Counts the Dispatcher questions routing asks."""
    n = [0]
    real = _routing.select

    def counting(*a, **k):
        n[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(_routing, "select", counting)
    return n


def _rand(*shape, seed=0, dtype=torch.float64, grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(grad)


OURS = {"matmul": "cublasLt", "attention": "flash_v2", "layernorm": "fused"}


def test_a_case_is_decided_once_and_its_calls_counted(selects):
    xrt_torch.set_kernel_policy(**OURS)
    x, w = _rand(6, 16), _rand(16, seed=1)
    for _ in range(5):
        F.layer_norm(x, (16,), w)
    assert selects[0] == 1
    (d,) = xrt_torch.decision_log()
    assert (d.chosen, d.hits) == ("fused", 5)
    assert xrt_torch.routing_counts() == {"layernorm:fused": 5}
    F.layer_norm(x, (16,), w, eps=1e-3)  # another eps: another case
    assert selects[0] == 2 and len(xrt_torch.decision_log()) == 2


# Every call form routing takes, against float64 references computed without a policy.
def _forms():
    a, b, bias = _rand(5, 8), _rand(8, 3, seed=1), _rand(3, seed=2)
    w = _rand(3, 8, seed=3)
    ba, bb = _rand(2, 5, 8, seed=4), _rand(2, 8, 3, seed=5)
    q, k, v = (_rand(2, 3, 7, 8, seed=s) for s in (6, 7, 8))
    mask = _rand(7, 7, seed=9) > 0
    x, lw, lb = _rand(4, 6, 10, seed=10), _rand(10, seed=11), _rand(10, seed=12)
    return [
        ("linear", lambda: F.linear(a, w, bias)),
        ("linear kw", lambda: F.linear(a, weight=w)),
        ("matmul", lambda: torch.matmul(a, b)),
        ("@", lambda: a @ b),
        ("rmatmul", lambda: torch.Tensor.__rmatmul__(b, a)),
        ("mm", lambda: torch.mm(a, b)),
        ("bmm", lambda: torch.bmm(ba, bb)),
        ("addmm", lambda: torch.addmm(bias, a, b)),
        ("addmm beta", lambda: torch.addmm(bias, a, b, beta=0.5)),
        ("sdpa", lambda: F.scaled_dot_product_attention(q, k, v)),
        ("sdpa causal kw", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)),
        ("sdpa mask", lambda: F.scaled_dot_product_attention(q, k, v, mask)),
        ("sdpa mask kw", lambda: F.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask)),
        ("layer_norm", lambda: F.layer_norm(x, (10,), lw, lb)),
        ("layer_norm bias only", lambda: F.layer_norm(x, [10], bias=lb, eps=1e-2)),
        ("layer_norm 2d", lambda: F.layer_norm(x, (6, 10))),
    ]


@pytest.mark.parametrize("name", [n for n, _ in _forms()])
def test_hits_give_the_bits_of_the_first_call_and_match_torch(name, selects):
    fn = dict(_forms())[name]
    ref = fn()  # no policy: torch
    xrt_torch.set_kernel_policy(**OURS)
    first = fn()  # the miss: the general path
    hits = [fn() for _ in range(3)]  # the prepared launcher
    assert selects[0] == 1
    for h in hits:
        assert torch.equal(h, first)
    assert torch.allclose(first, ref, rtol=1e-10, atol=1e-10)
    (d,) = xrt_torch.decision_log()
    assert d.hits == 4


@pytest.mark.parametrize("name", [n for n, _ in _forms()])
def test_torch_kernel_hits_are_the_torch_call_bit_for_bit(name):
    fn = dict(_forms())[name]
    ref = fn()
    xrt_torch.set_kernel_policy(matmul="torch", attention="torch", layernorm="torch")
    for _ in range(3):
        assert torch.equal(fn(), ref)
    (d,) = xrt_torch.decision_log()
    assert d.chosen == "torch" and d.hits == 3


def test_the_fast_key_forms_give_the_general_key():
    """case_key spells out the common forms; each must be the tuple the general pass
    builds, or a case would be decided twice (and a key could name two forms)."""
    from xpuruntime.pytorch import _prepared

    x, w, b = _rand(4, 8), _rand(3, 8, seed=1), _rand(3, seed=2)
    q = _rand(1, 2, 5, 8)
    lw = torch.nn.Parameter(_rand(8, seed=3))
    forms = [
        (F.linear, (x, w, b), None),
        (F.linear, (x, w, None), None),
        (torch.matmul, (x, w.t()), None),
        (F.scaled_dot_product_attention, (q, q, q), {"is_causal": True, "scale": 0.5}),
        (F.layer_norm, (x, (8,)), {"weight": lw, "bias": lw, "eps": 1e-5}),
    ]
    keys = set()
    for func, args, kwargs in forms:
        key = _prepared.case_key(func, args, kwargs, "")
        names = tuple(kwargs) if kwargs else None
        values = args + tuple(kwargs.values()) if kwargs else args
        assert key == _prepared._general_key([func, "", None, names], values)
        keys.add(key)
    assert len(keys) == len(forms)
    # what the key must tell apart, form by form
    assert _prepared.case_key(F.linear, (x, w, b), None, "") != _prepared.case_key(
        F.linear, (x, w, b.float()), None, ""
    )
    assert _prepared.case_key(torch.matmul, (x, w.t()), None, "") != _prepared.case_key(
        torch.matmul, (x, w.t().contiguous()), None, ""
    )
    ln = (F.layer_norm, (x, (8,)))
    assert _prepared.case_key(*ln, {"weight": lw, "bias": lw, "eps": 1e-5}, "") != _prepared.case_key(
        *ln, {"weight": lw, "bias": lw, "eps": 1e-3}, ""
    )
    assert _prepared.case_key(*ln, {"weight": lw, "bias": lw, "eps": 1e-5}, "") != _prepared.case_key(
        *ln, {"weight": lw, "bias": lw, "eps": 1e-5}, "fp16"
    )


def test_a_site_hit_is_only_the_same_case(selects):
    """lookup's sites check the tensors in C++ (TensorGuards): a tensor differing in
    dtype, strides, requires_grad or shape at the same site is another case."""
    from xpuruntime.pytorch import _log, _prepared

    xrt_torch.set_kernel_policy(matmul="torch", layernorm="torch")
    x, w, b = _rand(4, 8), _rand(3, 8, seed=1), _rand(3, seed=2)
    for _ in range(3):  # the miss, the site's first check, a site hit
        F.linear(x, w, b)
    assert selects[0] == 1
    if _prepared._guards_work():
        assert [len(c) for c in _log.sites.values()] == [1]
    others = [
        (x.float(), w.float(), b.float()),  # dtype
        (x, _rand(8, 3, seed=1).t(), b),  # strides
        (x, w.detach().clone().requires_grad_(), b),  # requires_grad
        (x[:2], w, b),  # shape
    ]
    for args in others:
        for _ in range(2):
            out = F.linear(*args)
        xrt_torch.clear_kernel_policy()
        assert torch.equal(out, F.linear(*args))
        xrt_torch.set_kernel_policy(matmul="torch", layernorm="torch")
    # set_kernel_policy forgot the cases each time: each variant is decided once, and
    # the first case again after the last policy change
    assert selects[0] == 1 + len(others)
    F.linear(x, w, b)
    F.linear(x, torch.nn.Parameter(w, requires_grad=False), b)  # the same case (its own check)
    assert selects[0] == 2 + len(others)
    log = xrt_torch.decision_log()
    assert len(log) == 2 + len(others) and log[len(log) - 1].hits == 2


def test_one_tensor_passed_twice_is_the_same_case(selects):
    """TensorGuards takes each tensor once: a site keys which arguments are one object."""
    q, k = _rand(1, 2, 5, 8), _rand(1, 2, 5, 8, seed=1)
    forms = [(q, q, q), (q, k, q), (k, q, q), (q, k, k), (q, k, _rand(1, 2, 5, 8, seed=2))]
    refs = [F.scaled_dot_product_attention(*a) for a in forms]
    xrt_torch.set_kernel_policy(attention="torch")
    for _ in range(3):
        for args, ref in zip(forms, refs):
            assert torch.equal(F.scaled_dot_product_attention(*args), ref)
    (d,) = xrt_torch.decision_log()  # the same dtypes, shapes and strides: one case
    assert selects[0] == 1 and d.hits == 3 * len(forms)


def test_the_site_checks_tell_apart_what_the_key_does():
    from xpuruntime.pytorch import _prepared

    if _prepared._TensorGuards is None:
        pytest.skip("this torch has no dynamo TensorGuards: lookup uses the case key alone")
    assert _prepared._guards_work()
    q = _rand(2, 3)
    assert _prepared._tensor_check((q, q)) is not None


class _Counted(torch.Tensor):
    """A subclass with its own __torch_function__: routing must keep calling it."""

    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is F.layer_norm:
            cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_is_its_own_case_and_keeps_its_torch_function(selects):
    xrt_torch.set_kernel_policy(layernorm="torch")
    x = _rand(3, 8)
    sub = x.as_subclass(_Counted)
    ref = F.layer_norm(x, (8,))
    for _ in range(3):
        F.layer_norm(x, (8,))
        out = F.layer_norm(sub, (8,))
    assert selects[0] == 2  # the plain tensor and the subclass: two cases
    assert _Counted.calls == 3  # hits of the subclass's case still go through its __torch_function__
    assert type(out) is _Counted and torch.equal(out.as_subclass(torch.Tensor), ref)


def test_layout_and_scalars_are_in_the_key(selects):
    xrt_torch.set_kernel_policy(**OURS)
    q = _rand(1, 2, 5, 8)
    kt = _rand(1, 2, 8, 5, seed=1).transpose(-1, -2)  # same shape as q, other strides
    F.scaled_dot_product_attention(q, q, q)
    out = F.scaled_dot_product_attention(q, kt, q)
    assert selects[0] == 2
    xrt_torch.clear_kernel_policy()
    assert torch.allclose(out, F.scaled_dot_product_attention(q, kt, q), atol=1e-12)
    xrt_torch.set_kernel_policy(**OURS)
    for s in (0.1, 0.2):  # the scale is parsed once per case: another value is another case
        out = F.scaled_dot_product_attention(q, q, q, scale=s)
        xrt_torch.clear_kernel_policy()
        ref = F.scaled_dot_product_attention(q, q, q, scale=s)
        xrt_torch.set_kernel_policy(**OURS)
        assert torch.allclose(out, ref, atol=1e-12)


def test_requires_grad_is_in_the_key_and_hits_keep_autograd():
    xrt_torch.set_kernel_policy(**OURS)
    x = _rand(3, 8)
    F.layer_norm(x, (8,))
    xg = _rand(3, 8, grad=True)
    for _ in range(2):
        y = F.layer_norm(xg, (8,))
        (gx,) = torch.autograd.grad(y.square().sum(), xg)
    assert len(xrt_torch.decision_log()) == 2
    xrt_torch.clear_kernel_policy()
    (ref,) = torch.autograd.grad(F.layer_norm(xg, (8,)).square().sum(), xg)
    assert torch.allclose(gx, ref, atol=1e-10)


def test_a_policy_change_or_clear_forgets_the_cases(selects):
    a, b = _rand(4, 4), _rand(4, 4, seed=1)
    xrt_torch.set_kernel_policy(attention="flash_v2", layernorm="fused")
    F.layer_norm(a, (4,))
    xrt_torch.set_kernel_policy(layernorm="torch")
    F.layer_norm(a, (4,))
    assert [d.chosen for d in xrt_torch.decision_log()] == ["fused", "torch"]
    xrt_torch.clear_kernel_policy()
    F.layer_norm(a, (4,))
    assert selects[0] == 2
    assert len(xrt_torch.decision_log()) == 2
    xrt_torch.set_kernel_policy(layernorm="fused")
    F.layer_norm(a, (4,))
    assert selects[0] == 3
    del b


def test_autocast_is_in_the_key():
    xrt_torch.set_kernel_policy(attention="flash_v2")
    q = _rand(1, 2, 4, 8, dtype=torch.float32)
    F.scaled_dot_product_attention(q, q, q)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = [F.scaled_dot_product_attention(q, q, q) for _ in range(2)]
    assert all(o.dtype == torch.bfloat16 for o in outs) and torch.equal(outs[0], outs[1])
    assert [d.dtypes[0] for d in xrt_torch.decision_log()] == ["float32", "bfloat16"]
    plain = F.scaled_dot_product_attention(q, q, q)
    assert plain.dtype == torch.float32


def test_profile_sees_every_routed_call():
    xrt_torch.set_kernel_policy(layernorm="fused")
    x = _rand(2, 8)
    with xrt_torch.profile() as prof:
        for _ in range(3):  # the miss, then two hits
            F.layer_norm(x, (8,))
    names = [e.name for e in prof.events()]
    assert names.count("xpuruntime.layernorm:fused") == 3
    with xrt_torch.profile() as prof:  # a profile ends: no per-call events after it
        pass
    with torch.profiler.profile() as plain:
        F.layer_norm(x, (8,))
    assert "xpuruntime.layernorm:fused" not in [e.name for e in plain.events()]


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(32)
        self.qkv = torch.nn.Linear(32, 96)
        self.o = torch.nn.Linear(32, 32)

    def forward(self, x):
        h = self.ln(x)
        B, S, _ = h.shape
        q, k, v = self.qkv(h).view(B, S, 3, 2, 16).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(a.transpose(1, 2).reshape(B, S, 32))


def test_compile_under_a_policy_has_no_graph_break_and_records_at_trace_time():
    torch.manual_seed(0)
    m, x = _Tiny(), torch.randn(2, 8, 32)
    ref = m(x)
    xrt_torch.set_kernel_policy(**OURS)
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(m)(x)
        assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
        torch._dynamo.reset()
        xrt_torch.clear_decision_log()
        out = torch.compile(m, fullgraph=True, backend="aot_eager")(x)
    finally:
        torch._dynamo.reset()
    assert torch.allclose(out, ref, atol=1e-5)
    chosen = {(d.op, d.chosen) for d in xrt_torch.decision_log()}
    assert {("layernorm", "fused"), ("attention", "flash_v2"), ("matmul", "torch")} <= chosen


def test_an_equal_policy_set_again_keeps_the_compiled_graph():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    x, w = _rand(4, 8), _rand(8, seed=1)

    def f(x):
        return F.layer_norm(x, (8,), w, w) + 1

    torch._dynamo.reset()
    try:
        c = torch.compile(f, backend=counter)
        xrt_torch.set_kernel_policy(layernorm="fused")
        c(x)
        xrt_torch.set_kernel_policy(layernorm="fused")
        c(x)
        assert counter.frame_count == 1
        xrt_torch.set_kernel_policy(layernorm="torch")  # another policy: traced again
        out = c(x)
        assert counter.frame_count == 2
    finally:
        torch._dynamo.reset()
    xrt_torch.clear_kernel_policy()
    assert torch.allclose(out, f(x), atol=1e-12)


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")
def test_compile_with_dynamic_shapes_gives_torchs_results():
    """Symbolic sizes are no trace-time constants: a routed call specializes the sizes it
    sees (one static case per size, decided at trace time); the results stay right."""
    torch.manual_seed(1)
    m = _Tiny()
    xs = [torch.randn(2, 8, 32), torch.randn(2, 12, 32)]
    refs = [m(x) for x in xs]
    xrt_torch.set_kernel_policy(**OURS)
    torch._dynamo.reset()
    try:
        c = torch.compile(m, dynamic=True, backend="aot_eager")
        outs = [c(x) for x in xs]
    finally:
        torch._dynamo.reset()
    for out, ref in zip(outs, refs):
        assert torch.allclose(out, ref, atol=1e-5)


# ---- honest tuning: device times, ties within noise, the regime --------------------------------
def _fake_timer(monkeypatch, times, noise=0.0):
    seen = []

    def fake(kernel, call, func, args, kwargs, regime="eager", **k):
        seen.append((kernel, regime))
        return times[kernel], noise

    monkeypatch.setattr(_routing, "_timing_skipped", lambda call, pool: "")
    monkeypatch.setattr(_routing, "time_kernel", fake)
    return seen


def test_best_performance_ties_within_noise_keep_the_stable_order(monkeypatch):
    """torch is 1% faster than flash_v2, within the noise: a tie, which flash_v2 (earlier
    in the Dispatcher's order) wins; the decision records every time and the regime."""
    times = {"flash_v2": 1.00, "math": 1.50, "torch": 0.99}
    seen = _fake_timer(monkeypatch, times, noise=0.02)
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy="best_performance")
    q = _rand(1, 1, 4, 8)
    F.scaled_dot_product_attention(q, q, q)
    (d,) = xrt_torch.decision_log()
    assert [k for k, _ in seen] == ["flash_v2", "math", "torch"]  # the Dispatcher's order
    assert d.rule == "auto.best_performance" and d.timings == times
    assert {c.kernel: c.time_ms for c in d.candidates if c.time_ms is not None} == times
    assert d.chosen == "flash_v2"
    assert "regime=eager" in d.detail and "tie with the fastest 'torch'" in d.detail


def test_best_performance_outside_noise_takes_the_fastest_and_records_the_margin(monkeypatch):
    times = {"flash_v2": 2.0, "math": 1.0, "torch": 1.5}
    _fake_timer(monkeypatch, times, noise=0.01)
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy="best_performance")
    q = _rand(1, 1, 4, 8)
    F.scaled_dot_product_attention(q, q, q)
    (d,) = xrt_torch.decision_log()
    assert d.chosen == "math" and d.timings == times
    assert "margin 50.0% over 'torch'" in d.detail and "regime=eager" in d.detail


def test_the_policy_regime_is_what_tuning_times_in(monkeypatch):
    seen = _fake_timer(monkeypatch, {"flash_v2": 1.0, "math": 3.0, "torch": 2.0})
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy="best_performance", regime="captured")
    q = _rand(1, 1, 4, 8)
    F.scaled_dot_product_attention(q, q, q)
    (d,) = xrt_torch.decision_log()
    assert {r for _, r in seen} == {"captured"} and "regime=captured" in d.detail
    with pytest.raises(ValueError, match="regime"):
        xrt_torch.set_kernel_policy(attention="auto", regime="graph")


def test_timing_noise_is_the_spread_of_the_middle_blocks():
    median, noise = _routing._median_and_noise([1.0, 1.1, 0.9, 1.0, 5.0, 1.05, 0.95])
    assert median == pytest.approx(1.0)
    # sorted: 0.9 0.95 1.0 1.0 1.05 1.1 5.0 -> quartiles 0.95 and 1.1: the 5.0 block is ignored
    assert noise == pytest.approx(0.075)


def test_module_state_is_private():
    assert policy._state.profiling == 0


# ---- on a GPU (skipped without CUDA and our kernels; the lead's GPU run) -----------------------
def _gpu_skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    from xpuruntime.pytorch.ops import _bridge

    return _bridge.cuda_kernels_unavailable() or _bridge.capability_problem(0)


gpu = pytest.mark.skipif(bool(_gpu_skip_reason()), reason=_gpu_skip_reason() or "ok")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("regime", ["eager", "captured"])
def test_gpu_time_kernel_measures_device_time_in_the_regime(regime):
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(512, 512, device="cuda", dtype=torch.float16, generator=g) for _ in range(2))
    call = _routing.parse_call(torch.matmul, (a, b), {})
    ms, noise = _routing.time_kernel("torch", call, torch.matmul, (a, b), {}, regime)
    assert 0 < ms < 5.0 and 0 <= noise < ms


@pytest.mark.gpu
@gpu
def test_gpu_best_performance_in_the_captured_regime():
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    xrt_torch.set_kernel_policy(attention="auto", auto_strategy="best_performance", regime="captured")
    for _ in range(2):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (out.double() - ref).abs().max().item() < 2e-2
    (d,) = xrt_torch.decision_log()
    assert d.rule == "auto.best_performance" and d.hits == 2 and "regime=captured" in d.detail
    timed = {c.kernel: c.time_ms for c in d.candidates if c.time_ms is not None}
    assert len(timed) >= 2 and d.timings == timed
    fastest = min(timed, key=timed.get)
    assert d.chosen == fastest or f"a tie with the fastest '{fastest}'" in d.detail, d.detail


@pytest.mark.gpu
@gpu
def test_gpu_hits_give_the_bits_of_the_first_call():
    g = torch.Generator(device="cuda").manual_seed(2)
    dt = torch.bfloat16
    x = torch.randn(4, 128, 768, device="cuda", dtype=dt, generator=g)
    w = torch.randn(768, 768, device="cuda", dtype=dt, generator=g) / 768**0.5
    b = torch.randn(768, device="cuda", dtype=dt, generator=g)
    q = torch.randn(4, 12, 128, 64, device="cuda", dtype=dt, generator=g)
    calls = {
        "linear": lambda: F.linear(x, w, b),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "layer_norm": lambda: F.layer_norm(x, (768,), b, b),
    }
    refs = {n: fn().double() for n, fn in calls.items()}
    xrt_torch.set_kernel_policy(**OURS)
    for name, fn in calls.items():
        first = fn()
        for _ in range(3):
            assert torch.equal(fn(), first), name
        assert (first.double() - refs[name]).abs().max().item() < 0.1, name
    chosen = {d.node: (d.chosen, d.hits) for d in xrt_torch.decision_log()}
    assert chosen == {
        "linear": ("cublasLt", 4),
        "scaled_dot_product_attention": ("flash_v2", 4),
        "layer_norm": ("fused", 4),
    }
