"""Protocol-neutral pieces of the Open Inference Protocol (KServe v2).

The REST and gRPC front ends both turn a request into an :class:`InferRequest`
(name -> numpy array) and a :class:`InferResponse` back into their wire format;
everything between (validation, batching, running) sees only these types. Errors
are :class:`ServingError` with the HTTP status and gRPC code the protocol expects,
and a message that says what was wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import re
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
    """A tensor from JSON/gRPC typed contents (flat or nested, row-major), strictly typed.

    The Open Inference Protocol's rules, without silent conversions: numbers for the
    numeric datatypes (never strings), integers within range for the integer ones
    (``1.7`` for INT64 is refused, not truncated), ``true``/``false`` for BOOL, and
    floats within the datatype's range (``1e6`` for FP16 is refused, not made inf).
    """
    try:
        arr = np.asarray(data)
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid(f"{where}: 'data' is not a list of {datatype_of(dt)} values: {exc}") from None
    if arr.size != element_count(shape):
        raise invalid(
            f"{where}: {arr.size} elements of data for shape {list(shape)} "
            f"({element_count(shape)} elements); the data must fill the shape exactly"
        )
    name = datatype_of(dt)
    kind = arr.dtype.kind
    if arr.size == 0:
        return np.zeros(shape, dt)
    if dt.kind == "b":
        if kind != "b":
            raise invalid(f"{where}: BOOL data must be JSON true/false, got {_first_value(arr)!r}")
        return arr.astype(dt).reshape(shape)
    if kind not in "iuf":
        # "b": booleans, "U": strings, "O": mixed values or integers beyond 64 bits.
        raise invalid(
            f"{where}: {name} data must be JSON numbers, got {_first_value(arr)!r} "
            f"({_kind_name(arr)}); send the values as numbers"
        )
    if dt.kind in "iu":
        if kind == "f" and _all_python_ints(data):
            # integers that numpy promoted to float64 (a UINT64 above 2**63 beside small
            # ones): checked and converted exactly, from the parsed integers themselves
            exact = np.asarray(data, dtype=object).reshape(-1)
            info = np.iinfo(dt)
            lo, hi = min(exact), max(exact)
            if lo < info.min or hi > info.max:
                shown = lo if lo < info.min else hi
                raise invalid(f"{where}: {name} value {int(shown)} is outside {info.min}..{info.max}")
            return np.array(list(exact), dtype=dt).reshape(shape)
        if kind == "f":
            bad = arr[arr != np.trunc(arr)] if np.isfinite(arr).all() else arr[~np.isfinite(arr)]
            shown = (bad.reshape(-1)[0] if bad.size else arr.reshape(-1)[0]).item()
            raise invalid(f"{where}: {name} data must be integers, got {shown!r}; send whole numbers")
        info = np.iinfo(dt)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            shown = lo if lo < info.min else hi
            raise invalid(f"{where}: {name} value {int(shown)} is outside {info.min}..{info.max}")
        return arr.astype(dt).reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dt)
    overflow = np.isinf(out) & np.isfinite(arr)
    if overflow.any():
        shown = arr[overflow].reshape(-1)[0].item()
        raise invalid(
            f"{where}: {name} value {float(shown)!r} is beyond the datatype's range "
            f"(+-{float(np.finfo(dt).max)!r}); send it in a wider datatype"
        )
    return out.reshape(shape)


def _all_python_ints(data: Any) -> bool:
    """Whether nested lists ``data`` hold only Python ints (no floats, no bools)."""
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif type(v) is not int:
            return False
    return True


def _first_value(arr: np.ndarray) -> Any:
    flat = arr.reshape(-1)
    if arr.dtype.kind == "O":
        for v in flat:
            if isinstance(v, (str, bool)) or not isinstance(v, (int, float)):
                return _short(v)
    return _short(flat[0].item() if hasattr(flat[0], "item") else flat[0])


def _kind_name(arr: np.ndarray) -> str:
    return {
        "b": "booleans",
        "U": "strings",
        "S": "strings",
        "O": "mixed values or integers beyond 64 bits",
    }.get(arr.dtype.kind, str(arr.dtype))


def _short(value: Any, limit: int = 64) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"... ({len(value)} characters)"
    return value


def check_finite_for_json(name: str, arr: np.ndarray) -> None:
    """Refuse an output JSON cannot carry: NaN and +-inf have no JSON number.

    Rather than writing ``null`` (which reads back as a missing value) or a non-JSON token,
    the request is refused with the fix: the binary tensor extension carries every float.
    """
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        bad = arr[~np.isfinite(arr)].reshape(-1)[0]
        raise invalid(
            f"output '{name}' holds {float(bad)!r}, which JSON cannot represent; request it as "
            'binary data (output parameters {"binary_data": true}, or "binary_data_output": true '
            "for every output) to receive NaN and infinities exactly"
        )


# ---------------------------------------------------------------------------- names
#: Model names: what a folder of the repository may be called and a URL segment can
#: carry unencoded. Anything else is refused before any lookup, so the answer never
#: depends on what exists on the host's disk.
MAX_NAME_LENGTH = 128
_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.\-]{{0,{MAX_NAME_LENGTH - 1}}}")
_VERSION = re.compile(r"[0-9]{1,18}")


def is_model_name(name: Any) -> bool:
    """Whether ``name`` is a valid model name (letters, digits, ``_ . -``; no leading dot)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_model_name(name: Any) -> str:
    """``name`` when it is a valid model name, else ServingError 400 (the same for any invalid name)."""
    if not is_model_name(name):
        raise invalid(
            f"{_shown(name)} is not a valid model name: a model name is 1 to {MAX_NAME_LENGTH} letters, "
            "digits, '_', '.' or '-', not starting with '.'; see the repository index for the models"
        )
    return name


