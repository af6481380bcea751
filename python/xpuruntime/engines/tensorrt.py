"""TensorRT engine adapter (DESIGN.md §6).

Build: the ONNX model goes through TensorRT's ONNX parser; the builder config takes
the policy (precision, TF32, workspace limit) and shape profiles; the serialized
engine and the timing cache are stored in the content-addressed cache of
``trt_cache`` (model hash, policy fingerprint, build options, GPU name, compute
capability, TensorRT and CUDA versions). A stale, corrupt or mismatched entry is
detected, reported with the reason, and rebuilt. A progress bar follows the build.

Precision: TensorRT ≤ 10 takes builder flags (FP16, BF16, INT8 with a QDQ model);
TensorRT 11 builds strongly typed networks only, so fp16 is obtained by converting
the ONNX model to float16 (fp32 I/O kept) before parsing, int8 needs a QDQ model,
and bf16 needs a model exported in bfloat16. Each mapping is a Decision.

Run: inputs that are already on the device (``__cuda_array_interface__`` or a
DLPack CUDA tensor) are bound by pointer, without a copy; host inputs are copied in.
Outputs are device buffers (``DeviceArray``) when any input came from the device,
else numpy arrays.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..cache.tensorrt import BuildKey, EngineCache
from . import _cuda
from ._common import DecisionRecorder, pol, policy_fingerprint, precision
from .base import Availability, Engine, EngineOptions, TensorInfo
from .onnx_model import has_dynamic_dims, load_model, onnx_io

INSTALL_HINT = "pip install xpuruntime[tensorrt]"
_QDQ = {"QuantizeLinear", "DequantizeLinear"}
_KDLCUDA = 2


def _import_trt() -> Any:
    import tensorrt

    return tensorrt


class TensorRtEngine(Engine):
    """A TensorRT engine for one CUDA device, built (or loaded from cache) at init."""

    name = "tensorrt"

    @classmethod
    def availability(cls) -> Availability:
        try:
            trt = _import_trt()
        except (ImportError, OSError) as exc:
            return Availability(
                False,
                f"TensorRT is not usable here ({type(exc).__name__}: {exc}); the 'tensorrt' wheel needs its "
                "libraries package (tensorrt-cu12-libs / tensorrt-cu13-libs)",
                INSTALL_HINT,
            )
        probe = _cuda.probe()
        if probe.device_count == 0:
            return Availability(
                False,
                f"TensorRT {trt.__version__} is installed but there is no CUDA device: {probe.reason}",
                INSTALL_HINT,
            )
        return Availability(True, "", INSTALL_HINT, ("cuda",))

    @classmethod
    def supports(cls, device: str, exec_policy: Any) -> tuple[str, str] | None:
        if device.split(":")[0] != "cuda":
            return ("device_unavailable", f"TensorRT runs on CUDA devices only, not {device}")
        return None

    # ------------------------------------------------------------------ building
    def __init__(self, model: Any, options: EngineOptions) -> None:
        from .._core import UnsupportedOperationError

        trt = _import_trt()
        self._trt = trt
        self._device = options.device
        index = int(options.device.partition(":")[2] or 0)
        self._ctx = _cuda.DriverContext(index)
        gpu = _cuda.device_info(index)
        ep = options.exec_policy
        self._rec = DecisionRecorder(self.name, options.device)
        src = load_model(model)
        self._inputs, self._outputs = onnx_io(src.proto)
        self._logger = trt.Logger(trt.Logger.WARNING)

        weakly_typed = hasattr(trt.BuilderFlag, "FP16")  # TensorRT <= 10
        prec = precision(ep)
        model_bytes, flags = self._precision(src, prec, weakly_typed)
        profiles = self._profiles(options)
        workspace = int(pol(ep, "workspace_limit_bytes", 0) or 0)
        tf32 = bool(pol(ep, "allow_tf32", False))
        build_options = {
            "precision": prec,
            "flags": sorted(flags),
            "profiles": profiles,
            "workspace_limit_bytes": workspace,
            "tf32": tf32,
            "kernel_policy": policy_fingerprint(options.kernel_policy),
        }
        key = BuildKey(
            model_sha256=src.sha256,
            policy_fingerprint=policy_fingerprint(ep),
            gpu_name=gpu.name,
            compute_capability=gpu.compute_capability,
            tensorrt_version=str(trt.__version__),
            cuda_version=_driver_version_text(),
            build_options=build_options,
        )
        cache = EngineCache(options.extra.get("cache_dir"))
        self._cache_key = key
        self._runtime = trt.Runtime(self._logger)
        look = cache.lookup(key)
        engine = None
        if look.hit:
            engine = self._runtime.deserialize_cuda_engine(look.payload)
            if engine is None:
                cache.invalidate(key)
                look.status, look.reason = (
                    "stale",
                    f"TensorRT {trt.__version__} could not deserialize the cached engine; rebuilding",
                )
        if engine is None:
            if look.status != "miss":
                warnings.warn(f"xpuruntime TensorRT cache: {look.reason}", stacklevel=2)
            payload = self._build(
                trt,
                model_bytes,
                flags,
                profiles,
                workspace,
                tf32,
                cache,
                key,
                bool(options.extra.get("progress", True)),
            )
            cache.store(key, payload, extra={"model_inputs": [i.name for i in self._inputs]})
            engine = self._runtime.deserialize_cuda_engine(payload)
            if engine is None:
                raise UnsupportedOperationError(
                    "TensorRT built an engine it cannot deserialize; see the TensorRT log above"
                )
        self._rec.note(
            "engine.cache", look.status if look.hit else "rebuilt", f"cache.{look.status}", look.reason
        )
        self._engine = engine
        self._context = engine.create_execution_context()
        self._lock = threading.Lock()  # an execution context runs one inference at a time
        self._io = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in self._io}
        self._dtype = {n: np.dtype(trt.nptype(engine.get_tensor_dtype(n))) for n in self._io}
        self._out_names = [o.name for o in self._outputs]

    def _precision(self, src: Any, prec: str, weakly_typed: bool) -> tuple[bytes, set[str]]:
        from .._core import UnsupportedOperationError

        ops = {n.op_type for n in src.proto.graph.node}
        if prec == "fp32":
            self._rec.mapping("precision", prec, "builder_flags", "none", default=True)
            return src.bytes, set()
        if prec == "int8":
            if not ops & _QDQ:
                raise UnsupportedOperationError(
                    "precision='int8' on TensorRT needs an explicitly quantized (QDQ) model; quantize it first "
                    "(e.g. onnxruntime.quantization.quantize_static with QuantFormat.QDQ)"
                )
            flags = {"INT8"} if weakly_typed else set()
            self._rec.mapping(
                "precision",
                prec,
                "builder_flags",
                sorted(flags) or "strongly typed QDQ",
                detail="int8: the QDQ nodes fix the int8 regions",
            )
            return src.bytes, flags
        if weakly_typed:
            flag = {"fp16": "FP16", "bf16": "BF16"}[prec]
            self._rec.mapping("precision", prec, "builder_flags", flag)
            return src.bytes, {flag}
        if prec == "fp16":
            from onnxruntime.transformers.float16 import convert_float_to_float16

            self._rec.mapping(
                "precision",
                prec,
                "model_conversion",
                "float16(keep_io_types=True)",
                detail="TensorRT 11 is strongly typed: the model is converted to float16 before parsing",
            )
            return convert_float_to_float16(src.proto, keep_io_types=True).SerializeToString(), set()
        raise UnsupportedOperationError(
            f"precision={prec!r} on TensorRT {self._trt.__version__} (strongly typed) needs a model exported in {prec}; "
            "export it so, or use precision='fp16'"
        )

    def _profiles(self, options: EngineOptions) -> dict[str, list[list[int]]]:
        """Shape profile per dynamic input: extra["shape_profiles"] {name: (min, opt, max)}
        or extra["input_shapes"] {name: shape} (min = opt = max)."""
        from .._core import PolicyError

        dynamic = has_dynamic_dims(self._inputs)
        given = options.extra.get("shape_profiles") or {}
        fixed = options.extra.get("input_shapes") or {}
        out: dict[str, list[list[int]]] = {}
        for name in dynamic:
            if name in given:
                out[name] = [list(map(int, s)) for s in given[name]]
            elif name in fixed:
                out[name] = [list(map(int, fixed[name]))] * 3
            else:
                raise PolicyError(
                    f"TensorRT needs the shapes of dynamic input {name!r}: pass engine options "
                    f"input_shapes={{{name!r}: [...]}} or shape_profiles={{{name!r}: (min, opt, max)}}"
                )
        if out:
            self._rec.mapping(
                "static_shape",
                bool(pol(options.exec_policy, "static_shape", False)),
                "optimization_profile",
                out,
            )
        return out

    def _build(
        self,
        trt: Any,
        model_bytes: bytes,
        flags: set[str],
        profiles: dict[str, list[list[int]]],
        workspace: int,
        tf32: bool,
        cache: EngineCache,
        key: BuildKey,
        progress: bool,
    ) -> bytes:
        from .._core import InvalidModelError, UnsupportedOperationError

        builder = trt.Builder(self._logger)
        net_flags = 0
        if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH") and not hasattr(
            trt.BuilderFlag, "STRONGLY_TYPED"
        ):
            net_flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)  # TensorRT 8.x
        network = builder.create_network(net_flags)
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(model_bytes):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise InvalidModelError("TensorRT's ONNX parser rejected the model:\n  " + "\n  ".join(errors))
        config = builder.create_builder_config()
        for flag in sorted(flags):
            config.set_flag(getattr(trt.BuilderFlag, flag))
        if hasattr(trt.BuilderFlag, "TF32") and not tf32:
            config.clear_flag(trt.BuilderFlag.TF32)
        self._rec.mapping("allow_tf32", tf32, "BuilderFlag.TF32", tf32)
        if workspace:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
            self._rec.mapping("workspace_limit_bytes", workspace, "MemoryPoolType.WORKSPACE", workspace)
        if profiles:
            profile = builder.create_optimization_profile()
            for name, (mn, opt, mx) in profiles.items():
                profile.set_shape(name, mn, opt, mx)
            config.add_optimization_profile(profile)
        timing_bytes, why = cache.load_timing(key)
        timing = config.create_timing_cache(timing_bytes or b"")
        config.set_timing_cache(timing, ignore_mismatch=False)
        self._rec.note("engine.timing_cache", "loaded" if timing_bytes else "new", "cache.timing", why)
        monitor = _ProgressMonitor(trt) if progress and hasattr(trt, "IProgressMonitor") else None
        if monitor is not None:
            config.progress_monitor = monitor
        try:
            serialized = builder.build_serialized_network(network, config)
        finally:
            if monitor is not None:
                monitor.close()
        if serialized is None:
            raise UnsupportedOperationError(
                "TensorRT could not build an engine for this model under the policy; see the TensorRT log above"
            )
        cache.store_timing(key, bytes(config.get_timing_cache().serialize()))
        return bytes(serialized)

    # ------------------------------------------------------------------ running
    def inputs(self) -> Sequence[TensorInfo]:
        return list(self._inputs)

    def outputs(self) -> Sequence[TensorInfo]:
        return list(self._outputs)

    def decisions(self) -> list[Any]:
        return list(self._rec.items)

    @property
    def cache_key(self) -> BuildKey:
        return self._cache_key

    def run(self, inputs: Mapping[str, Any], output_names: Sequence[str] | None = None) -> dict[str, Any]:
        names = self._out_names if output_names is None else list(output_names)
        keep: list[Any] = []  # host copies and capsules that must outlive the launch
        on_device = False
        with self._lock:
            self._ctx.make_current()
            for name, value in inputs.items():
                ptr, shape, dev = _device_pointer(value, keep)
                if dev:
                    on_device = True
                else:
                    host = np.ascontiguousarray(value, dtype=self._dtype[name])
                    buf = _cuda.DeviceArray(self._ctx, host.shape, host.dtype)
                    self._ctx.copy_htod(buf.ptr, host.ctypes.data, host.nbytes)
                    keep += [host, buf]
                    ptr, shape = buf.ptr, host.shape
                self._context.set_input_shape(name, tuple(shape))
                self._context.set_tensor_address(name, ptr)
            outs: dict[str, _cuda.DeviceArray] = {}
            for name in self._io:
                if self._is_input[name]:
                    continue
                arr = _cuda.DeviceArray(
                    self._ctx, tuple(self._context.get_tensor_shape(name)), self._dtype[name]
                )
                self._context.set_tensor_address(name, arr.ptr)
                outs[name] = arr
            if not self._context.execute_async_v3(self._ctx.stream.value or 0):
                from .._core import XpuRuntimeError

                raise XpuRuntimeError(
                    f"TensorRT execute_async_v3 failed on {self._device}; see the TensorRT log"
                )
            self._ctx.synchronize()
        if on_device:
            return {n: outs[n] for n in names}
        return {n: outs[n].numpy() for n in names}


def _device_pointer(value: Any, keep: list[Any]) -> tuple[int, tuple[int, ...], bool]:
    """(pointer, shape, True) for a contiguous CUDA tensor; (0, (), False) for host data."""
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        if cai.get("strides") not in (None, ()):
            itemsize = np.dtype(cai["typestr"]).itemsize
            expect = tuple(
                int(np.prod(cai["shape"][i + 1 :], dtype=np.int64)) * itemsize
                for i in range(len(cai["shape"]))
            )
            if tuple(cai["strides"]) != expect:
                from .._core import InvalidArgumentError

                raise InvalidArgumentError(
                    "TensorRT inputs on the device must be contiguous; call .contiguous() first"
                )
        return int(cai["data"][0]), tuple(cai["shape"]), True
    if hasattr(value, "__dlpack_device__") and value.__dlpack_device__()[0] == _KDLCUDA:
        capsule = value.__dlpack__()
        keep.append(capsule)
        return (*_dlpack_pointer(capsule), True)
    return 0, (), False


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _dlpack_pointer(capsule: Any) -> tuple[int, tuple[int, ...]]:
    """Data pointer and shape of a legacy DLPack capsule (borrowed; the capsule keeps ownership)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    addr = get(capsule, b"dltensor")
    t = _DLTensor.from_address(addr)  # DLManagedTensor starts with its DLTensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        expect, acc = [], 1
        for d in reversed(shape):
            expect.append(acc)
            acc *= d
        if tuple(t.strides[i] for i in range(t.ndim)) != tuple(reversed(expect)):
            from .._core import InvalidArgumentError

            raise InvalidArgumentError(
                "TensorRT inputs on the device must be contiguous; call .contiguous() first"
            )
    return int(t.data or 0) + int(t.byte_offset), shape


