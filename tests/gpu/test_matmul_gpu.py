"""xpuruntime.ops.matmul on a CUDA GPU with torch tensors (DLPack, zero-copy).

cublas and cublasLt against a float64 reference for fp32/fp16/bf16 across shapes
with M from 1 to 16, transposed views and strided batches; cuBLASLt epilogues;
tf32 only when the ExecutionPolicy allows it; work on the caller's (torch's)
stream; a pinned cuBLASLt algorithm gives the same bits across runs and across
processes; best_performance picks a winner and the exported pin reproduces it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="the GPU matmul tests compare with torch tensors")

import xpuruntime as xrt
from xpuruntime import ops


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if xrt.get_device_count() == 0:
        return (
            f"xpuruntime sees no CUDA device: {xrt._core.DeviceManager.instance().cuda_unavailable_reason()}"
        )
    return ""


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
U_OUT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def _require(kernel: str) -> xrt.KernelPolicy:
    return xrt.KernelPolicy(matmul=kernel, mode="require")


def _torch(t: xrt.Tensor) -> torch.Tensor:
    return torch.from_dlpack(t)


def _check(got, a, b, bias=None, activation=None, u_acc=2.0**-24):
    """Every element within (K+4)·u_acc·Σ|a||b| + 4·u_out·|ref| of the float64 product."""
    a64, b64 = a.double(), b.double()
    ref, mag = a64 @ b64, a64.abs() @ b64.abs()
    if bias is not None:
        ref, mag = ref + bias.double(), mag + bias.double().abs()
    pre = ref
    if activation == "relu":
        ref = torch.relu(ref)
    elif activation == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    k = a.shape[-1]
    tol = 1.2 * (k + 4) * u_acc * mag + 4 * U_OUT[a.dtype] * ref.abs() + 1e-30
    if activation == "gelu":  # cuBLASLt may use a fast tanh
        tol = tol + 1e-3 * (1 + pre.abs())
    err = (got.double() - ref).abs()
    assert got.dtype == a.dtype and got.shape == ref.shape
    assert bool((err <= tol).all()), (
        f"max err {err.max().item():.3e} (tol there {tol.flatten()[err.argmax()].item():.3e})"
    )


@pytest.mark.parametrize("kernel", ["cublas", "cublasLt"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_kernels_against_float64_small_m_and_odd_shapes(kernel, dtype):
    dt = DTYPES[dtype]
    policy = _require(kernel)
    shapes = [(m, 256 + 8 * m, 128 + 32 * (m % 4)) for m in range(1, 17)]
    shapes += [(257, 130, 333), (1, 1, 1), (64, 4096, 4096)]
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").to(dt)
        b = torch.randn(k, n, device="cuda").to(dt)
        c = ops.matmul(a, b, policy=policy)
        d = ops.last_decision()
        assert (d.chosen, d.rule, d.device) == (kernel, "policy.require", "cuda:0")
        _check(_torch(c), a, b)


@pytest.mark.parametrize("kernel", ["cublas", "cublasLt"])
def test_transposed_views_and_strided_batches(kernel):
    policy = _require(kernel)
    for dt in DTYPES.values():
        a = torch.randn(6, 48, 40, device="cuda").to(dt).transpose(1, 2)  # (6, 40, 48) view
        b = torch.randn(6, 48, 72, device="cuda").to(dt)
        _check(_torch(ops.bmm(a, b, policy=policy)), a, b)
        big = torch.randn(3, 2, 40, 90, device="cuda").to(dt)
        a2 = big[:, 1]  # batch stride 2·40·90: a strided batch, no copy
        b2 = torch.randn(90, 17, device="cuda").to(dt).t().contiguous().t()  # column-major
        _check(_torch(ops.matmul(a2, b2, policy=policy)), a2, b2)
        out = torch.empty(3, 17, 40, device="cuda", dtype=dt).transpose(1, 2)  # column-major out
        ops.matmul(a2, b2, out=out, policy=policy)
        _check(out, a2, b2)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_cublaslt_epilogues(dtype, activation):
    dt = DTYPES[dtype]
    for m in (1, 16, 100):
        x = torch.randn(2, m, 256, device="cuda").to(dt)
        w = torch.randn(192, 256, device="cuda").to(dt)  # nn.Linear layout: x @ w.T
        bias = torch.randn(192, device="cuda").to(dt)
        y = ops.matmul(x, w.t(), bias=bias, activation=activation, policy=_require("cublasLt"))
        _check(_torch(y), x, w.t(), bias=bias, activation=activation)


def _check_row_sums(got, a):
    """cuBLASLt's BGRAD reduction rounds its partial sums to the output type, so the
    bound has a u_out·Σ|a| term besides fp32 accumulation and the final rounding
    (measured on an H200: up to 2^-15·Σ|a| in fp16 at K = 256)."""
    a64 = a.double()
    ref, mag = a64.sum(-1), a64.abs().sum(-1)
    u = U_OUT[a.dtype]
    tol = 1.2 * ((a.shape[-1] + 4) * 2.0**-24 * mag + u * mag + 4 * u * ref.abs()) + 1e-30
    err = (got.double() - ref).abs()
    assert got.dtype == a.dtype and bool((err <= tol).all()), f"row sums: max err {err.max().item():.3e}"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "n_out,tokens,k_in", [(768, 8192, 2304), (2304, 4096, 768), (3072, 512, 768), (64, 1000, 96)]
)
def test_cublaslt_fused_row_sums_match_float64(dtype, n_out, tokens, k_in):
    """a_row_sums on cuBLASLt (BGRAD epilogue) in the linear-backward layout: a = gᵀ
    (a transposed view of the output gradient), b = the layer input; the product is
    the weight gradient and the row sums the bias gradient."""
    dt = DTYPES[dtype]
    g = torch.randn(tokens, n_out, device="cuda").to(dt)
    x = torch.randn(tokens, k_in, device="cuda").to(dt)
    sums = torch.full((n_out,), float("nan"), device="cuda", dtype=dt)
    w = ops.matmul_with_kernel("cublasLt", g.t(), x, a_row_sums=sums)
    _check(_torch(w), g.t(), x)
    _check_row_sums(sums, g.t())
    # A contiguous a reduces over the other operand (BGRADA/B swap); cuBLASLt may
    # offer no algorithm for it, which must surface as a typed error.
    a = g.t().contiguous()
    sums2 = torch.full_like(sums, float("nan"))
    try:
        w2 = ops.matmul_with_kernel("cublasLt", a, x, a_row_sums=sums2)
    except xrt.UnsupportedOperationError as e:
        assert "no algorithm" in str(e)
    else:
        _check(_torch(w2), a, x)
        _check_row_sums(sums2, a)


def test_fused_row_sums_refusals_on_gpu():
    # a as a transposed view: the linear-backward layout cuBLASLt has BGRAD algorithms for
    a = torch.randn(256, 64, device="cuda", dtype=torch.float16).t()
    b = torch.randn(256, 32, device="cuda", dtype=torch.float16)
    sums = torch.zeros(64, device="cuda", dtype=torch.float16)
    for kernel, rows in (("cublas", 64), ("skinny", 16)):  # skinny takes M <= 16
        with pytest.raises(xrt.UnsupportedOperationError, match="no fused row-sums"):
            ops.matmul_with_kernel(kernel, a[:rows], b, a_row_sums=sums[:rows])
    with pytest.raises(xrt.UnsupportedOperationError, match="float16 and bfloat16"):
        ops.matmul_with_kernel("cublasLt", a.float(), b.float(), a_row_sums=sums.float())
    assert bool((sums == 0).all())
    ops.matmul_with_kernel("cublasLt", a, b, a_row_sums=sums)  # still usable after the refusals
    _check_row_sums(sums, a)


def test_auto_choice_prefers_cublaslt_for_epilogues_and_explains_cublas():
    x = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    bias = torch.randn(32, device="cuda", dtype=torch.float16)
    ops.matmul(x, w, bias=bias, activation="relu")
    d = ops.last_decision()
    assert d.chosen == "cublasLt"
    assert d.candidate("cublas").reason_code == "attribute_unsupported"


def test_tf32_only_when_the_policy_allows_it():
    a = torch.randn(64, 4096, device="cuda")
    b = torch.randn(4096, 64, device="cuda")
    for kernel in ("cublas", "cublasLt"):
        strict = _torch(ops.matmul(a, b, policy=_require(kernel)))
        _check(strict, a, b)  # the fp32 bound, which tf32 would break
        ep = xrt.ExecutionPolicy(allow_tf32=True)
        fast = _torch(ops.matmul(a, b, policy=(_require(kernel), ep)))
        _check(fast, a, b, u_acc=2.0**-11)
        assert not torch.equal(fast, strict), f"{kernel}: allow_tf32 changed nothing"


@pytest.mark.parametrize("kernel", ["cublasLt", "skinny"])
def test_runs_on_the_callers_torch_stream(kernel):
    s = torch.cuda.Stream()
    a = torch.randn(16, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    previous = xrt.stream.current_stream("cuda:0")
    with torch.cuda.stream(s):
        xrt.stream.set_current_stream(xrt.Stream.wrap("cuda:0", s.cuda_stream))
        try:
            torch.cuda._sleep(50_000_000)  # keeps s busy: our GEMM must queue behind it
            a2 = a * 2  # produced on s
            c = ops.matmul(a2, b, policy=_require(kernel))
        finally:
            xrt.stream.set_current_stream(previous)
    s.synchronize()
    _check(_torch(c), a * 2, b)


def _write_inputs(tmp_path):
    g = torch.Generator(device="cuda").manual_seed(1234)
    a = torch.randn(16, 4096, device="cuda", generator=g, dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", generator=g, dtype=torch.float16)
    torch.save({"a": a.cpu(), "b": b.cpu()}, tmp_path / "inputs.pt")
    return a, b


def test_best_performance_winner_pin_reproduces_bits_across_runs_and_processes(tmp_path):
    a, b = _write_inputs(tmp_path)
    disp = xrt._core.Dispatcher.instance()
    disp.clear_tuning_cache()
    ops.clear_cache()
    policy = xrt.KernelPolicy(auto_strategy="best_performance")
    tuned = _torch(ops.matmul(a, b, policy=policy)).clone()
    d = ops.last_decision()
    assert d.rule == "auto.best_performance" and d.chosen in ("cublas", "cublasLt", "skinny")
    assert any(k.startswith("cublasLt/lt1:") for k in d.timings), d.timings
    winner = d.chosen if not d.algorithm else f"{d.chosen}/{d.algorithm}"
    # The fastest timing wins, or one within the measured noise (at least 1%) that comes
    # earlier in the stable candidate order, and the decision says it was a tie.
    assert d.timings[winner] == min(d.timings.values()) or "a tie with the fastest" in d.detail, (
        d.timings,
        d.detail,
    )
    _check(tuned, a, b)

    pinned = xrt.dispatch.export_pins(policy)
    path = tmp_path / "pins.json"
    pinned.save(path)
    again = _torch(ops.matmul(a, b, policy=xrt.KernelPolicy.load(path)))
    d2 = ops.last_decision()
    assert (d2.rule, d2.chosen, d2.algorithm) == ("pinned", d.chosen, d.algorithm)
    assert torch.equal(again, tuned)

    # A pinned cuBLASLt algorithm (the tuned one if cuBLASLt won, else its best) in a fresh process.
    lt_algo = d.algorithm if d.chosen == "cublasLt" else d.candidate("cublasLt").algorithm
    assert lt_algo.startswith("lt1:")
    here = _torch(ops.matmul_with_kernel("cublasLt", a, b, algorithm=lt_algo))
    here2 = _torch(ops.matmul_with_kernel("cublasLt", a, b, algorithm=lt_algo))
    assert torch.equal(here, here2)
    torch.save(here.cpu(), tmp_path / "here.pt")
    script = textwrap.dedent(
        f"""
        import json, torch, xpuruntime as xrt
        from xpuruntime import ops
        inp = torch.load({str(tmp_path / "inputs.pt")!r})
        a, b = inp["a"].cuda(), inp["b"].cuda()
        pinned = xrt.KernelPolicy.load({str(path)!r})
        c = torch.from_dlpack(ops.matmul(a, b, policy=pinned))
        d = ops.last_decision()
        lt = torch.from_dlpack(ops.matmul_with_kernel("cublasLt", a, b, algorithm={lt_algo!r}))
        torch.save({{"pinned": c.cpu(), "lt": lt.cpu()}}, {str(tmp_path / "there.pt")!r})
        print(json.dumps({{"rule": d.rule, "chosen": d.chosen, "algorithm": d.algorithm}}))
        """
    )
    env = dict(os.environ)
    res = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, env=env, timeout=240
    )
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert (info["rule"], info["chosen"], info["algorithm"]) == ("pinned", d.chosen, d.algorithm)
    there = torch.load(tmp_path / "there.pt")
    assert torch.equal(there["pinned"], tuned.cpu()), "the pinned choice gave other bits in another process"
    assert torch.equal(there["lt"], here.cpu()), (
        "the pinned cuBLASLt algorithm gave other bits in another process"
    )


def test_workspace_limit_reaches_the_kernels():
    a = torch.randn(16, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    tiny = xrt.ExecutionPolicy(workspace_limit_bytes=1)
    _check(_torch(ops.matmul(a, b, policy=(_require("cublasLt"), tiny))), a, b)
    with pytest.raises(xrt.UnsupportedOperationError, match="workspace_exceeded"):
        ops.matmul(a, b, policy=(_require("cublas"), tiny))
    small = xrt.ExecutionPolicy(workspace_limit_bytes=64 << 10)
    for kernel in ("cublas", "cublasLt"):
        _check(_torch(ops.matmul(a, b, policy=(_require(kernel), small))), a, b)


def test_mismatched_devices_and_unsupported_dtype_raise():
    a = torch.randn(4, 4, device="cuda")
    with pytest.raises(xrt.InvalidArgumentError, match="device"):
        ops.matmul(a, torch.randn(4, 4))
    with pytest.raises(xrt.UnsupportedOperationError, match="dtype_unsupported"):
        ops.matmul(a.double(), a.double(), policy=_require("cublasLt"))


def test_caller_workspace_is_used_and_checked():
    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.float16)
    ws = torch.empty(32 << 20, device="cuda", dtype=torch.uint8)
    for kernel in ("cublas", "cublasLt"):
        _check(_torch(ops.matmul_with_kernel(kernel, a, b, workspace=ws)), a, b)
        with pytest.raises(xrt.InvalidArgumentError, match="workspace"):
            ops.matmul_with_kernel(kernel, a, b, workspace=ws[:1024])
    with pytest.raises(xrt.InvalidArgumentError, match="workspace"):
        ops.matmul_with_kernel("cublasLt", a, b, workspace=torch.empty(32 << 20, dtype=torch.uint8))
    # still usable after the refusals
    _check(_torch(ops.matmul_with_kernel("cublasLt", a, b)), a, b)


def test_matmul_with_torch_workspace_inside_a_cuda_graph():
    a = torch.randn(64, 768, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(768, 2304, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(64, 2304, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    previous = xrt.stream.current_stream("cuda:0")

    def call():
        ws = torch.empty(32 << 20, device="cuda", dtype=torch.uint8)
        xrt.stream.set_current_stream(xrt.Stream.wrap("cuda:0", torch.cuda.current_stream().cuda_stream))
        ops.matmul_with_kernel("cublasLt", a, b, out=out, workspace=ws)

    try:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            call()
    finally:
        xrt.stream.set_current_stream(previous)
    out.zero_()
    a.copy_(torch.randn_like(a))  # the replay must read the new values
    graph.replay()
    torch.cuda.synchronize()
    _check(out, a, b)
