"""ONNX Runtime engine adapter (DESIGN.md §6).

Providers: CPU always; CUDA and TensorRT when this onnxruntime build has them and a
GPU is present (``EngineOptions.extra["providers"] = ["tensorrt", "cuda"]`` picks
them explicitly). Policy → ORT knob mappings, each recorded as a Decision:

=====================  ==========================================================
precision              fp32: as exported; fp16 on CUDA: the model is converted to
                       float16 with fp32 I/O (or trt_fp16_enable on the TensorRT
                       provider); int8 on CPU: dynamic quantization (int8 weights)
kernel policy "conv"   CUDA ``cudnn_conv_algo_search``: EXHAUSTIVE for
                       auto_strategy=best_performance, DEFAULT when deterministic,
                       else HEURISTIC
cuda_graph             CUDA ``enable_cuda_graph`` (static shapes; inputs are copied
                       into persistent device buffers that the graph replays)
allow_tf32             CUDA ``use_tf32``
workspace_limit_bytes  CUDA ``cudnn_conv_use_max_workspace=0``; TensorRT
                       ``trt_max_workspace_size``
deterministic          ``SessionOptions.use_deterministic_compute``
threads                ``SessionOptions.intra_op_num_threads``
static_shape           free-dimension overrides from ``extra["input_shapes"]``
extra["graph_optimization_level"]  "disable" | "basic" | "extended" | "all" (default)
=====================  ==========================================================

After the session is built the effective options are read back from it and every
node's provider is read from ``get_provider_graph_assignment_info``; the strict
assertions ``no_cpu_fallback`` / ``no_fallback`` turn a CPU-placed node into an error
at build time when the target is not the CPU.

Zero copy: numpy inputs are wrapped (ORT reads them in place), DLPack inputs become
OrtValues through ``OrtValue.from_dlpack``; CPU outputs are numpy views of ORT's
buffers. On CUDA, outputs stay on the device as ``OrtValue`` (DLPack-capable) when any
input came from the device, and come back as numpy when every input was a host array.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from . import _cuda
from ._common import DecisionRecorder, kernel_prefs, pol, precision, strict
from .base import Availability, Engine, EngineOptions, TensorInfo
from .onnx_model import ORT_TYPE_NAMES, load_model, numpy_dtype, onnx_io

INSTALL_HINT = "pip install xpuruntime[onnxruntime]"
GPU_INSTALL_HINT = "pip install xpuruntime[onnxruntime-gpu]"

_PROVIDER = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
_OPT_LEVELS = ("disable", "basic", "extended", "all")


def _import_ort() -> Any:
    import onnxruntime

    return onnxruntime


class OnnxRuntimeEngine(Engine):
    """A model compiled by ONNX Runtime on the CPU or CUDA/TensorRT providers."""

    name = "onnxruntime"

    # ------------------------------------------------------------------ probing
    @classmethod
    def availability(cls) -> Availability:
        try:
            ort = _import_ort()
        except ImportError as exc:
            return Availability(False, f"the onnxruntime package is not installed ({exc})", INSTALL_HINT)
        provs = ort.get_available_providers()
        devices = ["cpu"]
        gpu_eps = [p for p in (_PROVIDER["cuda"], _PROVIDER["tensorrt"]) if p in provs]
        if not gpu_eps:
            note = f"cuda: this onnxruntime {ort.__version__} build has no CUDA provider ({GPU_INSTALL_HINT})"
        elif (probe := _cuda.probe()).device_count == 0:
            note = f"cuda: {probe.reason}"
        else:
            devices.append("cuda")
            note = ""
        return Availability(True, note, INSTALL_HINT, tuple(devices))

    @classmethod
    def supports(cls, device: str, exec_policy: Any) -> tuple[str, str] | None:
        kind = device.split(":")[0]
        prec = precision(exec_policy)
        if kind == "cpu" and prec in ("fp16", "bf16"):
            return (
                _core.reason.DTYPE_UNSUPPORTED,
                (
                    f"onnxruntime's CPU provider has no {prec} kernels for most ops; use precision='fp32' or "
                    "'int8' (dynamic quantization) on the CPU, or a CUDA device"
                ),
            )
        if kind == "cuda" and prec == "int8":
            return (
                _core.reason.DTYPE_UNSUPPORTED,
                (
                    "int8 on CUDA needs a calibrated TensorRT build; use engine='tensorrt' with a calibration "
                    "cache, or precision='fp16'"
                ),
            )
        if kind == "cuda" and prec == "bf16":
            return (
                _core.reason.DTYPE_UNSUPPORTED,
                "onnxruntime has no bf16 conversion for the CUDA provider; use fp16 or engine='tensorrt'",
            )
        if kind not in ("cpu", "cuda"):
            return ("device_unavailable", f"onnxruntime runs on cpu or cuda, not {kind}")
        return None

    # ------------------------------------------------------------------ building
    def __init__(self, model: Any, options: EngineOptions) -> None:
        ort = _import_ort()
        self._ort = ort
        self._options = options
        self._device = options.device
        kind, _, idx = options.device.partition(":")
        self._kind = kind
        self._device_id = int(idx) if idx else 0
        refusal = self.supports(options.device, options.exec_policy)
        if refusal is not None:
            from .._core import UnsupportedOperationError

            raise UnsupportedOperationError(f"onnxruntime cannot build for {options.device}: {refusal[1]}")
        ep = options.exec_policy
        self._rec = DecisionRecorder(self.name, options.device)
        src = load_model(model)
        self._inputs, self._outputs = onnx_io(src.proto)
        self._out_names = [o.name for o in self._outputs]

        providers = self._providers(options)
        model_bytes = self._apply_precision(src, providers)
        so = self._session_options(ort, options)
        prov_opts = [self._provider_options(p, options) for p in providers]
        self._cuda_graph = (
            bool(pol(ep, "cuda_graph", False)) and kind == "cuda" and _PROVIDER["cuda"] in providers
        )
        try:
            self._sess = ort.InferenceSession(
                model_bytes, so, providers=providers, provider_options=prov_opts
            )
        except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph classes
            self._raise_build_error(exc, providers)
        self._read_back(providers)
        self._record_placement(ep)
        self._graph_lock = threading.Lock()
        self._graph_binding: Any = None
        self._graph_inputs: dict[str, Any] = {}

    def _providers(self, options: EngineOptions) -> list[str]:
        if self._kind == "cpu":
            self._rec.mapping("target", "cpu", "providers", [_PROVIDER["cpu"]])
            return [_PROVIDER["cpu"]]
        wanted = options.extra.get("providers") or ["cuda"]
        unknown = [p for p in wanted if p not in ("cuda", "tensorrt")]
        if unknown:
            from .._core import InvalidArgumentError

            raise InvalidArgumentError(
                f"unknown onnxruntime provider(s) {unknown} in extra['providers']; valid: 'tensorrt', 'cuda'"
            )
        available = self._ort.get_available_providers()
        missing = [p for p in wanted if _PROVIDER[p] not in available]
        if missing:
            from .._core import BackendUnavailableError

            raise BackendUnavailableError(
                f"onnxruntime {self._ort.__version__} here lacks the {', '.join(missing)} provider(s) "
                f"(has {available}); install {GPU_INSTALL_HINT}"
            )
        out = [_PROVIDER[p] for p in wanted]
        # The CPU provider runs the nodes the GPU providers do not take (shape math
        # mostly); strict no_cpu_fallback removes it so ORT itself refuses those.
        if not (strict(options.exec_policy, "no_cpu_fallback") or strict(options.exec_policy, "no_fallback")):
            out.append(_PROVIDER["cpu"])
        self._rec.mapping(
            "target", self._kind, "providers", out, detail=f"providers in priority order: {out}"
        )
        return out

    def _apply_precision(self, src: Any, providers: list[str]) -> bytes:
        prec = precision(self._options.exec_policy)
        if prec == "fp32":
            self._rec.mapping(
                "precision",
                prec,
                "model",
                "fp32",
                detail="fp32: the model runs as exported",
                default=self._options.exec_policy is None,
            )
            return src.bytes
        if prec == "fp16" and providers[0] == _PROVIDER["tensorrt"]:
            self._rec.mapping("precision", prec, "trt_fp16_enable", True)
            return src.bytes
        if prec == "fp16":
            from onnxruntime.transformers.float16 import convert_float_to_float16

            fp16 = convert_float_to_float16(src.proto, keep_io_types=True)
            self._rec.mapping(
                "precision",
                prec,
                "model_conversion",
                "float16(keep_io_types=True)",
                detail="fp16: weights and activations converted to float16 with fp32 inputs/outputs",
            )
            return fp16.SerializeToString()
        if prec == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with tempfile.TemporaryDirectory(prefix="xrt_ort_int8_") as tmp:
                fin, fout = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
                fin.write_bytes(src.bytes)
                quantize_dynamic(fin, fout, weight_type=QuantType.QInt8)
                data = fout.read_bytes()
            self._rec.mapping(
                "precision",
                prec,
                "model_conversion",
                "quantize_dynamic(weight_type=QInt8)",
                detail="int8: weights quantized to int8, activations quantized dynamically per call",
            )
            return data
        raise AssertionError(
            f"precision {prec} passed supports() unexpectedly"
        )  # supports() refuses the rest

    def _session_options(self, ort: Any, options: EngineOptions) -> Any:
        ep = options.exec_policy
        so = ort.SessionOptions()
        so.log_severity_level = int(options.extra.get("log_severity_level", 3))
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")

        level = str(options.extra.get("graph_optimization_level", "all")).lower()
        if level not in _OPT_LEVELS:
            from .._core import InvalidArgumentError

            raise InvalidArgumentError(f"graph_optimization_level {level!r} is not one of {_OPT_LEVELS}")
        enum = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        so.graph_optimization_level = enum
        self._rec.mapping(
            "graph_optimization_level",
            level,
            "graph_optimization_level",
            enum.name,
            default="graph_optimization_level" not in options.extra,
        )

        threads = int(pol(ep, "threads", 0) or 0)
        if threads > 0:
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            self._rec.mapping("threads", threads, "intra_op_num_threads", threads)
        else:
            self._rec.mapping("threads", 0, "intra_op_num_threads", "0 (one per physical core)", default=True)

        if pol(ep, "deterministic", False):
            so.use_deterministic_compute = True
            self._rec.mapping("deterministic", True, "use_deterministic_compute", True)

        if (strict(ep, "no_cpu_fallback") or strict(ep, "no_fallback")) and self._kind != "cpu":
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            self._rec.mapping("strict", "no_cpu_fallback", "session.disable_cpu_ep_fallback", 1)

        if pol(ep, "static_shape", False):
            self._static_shapes(so, options)
        return so

    def _static_shapes(self, so: Any, options: EngineOptions) -> None:
        """Fix every symbolic dimension from extra["input_shapes"] (a name → shape map)."""
        from .._core import PolicyError

        shapes: dict[str, Sequence[int]] = options.extra.get("input_shapes") or {}
        fixed: dict[str, int] = {}
        for info in self._inputs:
            given = shapes.get(info.name)
            for i, d in enumerate(info.shape):
                if isinstance(d, int) and d >= 0:
                    continue
                if given is None or i >= len(given):
                    raise PolicyError(
                        f"ExecutionPolicy(static_shape=True) but input {info.name!r} has dynamic shape {list(info.shape)}; "
                        f"pass engine options input_shapes={{{info.name!r}: [...]}} with every dimension"
                    )
                if isinstance(d, str):
                    if fixed.get(d, given[i]) != given[i]:
                        raise PolicyError(f"dimension {d!r} is given two values: {fixed[d]} and {given[i]}")
                    fixed[d] = int(given[i])
        for dim, value in sorted(fixed.items()):
            so.add_free_dimension_override_by_name(dim, value)
        self._rec.mapping(
            "static_shape", True, "free_dimension_overrides", fixed or "none needed (all dims static)"
        )

    def _provider_options(self, provider: str, options: EngineOptions) -> dict[str, str]:
        ep, kp = options.exec_policy, options.kernel_policy
        if provider == _PROVIDER["cuda"]:
            opts = {"device_id": str(self._device_id)}
            conv = kernel_prefs(kp, "conv")
            if (
                conv
                and not any(k in ("cudnn", "auto") for k in conv)
                and str(pol(kp, "mode", "prefer")) == "require"
            ):
                from .._core import UnsupportedOperationError

                raise UnsupportedOperationError(
                    f"KernelPolicy requires conv={conv} but onnxruntime's CUDA provider runs every Conv through cuDNN; "
                    "use engine='native' for that kernel or allow 'cudnn'"
                )
            if pol(ep, "deterministic", False):
                algo, why = "DEFAULT", "deterministic=True: a fixed cuDNN algorithm"
            elif str(pol(kp, "auto_strategy", "first_supported")) == "best_performance":
                algo, why = "EXHAUSTIVE", "auto_strategy=best_performance: cuDNN benchmarks every algorithm"
            else:
                algo, why = "HEURISTIC", "cuDNN heuristics choose without timing"
            opts["cudnn_conv_algo_search"] = algo
            self._rec.mapping("conv", conv or "auto", "cudnn_conv_algo_search", algo, detail=why)
            graph = bool(pol(ep, "cuda_graph", False))
            opts["enable_cuda_graph"] = "1" if graph else "0"
            self._rec.mapping("cuda_graph", graph, "enable_cuda_graph", int(graph))
            tf32 = bool(pol(ep, "allow_tf32", False))
            opts["use_tf32"] = "1" if tf32 else "0"
            self._rec.mapping("allow_tf32", tf32, "use_tf32", int(tf32))
            limit = int(pol(ep, "workspace_limit_bytes", 0) or 0)
            opts["cudnn_conv_use_max_workspace"] = "0" if limit else "1"
            self._rec.mapping(
                "workspace_limit_bytes",
                limit,
                "cudnn_conv_use_max_workspace",
                opts["cudnn_conv_use_max_workspace"],
            )
            return opts
        if provider == _PROVIDER["tensorrt"]:
            prec = precision(ep)
            opts = {
                "device_id": str(self._device_id),
                "trt_fp16_enable": "1" if prec == "fp16" else "0",
                "trt_engine_cache_enable": "1",
                "trt_timing_cache_enable": "1",
                "trt_engine_cache_path": str(
                    options.extra.get("cache_dir", Path.home() / ".cache" / "xpuruntime" / "ort_trt")
                ),
                "trt_cuda_graph_enable": "1" if pol(ep, "cuda_graph", False) else "0",
            }
            limit = int(pol(ep, "workspace_limit_bytes", 0) or 0)
            if limit:
                opts["trt_max_workspace_size"] = str(limit)
            for k, v in opts.items():
                if k != "device_id":
                    self._rec.mapping("tensorrt_provider", "", k, v)
            return opts
        return {}

    def _raise_build_error(self, exc: Exception, providers: list[str]) -> None:
        from .._core import InvalidModelError, UnsupportedOperationError

        text = str(exc)
        if "fallback to CPU EP has been explicitly disabled" in text:
            raise UnsupportedOperationError(
                f"onnxruntime on {self._device}: some nodes are only supported by the CPU provider, and the policy's strict "
                f"'no_cpu_fallback' forbids running them there (providers {providers}). Remove the assertion or use another engine."
            ) from exc
        raise InvalidModelError(
            f"onnxruntime could not build the model for {self._device} with {providers}: {text}"
        ) from exc

    # ------------------------------------------------------------------ read-back
    def _read_back(self, providers: list[str]) -> None:
        """Check the options the session actually holds; a mismatch is a bug, so raise."""
        so = self._sess.get_session_options()
        self._effective = {
            "intra_op_num_threads": so.intra_op_num_threads,
            "inter_op_num_threads": so.inter_op_num_threads,
            "graph_optimization_level": so.graph_optimization_level.name,
            "use_deterministic_compute": so.use_deterministic_compute,
            "providers": list(self._sess.get_providers()),
            "provider_options": self._sess.get_provider_options(),
        }
        got = self._effective["providers"]
        if [p for p in providers if p in got] != providers:
            from .._core import BackendUnavailableError

            raise BackendUnavailableError(
                f"onnxruntime silently dropped provider(s) {[p for p in providers if p not in got]} (session has {got}); "
                "the CUDA/cuDNN/TensorRT libraries they need are probably missing"
            )
        for d in self._rec.items:
            knob = d.chosen.split("=", 1)[0]
            if knob in self._effective:
                d.detail += f" (read back: {knob}={self._effective[knob]})"
            for popts in self._effective["provider_options"].values():
                if knob in popts:
                    d.detail += f" (read back: {knob}={popts[knob]})"

    def _record_placement(self, ep: Any) -> None:
        on_cpu: list[str] = []
        for sub in self._sess.get_provider_graph_assignment_info():
            for node in sub.get_nodes():
                where = sub.ep_name
                detail = ""
                if self._kind != "cpu" and where == _PROVIDER["cpu"]:
                    on_cpu.append(f"{node.name or '?'} ({node.op_type})")
                    detail = "not taken by the GPU providers; ORT runs it on the CPU"
                self._rec.placement(node.name, node.op_type, where, detail=detail)
        if on_cpu:
            for d in self._rec.items:
                if d.rule == "engine.placement" and d.chosen == _PROVIDER["cpu"]:
                    d.rule = _core.rule.FALLBACK
            if strict(ep, "no_cpu_fallback") or strict(ep, "no_fallback"):
                from .._core import UnsupportedOperationError

                raise UnsupportedOperationError(
                    f"strict 'no_cpu_fallback': {len(on_cpu)} node(s) landed on the CPU provider on target {self._device}: "
                    + ", ".join(on_cpu[:20])
                )

    # ------------------------------------------------------------------ running
    def inputs(self) -> Sequence[TensorInfo]:
        return list(self._inputs)

    def outputs(self) -> Sequence[TensorInfo]:
        return list(self._outputs)

    def decisions(self) -> list[Any]:
        return list(self._rec.items)

    @property
    def effective_options(self) -> dict[str, Any]:
        """Session and provider options as read back from the built session."""
        return dict(self._effective)

    @property
    def session(self) -> Any:
        """The underlying ``onnxruntime.InferenceSession`` (for inspection)."""
        return self._sess

    def run(self, inputs: Mapping[str, Any], output_names: Sequence[str] | None = None) -> dict[str, Any]:
        names = list(output_names) if output_names is not None else self._out_names
        if self._kind == "cpu" and all(type(v) is np.ndarray for v in inputs.values()):
            # ORT wraps C-contiguous numpy inputs in place; this is the lowest-overhead path.
            return dict(zip(names, self._sess.run(names, inputs)))
        if self._cuda_graph:
            return self._run_graph(inputs, names)
        io = self._sess.io_binding()
        host_only = True
        for name, value in inputs.items():
            if type(value) is np.ndarray:
                io.bind_cpu_input(name, value)
            else:
                ort_value = _as_ortvalue(self._ort, value)
                host_only = host_only and ort_value.device_name().lower() == "cpu"
                io.bind_ortvalue_input(name, ort_value)
        dev_type = "cpu" if self._kind == "cpu" else "cuda"
        for name in names:
            io.bind_output(name, dev_type, self._device_id)
        self._sess.run_with_iobinding(io)
        outs = io.get_outputs()
        if dev_type == "cpu":
            return {n: v.numpy() for n, v in zip(names, outs)}  # views of ORT's buffers, no copy
        if host_only:  # host in, host out (like the CPU path); device tensors in, device out
            return {n: v.numpy() for n, v in zip(names, outs)}
        return dict(zip(names, outs))

    def _run_graph(self, inputs: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        """CUDA-graph replay: inputs are copied into buffers whose addresses never change."""
        from .._core import InvalidArgumentError

        with self._graph_lock:
            host_only = all(type(v) is np.ndarray for v in inputs.values())
            if self._graph_binding is None:
                io = self._sess.io_binding()
                for name, value in inputs.items():
                    src = _as_ortvalue(self._ort, value)
                    dtype = numpy_dtype(ORT_TYPE_NAMES.get(src.data_type(), src.data_type()))
                    buf = self._ort.OrtValue.ortvalue_from_shape_and_type(
                        src.shape(), dtype, "cuda", self._device_id
                    )
                    self._graph_inputs[name] = buf
                    io.bind_ortvalue_input(name, buf)
                for name in self._out_names:
                    io.bind_output(name, "cuda", self._device_id)
                self._graph_binding = io
            srcs, dsts = [], []
            for name, value in inputs.items():
                buf = self._graph_inputs[name]
                src = _as_ortvalue(
                    self._ort, np.ascontiguousarray(value) if type(value) is np.ndarray else value
                )
                if list(src.shape()) != list(buf.shape()):
                    raise InvalidArgumentError(
                        f"cuda_graph=True replays a graph captured for {name!r} shape {buf.shape()}, got "
                        f"{src.shape()}; build a new session for another shape"
                    )
                srcs.append(src)
                dsts.append(buf)
            self._ort.copy_tensors(srcs, dsts)  # host→device or device→device into the fixed buffers
            self._sess.run_with_iobinding(self._graph_binding)
            outs = dict(zip(self._out_names, self._graph_binding.get_outputs()))
            if host_only:
                return {n: outs[n].numpy() for n in names}
            return {n: outs[n] for n in names}


def _as_ortvalue(ort: Any, value: Any) -> Any:
    """Wrap a DLPack-capable tensor (torch, cupy, xpuruntime.Tensor, OrtValue) without copying."""
    if isinstance(value, ort.OrtValue):
        return value
    if hasattr(value, "__dlpack__"):
        return ort.OrtValue.from_dlpack(value)
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(np.asarray(value)))
