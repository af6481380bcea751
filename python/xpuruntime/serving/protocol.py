"""Protocol-neutral pieces of the Open Inference Protocol (KServe v2).

The REST and gRPC front ends both turn a request into an :class:`InferRequest`
(name -> numpy array) and a :class:`InferResponse` back into their wire format;
everything between (validation, batching, running) sees only these types. Errors
are :class:`ServingError` with the HTTP status and gRPC code the protocol expects,
and a message that says what was wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Protocol datatype <-> numpy dtype (the protocol's "Tensor Data Types" table). BYTES
# (variable-length strings) has no numpy fixed-size equivalent and no engine of ours
# takes string tensors, so it is refused with a clear message rather than guessed.
_DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_BY_DTYPE = {v: k for k, v in _DATATYPES.items()}
# The protocol's raw tensors are little-endian: on a little-endian host they are used as they come.
_LITTLE = sys.byteorder == "little"


class ServingError(Exception):
    """A request the server refuses, with the protocol's HTTP status and gRPC code.

    Attributes:
        http_status: the REST status code (400, 404, 413, 503, 500).
        grpc_code: the name of the ``grpc.StatusCode`` member (``"INVALID_ARGUMENT"``, ...).
    """

    def __init__(self, message: str, http_status: int = 400, grpc_code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.http_status = http_status
        self.grpc_code = grpc_code


def invalid(message: str) -> ServingError:
    """A malformed or inconsistent request (HTTP 400, INVALID_ARGUMENT)."""
    return ServingError(message, 400, "INVALID_ARGUMENT")


def not_found(message: str) -> ServingError:
    """An unknown model or version (HTTP 404, NOT_FOUND)."""
    return ServingError(message, 404, "NOT_FOUND")


def unavailable(message: str) -> ServingError:
    """A model that is not ready, or a server shutting down (HTTP 503, UNAVAILABLE)."""
    return ServingError(message, 503, "UNAVAILABLE")


def overloaded(message: str) -> ServingError:
    """Back-pressure: the model's queue is full (HTTP 503, RESOURCE_EXHAUSTED)."""
    return ServingError(message, 503, "RESOURCE_EXHAUSTED")


def too_large(message: str) -> ServingError:
    """A request body over the server's limit (HTTP 413, RESOURCE_EXHAUSTED)."""
    return ServingError(message, 413, "RESOURCE_EXHAUSTED")


def datatype_of(dtype: np.dtype) -> str:
    """The protocol datatype name of a numpy dtype (``float32`` -> ``"FP32"``)."""
    dt = np.dtype(dtype)
    if dt not in _BY_DTYPE:
        raise invalid(f"dtype {dt} has no Open Inference Protocol datatype")
    return _BY_DTYPE[dt]


def dtype_of(datatype: str, where: str) -> np.dtype:
    """The numpy dtype of a protocol datatype; ServingError naming ``where`` when unknown."""
    dt = _DATATYPES.get(str(datatype).upper())
    if dt is None:
        raise invalid(f"{where}: datatype {datatype!r} is not supported; use one of {', '.join(_DATATYPES)}")
    return dt


def check_shape(shape: Any, where: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, or ServingError."""
    if isinstance(shape, (list, tuple)):
        dims = tuple(shape)
        # type() rather than isinstance(): bool is an int subclass and is not a dimension.
        if all(type(d) is int and d >= 0 for d in dims):
            return dims
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape
    ):
        raise invalid(f"{where}: 'shape' must be a list of integers, got {shape!r}")
    if any(d < 0 for d in shape):
        raise invalid(f"{where}: 'shape' {list(shape)} has a negative dimension")
    return tuple(int(d) for d in shape)


def element_count(shape: Sequence[int]) -> int:
    """Number of elements of ``shape`` (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def array_from_bytes(raw: bytes | memoryview, dt: np.dtype, shape: tuple[int, ...], where: str) -> np.ndarray:
    """A tensor from its raw little-endian row-major bytes (binary extension, raw contents).

    The array is a read-only view of ``raw`` on little-endian hosts (no copy).
    """
    want = element_count(shape) * dt.itemsize
    if len(raw) != want:
        raise invalid(
            f"{where}: {len(raw)} bytes of binary data for shape {list(shape)} {datatype_of(dt)} "
            f"which needs {want} bytes; send exactly shape x element size"
        )
    if _LITTLE:
        return np.frombuffer(raw, dtype=dt).reshape(shape)
    return np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt).reshape(shape)


def raw_bytes(arr: np.ndarray) -> bytes:
    """The array's row-major bytes in the protocol's byte order (little-endian)."""
    bo = arr.dtype.byteorder
    if bo == ">" or (bo == "=" and not _LITTLE):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr).tobytes()


def array_from_list(data: Any, dt: np.dtype, shape: tuple[int, ...], where: str) -> np.ndarray:
    """A tensor from JSON/gRPC typed contents (flat or nested, row-major)."""
    try:
        arr = np.asarray(data, dtype=dt)
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid(f"{where}: 'data' does not convert to {datatype_of(dt)}: {exc}") from None
    if arr.size != element_count(shape):
        raise invalid(
            f"{where}: {arr.size} elements of data for shape {list(shape)} "
            f"({element_count(shape)} elements); the data must fill the shape exactly"
        )
    return arr.reshape(shape)


@dataclasses.dataclass
class RequestedOutput:
    """An output the client asked for; ``binary`` selects the binary tensor extension (REST)."""

    name: str
    binary: bool = False


@dataclasses.dataclass
class InferRequest:
    """One inference request in protocol-neutral form."""

    model: str
    version: str
    inputs: dict[str, np.ndarray]
    outputs: list[RequestedOutput] | None = None
    id: str = ""
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    binary_outputs: bool = False  # REST: every output in binary unless an output says otherwise


class SharedParameters:
    """Response parameters that many responses share (model, engine, device, policy, batch size).

    The scheduler builds one per model version and batch size at load, so a response
    does not format them again; front ends cache their wire encoding of them in
    ``encoded`` (by front end). ``values`` must not change once the object is shared.
    """

    __slots__ = ("encoded", "values")

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values: dict[str, Any] = dict(values)
        self.encoded: dict[str, Any] = {}


@dataclasses.dataclass
class InferResponse:
    """One response: outputs in the requested order and the provenance parameters.

    ``parameters`` holds every parameter; when ``shared`` is given, the parameters it
    holds are in ``parameters`` too, and the rest are this response's own.
    """

    model: str
    version: str
    outputs: dict[str, np.ndarray]
    parameters: dict[str, Any]
    id: str = ""
    shared: SharedParameters | None = None


def select_outputs(
    all_outputs: Mapping[str, np.ndarray], requested: list[RequestedOutput] | None
) -> dict[str, np.ndarray]:
    """The requested outputs (all when none were named), in the order asked."""
    if not requested:
        return dict(all_outputs)
    return {r.name: all_outputs[r.name] for r in requested}
