"""ONNX models as every engine receives them: one loader, one dtype table.

:func:`load_model` accepts a path (external data included), serialized bytes or an
``onnx.ModelProto`` and returns a :class:`ModelSource` with the content hash the
engine caches key on. The native engine's front end
(:mod:`xpuruntime.engines.native.frontend`) checks and converts what it returns; the
vendor adapters hand it to their runtimes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._core import InvalidModelError
from .base import TensorInfo

__all__ = [
    "ONNX_DTYPES",
    "ORT_TYPE_NAMES",
    "ModelSource",
    "dims",
    "has_dynamic_dims",
    "import_onnx",
    "load_model",
    "numpy_dtype",
    "onnx_io",
]

#: ONNX TensorProto element type -> canonical dtype name (dtype.h).
ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}

#: ONNX Runtime's type strings ("tensor(float)") -> canonical dtype names.
ORT_TYPE_NAMES: dict[str, str] = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(double)": "float64",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(int16)": "int16",
    "tensor(uint16)": "uint16",
    "tensor(int32)": "int32",
    "tensor(uint32)": "uint32",
    "tensor(int64)": "int64",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype for a canonical dtype name (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def import_onnx() -> Any:
    """The onnx package, or InvalidModelError saying how to install it."""
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a dependency of the engines
        raise InvalidModelError(
            "loading an ONNX model needs the onnx package (pip install onnx); "
            "a saved plan (InferenceSession.save_plan) runs without it"
        ) from exc
    return onnx


@dataclass
class ModelSource:
    """One ONNX model, whatever form it came in, with a content hash.

    ``path`` is kept when the model came from a file, so vendors that resolve external
    data relative to the file can read it themselves. ``origin`` is ``"path:<file>"``,
    ``"bytes"`` or ``"proto"``.
    """

    proto: Any  # onnx.ModelProto
    path: Path | None = None
    origin: str = "proto"
    _bytes: bytes | None = field(default=None, repr=False)
    _hash: str | None = field(default=None, repr=False)

    @property
    def bytes(self) -> bytes:
        """The serialized model (external data inlined)."""
        if self._bytes is None:
            self._bytes = self.proto.SerializeToString()
        return self._bytes

    @property
    def sha256(self) -> str:
        """SHA-256 of the model as given (the file's or the caller's bytes; a proto's
        serialization): what the engine caches are keyed on."""
        if self._hash is None:
            self._hash = hashlib.sha256(self.bytes).hexdigest()
        return self._hash


def _parse(onnx: Any, data: bytes, what: str) -> Any:
    try:
        return onnx.load_from_string(data)
    except Exception as exc:
        raise InvalidModelError(f"{what} is not a valid ONNX model (truncated or corrupt?): {exc}") from exc


def check_names_are_text(proto: Any) -> None:
    """InvalidModelError naming the first name in ``proto`` that is not UTF-8.

    protobuf hands a string field holding other bytes over as ``bytes``; every later
    step (engines, plans, messages) needs text, so such a model is refused here with
    the typed error instead of a UnicodeDecodeError deep inside (issue 19).
    """
    graphs = [("graph", proto.graph)]
    while graphs:
        where, g = graphs.pop()
        names = [(f"{where} input", v.name) for v in g.input]
        names += [(f"{where} output", v.name) for v in g.output]
        names += [(f"{where} value_info", v.name) for v in g.value_info]
        names += [(f"{where} initializer", t.name) for t in g.initializer]
        for i, node in enumerate(g.node):
            at = f"{where} node {i}"
            names += [(at, node.name), (f"{at} op_type", node.op_type), (f"{at} domain", node.domain)]
            names += [(f"{at} input", n) for n in node.input] + [(f"{at} output", n) for n in node.output]
            for a in node.attribute:
                names.append((f"{at} attribute", a.name))
                if a.HasField("g"):
                    graphs.append((f"{at} attribute {a.name}", a.g))
                graphs.extend((f"{at} attribute {a.name}", sub) for sub in a.graphs)
        for what, value in names:
            if isinstance(value, bytes):
                from .._core import policy_util

                raise InvalidModelError(
                    f"the model's {what} name {policy_util.quote_input(value)} is not UTF-8 text; "
                    "ONNX names are UTF-8 strings: rename it in the model"
                )


def load_model(model: Any) -> ModelSource:
    """Reads ``model`` (path, bytes, ``onnx.ModelProto`` or a ModelSource).

    Raises:
        InvalidModelError: a missing file, bytes that are no ONNX model, unreadable
            external data, or another type of argument.
    """
    if isinstance(model, ModelSource):
        return model
    onnx = import_onnx()
    if isinstance(model, onnx.ModelProto):
        check_names_are_text(model)
        return ModelSource(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        proto = _parse(onnx, data, "the model bytes")
        check_names_are_text(proto)
        return ModelSource(proto, origin="bytes", _bytes=data)
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise InvalidModelError(
                f"model file '{path}' does not exist (pass an .onnx path, bytes or a ModelProto)"
            )
        data = path.read_bytes()
        proto = _parse(onnx, data, f"'{path}'")
        check_names_are_text(proto)
        try:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(proto, str(path.parent))
        except Exception as exc:
            raise InvalidModelError(f"cannot load the external data of '{path}': {exc}") from exc
        return ModelSource(proto, path=path, origin=f"path:{path}", _hash=hashlib.sha256(data).hexdigest())
    raise InvalidModelError(f"model must be a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def dims(value_info: Any) -> list[int | str | None]:
    """A value's dimensions: ints, symbolic names, None where unknown ([] without a shape)."""
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return []
    out: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(str(d.dim_param))
        else:
            out.append(None)
    return out


def onnx_io(proto: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """Graph inputs (initializers excluded) and outputs as TensorInfo."""
    inits = {i.name for i in proto.graph.initializer}

    def info(vi: Any) -> TensorInfo:
        code = vi.type.tensor_type.elem_type
        return TensorInfo(vi.name, tuple(dims(vi)), ONNX_DTYPES.get(code, f"onnx_type_{code}"))

    ins = [info(v) for v in proto.graph.input if v.name not in inits]
    outs = [info(v) for v in proto.graph.output]
    return ins, outs


def has_dynamic_dims(infos: Iterable[TensorInfo]) -> list[str]:
    """Names of inputs with a dimension that is not a fixed integer."""
    return [t.name for t in infos if any(not isinstance(d, int) or d < 0 for d in t.shape)]
