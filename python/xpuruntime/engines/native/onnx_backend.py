"""``onnx.backend.base.Backend`` over the native engine, for ONNX's conformance tests.

    import onnx.backend.test
    from xpuruntime.engines.native.onnx_backend import NativeBackend
    tests = onnx.backend.test.BackendTest(NativeBackend, __name__)

``prepare`` compiles the model for ``device`` ("CPU", or "CUDA[:N]" where the native
engine runs on CUDA here: :func:`xpuruntime.engines.native.devices`) and returns a rep whose ``run`` takes inputs in
model order and returns outputs in model order, as the ONNX test runner expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ..base import EngineOptions
from .engine import NativeEngine, devices


class NativeBackendRep(BackendRep):
    """A compiled model; ``run`` maps positional inputs to the graph's inputs."""

    def __init__(self, engine: NativeEngine) -> None:
        self.engine = engine
        self.input_names = [i.name for i in engine.inputs()]
        self.output_names = [o.name for o in engine.outputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = dict(zip(self.input_names, list(inputs)))
        out = self.engine.run(feed)
        return tuple(out[n] for n in self.output_names)


class NativeBackend(Backend):
    """ONNX backend API over the native engine on the CPU or, where usable, CUDA."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return _session_device(device).split(":")[0] in devices()

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> NativeBackendRep:
        super().prepare(model, device, **kwargs)
        return NativeBackendRep(NativeEngine(model, EngineOptions(_session_device(device))))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        raise NotImplementedError("the native engine runs whole models; use run_model")


def _session_device(device: str) -> str:
    """ONNX's device string ("CPU", "CUDA", "CUDA:1") as a session device ("cpu", "cuda:0")."""
    kind, _, index = str(device).strip().lower().partition(":")
    if kind == "cuda":
        return f"cuda:{index or 0}"
    return kind
