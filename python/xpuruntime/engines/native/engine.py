"""The native engine (DESIGN.md §5): our C++ compiler and executor.

``NativeEngine(model, options)`` loads the model through the ONNX front end
(:mod:`.frontend`), compiles it in C++ (constant folding,
BatchNorm folding, fusion, dispatch of every node through the Dispatcher under the
KernelPolicy, memory planning) and runs the resulting ``ExecutionPlan``. A plan saved
with :meth:`save_plan` loads back without the onnx package (``model`` may be a plan
file path or plan bytes). ``run`` is thread-safe and releases the GIL.

Devices: the plan is compiled for the session's device kind through the C++
``CompileOptions.device`` ("cpu", or "cuda" where the CUDA execution provider is
registered and a CUDA device is usable); inputs are host arrays and the executor copies
them to the device, and the outputs back, at the plan's edges. A saved plan runs on the
device its header names.

Engine-specific options (``EngineOptions.extra``): ``input_shapes`` (name → shape,
a specialization of symbolic dimensions), ``fold`` and ``fuse`` (compiler passes,
default on). Loading a saved plan: ``source_model`` (the ONNX model it should have been
compiled from: path, bytes or ``onnx.ModelProto``) or ``model_hash`` (its SHA-256 in
hex) makes the session refuse a plan compiled from another model
(``InvalidModelError`` naming both hashes; ``check_model_hash=False`` opts out), and
``check_policy=False`` accepts a plan compiled under other policies.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ... import _core
from ..._core import BackendUnavailableError, InvalidArgumentError, InvalidModelError
from ...policies import coerce
from .._common import host_array, normalize_output_names, parse_input_shapes
from ..base import Availability, Engine, EngineOptions, TensorInfo
from . import frontend

PLAN_MAGIC = b"XRTPLAN"
#: Where a plan's JSON header starts, by container version (the magic's last byte):
#: "2" has the header and blob SHA-256 digests before it (cpp/include/.../graph/plan.h).
_PLAN_HEADER_AT = {b"1": 16, b"2": 144, b"3": 144}


def core_kernel_policy(policy: Any) -> Any:
    """The C++ KernelPolicy behind ``policy`` (None -> the default policy)."""
    return coerce.core_kernel_policy(policy) or _core.KernelPolicy()


def core_exec_policy(policy: Any) -> Any:
    """The C++ ExecutionPolicy behind ``policy`` (None -> the default policy)."""
    return coerce.core_exec_policy(policy) or _core.ExecutionPolicy()


#: Device kinds this class drives (this build's plugin table, read from ``_core``): it
#: compiles for the kind (CompileOptions.device) and feeds the executor host arrays
#: (as_numpy), which copies them to the device and the outputs back at the plan's edges
#: through the kind's execution provider. The CPU first, then the table's order.
_DRIVEN = tuple(sorted((str(k) for k in _core.device_kinds()), key=lambda k: k != "cpu"))


def _providers() -> tuple[str, ...]:
    providers = getattr(_core.graph, "providers", None)
    return tuple(str(p) for p in providers()) if callable(providers) else ("cpu",)


def unavailable_reason(kind: str) -> str:
    """Why the native engine cannot run on device kind ``kind`` here ("" when it can).

    A kind needs an execution provider in the core (``_core.graph.providers()``) and,
    beyond the CPU, a usable device (a device plugin registers its provider even on a
    machine without its device; the DeviceManager says why it has none).
    """
    if kind not in _DRIVEN:
        return f"the native engine runs on {', '.join(_DRIVEN)} only, not on {kind!r}"
    dm = _core.DeviceManager.instance()
    # A device plugin loads on the first query of its kind, and registers its provider
    # then: ask for the device count first, so that the provider list below includes it.
    count = dm.get_device_count_of(kind) if kind != "cpu" else 0
    reason = dm.unavailable_reason(kind) if kind != "cpu" else ""
    if kind not in _providers():
        why = f": {reason}" if reason else ""
        return (
            f"no {kind} execution provider is registered in this build (registered: "
            f"{', '.join(_providers()) or 'none'}){why}"
        )
    if kind != "cpu" and count <= 0:
        return reason or f"no {kind.upper()} device was found"
    return ""


def devices() -> tuple[str, ...]:
    """Device kinds the native engine runs on here: those it drives that have an
    execution provider in the core and, for "cuda", a usable CUDA device."""
    return tuple(k for k in _DRIVEN if not unavailable_reason(k))


def plan_device(model: Any) -> str | None:
    """The device kind a saved plan was compiled for (its header's ``device``), or None
    when ``model`` is no readable plan (loading it then reports what is wrong)."""
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
        else:
            with open(Path(model), "rb") as f:
                data = f.read(144)
                if len(data) == 144 and data[:7] == PLAN_MAGIC:
                    # The header-length field is checked against the file before any read:
                    # a corrupt length (up to 2^64-1) is left to the plan loader's message.
                    size = int.from_bytes(data[8:16], "little")
                    if size > os.fstat(f.fileno()).st_size - _PLAN_HEADER_AT.get(data[7:8], 144):
                        return None
                    data += f.read(size)
        at = _PLAN_HEADER_AT.get(data[7:8])
        if data[:7] != PLAN_MAGIC or at is None or len(data) < at:
            return None
        size = int.from_bytes(data[8:16], "little")
        device = json.loads(data[at : at + size]).get("device")
    except (OSError, ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        return None
    return device if isinstance(device, str) else None


def model_sha256(model: Any) -> str:
    """SHA-256 (hex) of a model as the compiler records it in a plan's ``model_hash``:
    the bytes of a file or of ``bytes``; a ``ModelProto``'s serialization."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(model)).hexdigest()
    if isinstance(model, (str, os.PathLike)):
        try:
            return hashlib.sha256(Path(model).read_bytes()).hexdigest()
        except OSError as exc:
            raise InvalidModelError(f"cannot read the model '{model}' to check the plan: {exc}") from exc
    from ..onnx_model import load_model

    return str(load_model(model).sha256)


def is_plan(model: Any) -> bool:
    """Whether ``model`` is a saved plan (path to a plan file, or plan bytes)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model[:7]) == PLAN_MAGIC
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if p.is_file():
            with open(p, "rb") as f:
                return f.read(7) == PLAN_MAGIC
    return False


def _precision(exec_policy: Any) -> str:
    if exec_policy is None:
        return "fp32"
    v = getattr(exec_policy, "precision", "fp32")
    return str(getattr(v, "name", v)).lower().replace("precision.", "")


_PRECISIONS = {
    "fp32": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}
# DLPack device types of memory the CUDA kernels read in place (CUDA, pinned, managed).
_DL_CUDA = (2, 3, 13)


def on_device(value: Any) -> bool:
    """True for a tensor in CUDA memory (torch, cupy, our Tensor: anything with DLPack)."""
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack_device__"):
        return False
    try:
        return int(value.__dlpack_device__()[0]) in _DL_CUDA
    except (TypeError, ValueError, RuntimeError, AttributeError, BufferError):  # cannot say: host
        return False


class _DeviceMeta:
    """Shape and dtype of a device tensor for the input checks (numpy-style names)."""

    def __init__(self, name: str, value: Any) -> None:
        try:
            t = _core.from_dlpack(value)
        except Exception as exc:
            raise InvalidArgumentError(
                f"input '{name}': cannot view {type(value).__name__} through DLPack ({exc})"
            ) from exc
        self.value = value
        self.shape = tuple(t.shape)
        self.dtype = str(t.dtype)
        self.ndim = len(self.shape)


def stream_handle(stream: Any) -> int:
    """A raw CUDA stream handle from a torch/cupy stream, our Stream, or an int (0: none).

    torch's default stream is the legacy default stream, whose handle is 0; it is
    passed as cudaStreamLegacy (1) so that the run is ordered after its work."""
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr", "handle", "native_handle"):
        if hasattr(stream, attr):
            h = getattr(stream, attr)
            h = int(h() if callable(h) else h)
            return h if h != 0 else 1
    if isinstance(stream, int) and stream >= 0:
        return stream
    raise InvalidArgumentError(
        f"stream must be a torch.cuda.Stream, a cupy Stream, an xpuruntime Stream or a raw handle, "
        f"got {type(stream).__name__}"
    )


#: numpy dtypes the executor reads (the C++ DTypes with a numpy equivalent).
_NATIVE_DTYPES = frozenset(
    ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
)


def as_numpy(name: str, value: Any) -> np.ndarray:
    """A C-contiguous numpy view of an input (numpy, xpuruntime Tensor, any __dlpack__)."""
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "__dlpack__"):
        try:
            arr = np.from_dlpack(value)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:  # a CUDA tensor, say
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError, RuntimeError):
                raise InvalidArgumentError(
                    f"input '{name}': cannot view {type(value).__name__} on the CPU through DLPack ({exc}); "
                    "pass a CPU array"
                ) from exc
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:
            raise InvalidArgumentError(f"input '{name}' is not an array: {type(value).__name__}") from exc
    # Native byte order and alignment (a >f4 array is converted, exactly); masked and
    # structured arrays are refused, naming the input.
    arr = host_array(name, arr)
    if arr.dtype.name not in _NATIVE_DTYPES:
        raise InvalidArgumentError(
            f"input '{name}' has dtype {arr.dtype}, which the native engine does not run (it takes "
            f"{', '.join(sorted(_NATIVE_DTYPES))}); convert it with arr.astype(...) to the dtype the "
            "model declares"
        )
    # np.ascontiguousarray would turn a 0-d array into a 1-d one.
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


class NativeEngine(Engine):
    """A model compiled by xpuruntime's own compiler and run by its C++ executor."""

    name = "native"

    @classmethod
    def availability(cls) -> Availability:
        # Available everywhere (the CPU); the reason notes why a driven device is not.
        notes = "; ".join(f"{k}: {why}" for k in _DRIVEN if (why := unavailable_reason(k)))
        return Availability(True, notes, "", devices())

    @classmethod
    def supports(cls, device: str, exec_policy: Any) -> tuple[str, str] | None:
        kind = str(device).split(":")[0]
        why = unavailable_reason(kind)
        if why:
            return ("device_unavailable", f"the native engine cannot run on {kind} here: {why}")
        prec = _PRECISIONS.get(_precision(exec_policy))
        if prec is None or (prec != "fp32" and kind != "cuda"):
            detail = (
                f"the native engine runs float models in fp32 on {kind}"
                + (" and in fp16/bf16 on cuda" if kind != "cuda" else ", fp16 or bf16")
                + f"; precision={_precision(exec_policy)!r} is not available there "
                "(use engine='onnxruntime' or 'openvino' for int8, or precision='fp32')"
            )
            return (_core.reason.DTYPE_UNSUPPORTED, detail)
        return None

    def __init__(self, model: Any, options: EngineOptions) -> None:
        self._options = options
        self._kind, self._index = _device_of(options.device)
        self._kp = core_kernel_policy(options.kernel_policy)
        self._ep = core_exec_policy(options.exec_policy)
        self._fingerprint = _core.graph.policy_fingerprint(self._kp, self._ep)
        extra = dict(options.extra or {})
        self._extra = extra
        self._lock = threading.Lock()
        self._plans: dict[tuple[Any, ...], tuple[Any, Any]] = {}  # shapes -> (plan, executor)
        self._desc: dict[str, Any] | None = None
        self._plan = None
        self._executor = None
        if isinstance(model, _core.graph.ExecutionPlan):
            if model.device != self._kind:
                raise InvalidModelError(
                    f"plan was compiled for device '{model.device}' but this session runs on "
                    f"'{self._kind}'; recompile the plan for this device"
                )
            self._check_model_hash(model)
            self._use(model)
        elif is_plan(model):
            plan = self._load_plan(model, extra.get("check_policy", True))
            self._check_model_hash(plan)
            self._use(plan)
        else:
            loaded = frontend.load(model)
            self._desc = frontend.describe(loaded)
            self._model_hash = loaded.model_hash
            self._inputs = [TensorInfo(n, tuple(d), t) for n, t, d in self._desc["inputs"]]
            self._outputs = [TensorInfo(n, tuple(d), t) for n, t, d in self._desc["outputs"]]
            given = parse_input_shapes(extra.get("input_shapes"), self._inputs)
            static = all(all(isinstance(d, int) for d in i.shape) for i in self._inputs)
            if static or all(i.name in given for i in self._inputs):
                # Shapes known now: compile at once. Otherwise each new set of input
                # shapes gets its own plan at its first run (a specialization).
                # Keyed by the shapes it was specialized for, as a run looks it up
                # (the plan itself reports the model's declared, symbolic dims).
                shapes = tuple(tuple(given.get(i.name, i.shape)) for i in self._inputs)
                self._use(self._compile(given), key=shapes)
            else:
                # Not compiled before the first run: what the engine cannot run is
                # reported now, all of it at once, as a compile would.
                frontend.check_supported(self._desc, self._kind)

    def _compile(self, shapes: dict[str, list[int]]) -> Any:
        assert self._desc is not None
        with self._on_device():
            return _core.graph.compile(
                self._desc,
                self._kp,
                self._ep,
                model_hash=self._model_hash,
                input_shapes=shapes,
                fold=bool(self._extra.get("fold", True)),
                fuse=bool(self._extra.get("fuse", True)),
                device=self._kind,
            )

    @contextmanager
    def _on_device(self) -> Iterator[None]:
        """Makes the session's device current on this thread (the provider compiles,
        uploads constants and runs on the current device), restoring the previous one."""
        if self._index is None:
            yield
            return
        dm = _core.DeviceManager.instance()
        prev = dm.get_current_device()
        if prev == f"{self._kind}:{self._index}":
            yield
            return
        dm.set_current_device_spec(f"{self._kind}:{self._index}")
        try:
            yield
        finally:
            dm.set_current_device_spec(prev)

    def _new_executor(self, plan: Any) -> Any:
        with self._on_device():
            return _core.graph.Executor(plan)

    def _use(self, plan: Any, key: tuple[Any, ...] | None = None) -> None:
        self._plan = plan
        self._executor = self._new_executor(plan)
        self._inputs = [TensorInfo(n, tuple(d), t) for n, t, d in plan.inputs]
        self._outputs = [TensorInfo(n, tuple(d), t) for n, t, d in plan.outputs]
        if key is None:
            key = tuple(tuple(d) for _, _, d in plan.inputs)
        self._plans[key] = (plan, self._executor)

    def _executor_for(self, arrays: Mapping[str, np.ndarray]) -> Any:
        if self._desc is None or self._plan is not None and self._static_plan():
            return self._executor
        infos = self._desc_inputs()
        key = self._check_inputs(infos, arrays)
        with self._lock:
            hit = self._plans.get(key)
            if hit is None:
                plan = self._compile({i.name: list(arrays[i.name].shape) for i in infos})
                if len(self._plans) >= 8:  # keep a few specializations
                    self._plans.pop(next(iter(self._plans)))
                hit = (plan, self._new_executor(plan))
                self._plans[key] = hit
            self._plan = hit[0]
            return hit[1]

    @staticmethod
    def _check_inputs(infos: Sequence[TensorInfo], arrays: Mapping[str, np.ndarray]) -> tuple[Any, ...]:
        """Validates names, dtypes, ranks and fixed dims (same messages as the executor)."""

        def decl(i: TensorInfo) -> str:
            return f"{i.dtype}[{', '.join('?' if d is None else str(d) for d in i.shape)}]"

        def expect() -> str:  # only for messages: every run passes here (issue 36: per-run cost)
            return ", ".join(f"{i.name}: {decl(i)}" for i in infos)

        names = [i.name for i in infos]
        for n in arrays:
            if n not in names:
                raise InvalidArgumentError(f"unknown input name '{n}'; the model's inputs are: {expect()}")
        for i in infos:
            if i.name not in arrays:
                raise InvalidArgumentError(f"missing input '{i.name}'; the model's inputs are: {expect()}")
            a = arrays[i.name]
            if str(a.dtype) != i.dtype:
                raise InvalidArgumentError(
                    f"input '{i.name}' has dtype {a.dtype} but the model expects {decl(i)}"
                )
            if a.ndim != len(i.shape):
                raise InvalidArgumentError(
                    f"input '{i.name}' has rank {a.ndim} (shape {list(a.shape)}) but the model expects {decl(i)}"
                )
            for k, (got, want) in enumerate(zip(a.shape, i.shape)):
                if isinstance(want, int) and got != want:
                    raise InvalidArgumentError(
                        f"input '{i.name}' has shape {list(a.shape)} but the model expects {decl(i)}: "
                        f"dimension {k} must be {want}"
                    )
        return tuple(tuple(arrays[n].shape) for n in names)

    def _static_plan(self) -> bool:
        return all(all(isinstance(d, int) for d in i.shape) for i in self._desc_inputs())

    def _desc_inputs(self) -> list[TensorInfo]:
        assert self._desc is not None
        return [TensorInfo(n, tuple(d), t) for n, t, d in self._desc["inputs"]]

    def _load_plan(self, model: Any, check_policy: bool) -> Any:
        # The plan must be for this session's device kind (the C++ check names both).
        fp = self._fingerprint if check_policy else ""
        if isinstance(model, (bytes, bytearray, memoryview)):
            return _core.graph.ExecutionPlan.deserialize(
                bytes(model), device=self._kind, policy_fingerprint=fp
            )
        return _core.graph.ExecutionPlan.load(str(model), device=self._kind, policy_fingerprint=fp)

    def _check_model_hash(self, plan: Any) -> None:
        """Refuses a plan compiled from another model than the one the caller names
        (``source_model`` or ``model_hash``), unless ``check_model_hash=False``."""
        extra = self._extra
        if not extra.get("check_model_hash", True):
            return
        want = extra.get("model_hash")
        what = "the given model_hash"
        if extra.get("source_model") is not None:
            want = model_sha256(extra["source_model"])
            what = "the given source_model"
        if want is None:
            return
        if not isinstance(want, str):
            raise InvalidArgumentError(f"model_hash must be a SHA-256 hex string, got {type(want).__name__}")
        if want.lower() != plan.model_hash:
            raise InvalidModelError(
                f"the plan was compiled from the model with SHA-256 {plan.model_hash or '(none recorded)'}, "
                f"but {what} has SHA-256 {want.lower()}; compile the plan from this model "
                "(InferenceSession(model, engine='native').save_plan(...)), or pass "
                "check_model_hash=False to run it anyway"
            )

    # ----------------------------------------------------------------- Engine API
    def inputs(self) -> Sequence[TensorInfo]:
        return list(self._inputs)

    def outputs(self) -> Sequence[TensorInfo]:
        return list(self._outputs)

    def run(
        self,
        inputs: Mapping[str, Any],
        output_names: Sequence[str] | None = None,
        *,
        outputs: Sequence[Any] | None = None,
        stream: Any = None,
    ) -> dict[str, Any]:
        """Runs the model.

        ``inputs`` may be numpy arrays or tensors in the plan device's memory (torch, cupy,
        our Tensor: read in place through DLPack). ``outputs``: caller buffers, one per
        requested output, written in place (their entries of the result are those buffers).
        ``stream``: the caller's CUDA stream (torch/cupy/ours/raw handle); the run is issued
        on it, after the caller's earlier work. With torch CUDA inputs and no stream, torch's
        current stream is used. Without buffers, device inputs give torch CUDA outputs where
        torch is the producer and shapes are static; otherwise numpy arrays.
        """
        if not isinstance(inputs, Mapping):
            raise InvalidArgumentError(
                f"inputs must be a dict of name -> array, got {type(inputs).__name__}; "
                f"expected inputs: {self._executor.describe_inputs()}"
            )
        if (
            outputs is not None
            or stream is not None
            or self._use_graph()
            or any(on_device(v) for v in inputs.values())
        ):
            return self._run_io(inputs, output_names, outputs, stream)
        output_names = normalize_output_names(output_names)  # [] means all, as in ORT
        arrays = {str(k): as_numpy(str(k), v) for k, v in inputs.items()}
        names = list(output_names) if output_names is not None else [o.name for o in self._outputs]
        executor = self._executor_for(arrays)
        with self._on_device():
            outs = executor.run(arrays, names if output_names is not None else None)
        return dict(zip(names, outs))

    def _use_graph(self) -> bool:
        return bool(getattr(self._ep, "cuda_graph", False)) and self._kind == "cuda"

    def _run_io(
        self, inputs: Mapping[str, Any], output_names: Sequence[str] | None, outputs: Any, stream: Any
    ) -> dict[str, Any]:
        vals = {
            str(k): (_DeviceMeta(str(k), v) if on_device(v) else as_numpy(str(k), v))
            for k, v in inputs.items()
        }
        names = list(output_names) if output_names is not None else [o.name for o in self._outputs]
        executor = self._executor_for(vals)
        self._last_executor = executor
        handle = stream_handle(stream)
        torch_inputs = [v.value for v in vals.values() if isinstance(v, _DeviceMeta) and _is_torch(v.value)]
        if handle == 0 and torch_inputs:
            import torch

            handle = stream_handle(torch.cuda.current_stream(torch_inputs[0].device))
        given = outputs
        if given is None and torch_inputs:
            given = _torch_outputs(self._plan, names, torch_inputs[0].device)
        if given is not None:
            given = list(given)
            if len(given) != len(names):
                raise InvalidArgumentError(
                    f"got {len(given)} output buffers for {len(names)} outputs ({', '.join(names)}); "
                    "pass one per requested output"
                )
        feed = {k: (v.value if isinstance(v, _DeviceMeta) else v) for k, v in vals.items()}
        with self._on_device():
            outs, stats = executor.run_io(
                feed,
                names if output_names is not None else None,
                outputs=given,
                stream=handle,
                use_graph=self._use_graph(),
            )
        self._last_stats = dict(stats)
        if given is not None:
            outs = [g if o is None else o for o, g in zip(outs, given)]
        return dict(zip(names, outs))

    def last_run_stats(self) -> dict[str, Any]:
        """Copies (count, bytes per direction), steps run and graph capture/replay of the last
        run that took device tensors, caller buffers, a stream or a CUDA graph."""
        return dict(getattr(self, "_last_stats", {}))

    def graph_status(self) -> str:
        """'captured', 'not captured yet', or why the plan cannot be replayed as a CUDA graph."""
        if not self._use_graph():
            return "off (ExecutionPolicy(cuda_graph=True) on device='cuda' turns it on)"
        executor = getattr(self, "_last_executor", None) or self._executor
        return str(executor.graph_status()) if executor is not None else "no plan yet"

    def build_timings(self) -> dict[str, float]:
        """Where building (or loading) the latest plan went, in ms: the plan's phases
        (``read``, ``verify``, ``parse``, ``passes``, ``prepare``, ``prepare:<kernel>``) and
        its executor's (``upload``; ``graph_first_run`` and ``graph_capture`` once a CUDA
        graph was captured)."""
        out: dict[str, float] = {}
        if self._plan is not None:
            out.update({str(k): float(v) for k, v in dict(self._plan.timings_ms).items()})
        executor = getattr(self, "_last_executor", None) or self._executor
        if executor is not None:
            out.update({str(k): float(v) for k, v in dict(executor.timings_ms()).items()})
        return out

    def decisions(self) -> list[Any]:
        from ...dispatch.decision import Decision

        if self._plan is None:
            return []
        return [Decision.from_dict(json.loads(d)) for d in self._plan.decisions]

    # ------------------------------------------------------------ native extras
    @property
    def plan(self) -> Any:
        """The compiled ``_core.graph.ExecutionPlan`` (the latest specialization; None before the
        first run of a model with symbolic input dimensions)."""
        return self._plan

    def _need_plan(self) -> Any:
        if self._plan is None:
            raise InvalidArgumentError(
                "the model has symbolic input dimensions and no plan was compiled yet: run it once, or "
                "pass input_shapes={name: shape} to compile a specialization up front"
            )
        return self._plan

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the compiled plan; it loads back without the ONNX model or the onnx package."""
        self._need_plan().save(str(path))

    def memory(self) -> dict[str, int]:
        """Arena (peak) bytes next to the sum of all intermediates, constants, dynamic values."""
        return dict(self._need_plan().memory)

    def explain_text(self) -> str:
        return str(self._need_plan().summary())

    def __repr__(self) -> str:
        steps = len(self._plan.steps) if self._plan is not None else "?"
        return f"NativeEngine({steps} steps, device={self._options.device})"

    @property
    def device(self) -> str:
        """The device the plans run on ("cpu", "cuda:0", ...)."""
        return str(self._options.device)


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def _torch_outputs(plan: Any, names: Sequence[str], device: Any) -> list[Any] | None:
    """torch tensors for the outputs when every one has a static shape (else None)."""
    import torch

    shapes = {n: (t, d) for n, t, d in plan.outputs}
    out = []
    for n in names:
        dtype, dims = shapes[n]
        if any(not isinstance(d, int) for d in dims):
            return None
        td = getattr(torch, dtype, None)
        if td is None:
            return None
        out.append(torch.empty(tuple(dims), dtype=td, device=device))
    return out


def _device_of(device: str) -> tuple[str, int | None]:
    """(kind, device index or None) of a session device; beyond the CPU (a kind of
    this build's plugin table) the index must exist here."""
    kind, _, idx = str(device).strip().lower().partition(":")
    if kind == "cpu" or kind not in _DRIVEN:
        return kind, None
    why = unavailable_reason(kind)
    if why:
        raise BackendUnavailableError(
            f"the native engine cannot run on {device}: {why}; use device='cpu', or run on a machine "
            f"with the device, its driver and xpuruntime's {kind} plugin"
        )
    index = int(idx) if idx.isdigit() else 0
    count = _core.DeviceManager.instance().get_device_count_of(kind)
    if index >= count:
        raise InvalidArgumentError(
            f"device {device} does not exist: this machine has {count} {kind.upper()} device(s) "
            f"({kind}:0..{kind}:{count - 1})"
        )
    return kind, index
