"""Qualcomm QNN engine adapter, through ONNX Runtime's QNN plugin provider
(the ``onnxruntime-qnn`` wheel, DESIGN.md §6).

Backends: the wheel ships QNN backend libraries next to its provider. "npu" maps to
the HTP backend (``libQnnHtp.so``): on Snapdragon it is the Hexagon NPU, on x86_64
Linux it is Qualcomm's HTP *simulator* — it runs the same compiled graph, slowly, on
the host CPU. A simulated device is listed in ``Availability.simulated`` so that
``engine="auto"`` never picks it; name ``engine="qnn"`` to use it. "cpu" maps to the
QNN CPU backend (``libQnnCpu.so``) when the wheel carries it (the x86_64 2.x wheels
do not), and "gpu" to ``libQnnGpu.so`` (Adreno; never usable on x86_64).

Policy requirements, enforced before anything is built:
- ``static_shape=True`` (QNN compiles static graphs); dynamic dims need
  ``extra["input_shapes"]``.
- HTP precision is int8 (a QDQ-quantized model) or fp16 (``enable_htp_fp16_precision``);
  fp32 and bf16 are refused with the reason.
- Nodes the QNN provider does not take run on ORT's CPU provider only with
  ``allow_fallback="cpu"``; the input QuantizeLinear and output DequantizeLinear of a
  QDQ model are host-side by design and always allowed, unless the strict
  ``no_cpu_fallback`` assertion forbids any CPU node.
"""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import _core
from ._common import DecisionRecorder, pol, precision, strict
from .base import Availability, Engine, EngineOptions, TensorInfo
from .onnx_model import load_model, onnx_io

INSTALL_HINT = "pip install xpuruntime[qnn]"
_QDQ = {"QuantizeLinear", "DequantizeLinear"}
_BACKEND = {"npu": "htp", "cpu": "cpu", "gpu": "gpu"}
# HTP target used when the caller names none (soc_model and htp_arch ids of QNN).
_DEFAULT_SOC_MODEL = "57"
_DEFAULT_HTP_ARCH = "75"
_register_lock = threading.Lock()
_registered: str | None = None


def _import() -> tuple[Any, Any]:
    import onnxruntime
    import onnxruntime_qnn

    return onnxruntime, onnxruntime_qnn


def _backend_libs(qnn: Any) -> dict[str, str]:
    """Backend name → library path, for the backend libraries this wheel carries."""
    paths = {"htp": qnn.get_qnn_htp_path(), "cpu": qnn.get_qnn_cpu_path(), "gpu": qnn.get_qnn_gpu_path()}
    return {k: p for k, p in paths.items() if os.path.isfile(p)}


def _ep_devices(ort: Any, qnn: Any) -> list[Any]:
    """Register the QNN provider library once per process and return its devices."""
    global _registered
    with _register_lock:
        if _registered is None:
            ort.register_execution_provider_library(qnn.EP_NAME, qnn.get_library_path())
            _registered = qnn.get_library_path()
    return [d for d in ort.get_ep_devices() if d.ep_name == qnn.EP_NAME]


