"""The engine interface (DESIGN.md §2 and §6).

An *engine* turns a whole ONNX model into something runnable on a device: ``native``
(our C++ compiler and executor) or an adapter around ONNX Runtime, OpenVINO,
TensorRT or QNN. Every engine takes the same policies, records each choice it makes
(its own selection, the policy mappings onto vendor knobs, where nodes landed) as
:class:`~xpuruntime.dispatch.Decision` objects, and exchanges tensors zero-copy where
the vendor allows it.

How to add an engine: subclass :class:`Engine` in ``engines/<name>.py``, implement
``availability`` (never raise ImportError: report the missing package with its
install hint), ``__init__`` (compile/build under the policies, recording decisions),
``inputs``/``outputs``, ``run`` and ``decisions``; then add it to
``engines/registry.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Availability:
    """Whether an engine can be used here, and if not, why and how to fix it."""

    available: bool
    reason: str = ""
    install_hint: str = ""
    devices: tuple[str, ...] = ()  # devices this engine can target here ("cpu", "cuda", "npu")
    # Devices of ``devices`` that are emulated here (QNN's HTP simulator on x86_64):
    # usable when the engine is named, never chosen by engine="auto".
    simulated: tuple[str, ...] = ()


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output: name, shape (int or symbolic str per dim), dtype name."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: str

    def __repr__(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"TensorInfo(name={self.name!r}, shape=[{dims}], dtype={self.dtype})"


@dataclass
class EngineOptions:
    """What InferenceSession hands to an engine, already validated."""

    device: str  # "cpu", "cuda:0", "npu", ...
    kernel_policy: Any = None  # xpuruntime.KernelPolicy or None
    exec_policy: Any = None  # xpuruntime.ExecutionPolicy or None
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific options


class Engine(ABC):
    """A compiled model on one engine and device. ``run`` must be thread-safe."""

    name: str = ""

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Report whether this engine can run here (cheap; no model needed)."""

    @classmethod
    def supports(cls, device: str, exec_policy: Any) -> tuple[str, str] | None:
        """Can this (available) engine compile for ``device`` under ``exec_policy``?

        None when it can, else ``(reason_code, detail)`` — e.g. ``("dtype_unsupported",
        "qnn needs precision='int8'")``. Called by the registry after availability and
        the device check passed; override to refuse precisions or shapes up front.
        """
        return None

    @abstractmethod
    def __init__(self, model: Any, options: EngineOptions) -> None:
        """Compile ``model`` (an ``onnx.ModelProto``, bytes or a path) under the policies."""

    @abstractmethod
    def inputs(self) -> Sequence[TensorInfo]:
        """The model inputs, in model order."""

    @abstractmethod
    def outputs(self) -> Sequence[TensorInfo]:
        """The model outputs, in model order."""

    @abstractmethod
    def run(self, inputs: Mapping[str, Any], output_names: Sequence[str] | None = None) -> dict[str, Any]:
        """Run once; inputs are validated arrays (numpy or DLPack-capable)."""

    @abstractmethod
    def decisions(self) -> list[Any]:
        """Every decision this engine recorded (xpuruntime.dispatch.Decision objects)."""
