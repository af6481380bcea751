"""Ops dispatched through the KernelPolicy: ``matmul`` and its batched form ``bmm``.

Operands may be numpy arrays, xpuruntime Tensors or anything with ``__dlpack__``
(torch, cupy, jax; zero-copy). The kernel is chosen by the policy
(``KernelPolicy`` op key ``"matmul"``: ``onednn``, ``cpu_gemv``, ``cpu_blas``, ``cpu_blocked``, ``cublas``,
``cublasLt``) and every choice is recorded in the dispatcher's decision log
(:func:`last_decision`, ``xpuruntime.dispatch``). CUDA work runs on the calling
thread's current xpuruntime stream (``xpuruntime.stream``), which can wrap a torch
stream.

Example::

    import numpy as np, xpuruntime as xrt
    y = xrt.ops.matmul(np.ones((4, 8), np.float32), np.ones((8, 3), np.float32),
                       bias=np.zeros(3, np.float32), activation="relu")
    print(xrt.ops.last_decision().summary())   # matmul cpu -> onednn (auto.first_supported)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .. import _core
from ..dispatch.decision import Decision
from ..policies import coerce

__all__ = [
    "ACTIVATIONS",
    "bmm",
    "clear_cache",
    "cpu_gemm_info",
    "last_decision",
    "matmul",
    "matmul_with_kernel",
]

#: Activations the matmul epilogue applies after the bias. ``"gelu"`` is the tanh
#: approximation (the one cuBLASLt fuses): ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``.
ACTIVATIONS = ("none", "relu", "gelu")

_ops = _core.ops
_matmul = _ops.matmul


def _split_policy(policy: Any) -> tuple[Any, Any]:
    """``policy`` -> (KernelPolicy or None, ExecutionPolicy or None)."""
    if policy is None:
        return None, None
    if isinstance(policy, (tuple, list)):
        kernel = execution = None
        for p in policy:
            k, e = _split_policy(p)
            kernel = k if k is not None else kernel
            execution = e if e is not None else execution
        return kernel, execution
    kind = coerce.policy_kind(policy)
    if kind == "kernel":
        return policy, None
    if kind == "execution":
        return None, policy
    raise TypeError(
        f"policy must be a KernelPolicy, an ExecutionPolicy, a (KernelPolicy, ExecutionPolicy) "
        f"pair or None, got {type(policy).__name__}"
    )


def matmul(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    out: Any = None,
    policy: Any = None,
    node: str = "",
) -> _core.Tensor:
    """``activation(a @ b + bias)`` with NumPy ``matmul`` semantics.

    Args:
        a: ``(..., M, K)`` or ``(K,)``; any strides (a transpose is a view).
        b: ``(..., K, N)`` or ``(K,)``; batch dims broadcast against ``a``'s.
        bias: ``(N,)``, added to every row; same dtype and device as ``a``.
        activation: ``None``/``"none"``, ``"relu"`` or ``"gelu"`` (tanh form, see ``ACTIVATIONS``).
        out: a tensor of the result's shape, dtype and device to write into.
        policy: a ``KernelPolicy`` (which kernel), an ``ExecutionPolicy`` (tf32, workspace
            limit, determinism, strict assertions) or a pair of both; ``None`` uses the
            dispatcher's current policy (``xpuruntime.dispatch``) and defaults.
        node: a call-site name recorded in the decision.

    Returns:
        An xpuruntime ``Tensor`` on the operands' device (``out`` itself when given).

    Raises:
        InvalidArgumentError: shapes that do not multiply, mixed dtypes or devices, a bad
            ``out`` or ``bias`` (the message names the shapes).
        UnsupportedOperationError: no kernel the policy allows can run this case (the
            decision, with every candidate's reason, is in the log).
        PolicyError: the policy names an unknown kernel.
    """
    # Positional on purpose: this is the hot path (see benchmarks/bench_matmul.py).
    if policy is None:
        return _matmul(a, b, bias, activation, out, None, None, node)
    kernel_policy, execution_policy = _split_policy(policy)
    return _matmul(a, b, bias, activation, out, kernel_policy, execution_policy, node)


def bmm(a: Any, b: Any, *, out: Any = None, policy: Any = None, node: str = "") -> _core.Tensor:
    """Batched matmul of ``(B, M, K)`` by ``(B, K, N)`` (the same batch size, no broadcast).

    Strided batches (any batch stride, including views) run as one strided-batched
    GEMM on the GPU kernels. See :func:`matmul` for ``out``, ``policy`` and errors.
    """
    a_shape, b_shape = _shape_of(a), _shape_of(b)
    if len(a_shape) != 3 or len(b_shape) != 3 or a_shape[0] != b_shape[0]:
        raise _core.InvalidArgumentError(
            f"bmm: expected a (B, M, K) and b (B, K, N) with one batch size B, got a {list(a_shape)} "
            f"and b {list(b_shape)}; use matmul for broadcasting"
        )
    return matmul(a, b, out=out, policy=policy, node=node)


def matmul_with_kernel(
    kernel: str,
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    out: Any = None,
    execution_policy: Any = None,
    algorithm: str = "",
    workspace: Any = None,
    a_row_sums: Any = None,
) -> _core.Tensor:
    """Runs one named matmul kernel directly, bypassing the policy (records no decision).

    For tests and benchmarks that compare kernels; ``algorithm`` is a kernel-specific id
    (a cuBLASLt algorithm as written into pins). ``workspace`` is an optional contiguous
    buffer (anything with ``__dlpack__``) used as the kernel's scratch instead of one of
    ours; the PyTorch integration passes one from torch's allocator so the call can be
    captured in a CUDA graph. ``a_row_sums`` is an optional ``(M,)`` tensor of the
    operands' dtype that receives ``a.sum(-1)`` from the same kernel (2-D operands, no
    bias or activation; only ``cublasLt`` has it, as its BGRAD epilogue: with
    ``a = grad_out.T`` and ``b = input`` the call gives a linear layer's weight and
    bias gradients; cuBLASLt rounds the partial sums to the output dtype). Raises ``UnsupportedOperationError`` with the kernel's
    reason when it cannot run the case, ``InvalidArgumentError`` when the workspace is
    smaller than the kernel needs or ``a_row_sums`` does not fit.
    """
    return _ops.matmul_with_kernel(
        kernel,
        a,
        b,
        bias=bias,
        activation=activation,
        out=out,
        execution_policy=execution_policy,
        algorithm=algorithm,
        workspace=workspace,
        a_row_sums=a_row_sums,
    )


def last_decision() -> Decision | None:
    """The Decision of this thread's last successful :func:`matmul`, or ``None``."""
    d = json.loads(_ops.last_decision_json())
    return Decision.from_dict(d) if d.get("op") else None


def clear_cache() -> None:
    """Forget the per-case kernel choices :func:`matmul` cached (e.g. after re-tuning)."""
    _ops.clear_cache()


def cpu_gemm_info() -> dict[str, Any]:
    """The CPU kernels' build, chosen at run time for this CPU: ``{"isa": "avx512"|"avx2"|"portable",
    "blas_available": bool, "blas": str, "vector_isa": "x86-64-v4"|"x86-64-v3"|"baseline",
    "onednn": str}`` (``isa``: the cpu_blocked GEMM's micro-kernel, the widest this CPU runs;
    ``vector_isa``: the compiled clone the vectorized elementwise, softmax and normalization
    loops run; ``onednn``: the oneDNN version and threading runtime the onednn kernels use, or
    why the build has none)."""
    return dict(_ops.cpu_gemm_info())


def _shape_of(x: Any) -> Sequence[int]:
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = _core.from_dlpack(x).shape
    return tuple(int(d) for d in shape)