def _driver_version_text() -> str:
    v = _cuda.probe().driver_version
    return f"{v // 1000}.{(v % 1000) // 10}" if v else "unknown"


class _ProgressMonitor:
    """TensorRT build progress on stderr: a rich progress bar on a terminal, else one
    line per finished phase."""

    def __new__(cls, trt: Any) -> Any:
        base = trt.IProgressMonitor

        class Monitor(base):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                base.__init__(self)
                self._bar: Any = None
                self._tasks: dict[str, Any] = {}
                if sys.stderr.isatty():
                    try:
                        from rich.progress import Progress

                        self._bar = Progress(transient=True)
                        self._bar.start()
                    except ImportError:
                        self._bar = None

            def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
                if self._bar is not None:
                    self._tasks[phase_name] = self._bar.add_task(f"TensorRT: {phase_name}", total=num_steps)

            def step_complete(self, phase_name: str, step: int) -> bool:
                if self._bar is not None and phase_name in self._tasks:
                    self._bar.update(self._tasks[phase_name], completed=step + 1)
                return True  # keep building

            def phase_finish(self, phase_name: str) -> None:
                if self._bar is not None and phase_name in self._tasks:
                    self._bar.remove_task(self._tasks.pop(phase_name))
                elif self._bar is None:
                    print(f"[xpuruntime] TensorRT build: {phase_name} done", file=sys.stderr, flush=True)

            def close(self) -> None:
                if self._bar is not None:
                    self._bar.stop()

        return Monitor()
