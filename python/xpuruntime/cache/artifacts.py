"""Cached builds of each artifact kind on the CPU side (DESIGN.md §5).

    sess, build = cache.native_plan("model.onnx", input_shapes={"x": [1, 64]})
    print(build.status, build.reason)       # "miss", "no cached native_plan yet: first build"
    sess, build = cache.native_plan("model.onnx", input_shapes={"x": [1, 64]})
    print(build.status)                     # "hit"

Kinds: ``native_plan`` (the native engine's serialized ExecutionPlan; CPU and CUDA),
``pin_set`` (the kernel and algorithm per case that a ``best_performance`` build tuned,
as a KernelPolicy: a hit builds with those pins and times nothing), ``onnxruntime_model`` (ONNX Runtime's optimized model, level "extended" so it stays
portable across CPUs), ``openvino_blob`` (OpenVINO's exported compiled model).
Each build returns the runnable (an InferenceSession; for OpenVINO its
``CompiledModel``) and a :class:`CachedBuild` whose ``decision`` records the hit, or
the miss and its reason, as a Decision (``op="cache"``, rule ``cache.<status>``);
sessions get it appended to ``explain()``. A corrupted entry is reported
(``status="corrupt"``), rebuilt and stored again.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _core
from ..dispatch.decision import Candidate, Decision
from ..lock.environment import device_fields, library_versions
from .store import ArtifactCache, ArtifactKey, CacheLookup

__all__ = [
    "KINDS",
    "CachedBuild",
    "artifact_key",
    "native_plan",
    "onnxruntime_model",
    "openvino_blob",
    "openvino_options",
    "pin_set",
]

KINDS = ("native_plan", "pin_set", "onnxruntime_model", "openvino_blob")
_ENGINE = {
    "native_plan": "native",
    "pin_set": "native",
    "onnxruntime_model": "onnxruntime",
    "openvino_blob": "openvino",
}


@dataclass
class CachedBuild:
    """How a build went: ``status`` hit | miss | corrupt | stale, ``reason`` in words."""

    kind: str
    status: str
    reason: str
    key: ArtifactKey
    path: Path | None
    decision: Decision

    @property
    def hit(self) -> bool:
        return self.status == "hit"


def _model_bytes(model: Any) -> bytes:
    from ..engines.onnx_model import load_model

    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        try:
            return Path(model).read_bytes()
        except OSError as exc:
            raise _core.InvalidArgumentError(
                f"cannot read the model {str(model)!r}: {exc.strerror or exc}"
            ) from exc
    return bytes(load_model(model).bytes)


def artifact_key(
    kind: str,
    model: Any,
    *,
    device: str = "cpu",
    kernel_policy: Any = None,
    exec_policy: Any = None,
    options: dict[str, Any] | None = None,
    model_bytes: bytes | None = None,
) -> ArtifactKey:
    """The key of ``kind`` built from ``model`` under these policies on ``device`` here."""
    import hashlib

    from ..lock.guard import policy_record
    from ..policies import coerce

    if kind not in KINDS:
        raise _core.InvalidArgumentError(f"unknown artifact kind {kind!r}; the kinds are {', '.join(KINDS)}")
    data = model_bytes if model_bytes is not None else _model_bytes(model)
    kp = coerce.core_kernel_policy(kernel_policy)
    if kind == "pin_set":
        kp = tuning_policy(kp)
    policy = policy_record(kp, coerce.core_exec_policy(exec_policy))
    if kind not in ("native_plan", "pin_set"):  # external engines read no kernel policy
        policy = {k: v for k, v in policy.items() if k.startswith("exec")}
    return ArtifactKey(
        kind=kind,
        model_sha256=hashlib.sha256(data).hexdigest(),
        policy=policy,
        device=device_fields(device),
        libraries=library_versions(_ENGINE[kind], device),
        options=dict(options or {}),
    )


def _decision(kind: str, device: str, look: CacheLookup) -> Decision:
    chosen = "cached" if look.hit else "rebuilt"
    detail = look.reason if look.hit else f"{look.status}: {look.reason}; rebuilt and stored"
    return Decision(
        op="cache",
        device=device,
        dtypes=[],
        shapes=[],
        candidates=[Candidate(chosen, "supported", "", detail)],
        chosen=chosen,
        rule=f"cache.{look.status}",
        node=kind,
        detail=detail,
    )


def _cached(
    cache: ArtifactCache | None, key: ArtifactKey, device: str, build: Any, load: Any
) -> tuple[Any, CachedBuild]:
    """Look ``key`` up; load the payload on a hit, else build, store and load."""
    cache = cache or ArtifactCache()
    look = cache.lookup(key)
    runnable = None
    if look.hit:
        try:
            runnable = load(look.payload)
        except _core.XpuRuntimeError as exc:  # e.g. the plan loader refuses it
            look = CacheLookup("stale", f"the cached {key.kind} no longer loads ({exc})", key)
    path = None
    if runnable is None:
        payload = build()
        path = cache.store(key, payload)
        runnable = load(payload)
    else:
        path = cache.artifacts / key.kind / str((look.meta or {}).get("payload", ""))
    return runnable, CachedBuild(
        key.kind, look.status, look.reason, key, path, _decision(key.kind, device, look)
    )


def coerce_exec(exec_policy: Any) -> Any:
    """The core ExecutionPolicy (the defaults for None)."""
    from ..policies import coerce

    return coerce.core_exec_policy(exec_policy) or _core.ExecutionPolicy()


def openvino_options(device: str, exec_policy: Any) -> dict[str, Any]:
    """OpenVINO's device name and compile config for ``exec_policy``, mapped as the OpenVINO
    adapter maps them (fp32 must say f32: a CPU with bf16 would otherwise run bf16)."""
    from ..engines.openvino import _OV_PRECISION
    from ..lock.guard import _precision

    ep = coerce_exec(exec_policy)
    config: dict[str, Any] = {}
    hint = _OV_PRECISION.get(_precision(ep))
    if hint:
        config["INFERENCE_PRECISION_HINT"] = hint
    threads = int(getattr(ep, "threads", 0) or 0)
    if threads > 0:
        config["INFERENCE_NUM_THREADS"] = threads
    ov_device = {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}.get(device.split(":")[0], device.upper())
    return {"ov_device": ov_device, "config": config}


def _attach(session: Any, build: CachedBuild) -> None:
    # The cache's decision joins the session's own (explain() shows it first).
    session._decisions.insert(0, build.decision)


def native_plan(
    model: Any,
    *,
    device: str = "cpu",
    kernel_policy: Any = None,
    exec_policy: Any = None,
    input_shapes: dict[str, list[int]] | None = None,
    cache: ArtifactCache | None = None,
) -> tuple[Any, CachedBuild]:
    """An InferenceSession over the cached native plan (built and stored on a miss).

    A model with symbolic input dimensions needs ``input_shapes`` (the plan is one
    specialization)."""
    from ..inference import InferenceSession

    data = _model_bytes(model)
    shapes = {str(k): [int(d) for d in v] for k, v in (input_shapes or {}).items()}
    key = artifact_key(
        "native_plan",
        model,
        device=device,
        kernel_policy=kernel_policy,
        exec_policy=exec_policy,
        options={"input_shapes": shapes},
        model_bytes=data,
    )

    def build() -> bytes:
        sess = InferenceSession(
            data,
            device=device,
            engine="native",
            kernel_policy=kernel_policy,
            exec_policy=exec_policy,
            **({"input_shapes": shapes} if shapes else {}),
        )
        if sess.plan is None:
            raise _core.InvalidArgumentError(
                "the model has symbolic input dimensions: pass input_shapes={name: shape} to cache a plan"
            )
        return bytes(sess.plan.serialize())

    def load(payload: bytes) -> Any:
        return InferenceSession(
            payload,
            device=device,
            engine="native",
            kernel_policy=kernel_policy,
            exec_policy=exec_policy,
            model_hash=key.model_sha256,
        )

    sess, built = _cached(cache, key, device, build, load)
    _attach(sess, built)
    return sess, built


def tuning_policy(kernel_policy: Any) -> Any:
    """A copy of ``kernel_policy`` (core form; None = the defaults) with
    ``auto_strategy="best_performance"``: what a pin set is tuned under."""
    from ..policies import coerce

    core = coerce.core_kernel_policy(kernel_policy)
    out = core.copy() if core is not None else _core.KernelPolicy()
    out.auto_strategy_name = "best_performance"
    return out


def pin_set(
    model: Any,
    *,
    device: str = "cpu",
    kernel_policy: Any = None,
    exec_policy: Any = None,
    input_shapes: dict[str, list[int]] | None = None,
    cache: ArtifactCache | None = None,
) -> tuple[Any, CachedBuild]:
    """The pins a ``best_performance`` native build of ``model`` tunes, cached.

    On a miss the model is compiled under ``kernel_policy`` with
    ``auto_strategy="best_performance"`` (every case's candidates timed on ``device``)
    and the session's :meth:`~xpuruntime.InferenceSession.export_pins` is stored; a hit
    returns the stored pins without timing anything. Returns the pins as a
    :class:`xpuruntime.KernelPolicy` (build sessions with it: every tuned case is
    ``pinned``) and the :class:`CachedBuild`. A model with symbolic input dimensions
    needs ``input_shapes``.
    """
    from ..inference import InferenceSession
    from ..policies import KernelPolicy

    data = _model_bytes(model)
    shapes = {str(k): [int(d) for d in v] for k, v in (input_shapes or {}).items()}
    tuned = tuning_policy(kernel_policy)
    key = artifact_key(
        "pin_set",
        model,
        device=device,
        kernel_policy=tuned,
        exec_policy=exec_policy,
        options={"input_shapes": shapes},
        model_bytes=data,
    )

    def build() -> bytes:
        sess = InferenceSession(
            data,
            device=device,
            engine="native",
            kernel_policy=tuned,
            exec_policy=exec_policy,
            **({"input_shapes": shapes} if shapes else {}),
        )
        if sess.plan is None:
            raise _core.InvalidArgumentError(
                "the model has symbolic input dimensions: pass input_shapes={name: shape} to tune a pin set"
            )
        return sess.export_pins().to_json().encode()

    def load(payload: bytes) -> Any:
        return KernelPolicy.from_json(payload)

    return _cached(cache, key, device, build, load)


def onnxruntime_model(
    model: Any, *, device: str = "cpu", exec_policy: Any = None, cache: ArtifactCache | None = None
) -> tuple[Any, CachedBuild]:
    """An InferenceSession (engine onnxruntime) over ONNX Runtime's cached optimized model."""
    import onnxruntime as ort

    from ..inference import InferenceSession

    data = _model_bytes(model)
    key = artifact_key(
        "onnxruntime_model",
        model,
        device=device,
        exec_policy=exec_policy,
        options={"graph_optimization_level": "extended"},
        model_bytes=data,
    )

    def build() -> bytes:
        with tempfile.TemporaryDirectory(prefix="xrt_ort_opt_") as tmp:
            out = Path(tmp) / "optimized.onnx"
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            so.optimized_model_filepath = str(out)
            ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            return out.read_bytes()

    def load(payload: bytes) -> Any:
        # Already optimized: ONNX Runtime only needs to load it.
        return InferenceSession(
            payload,
            device=device,
            engine="onnxruntime",
            exec_policy=exec_policy,
            graph_optimization_level="disable",
        )

    sess, built = _cached(cache, key, device, build, load)
    _attach(sess, built)
    return sess, built


def openvino_blob(
    model: Any, *, device: str = "cpu", exec_policy: Any = None, cache: ArtifactCache | None = None
) -> tuple[Any, CachedBuild]:
    """OpenVINO's ``CompiledModel`` imported from the cached exported blob (compiled on a miss)."""
    import io

    import openvino as ov

    data = _model_bytes(model)
    options = openvino_options(device, exec_policy)
    ov_device, config = options["ov_device"], options["config"]
    key = artifact_key(
        "openvino_blob",
        model,
        device=device,
        exec_policy=exec_policy,
        options=options,
        model_bytes=data,
    )
    core = ov.Core()

    def build() -> bytes:
        compiled = core.compile_model(core.read_model(data), ov_device, config)
        blob = compiled.export_model()  # bytes in older releases, a BytesIO in newer ones
        return blob.getvalue() if hasattr(blob, "getvalue") else bytes(blob)

    def load(payload: bytes) -> Any:
        try:
            return core.import_model(io.BytesIO(payload), ov_device, config)
        except RuntimeError as exc:  # OpenVINO refuses a blob from another version or device
            raise _core.InvalidModelError(f"OpenVINO cannot import the cached blob: {exc}") from exc

    return _cached(cache, key, device, build, load)