class QnnEngine(Engine):
    """A model compiled by QNN (via onnxruntime-qnn) for one QNN backend."""

    name = "qnn"

    @classmethod
    def availability(cls) -> Availability:
        try:
            ort, qnn = _import()
        except ImportError as exc:
            return Availability(False, f"onnxruntime-qnn is not installed ({exc})", INSTALL_HINT)
        libs = _backend_libs(qnn)
        host_is_arm = platform.machine().lower() in ("aarch64", "arm64")
        devices, simulated, notes = [], [], []
        if "htp" in libs:
            devices.append("npu")
            if not host_is_arm:
                simulated.append("npu")
                notes.append(f"npu: the HTP backend on {platform.machine()} is Qualcomm's simulator")
        else:
            notes.append("npu: the wheel has no libQnnHtp.so")
        if "cpu" in libs:
            devices.append("cpu")
        else:
            notes.append(
                f"cpu: onnxruntime-qnn {getattr(qnn, '__version__', '?')} has no libQnnCpu.so (QNN CPU backend)"
            )
        if "gpu" in libs and host_is_arm:
            devices.append("gpu")
        try:
            _ep_devices(ort, qnn)
        except Exception as exc:  # noqa: BLE001 - a provider that cannot load is unavailable, with why
            return Availability(False, f"the QNN provider library failed to load: {exc}", INSTALL_HINT)
        return Availability(bool(devices), "; ".join(notes), INSTALL_HINT, tuple(devices), tuple(simulated))

    @classmethod
    def supports(cls, device: str, exec_policy: Any) -> tuple[str, str] | None:
        kind = device.split(":")[0]
        prec = precision(exec_policy)
        if not pol(exec_policy, "static_shape", False):
            return (
                _core.reason.SHAPE_UNSUPPORTED,
                "QNN compiles static graphs only: set ExecutionPolicy(static_shape=True)",
            )
        if kind == "npu" and prec not in ("int8", "fp16"):
            return (
                _core.reason.DTYPE_UNSUPPORTED,
                (
                    f"the QNN HTP (NPU) backend runs int8 (a QDQ-quantized model) or fp16, not {prec}; "
                    "set ExecutionPolicy(precision='int8') with a QDQ model, or precision='fp16'"
                ),
            )
        if kind == "cpu" and prec != "fp32":
            return (_core.reason.DTYPE_UNSUPPORTED, f"the QNN CPU backend runs fp32 models, not {prec}")
        return None

    def __init__(self, model: Any, options: EngineOptions) -> None:
        from .._core import InvalidModelError, PolicyError, UnsupportedOperationError

        ort, qnn = _import()
        self._ort = ort
        ep = options.exec_policy
        kind = options.device.split(":")[0]
        refusal = self.supports(options.device, ep)
        if refusal is not None:
            raise (
                PolicyError if refusal[0] == _core.reason.SHAPE_UNSUPPORTED else UnsupportedOperationError
            )(f"qnn cannot build for {options.device}: {refusal[1]}")
        backend = _BACKEND.get(kind)
        libs = _backend_libs(qnn)
        if backend not in libs:
            from .._core import BackendUnavailableError

            raise BackendUnavailableError(
                f"onnxruntime-qnn {getattr(qnn, '__version__', '?')} here has no QNN {backend} backend library "
                f"(it carries: {', '.join(sorted(libs)) or 'none'})"
            )
        self._device = options.device
        self._rec = DecisionRecorder(self.name, options.device)
        src = load_model(model)
        self._inputs, self._outputs = onnx_io(src.proto)
        self._out_names = [o.name for o in self._outputs]
        ops = {n.op_type for n in src.proto.graph.node}
        prec = precision(ep)
        provider_opts = {"backend_type": backend}
        sim = (
            " (x86_64: HTP simulator)" if backend == "htp" and "npu" in self.availability().simulated else ""
        )
        self._rec.mapping("target", kind, "backend_type", backend, detail=f"QNN backend {libs[backend]}{sim}")
        if prec == "int8":
            if not ops & _QDQ:
                raise UnsupportedOperationError(
                    "precision='int8' on QNN needs a QDQ-quantized model (QuantizeLinear/DequantizeLinear); quantize it "
                    "with onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ) first"
                )
            self._rec.mapping(
                "precision",
                prec,
                "model",
                "QDQ int8",
                detail="int8: the QDQ model's quantized regions run in int8",
            )
        elif prec == "fp16":
            provider_opts["enable_htp_fp16_precision"] = "1"
            self._rec.mapping("precision", prec, "enable_htp_fp16_precision", 1)
        if backend == "htp":
            # The provider needs the target SoC for fp16 (and uses it to pick the HTP
            # architecture); without it ORT silently drops QNN for the CPU provider.
            for opt, default in (("soc_model", _DEFAULT_SOC_MODEL), ("htp_arch", _DEFAULT_HTP_ARCH)):
                value = str(options.extra.get(opt, default))
                provider_opts[opt] = value
                self._rec.mapping(
                    opt,
                    value,
                    opt,
                    value,
                    default=opt not in options.extra,
                    detail=f"QNN HTP {opt}={value} (pass engine option {opt}=... for your SoC)",
                )

        so = ort.SessionOptions()
        so.log_severity_level = int(options.extra.get("log_severity_level", 3))
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        self._static_shapes(so, options)
        threads = int(pol(ep, "threads", 0) or 0)
        if threads > 0:
            so.intra_op_num_threads = threads
            self._rec.mapping("threads", threads, "intra_op_num_threads", threads)
        no_cpu = strict(ep, "no_cpu_fallback") or strict(ep, "no_fallback")
        if no_cpu:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            self._rec.mapping("strict", "no_cpu_fallback", "session.disable_cpu_ep_fallback", 1)
        so.add_provider_for_devices(_ep_devices(ort, qnn), provider_opts)
        try:
            self._sess = ort.InferenceSession(src.bytes, so)
        except Exception as exc:
            if "fallback to CPU EP has been explicitly disabled" in str(exc):
                raise UnsupportedOperationError(
                    f"qnn on {self._device}: some nodes are not supported by the QNN {backend} backend and the strict "
                    "'no_cpu_fallback' assertion forbids running them on the CPU"
                ) from exc
            raise InvalidModelError(f"QNN could not compile the model for backend {backend}: {exc}") from exc
        self._effective = {
            "providers": self._sess.get_providers(),
            "provider_options": self._sess.get_provider_options(),
        }
        if qnn.EP_NAME not in self._effective["providers"]:
            from .._core import BackendUnavailableError

            raise BackendUnavailableError(
                f"onnxruntime dropped the QNN provider for backend {backend} (session runs on {self._effective['providers']}); "
                "run with engine option log_severity_level=0 to see ORT's reason"
            )
        self._record_placement(src.proto, ep)

    def _static_shapes(self, so: Any, options: EngineOptions) -> None:
        from .._core import PolicyError

        given = options.extra.get("input_shapes") or {}
        fixed: dict[str, int] = {}
        for info in self._inputs:
            for i, d in enumerate(info.shape):
                if isinstance(d, int) and d >= 0:
                    continue
                shape = given.get(info.name)
                if shape is None or not isinstance(d, str):
                    raise PolicyError(
                        f"QNN needs static shapes, and input {info.name!r} is {list(info.shape)}; pass engine options "
                        f"input_shapes={{{info.name!r}: [...]}}"
                    )
                fixed[d] = int(shape[i])
        for dim, value in sorted(fixed.items()):
            so.add_free_dimension_override_by_name(dim, value)
        self._rec.mapping(
            "static_shape", True, "free_dimension_overrides", fixed or "none needed (all dims static)"
        )

    def _record_placement(self, proto: Any, ep: Any) -> None:
        from .._core import UnsupportedOperationError

        graph_inputs = {i.name for i in proto.graph.input}
        graph_outputs = {o.name for o in proto.graph.output}
        by_name = {n.name: n for n in proto.graph.node}
        fallback: list[str] = []
        allow_cpu = str(pol(ep, "allow_fallback", "") or "").lower() == "cpu"
        for sub in self._sess.get_provider_graph_assignment_info():
            for node in sub.get_nodes():
                if sub.ep_name != "CPUExecutionProvider":
                    self._rec.placement(node.name, node.op_type, sub.ep_name)
                    continue
                src_node = by_name.get(node.name)
                boundary = src_node is not None and (
                    (node.op_type == "QuantizeLinear" and src_node.input[0] in graph_inputs)
                    or (node.op_type == "DequantizeLinear" and src_node.output[0] in graph_outputs)
                )
                if boundary:
                    self._rec.placement(
                        node.name,
                        node.op_type,
                        sub.ep_name,
                        detail="I/O (de)quantization runs on the host by design",
                    )
                    continue
                fallback.append(f"{node.name or '?'} ({node.op_type})")
                self._rec.placement(
                    node.name, node.op_type, sub.ep_name, detail="not supported by the QNN backend"
                )
                self._rec.items[-1].rule = _core.rule.FALLBACK
        if fallback and not allow_cpu:
            raise UnsupportedOperationError(
                f"{len(fallback)} node(s) are not supported by QNN on {self._device} and would run on the CPU: "
                + ", ".join(fallback[:20])
                + "; allow that with ExecutionPolicy(allow_fallback='cpu') or change the model"
            )

    def inputs(self) -> Sequence[TensorInfo]:
        return list(self._inputs)

    def outputs(self) -> Sequence[TensorInfo]:
        return list(self._outputs)

    def decisions(self) -> list[Any]:
        return list(self._rec.items)

    @property
    def effective_options(self) -> dict[str, Any]:
        """Providers and provider options as read back from the built session."""
        return dict(self._effective)

    def run(self, inputs: Mapping[str, Any], output_names: Sequence[str] | None = None) -> dict[str, Any]:
        names = self._out_names if output_names is None else list(output_names)
        feeds = {
            k: (
                v
                if type(v) is np.ndarray
                else np.from_dlpack(v)
                if hasattr(v, "__dlpack__")
                else np.asarray(v)
            )
            for k, v in inputs.items()
        }
        return dict(zip(names, self._sess.run(names, feeds)))
