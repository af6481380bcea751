"""Engines: native (ours) and adapters around ONNX Runtime, OpenVINO, TensorRT, QNN.

Importing this package imports no vendor package; see ``registry`` for lookup,
availability and engine selection, and ``base`` for the interface.
"""

from .base import Availability, Engine, EngineOptions, TensorInfo
from .registry import (
    availability,
    canonical_name,
    get_engine_class,
    list_engines,
    register_engine,
    select_engine,
)

__all__ = [
    "Availability",
    "Engine",
    "EngineOptions",
    "TensorInfo",
    "availability",
    "canonical_name",
    "get_engine_class",
    "list_engines",
    "register_engine",
    "select_engine",
]
