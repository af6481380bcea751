"""xpuruntime — a unified GPU/NPU execution runtime.

Python is the control plane; the data plane (memory, streams, kernels, engines) is
the C++ core ``xpuruntime._core``. ``import xpuruntime`` never imports torch; the
PyTorch extension is ``xpuruntime.pytorch`` (lazy, optional).
"""

from __future__ import annotations

import importlib
from typing import Any

from ._loader import load_core

__version__ = "0.1.0"

_core = load_core()

from ._core import (  # noqa: E402
    BackendUnavailableError,
    CudaError,
    Event,
    InvalidArgumentError,
    InvalidModelError,
    OutOfMemoryError,
    PolicyError,
    Stream,
    Tensor,
    UnsupportedOperationError,
    XpuRuntimeError,
    from_dlpack,
)
from .runtime import memory, profiler, stream  # noqa: E402
from .runtime.device import (  # noqa: E402
    Device,
    get_all_devices,
    get_current_device,
    get_device_count,
    set_current_device,
    synchronize,
)
from .runtime.profiler import Profiler, profile  # noqa: E402

# Heavier parts load on first use, so `import xpuruntime` stays fast and needs
# neither onnx nor torch.
_LAZY_ATTRS = {
    "KernelPolicy": ("xpuruntime.policies", "KernelPolicy"),
    "ExecutionPolicy": ("xpuruntime.policies", "ExecutionPolicy"),
    "InferenceSession": ("xpuruntime.inference", "InferenceSession"),
    "preview_plan": ("xpuruntime.engines.native.preview", "preview_plan"),
    "LockViolationError": ("xpuruntime.lock", "LockViolationError"),
}
_LAZY_MODULES = {"ops", "kernels", "policies", "inference", "engines", "dispatch", "cli", "lock", "cache"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_ATTRS:
        module_name, attr = _LAZY_ATTRS[name]
        value = getattr(importlib.import_module(module_name), attr)
        globals()[name] = value
        return value
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "pytorch":
        try:
            return importlib.import_module(f"{__name__}.pytorch")
        except ImportError as e:
            raise ImportError(
                "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"
            ) from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__",
    # errors
    "XpuRuntimeError",
    "CudaError",
    "OutOfMemoryError",
    "UnsupportedOperationError",
    "InvalidArgumentError",
    "PolicyError",
    "InvalidModelError",
    "BackendUnavailableError",
    "LockViolationError",
    # devices
    "Device",
    "get_device_count",
    "get_all_devices",
    "get_current_device",
    "set_current_device",
    "synchronize",
    # tensors, streams, memory, profiling
    "Tensor",
    "from_dlpack",
    "Stream",
    "Event",
    "stream",
    "memory",
    "profiler",
    "Profiler",
    "profile",
    # policies and inference (lazy)
    "KernelPolicy",
    "ExecutionPolicy",
    "InferenceSession",
    "preview_plan",
]
