"""xpuruntime.pytorch — the PyTorch extension (seed 002), optional and lazy.

It needs PyTorch (``pip install xpuruntime[torch]``); importing it without torch
raises ImportError with that instruction. It never replaces autograd or the
optimizers: it routes torch's matmul / attention / layernorm to the kernels a
:class:`xpuruntime.KernelPolicy` names (and records why), adds our fused ops,
autocast tied to the policy's precision hint, CUDA graph capture of whole
training steps, our caching allocator and joint profiling.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError:
    raise ImportError(
        "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"
    ) from None

from . import ops
from .allocator import allocator_enabled, allocator_stats, reset_allocator, set_allocator
from .autocast import autocast
from .graph import CUDAGraphWrapper, capture_graph
from .policy import (
    clear_decision_log,
    clear_kernel_policy,
    decision_log,
    explain,
    get_kernel_policy,
    get_precision_hint,
    routing_counts,
    save_lock,
    set_kernel_policy,
    set_precision_hint,
)
from .profiling import profile

__all__ = [
    "CUDAGraphWrapper",
    "allocator_enabled",
    "allocator_stats",
    "autocast",
    "capture_graph",
    "clear_decision_log",
    "clear_kernel_policy",
    "decision_log",
    "explain",
    "get_kernel_policy",
    "get_precision_hint",
    "ops",
    "profile",
    "reset_allocator",
    "routing_counts",
    "save_lock",
    "set_allocator",
    "set_kernel_policy",
    "set_precision_hint",
]
