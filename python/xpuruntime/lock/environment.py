"""What a built artifact or a lock depends on beyond the model and the policies.

:func:`device_fields` names the device the way a lock file and a cache key record it
(GPU name and compute capability, or the CPU's name and the ISAs our CPU kernels were
built for); :func:`library_versions` lists the versions of every library whose
choices or kernels end up in a plan or an engine artifact (xpuruntime and its plan
format, oneDNN and the BLAS behind the CPU kernels, CUDA runtime / cuBLASLt / cuDNN
on a CUDA plan, ONNX Runtime, OpenVINO). Both are plain ``str -> str`` dicts, so two
of them diff field by field.
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import Any

from .. import _core

__all__ = ["device_fields", "diff_fields", "library_versions"]


def _kind(device: str) -> tuple[str, int]:
    kind, _, idx = str(device or "cpu").strip().lower().partition(":")
    return kind or "cpu", int(idx) if idx.isdigit() else 0


@functools.cache
def _cpu_build() -> dict[str, str]:
    """The CPU kernels' build: GEMM ISA, BLAS, vector ISA level, oneDNN (empty when the CPU
    plugin does not report it)."""
    info = getattr(getattr(_core, "ops", None), "cpu_gemm_info", None)
    if not callable(info):
        return {}
    try:
        d = dict(info())
    except _core.XpuRuntimeError:
        return {}
    return {str(k): str(v) for k, v in d.items()}


def device_fields(device: str) -> dict[str, str]:
    """The device a session runs on, as recorded in a lock or cache key.

    ``cpu``: ``kind``, ``name`` (the CPU model), ``isa`` (GEMM micro-kernel ISA) and
    ``vector_isa``. ``cuda[:N]``: ``kind``, ``name`` (GPU model) and
    ``compute_capability`` ("9.0"). Other kinds: ``kind`` and, where the device
    manager knows it, ``name``. No device index is recorded: a lock taken on cuda:0
    holds on cuda:1 of the same model.
    """
    kind, index = _kind(device)
    out = {"kind": kind}
    try:
        info = _core.DeviceManager.instance().get_device_info_for(f"{kind}:{index}")
    except (_core.XpuRuntimeError, TypeError, ValueError):
        info = None
    if info is not None and getattr(info, "name", ""):
        out["name"] = str(info.name)
    if kind == "cuda" and info is not None:
        out["compute_capability"] = f"{info.compute_capability_major}.{info.compute_capability_minor}"
    if kind == "cpu":
        build = _cpu_build()
        for k in ("isa", "vector_isa"):
            if build.get(k):
                out[k] = build[k]
    return out


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def library_versions(engine: str, device: str, plan: Any = None) -> dict[str, str]:
    """The versions that decide what ``engine`` builds on ``device``.

    Always ``xpuruntime``. The native engine adds ``plan_format`` and, on the CPU,
    ``onednn`` and ``blas``; a compiled ``plan`` adds its provider's environment
    (a CUDA plan: ``gpu_arch``, ``cuda_runtime``, ``cublaslt``, ``cudnn``).
    ``onnxruntime`` and ``openvino`` add their package versions.
    """
    from .. import __version__

    out = {"xpuruntime": str(__version__)}
    kind, _ = _kind(device)
    if engine == "native":
        graph = getattr(_core, "graph", None)
        version = getattr(plan, "format_version", None)
        if version is None and graph is not None:
            version = getattr(graph, "PLAN_FORMAT_VERSION", None)
        if version is not None:
            out["plan_format"] = str(version)
        if kind == "cpu":
            build = _cpu_build()
            for k in ("onednn", "blas"):
                if build.get(k):
                    out[k] = build[k]
        if plan is not None:
            out.update({str(k): str(v) for k, v in dict(plan.environment).items()})
    elif engine == "onnxruntime":
        out["onnxruntime"] = _dist_version("onnxruntime") or _dist_version("onnxruntime-gpu")
    elif engine == "openvino":
        out["openvino"] = _dist_version("openvino")
    elif engine == "tensorrt":
        out["tensorrt"] = _dist_version("tensorrt")
    return out


def diff_fields(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"where.field: old → new"`` for every field that differs (sorted by field)."""
    lines = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a != b:
            lines.append(f"{where}.{k}: {_show(a)} → {_show(b)}")
    return lines


def _show(v: Any) -> str:
    return "(none)" if v is None or v == "" else str(v)
