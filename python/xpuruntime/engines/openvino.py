"""OpenVINO engine adapter (DESIGN.md §6): Intel CPU, GPU and NPU, and OpenVINO's AUTO.

Device mapping: "cpu" → CPU, "gpu[:N]" → GPU[.N] (Intel GPUs; NVIDIA GPUs are
"cuda"), "npu" → NPU. ``EngineOptions.extra["ov_device"]`` passes an OpenVINO device
string as is ("AUTO", "AUTO:NPU,CPU", "HETERO:NPU,CPU"); the registry's own choice is
deterministic, OpenVINO's AUTO is not, so it is only used when asked for.

Policy → OpenVINO property mappings, each recorded as a Decision and read back from
the compiled model (a requested value the device did not honour raises, it never
degrades silently):

=====================  ==========================================================
precision              INFERENCE_PRECISION_HINT f32 / f16 / bf16; int8 needs a
                       QDQ-quantized model (OpenVINO's low-precision transforms
                       then run those layers in int8; the read-back checks it)
static_shape           ``Model.reshape`` to the static shapes (model dims or
                       ``extra["input_shapes"]``); NPU always needs static shapes
threads                INFERENCE_NUM_THREADS
deterministic          EXECUTION_MODE_HINT=ACCURACY (no silent precision lowering)
extra["performance_hint"]  PERFORMANCE_HINT (LATENCY default, THROUGHPUT, ...)
extra["cache_dir"]     CACHE_DIR (compiled-blob cache; default $XRT_CACHE_DIR/openvino
                       when that variable is set, else off)
=====================  ==========================================================

The runtime model's layers (type, runtime precision, device) are read back into the
decision log. Inputs are shared with OpenVINO without copying (``Tensor(...,
shared_memory=True)``); large static outputs (≥ 256 KiB) are written by OpenVINO
straight into fresh numpy arrays, small ones are copied out (cheaper than rebinding).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from ._common import DecisionRecorder, pol, precision, strict
from .base import Availability, Engine, EngineOptions, TensorInfo
from .onnx_model import load_model, onnx_io

INSTALL_HINT = "pip install xpuruntime[openvino]"

_OV_PRECISION = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}
_CAPABILITY = {"fp16": "FP16", "bf16": "BF16"}
_QUANT_OPS = {
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "MatMulInteger",
    "ConvInteger",
}
_PREALLOC_MIN_BYTES = 256 * 1024
_SKIP_LAYERS = {"Input", "Parameter", "Const", "Constant", "Output", "Result"}


def _import_ov() -> Any:
    import openvino

    return openvino


def _kind_of(ov_device: str) -> str:
    head = ov_device.split(".")[0].upper()
    return {"CPU": "cpu", "GPU": "gpu", "NPU": "npu"}.get(head, head.lower())


class OpenVinoEngine(Engine):
    """A model compiled by OpenVINO for one of its devices."""

    name = "openvino"
    _core_lock = threading.Lock()
    _core_obj: Any = None

    @classmethod
    def _core(cls) -> Any:
        with cls._core_lock:
            if cls._core_obj is None:
                cls._core_obj = _import_ov().Core()
            return cls._core_obj

    # ------------------------------------------------------------------ probing
    @classmethod
    def availability(cls) -> Availability:
        try:
            core = cls._core()
        except ImportError as exc:
            return Availability(False, f"the openvino package is not installed ({exc})", INSTALL_HINT)
        devices = tuple(dict.fromkeys(_kind_of(d) for d in core.available_devices))
        missing = [k for k in ("npu", "gpu") if k not in devices]
        note = f"no OpenVINO {', '.join(k.upper() for k in missing)} device here" if missing else ""
        return Availability(True, note, INSTALL_HINT, devices)

    @classmethod
    def supports(cls, device: str, exec_policy: Any) -> tuple[str, str] | None:
        prec = precision(exec_policy)
        if prec in _CAPABILITY and device.split(":")[0] == "cpu":
            caps = cls._core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
            if _CAPABILITY[prec] not in caps:
                return (
                    _core.reason.DTYPE_UNSUPPORTED,
                    (
                        f"this CPU has no native {prec} (OpenVINO CPU capabilities: {', '.join(caps)}); "
                        "OpenVINO would silently run f32. Use precision='fp32' or another device"
                    ),
                )
        return None

    # ------------------------------------------------------------------ building
    def __init__(self, model: Any, options: EngineOptions) -> None:
        from .._core import InvalidModelError, UnsupportedOperationError

        ov = _import_ov()
        self._ov = ov
        core = self._core()
        ep = options.exec_policy
        self._device = options.device
        self._rec = DecisionRecorder(self.name, options.device)
        src = load_model(model)
        self._inputs, self._outputs = onnx_io(src.proto)

        ov_device = self._ov_device(options)
        head = ov_device.split(":")[0].upper()
        kind = "multi" if head in ("AUTO", "HETERO", "MULTI", "BATCH") else _kind_of(head)
        try:
            ov_model = core.read_model(src.bytes) if src.path is None else core.read_model(str(src.path))
        except Exception as exc:
            raise InvalidModelError(f"OpenVINO could not read the model: {exc}") from exc

        static = bool(pol(ep, "static_shape", False)) or ov_device.startswith("NPU")
        if static:
            self._reshape(ov_model, options, ov_device)

        prec = precision(ep)
        config: dict[str, Any] = {}
        supported = self._supported_properties(core, ov_device)

        def want(
            prop: str, value: Any, field: str, field_value: Any, *, default: bool = False, detail: str = ""
        ) -> None:
            if supported is not None and prop not in supported:
                self._rec.mapping(
                    field,
                    field_value,
                    prop,
                    value,
                    default=default,
                    detail=f"{prop} is not a property of {ov_device}; not applied",
                )
                return
            config[prop] = value
            self._rec.mapping(field, field_value, prop, value, default=default, detail=detail)

        if prec == "int8":
            quant_ops = sorted({n.op_type for n in src.proto.graph.node} & _QUANT_OPS)
            if not quant_ops:
                raise UnsupportedOperationError(
                    "precision='int8' on OpenVINO needs a quantized model (QuantizeLinear/DequantizeLinear nodes); "
                    "quantize it first (onnxruntime.quantization.quantize_static or NNCF), or use precision='fp32'"
                )
            self._rec.mapping(
                "precision",
                prec,
                "model",
                f"quantized ({', '.join(quant_ops)})",
                detail="int8: OpenVINO's low-precision transformations run the QDQ-quantized layers in int8",
            )
        else:
            want("INFERENCE_PRECISION_HINT", _OV_PRECISION[prec], "precision", prec, default=ep is None)

        threads = int(pol(ep, "threads", 0) or 0)
        if threads > 0:
            want("INFERENCE_NUM_THREADS", threads, "threads", threads)
        if pol(ep, "deterministic", False) and prec == "fp32":
            want("EXECUTION_MODE_HINT", "ACCURACY", "deterministic", True)
        hint = str(options.extra.get("performance_hint", "LATENCY")).upper()
        want(
            "PERFORMANCE_HINT",
            hint,
            "performance_hint",
            hint,
            default="performance_hint" not in options.extra,
        )
        cache_dir = options.extra.get("cache_dir") or (
            str(Path(os.environ["XRT_CACHE_DIR"]) / "openvino") if os.environ.get("XRT_CACHE_DIR") else None
        )
        if cache_dir:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            config["CACHE_DIR"] = str(cache_dir)
            self._rec.mapping("cache_dir", str(cache_dir), "CACHE_DIR", str(cache_dir))

        try:
            self._compiled = core.compile_model(ov_model, ov_device, config)
        except Exception as exc:
            raise UnsupportedOperationError(
                f"OpenVINO could not compile the model for {ov_device} with {config}: {exc}"
            ) from exc

        self._read_back(config, prec, ov_device, kind, ep)
        self._ov_inputs = list(self._compiled.inputs)
        self._ov_outputs = list(self._compiled.outputs)
        self._out_names = [o.name for o in self._outputs]
        self._out_index = {o.name: i for i, o in enumerate(self._outputs)}
        self._in_index = {i.name: k for k, i in enumerate(self._inputs)}
        ov_in_names = [p.get_any_name() for p in self._ov_inputs]
        if ov_in_names != list(self._in_index):
            self._in_index = {n: ov_in_names.index(n) for n in self._in_index if n in ov_in_names}
        self._static_out = [self._static_shape_of(o) for o in self._ov_outputs]
        self._out_dtypes = [o.get_element_type().to_dtype() for o in self._ov_outputs]
        # Rebinding an output tensor costs OpenVINO ~20 µs per call, copying a small
        # result costs less: large static outputs are written in place, small ones copied.
        self._prealloc_out = [
            (i, shape)
            for i, shape in enumerate(self._static_out)
            if shape is not None and int(np.prod(shape)) * self._out_dtypes[i].itemsize >= _PREALLOC_MIN_BYTES
        ]
        self._local = threading.local()

    def _ov_device(self, options: EngineOptions) -> str:
        explicit = options.extra.get("ov_device")
        if explicit:
            self._rec.mapping(
                "device",
                options.device,
                "ov_device",
                explicit,
                detail=f"extra['ov_device']={explicit!r} passed to OpenVINO as is",
            )
            return str(explicit)
        kind, _, idx = options.device.partition(":")
        ov_device = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}.get(kind)
        if ov_device is None:
            from .._core import InvalidArgumentError

            raise InvalidArgumentError(
                f"OpenVINO devices are cpu, gpu[:N], npu (or extra['ov_device']), not {options.device!r}"
            )
        if idx:
            ov_device += f".{idx}"
        self._rec.mapping("device", options.device, "ov_device", ov_device)
        return ov_device

    def _supported_properties(self, core: Any, ov_device: str) -> set[str] | None:
        head = ov_device.split(":")[0]
        if head in ("AUTO", "HETERO", "MULTI", "BATCH"):
            return None  # virtual devices forward properties to the devices they wrap
        try:
            return set(core.get_property(head, "SUPPORTED_PROPERTIES"))
        except Exception:  # noqa: BLE001 - a device that cannot answer gets everything
            return None

    def _reshape(self, ov_model: Any, options: EngineOptions, ov_device: str) -> None:
        from .._core import PolicyError

        given: dict[str, Sequence[int]] = options.extra.get("input_shapes") or {}
        shapes: dict[str, list[int]] = {}
        for info in self._inputs:
            if info.name in given:
                shape = [int(d) for d in given[info.name]]
                if len(shape) != len(info.shape):
                    raise PolicyError(
                        f"input_shapes[{info.name!r}] has rank {len(shape)}, the model input has rank {len(info.shape)}"
                    )
            elif all(isinstance(d, int) and d >= 0 for d in info.shape):
                shape = [int(d) for d in info.shape]  # type: ignore[arg-type]
            else:
                why = (
                    "ExecutionPolicy(static_shape=True)"
                    if not ov_device.startswith("NPU")
                    else "the NPU (it compiles static shapes only)"
                )
                raise PolicyError(
                    f"{why} needs a static shape for input {info.name!r}, which is {list(info.shape)}; "
                    f"pass engine options input_shapes={{{info.name!r}: [...]}}"
                )
            shapes[info.name] = shape
        ov_model.reshape({name: self._ov.PartialShape(s) for name, s in shapes.items()})
        self._rec.mapping("static_shape", True, "Model.reshape", shapes)
        self._inputs = [TensorInfo(i.name, tuple(shapes[i.name]), i.dtype) for i in self._inputs]

    def _read_back(self, config: dict[str, Any], prec: str, ov_device: str, kind: str, ep: Any) -> None:
        from .._core import UnsupportedOperationError

        cm = self._compiled
        eff: dict[str, Any] = {}
        for prop in (
            "INFERENCE_PRECISION_HINT",
            "INFERENCE_NUM_THREADS",
            "PERFORMANCE_HINT",
            "EXECUTION_MODE_HINT",
            "EXECUTION_DEVICES",
            "NUM_STREAMS",
            "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
        ):
            try:
                eff[prop] = cm.get_property(prop)
            except Exception:  # noqa: BLE001, S112 - not every device exposes every property
                continue
        self._effective = {
            k: (str(v) if not isinstance(v, (int, list, tuple)) else v) for k, v in eff.items()
        }
        if "INFERENCE_PRECISION_HINT" in eff:
            got = _ov_type_name(eff["INFERENCE_PRECISION_HINT"])
            self._effective["INFERENCE_PRECISION_HINT"] = got
        for d in self._rec.items:
            knob = d.chosen.split("=", 1)[0]
            if knob in self._effective:
                d.detail += f" (read back: {knob}={self._effective[knob]})"
        asked = config.get("INFERENCE_PRECISION_HINT")
        if asked and self._effective.get("INFERENCE_PRECISION_HINT") not in (None, asked):
            raise UnsupportedOperationError(
                f"OpenVINO on {ov_device} compiled with inference precision {self._effective['INFERENCE_PRECISION_HINT']} "
                f"although precision={prec!r} ({asked}) was asked; the device does not support it — use another precision or device"
            )
        exec_devices = [str(x) for x in eff.get("EXECUTION_DEVICES", [ov_device])]
        default_dev = exec_devices[0] if len(exec_devices) == 1 else "/".join(exec_devices)
        int8_layers = 0
        on_cpu: list[str] = []
        for op in cm.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            fields = {k: info[k].astype(str) for k in info.keys()}  # noqa: SIM118 - RTMap has no __iter__
            layer = fields.get("layerType", op.get_type_name())
            if layer in _SKIP_LAYERS:
                continue
            rt_prec = fields.get("runtimePrecision", "?")
            dev = fields.get("affinity", default_dev)
            int8_layers += rt_prec in ("i8", "u8")
            if _kind_of(dev) == "cpu" and self._device.split(":")[0] != "cpu":
                on_cpu.append(fields.get("originalLayersNames", op.get_friendly_name()))
            self._rec.placement(
                fields.get("originalLayersNames", op.get_friendly_name()),
                layer,
                f"{dev}/{rt_prec}",
                detail=f"runtime layer {op.get_friendly_name()} ({fields.get('primitiveType', '?')})",
            )
        if prec == "int8" and int8_layers == 0:
            raise UnsupportedOperationError(
                f"precision='int8' asked but OpenVINO on {ov_device} runs no layer in int8 (read back from the runtime model)"
            )
        if on_cpu and (strict(ep, "no_cpu_fallback") or strict(ep, "no_fallback")):
            raise UnsupportedOperationError(
                f"strict 'no_cpu_fallback': OpenVINO placed {len(on_cpu)} layer(s) on the CPU for target {self._device}: "
                + ", ".join(on_cpu[:20])
            )
        if (
            kind == "multi"
            and self._device.split(":")[0] != "cpu"
            and any(_kind_of(d) == "cpu" for d in exec_devices)
            and (strict(ep, "no_cpu_fallback") or strict(ep, "no_fallback"))
        ):
            raise UnsupportedOperationError(
                f"strict 'no_cpu_fallback': OpenVINO {ov_device} executes on {exec_devices}"
            )

    @staticmethod
    def _static_shape_of(port: Any) -> tuple[int, ...] | None:
        ps = port.get_partial_shape()
        return tuple(d.get_length() for d in ps) if ps.is_static else None

    # ------------------------------------------------------------------ running
    def inputs(self) -> Sequence[TensorInfo]:
        return list(self._inputs)

    def outputs(self) -> Sequence[TensorInfo]:
        return list(self._outputs)

    def decisions(self) -> list[Any]:
        return list(self._rec.items)

    @property
    def effective_options(self) -> dict[str, Any]:
        """Properties read back from the compiled model."""
        return dict(self._effective)

    @property
    def compiled_model(self) -> Any:
        """The underlying ``openvino.CompiledModel`` (for inspection)."""
        return self._compiled

    def _request(self) -> Any:
        # InferRequest is not thread-safe: one per thread keeps run() thread-safe.
        req = getattr(self._local, "req", None)
        if req is None:
            req = self._local.req = self._compiled.create_infer_request()
        return req

    def run(self, inputs: Mapping[str, Any], output_names: Sequence[str] | None = None) -> dict[str, Any]:
        # Tensors are bound by index: OpenVINO's infer(dict) path costs ~60 µs of Python
        # per call on a tiny model; set_*_tensor + infer() does not.
        req = self._request()
        tensor = self._ov.Tensor
        for name, value in inputs.items():
            arr = value if type(value) is np.ndarray and value.flags.c_contiguous else _host_array(value)
            req.set_input_tensor(self._in_index[name], tensor(arr, shared_memory=True))  # zero copy
        fresh: dict[int, np.ndarray] = {}
        for i, shape in self._prealloc_out:
            # OpenVINO writes the result straight into this array (no copy after). Every
            # such output gets a fresh one, so no array handed out earlier is reused.
            arr = np.empty(shape, dtype=self._out_dtypes[i])
            req.set_output_tensor(i, tensor(arr, shared_memory=True))
            fresh[i] = arr
        req.infer()
        names = self._out_names if output_names is None else output_names
        out: dict[str, Any] = {}
        for name in names:
            i = self._out_index[name]
            out[name] = fresh[i] if i in fresh else req.get_output_tensor(i).data.copy()
        return out


def _host_array(value: Any) -> np.ndarray:
    """A C-contiguous host array, without copying when the input already is one
    (DLPack for torch/xpuruntime CPU tensors)."""
    arr = (
        np.from_dlpack(value)
        if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray)
        else np.asarray(value)
    )
    return np.ascontiguousarray(arr)


def _ov_type_name(t: Any) -> str:
    """OpenVINO element type → its short name ("f32", "f16", "bf16")."""
    name = str(getattr(t, "get_type_name", lambda: t)())
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(name, name)
