"""_core.routed.PreparedCall: a registry kernel bound to one case, run on raw pointers.

The routed hot path runs the C++ registry's kernels (the ones inference plans run) on
torch tensors' data pointers with the case's shapes and strides (issue 31). On the CPU
the registry's CPU matmul kernels run through the same binding, so these tests check
the binding itself (views, strides, outputs, workspaces, errors) against float64
references; the CUDA kernels take the same path on the GPU (tests/gpu).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from xpuruntime import _core
from xpuruntime.pytorch.ops import _launch

pytestmark = pytest.mark.skipif(not _launch.available(), reason="this _core has no routed binding")


@pytest.fixture(autouse=True)
def _checking(monkeypatch):
    """Every run checks its tensors against the prepared case (_launch.check)."""
    monkeypatch.setattr(_launch, "CHECK", True)


def _cpu_matmul_kernel() -> str:
    names = {d["name"] for d in _core.KernelRegistry.instance().list() if d["op"] == "matmul"}
    for name in ("cpu_blocked", "cpu_blas", "cpu_packed"):
        if name in names:
            return name
    pytest.skip(f"no CPU matmul kernel registered (matmul kernels: {sorted(names)})")


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def _context(inputs, outputs, attrs=None):
    return _core.OpContext(
        "matmul",
        [_launch.spec(t) for t in inputs],
        [_launch.spec(t) for t in outputs],
        device="cpu",
        attrs=attrs,
    )


@pytest.mark.parametrize("transposed_b", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_cpu_matmul_kernel_runs_on_torch_pointers(transposed_b, with_bias):
    kernel = _cpu_matmul_kernel()
    a = _rand(13, 37)
    w = _rand(29, 37, seed=1)
    b = w.t() if transposed_b else w.t().contiguous()  # F.linear's weight.t() is a strided view
    bias = _rand(29, seed=2) if with_bias else None
    out = torch.full((13, 29), float("nan"))
    inputs = [a, b] + ([bias] if with_bias else [])
    call = _core.routed.PreparedCall(kernel, _context(inputs, [out]))
    assert call.kernel == kernel
    _launch.run(call, inputs, [out], torch.device("cpu"), 0, 0)
    ref = a.double() @ b.double() + (bias.double() if with_bias else 0.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    # the same prepared call on other tensors of the case: only the pointers change
    a2 = _rand(13, 37, seed=5)
    inputs[0] = a2
    _launch.run(call, inputs, [out], torch.device("cpu"), 0, 0)
    ref2 = a2.double() @ b.double() + (bias.double() if with_bias else 0.0)
    torch.testing.assert_close(out.double(), ref2, rtol=1e-5, atol=1e-5)


def test_a_strided_output_view_is_written_in_place():
    kernel = _cpu_matmul_kernel()
    a, b = _rand(6, 8), _rand(8, 5, seed=3)
    big = torch.zeros(6, 12)
    out = big[:, 2:7]  # row stride 12: a strided output
    call = _core.routed.PreparedCall(kernel, _context([a, b], [out]))
    _launch.run(call, [a, b], [out], torch.device("cpu"), 0, 0)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(big[:, :2]) == 0 and torch.count_nonzero(big[:, 7:]) == 0


def test_unknown_kernel_names_the_registered_ones():
    a, b, out = _rand(2, 3), _rand(3, 4), torch.empty(2, 4)
    with pytest.raises(_core.UnsupportedOperationError, match="no kernel 'no_such_kernel'.*registered"):
        _core.routed.PreparedCall("no_such_kernel", _context([a, b], [out]))


def test_a_case_the_kernel_cannot_run_is_refused_with_the_reason():
    kernel = _cpu_matmul_kernel()
    a, b = _rand(2, 3), _rand(4, 5)  # inner dimensions differ
    with pytest.raises(_core.UnsupportedOperationError, match=f"kernel '{kernel}' cannot run"):
        _core.routed.PreparedCall(kernel, _context([a, b], [torch.empty(2, 5)]))


def test_a_cuda_kernel_on_cpu_operands_is_refused():
    a, b, out = _rand(2, 3), _rand(3, 4), torch.empty(2, 4)
    names = {d["name"] for d in _core.KernelRegistry.instance().list() if d["op"] == "matmul"}
    if "cublasLt" not in names:
        with pytest.raises(_core.UnsupportedOperationError, match="no kernel 'cublasLt'"):
            _core.routed.PreparedCall("cublasLt", _context([a, b], [out]))
    else:
        with pytest.raises(_core.UnsupportedOperationError, match="device_mismatch"):
            _core.routed.PreparedCall("cublasLt", _context([a, b], [out]))


def test_wrong_pointer_counts_and_null_pointers_are_refused():
    kernel = _cpu_matmul_kernel()
    a, b, out = _rand(2, 3), _rand(3, 4), torch.empty(2, 4)
    call = _core.routed.PreparedCall(kernel, _context([a, b], [out]))
    with pytest.raises(_core.InvalidArgumentError, match="2 inputs and 1 outputs, the call passed 1 and 1"):
        call.run((a.data_ptr(),), (out.data_ptr(),))
    with pytest.raises(_core.InvalidArgumentError, match="null pointer"):
        call.run((a.data_ptr(), 0), (out.data_ptr(),))


def test_the_strides_of_size_one_dimensions_are_normalised():
    # torch gives size-1 dimensions arbitrary strides; they never move the view
    t = torch.empty(5, 1, 7)[:, :, :]
    assert _launch.strides(t) == (7, 7, 1)
    col = torch.empty(1, 9).t()  # [9, 1], strides (1, 9)
    assert _launch.strides(col) == (1, 1)
    assert _launch.strides(torch.empty(4, 6).t()) == (1, 6)


@pytest.mark.parametrize(
    "a_shape,a_kind,b_kind,with_bias",
    [
        ((13, 37), "contiguous", "weight_t", True),  # F.linear's forward
        ((2, 5, 37), "contiguous", "weight_t", True),  # 3-D input: rows = 2 * 5
        ((37, 13), "transposed", "contiguous", False),  # a weight gradient: g^T @ x
        ((2, 5, 37), "sliced", "weight_t", False),  # a non-contiguous input: reshaped
        ((1, 37), "contiguous", "weight_t", True),  # one row (its stride is free)
    ],
)
def test_the_matmul_hot_path_runs_the_registry_kernel_on_torch_operands(a_shape, a_kind, b_kind, with_bias):
    """ops/matmul.py's _run_prepared (the CUDA hot path's code) on CPU tensors with the
    registry's CPU kernel: operand layouts as routed linears and their gradients hand
    them, against float64."""
    from xpuruntime.pytorch.ops import matmul

    kernel = _cpu_matmul_kernel()
    if a_kind == "transposed":
        a = _rand(*reversed(a_shape)).t()
    elif a_kind == "sliced":
        a = _rand(*a_shape[:-1], 2 * a_shape[-1])[..., ::2]
    else:
        a = _rand(*a_shape)
    w = _rand(29, a.shape[-1], seed=1)
    b = w.t() if b_kind == "weight_t" else w.t().contiguous()
    bias = _rand(29, seed=2) if with_bias else None
    _launch.clear()
    got = matmul._run_prepared(a, b, bias, kernel, 0)
    assert got is not None and got.shape == (*a.shape[:-1], 29)
    want = a.double() @ b.double() + (bias.double() if with_bias else 0.0)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    again = matmul._run_prepared(a, b, bias, kernel, 0)  # the case's prepared call, reused
    assert len(_launch._calls) == 1
    assert torch.equal(again, got)


def test_the_matmul_hot_path_leaves_batched_and_empty_forms_to_the_general_path():
    from xpuruntime.pytorch.ops import matmul

    kernel = _cpu_matmul_kernel()
    assert matmul._run_prepared(_rand(2, 3, 4), _rand(2, 4, 5), None, kernel, 0) is None
    assert matmul._run_prepared(torch.empty(0, 4), _rand(4, 5), None, kernel, 0) is None


def test_the_projections_of_one_layer_get_one_prepared_case_each():
    """The H200 fault of the first one-path run: the attention, MLP and output projections
    of a transformer block share the input's shape and the transposed weights' strides
    and differ only in n, so a case key without b's shape reused c_attn's prepared call
    (n = 3 * d) for c_proj (n = d): the kernel wrote past the output. Interleaved calls
    of the three, each against float64, and one prepared case per projection."""
    from xpuruntime.pytorch.ops import matmul

    kernel = _cpu_matmul_kernel()
    d = 16
    x = _rand(2, 5, d)
    layers = [(_rand(n, d, seed=n), _rand(n, seed=n + 1)) for n in (d, 3 * d, 4 * d)]
    _launch.clear()
    for _ in range(2):
        for w, bias in layers + [(layers[0][0], None)]:  # a bias-less call of one weight too
            got = matmul._run_prepared(x, w.t(), bias, kernel, 0)
            want = x.double() @ w.double().t() + (bias.double() if bias is not None else 0.0)
            assert got.shape == (2, 5, w.shape[0])
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert len(_launch._calls) == 4


def test_the_checking_mode_refuses_tensors_the_case_does_not_describe():
    """With checking on (the tests' mode), a prepared case run on an output smaller than
    its view raises a typed error naming the operand, before any kernel writes."""
    kernel = _cpu_matmul_kernel()
    a, b = _rand(4, 8), _rand(8, 12, seed=1)
    call = _core.routed.PreparedCall(kernel, _context([a, b], [torch.empty(4, 12)]))
    assert call.output_extents == [4 * 12 * 4] and call.input_extents == [4 * 8 * 4, 8 * 12 * 4]
    small = torch.full((4, 6), 7.0)
    with pytest.raises(_core.InvalidArgumentError, match=r"output 0 .*spans 192 bytes.*owns 96"):
        _launch.run(call, (a, b), (small,), torch.device("cpu"), 0, 0)
    assert torch.all(small == 7.0)
    with pytest.raises(_core.InvalidArgumentError, match=r"input 1 .*torch.float64"):
        _launch.run(call, (a, b.double()), (torch.empty(4, 12),), torch.device("cpu"), 0, 0)
    # a view into a larger tensor owns the memory up to its storage's end
    big = torch.empty(2, 4, 12)
    _launch.run(call, (a, b), (big[0],), torch.device("cpu"), 0, 0)
    torch.testing.assert_close(big[0].double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape", [(6, 24), (2, 3, 24)])
def test_a_routed_cases_slots_run_the_forward_and_backward_gemms_again(x_shape):
    """The per-case hot path (ops.matmul.CaseSlots, what a routed linear's launcher keeps):
    the first call fills the slots, later calls of the case run from them (one allocation
    and one launch each). Forward and the backward formula (da, the weight's gradient in
    its own layout, the bias gradient) on the registry's CPU kernel, twice, against
    float64 autograd."""
    from types import SimpleNamespace

    from xpuruntime.pytorch.ops import matmul

    kernel = _cpu_matmul_kernel()

    def mm(x, y, bias, _kernel, slot):  # what _run_cuda does with a slot, on the CPU
        hit = slot[0]
        if hit is not None:
            return hit[0].run(x, y, bias, hit[1])
        return matmul._run_prepared(x, y, bias, kernel, 0, slot)

    def col_sums(g2, slot):
        return g2.sum(0)

    _launch.clear()
    slots = matmul.CaseSlots()
    w, bias = _rand(40, 24, seed=1), _rand(40, seed=2)
    for seed in (3, 4):
        x, g = _rand(*x_shape, seed=seed), _rand(*x_shape[:-1], 40, seed=seed + 10)
        y = mm(x, w.t(), bias, kernel, slots.fwd)
        assert slots.fwd[0] is not None
        ctx = SimpleNamespace(has_bias=True, needs_input_grad=(True, True, True), kernel=kernel)
        dx, dw_t, db, _ = matmul._grads(ctx, x, w.t(), g, mm, col_sums, slots)
        x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, bias))
        y64 = x64 @ w64.t() + b64
        y64.backward(g.double())
        torch.testing.assert_close(y.double(), y64.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dx.double(), x64.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dw_t.t().double(), w64.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(db.double(), b64.grad, rtol=1e-5, atol=1e-5)
        assert dw_t.t().is_contiguous()  # the weight's gradient in the weight's layout
    assert slots.da[0] is not None and slots.db[0] is not None
    assert len(_launch._calls) == 3  # forward, da, dw: each prepared once


def test_the_direct_autograd_function_runs_its_case_from_the_slots(monkeypatch):
    """ops.matmul._DirectMatmul (the eager CUDA path of a routed linear with grad) with its
    kernels swapped for the registry's CPU kernel through the same slots: autograd gets
    one gradient per input (the slots' None included), twice, against float64."""
    from xpuruntime.pytorch.ops import _bridge, matmul

    kernel = _cpu_matmul_kernel()

    def run_cpu(a, b, bias, _kernel, slot=None):  # _run_cuda's slot logic on the CPU
        hit = slot[0] if slot is not None else None
        if hit is not None:
            return hit[0].run(a, b, bias, hit[1])
        return matmul._run_prepared(a, b, bias, kernel, 0, slot)

    monkeypatch.setattr(matmul, "_run_cuda", run_cpu)
    monkeypatch.setattr(matmul, "_column_sums_direct", lambda g2, slot=None: g2.sum(0))
    monkeypatch.setattr(_bridge, "eager_direct_ok", lambda *ts: True)
    _launch.clear()
    slots = matmul.CaseSlots()
    for seed in (0, 1):
        x = _rand(3, 5, 16, seed=seed).requires_grad_()
        w = _rand(24, 16, seed=seed + 2).requires_grad_()
        b = _rand(24, seed=seed + 4).requires_grad_()
        g = _rand(3, 5, 24, seed=seed + 6)
        y = matmul._DirectMatmul.apply(x, w.t(), b, kernel, slots)
        y.backward(g)
        x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
        y64 = x64 @ w64.t() + b64
        y64.backward(g.double())
        torch.testing.assert_close(y.detach().double(), y64.detach(), rtol=1e-5, atol=1e-5)
        for got, want in ((x.grad, x64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert all(s[0] is not None for s in (slots.fwd, slots.da, slots.db))


@pytest.mark.parametrize(
    ("x_shape", "needs"),
    [((3, 5, 16), (True, True, True)), ((7, 16), (True, True, False)), ((7, 16), (False, True, True))],
)
def test_the_direct_linear_runs_its_backward_from_the_slots_after_the_first(monkeypatch, x_shape, needs):
    """ops.linear._DirectLinear (a routed F.linear with grad: the weight as it is, no
    weight.t() node) on the registry's CPU kernel through the case's slots: the first
    backward fills them and marks the case (CaseSlots.linear_bwd), the later ones run
    from the slots on the pointers alone. Three calls on fresh inputs, every gradient
    against float64 autograd, inputs that need no gradient get None."""
    from xpuruntime.pytorch.ops import _bridge, linear, matmul

    kernel = _cpu_matmul_kernel()

    def run_cpu(a, b, bias, _kernel, slot=None):  # _run_cuda's slot logic on the CPU
        hit = slot[0] if slot is not None else None
        if hit is not None:
            return hit[0].run(a, b, bias, hit[1])
        return matmul._run_prepared(a, b, bias, kernel, 0, slot)

    monkeypatch.setattr(linear, "_run_cuda", run_cpu)
    monkeypatch.setattr(linear, "_column_sums_direct", lambda g2, slot=None: g2.sum(0))
    monkeypatch.setattr(linear, "_current_device", lambda: -1)  # a CPU GEMM's index
    monkeypatch.setattr(_bridge, "eager_direct_ok", lambda *ts: True)
    _launch.clear()
    slots = matmul.CaseSlots()
    for seed in (0, 1, 2):
        x = _rand(*x_shape, seed=seed).requires_grad_(needs[0])
        w = _rand(24, 16, seed=seed + 3).requires_grad_(needs[1])
        b = _rand(24, seed=seed + 6).requires_grad_(needs[2])
        g = _rand(*x_shape[:-1], 24, seed=seed + 9)
        y = linear._DirectLinear.apply(x, w, b, kernel, slots)
        assert y.grad_fn is not None and "Transpose" not in type(y.grad_fn.next_functions[1][0]).__name__
        y.backward(g)
        assert slots.linear_bwd == -1  # marked by the first backward
        x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
        y64 = x64 @ w64.t() + b64
        y64.backward(g.double())
        torch.testing.assert_close(y.detach().double(), y64.detach(), rtol=1e-5, atol=1e-5)
        for t, want, need in ((x, x64.grad, needs[0]), (w, w64.grad, needs[1]), (b, b64.grad, needs[2])):
            if need:
                torch.testing.assert_close(t.grad.double(), want, rtol=1e-5, atol=1e-5)
                assert t.grad.shape == t.shape and t.grad.is_contiguous()
            else:
                assert t.grad is None


def test_the_direct_linear_keeps_the_general_backward_for_a_strided_input(monkeypatch):
    """A case whose input is not contiguous (its rows are a copy in the weight's gradient
    GEMM) never runs the pointer-only backward: each backward takes the general formula."""
    from xpuruntime.pytorch.ops import _bridge, linear, matmul

    kernel = _cpu_matmul_kernel()

    def run_cpu(a, b, bias, _kernel, slot=None):
        hit = slot[0] if slot is not None else None
        if hit is not None:
            return hit[0].run(a, b, bias, hit[1])
        return matmul._run_prepared(a, b, bias, kernel, 0, slot)

    monkeypatch.setattr(linear, "_run_cuda", run_cpu)
    monkeypatch.setattr(linear, "_column_sums_direct", lambda g2, slot=None: g2.sum(0))
    monkeypatch.setattr(linear, "_current_device", lambda: -1)
    monkeypatch.setattr(_bridge, "eager_direct_ok", lambda *ts: True)
    _launch.clear()
    slots = matmul.CaseSlots()
    for seed in (0, 1):
        base = _rand(4, 16, 6, seed=seed)
        x = base.transpose(1, 2).requires_grad_()  # [4, 6, 16], not contiguous
        w = _rand(24, 16, seed=seed + 3).requires_grad_()
        g = _rand(4, 6, 24, seed=seed + 9)
        linear._DirectLinear.apply(x, w, None, kernel, slots).backward(g)
        assert slots.linear_bwd is None
        x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
        (x64 @ w64.t()).backward(g.double())
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-5)


def test_a_support_verdict_is_asked_once_per_case():
    """The direct APIs' support checks (fused_attention, fused_layernorm on CUDA) ask the
    registry's KernelDef through an OpContext; _bridge.cached_verdict builds it on a
    case's first call only, and keeps the refusal with its reason as well."""
    from xpuruntime.pytorch.ops import _bridge

    kernel = _cpu_matmul_kernel()
    made = []

    def make(a, b):
        def context():
            made.append(1)
            return _context([a, b], [torch.empty(a.shape[0], b.shape[1])])

        return context

    a, b, bad = _rand(2, 3), _rand(3, 4), _rand(5, 4)
    _bridge._verdicts.clear()
    for _ in range(3):
        assert (
            _bridge.cached_verdict(
                ("t", _bridge.tensor_case(a), _bridge.tensor_case(b)), "matmul", kernel, make(a, b)
            )
            is None
        )
    code, detail = _bridge.cached_verdict(
        ("t", _bridge.tensor_case(a), _bridge.tensor_case(bad)), "matmul", kernel, make(a, bad)
    )
    assert code == "shape_unsupported" and "inner dimensions" in detail
    assert (
        _bridge.cached_verdict(
            ("t", _bridge.tensor_case(a), _bridge.tensor_case(bad)), "matmul", kernel, make(a, bad)
        )[0]
        == code
    )
    assert len(made) == 2


def test_prefer_cublas_for_a_linear_with_a_bias_falls_back_and_says_why():
    """The first H200 run's 'torch' under matmul=cublas, decided here without a GPU (the
    CUDA plugin registers its KernelDefs without one): the Dispatcher asks the C++ cublas
    KernelDef, which has no epilogue and refuses the bias; routing's fallback is torch's
    kernel. (The Python copy of the checks deleted in this series accepted the bias.)"""
    import xpuruntime as xrt
    from xpuruntime.pytorch import _kernels, policy

    _core.DeviceManager.instance().get_device_count()  # loads the device plugins
    names = {d["name"] for d in _core.KernelRegistry.instance().list() if d["op"] == "matmul"}
    if "cublas" not in names:
        pytest.skip("no CUDA plugin with its matmul kernels in this build")
    bf16 = "bfloat16"
    inputs = [(bf16, [231, 96], [96, 1]), (bf16, [96, 160], [1, 96])]
    out = [(bf16, [231, 160], [160, 1])]
    dispatcher = _core.Dispatcher.instance()
    opts = {"runnable": _kernels.RUNNABLE["matmul"], "fallback_kernel": _kernels.FALLBACK, "record": False}
    view = policy._PolicyView(xrt.KernelPolicy(matmul="cublas"))
    with_bias = _core.OpContext("matmul", [*inputs, (bf16, [160], [1])], out, device="cuda:0", capability=90)
    d = dispatcher.select(with_bias, view.core, **opts)
    assert (d.chosen, d.rule) == ("torch", "fallback")
    (c,) = [c for c in d.candidates if c.kernel == "cublas"]
    assert (c.verdict, c.reason_code) == ("rejected", "attribute_unsupported") and "epilogue" in c.detail
    no_bias = _core.OpContext("matmul", inputs, out, device="cuda:0", capability=90)
    assert dispatcher.select(no_bias, view.core, **opts).chosen == "cublas"
