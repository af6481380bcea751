"""The native engine (DESIGN.md §5): ONNX front end, C++ compiler and executor.

:mod:`.frontend` loads and checks an ONNX model and describes it for the C++
compiler; :mod:`.engine` holds :class:`NativeEngine`; :mod:`.onnx_backend` exposes it
to ONNX's backend conformance tests.
"""

from .engine import NativeEngine, as_numpy, core_exec_policy, core_kernel_policy, devices, is_plan
from .preview import PlanPreview, preview_plan

__all__ = [
    "NativeEngine",
    "PlanPreview",
    "as_numpy",
    "core_exec_policy",
    "core_kernel_policy",
    "devices",
    "is_plan",
    "preview_plan",
]
