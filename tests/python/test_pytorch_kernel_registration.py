"""Our custom ops' CUDA kernels are registered with the dispatcher directly
(ops._bridge.cuda_kernel, issue 31): every op has one, and the mechanism keeps what the
custom op defines (schema, fake implementation, autograd formula) working. The CUDA
kernels themselves run in the GPU suites; here the same registration is made for the
CPU key of a test op, which CPU torch can run: eager with autograd, torch.compile, opcheck.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import xpuruntime.pytorch  # noqa: F401 - registers the ops
from xpuruntime.pytorch.ops import _bridge

OPS = (
    "linear",
    "linear_backward",
    "matmul",
    "column_sums",
    "layer_norm_fwd",
    "layer_norm_bwd",
    "flash_attn_fwd",
    "flash_attn_bwd",
)


@pytest.mark.parametrize("name", OPS)
def test_every_op_has_a_cuda_kernel_and_its_cpu_reference(name):
    qualname = f"xpuruntime::{name}"
    for key in ("CUDA", "CPU", "Autograd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), (qualname, key)


# A test op: defined for CUDA only by the custom op, its CPU kernel registered the way our
# CUDA kernels are (cuda_kernel with the CPU key).
@_bridge.custom_op("xrt_test_h31::scaled", mutates_args=(), device_types="cuda")
def _scaled(x: torch.Tensor, factor: float) -> torch.Tensor:
    raise AssertionError("the CUDA implementation never runs in this test")


_calls: list[int] = []


@_bridge.cuda_kernel(_scaled, dispatch_key="CPU")
def _scaled_cpu(x, factor):
    _calls.append(1)
    return x * factor


@_scaled.register_fake
def _(x, factor):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.factor = inputs[1]


_scaled.register_autograd(lambda ctx, g: (g * ctx.factor, None), setup_context=_setup)


def test_a_directly_registered_kernel_runs_with_the_ops_autograd():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    n = len(_calls)
    y = torch.ops.xrt_test_h31.scaled.default(x, 3.0)
    assert len(_calls) == n + 1  # our function, through the dispatcher
    assert torch.equal(y, x.detach() * 3.0)
    y.square().sum().backward()
    assert torch.allclose(x.grad, 18.0 * x.detach(), rtol=1e-12, atol=0)


def test_a_directly_registered_kernel_compiles_and_passes_opcheck():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, generator=g)

    def f(t):
        return torch.ops.xrt_test_h31.scaled.default(t + 1, 0.5).relu()

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert torch.allclose(got, ((x + 1) * 0.5).relu(), rtol=1e-6, atol=1e-6)
    torch.library.opcheck(_scaled, (x.requires_grad_(True), 2.0))