def check_version(version: Any) -> str:
    """``version`` when it is empty (the newest) or a decimal version number, else ServingError 400."""
    if version == "" or (isinstance(version, str) and _VERSION.fullmatch(version)):
        return version
    raise invalid(f"model version must be a decimal integer, got {_shown(version)}")


def _shown(value: Any) -> str:
    text = str(value)
    if len(text) > 64:
        return repr(text[:64]) + f"... ({len(text)} characters)"
    return repr(text)


def check_load_parameters(params: Mapping[str, Any] | None) -> None:
    """Refuse load-request parameters: Triton's ``config`` override and ``file:`` contents
    are not supported, and a load that silently ignored them would serve something else
    than the client asked for."""
    if params:
        key = min(params)
        raise invalid(
            f"model load parameter {_shown(key)} is not supported (no configuration overrides or "
            "file contents through the API); change the model's files in the repository and load it "
            "again without parameters"
        )


# ---------------------------------------------------------------------------- JSON
#: Deepest nesting of arrays and objects a request body may have. An infer body nests
#: its tensors' data by their rank (a handful of levels); anything deeper is refused
#: before parsing, whatever the JSON parser's own limit.
MAX_JSON_DEPTH = 64
_JSON_SPECIAL = np.zeros(256, np.bool_)
_JSON_SPECIAL[[ord(c) for c in '"\\[]{}']] = True


def json_depth(buf: bytes | memoryview, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of JSON text ``buf`` (or a bound above ``limit`` when deeper).

    Linear and allocation-light: when the text has no more than ``limit`` opening brackets
    it cannot nest deeper and is not scanned; otherwise brackets inside strings (with
    their escapes) are told apart from structural ones by a vectorized scan. On invalid
    JSON the result is exact up to the first error, which is as far as a parser reads.
    """
    raw = bytes(buf) if isinstance(buf, memoryview) else buf
    opens = raw.count(b"[") + raw.count(b"{")
    if opens <= limit:
        return opens
    a = np.frombuffer(raw, np.uint8)
    pos = np.flatnonzero(_JSON_SPECIAL[a])
    ch = a[pos]
    if b'"' not in raw:  # no strings: every bracket is structural
        outside = np.ones(pos.size, np.bool_)
    else:
        escaped = np.zeros(pos.size, np.bool_)
        if b"\\" in raw:
            idx = np.arange(pos.size)
            is_bs = ch == 0x5C
            adjacent = np.zeros(pos.size, np.bool_)
            adjacent[1:] = pos[1:] - pos[:-1] == 1
            cont = np.zeros(pos.size, np.bool_)
            cont[1:] = is_bs[1:] & is_bs[:-1] & adjacent[1:]
            latest = np.maximum.accumulate(np.where(is_bs & ~cont, idx, -1))
            run = np.where(is_bs, idx - latest + 1, 0)  # backslashes in a row ending here
            escaped[1:] = is_bs[:-1] & adjacent[1:] & (run[:-1] % 2 == 1)
        quote = (ch == 0x22) & ~escaped
        outside = (np.cumsum(quote, dtype=np.int64) & 1) == 0
    delta = (outside & ((ch == 0x5B) | (ch == 0x7B))).astype(np.int32)
    delta -= outside & ((ch == 0x5D) | (ch == 0x7D))
    return int(np.cumsum(delta, dtype=np.int64).max(initial=0))


def loads_json(buf: bytes | memoryview, what: str = "the request body") -> Any:
    """Parse JSON text with a nesting limit (ServingError 400 when too deep or invalid)."""
    import orjson

    depth = json_depth(buf)
    if depth > MAX_JSON_DEPTH:
        raise invalid(
            f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep; "
            "the protocol's documents need only a few levels (send tensor data flat)"
        )
    try:
        return orjson.loads(buf)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise invalid(f"{what} nests too deeply to be parsed") from None


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
