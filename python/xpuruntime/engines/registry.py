"""The one engine registry (DESIGN.md §2, §4, §6): name → Engine class, and the
deterministic choice of engine and device for ``InferenceSession``.

Engines are registered lazily as ``"module:Class"`` strings so that importing
xpuruntime never imports a vendor package; a class is imported the first time it is
asked for. An engine whose module or vendor package is missing is still listed and
reports itself unavailable with the reason and the install hint.

How to add an engine: write ``engines/<name>.py`` (see ``base.py``) and add one line
to ``_BUILTIN`` below (or call :func:`register_engine` from a plug-in package).

Selection (:func:`select_engine`) is a pure function of the request, the policy and
what is installed here; it never looks at timings, so the same inputs give the same
engine and device on every run. Each step is recorded as a ``Decision`` with
``op="engine"``.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any

from .. import _core
from .._core import BackendUnavailableError, InvalidArgumentError, PolicyError, UnsupportedOperationError
from ..dispatch.decision import Candidate, Decision
from ._common import pol, strict
from .base import Availability, Engine
from .native import devices as native_devices

# name → "module:Class" (lazy) or the class itself (after the first lookup).
_BUILTIN: dict[str, str] = {
    "native": "xpuruntime.engines.native:NativeEngine",
    "onnxruntime": "xpuruntime.engines.onnxruntime:OnnxRuntimeEngine",
    "openvino": "xpuruntime.engines.openvino:OpenVinoEngine",
    "tensorrt": "xpuruntime.engines.tensorrt:TensorRtEngine",
    "qnn": "xpuruntime.engines.qnn:QnnEngine",
}

_ALIASES: dict[str, str] = {
    "onnxrt": "onnxruntime",
    "ort": "onnxruntime",
    "ov": "openvino",
    "trt": "tensorrt",
    "xrt": "native",
}

# Device kinds a session can target. "gpu" is a non-CUDA GPU reached through
# OpenVINO's GPU plugin (Intel iGPU/dGPU); NVIDIA GPUs are "cuda".
DEVICE_KINDS = ("cpu", "cuda", "npu", "gpu")

# Engine preference per device kind when engine="auto": ours first where it runs,
# then the vendor engine built for that device, then the general ones.
_PREFERENCE: dict[str, tuple[str, ...]] = {
    "cuda": ("native", "tensorrt", "onnxruntime"),
    "npu": ("openvino", "qnn"),
    "gpu": ("openvino",),
    "cpu": ("native", "onnxruntime", "openvino"),
}


def _auto_order() -> dict[str, tuple[str, ...]]:
    # The native engine is ranked only where it has an execution provider: ranking it
    # first for a device it refuses would only add a rejected candidate to every choice.
    kinds = native_devices()
    return {k: tuple(n for n in names if n != "native" or k in kinds) for k, names in _PREFERENCE.items()}


AUTO_ORDER: dict[str, tuple[str, ...]] = _auto_order()

# Device preference when device="auto" (and the policy's target is "auto" or unset).
AUTO_DEVICE_ORDER = ("cuda", "npu", "cpu")

_lock = threading.Lock()
_classes: dict[str, type[Engine]] = {}
_specs: dict[str, str] = dict(_BUILTIN)
_avail_cache: dict[str, Availability] = {}


# --------------------------------------------------------------------------- lookup
def canonical_name(name: str) -> str:
    """Map an engine name or alias (case-insensitive) to its registered name."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"engine name must be a non-empty string, got {name!r}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _specs and key not in _classes:
        raise InvalidArgumentError(
            f"unknown engine {name!r}; valid engines: {', '.join(list_engines())} "
            f"(aliases: {', '.join(f'{a}→{t}' for a, t in sorted(_ALIASES.items()))}) or 'auto'"
        )
    return key


def list_engines() -> list[str]:
    """All registered engine names, available or not, in a stable order."""
    return sorted(set(_specs) | set(_classes))


def register_engine(name: str, engine: type[Engine] | str, *, aliases: tuple[str, ...] = ()) -> None:
    """Register ``engine`` (a class or a lazy ``"module:Class"`` string) under ``name``.

    Re-registering a name replaces it (a plug-in may provide a newer adapter).
    """
    key = name.strip().lower()
    with _lock:
        _classes.pop(key, None)
        _avail_cache.pop(key, None)
        if isinstance(engine, str):
            _specs[key] = engine
        else:
            _specs.pop(key, None)
            _classes[key] = engine
        for alias in aliases:
            _ALIASES[alias.strip().lower()] = key


class _MissingEngine:
    """Stands in for an engine whose adapter module cannot be imported."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason


def _load(name: str) -> type[Engine] | _MissingEngine:
    with _lock:
        if name in _classes:
            return _classes[name]
        spec = _specs[name]
    module_name, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        # The adapter module itself is missing or broken; vendor packages are imported
        # lazily inside the adapters, so this is not "package not installed".
        return _MissingEngine(name, f"engine adapter {spec} could not be loaded: {exc}")
    with _lock:
        _classes[name] = cls
    return cls


def get_engine_class(name: str) -> type[Engine]:
    """The Engine class for ``name`` (alias allowed); raises if its adapter cannot load."""
    key = canonical_name(name)
    cls = _load(key)
    if isinstance(cls, _MissingEngine):
        raise BackendUnavailableError(f"engine {key!r} is not available: {cls.reason}")
    return cls


def availability(name: str, *, refresh: bool = False) -> Availability:
    """Whether engine ``name`` can run here, with the reason and install hint if not.

    Cached per process (probing imports vendor packages); ``refresh=True`` probes again.
    """
    key = canonical_name(name)
    with _lock:
        if not refresh and key in _avail_cache:
            return _avail_cache[key]
    cls = _load(key)
    if isinstance(cls, _MissingEngine):
        av = Availability(False, cls.reason, "reinstall xpuruntime", ())
    else:
        try:
            av = cls.availability()
        except Exception as exc:  # noqa: BLE001 - a probe must never break selection
            av = Availability(False, f"availability probe of {key!r} raised {type(exc).__name__}: {exc}")
    with _lock:
        _avail_cache[key] = av
    return av


def engine_table() -> list[tuple[str, Availability]]:
    """(name, availability) for every registered engine, for the CLI and docs."""
    return [(n, availability(n)) for n in list_engines()]


# ------------------------------------------------------------------------ selection
@dataclass(frozen=True)
class _Device:
    kind: str
    index: int | None

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


def parse_device(device: str) -> _Device:
    """Parse "cpu", "cuda", "cuda:1", "npu", "gpu" (not "auto")."""
    if not isinstance(device, str):
        raise InvalidArgumentError(
            f"device must be a string like 'cpu', 'cuda:0', 'npu' or 'auto', got {device!r}"
        )
    text = device.strip().lower()
    kind, sep, idx = text.partition(":")
    if kind not in DEVICE_KINDS:
        raise InvalidArgumentError(
            f"unknown device {device!r}; valid: {', '.join(DEVICE_KINDS)} (with an optional ':N'), or 'auto'"
        )
    if not sep:
        return _Device(kind, None)
    if not idx.isdigit():
        raise InvalidArgumentError(f"device index in {device!r} must be a non-negative integer")
    return _Device(kind, int(idx))


def _policy_get(policy: Any, field: str, default: Any = None) -> Any:
    return pol(policy, field, default)  # enums → lower-case names, None → default


def _is_auto(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto"))


def _check(name: str, dev: _Device, exec_policy: Any, *, named: bool = True) -> tuple[str, str, str]:
    """(verdict, reason_code, detail) of engine ``name`` for ``dev`` under the policy.

    ``named``: the caller asked for this engine by name (simulated devices allowed).
    """
    cls = _load(name)
    av = availability(name)
    if not av.available or isinstance(cls, _MissingEngine):
        hint = f"; install with: {av.install_hint}" if av.install_hint else ""
        return "rejected", _core.reason.BACKEND_UNAVAILABLE, f"{av.reason}{hint}"
    if dev.kind not in av.devices:
        have = ", ".join(av.devices) or "none"
        why = f"; {av.reason}" if av.reason else ""
        return "rejected", "device_unavailable", f"{name} has no {dev.kind} device here (has: {have}){why}"
    if dev.kind in av.simulated and not named:
        return (
            "rejected",
            "simulated_device",
            f"{name}'s {dev.kind} is a simulator here; name engine={name!r} to use it",
        )
    refusal = cls.supports(str(dev), exec_policy)
    if refusal is not None:
        code, detail = refusal
        return "rejected", code, detail
    return "supported", "", f"{name} can run on {dev}"


def _candidate(name: str, dev: _Device, verdict: str, code: str, detail: str) -> Candidate:
    # The same engine may be tried on two devices (npu, then the cpu fallback), so a
    # candidate is an engine@device pair.
    return Candidate(f"{name}@{dev}", verdict, code, detail)


def _try(
    names: tuple[str, ...],
    dev: _Device,
    exec_policy: Any,
    cands: list[Candidate],
    named: bool,
    rejected: dict[str, tuple[str, str]] | None = None,
) -> str | None:
    """First supported engine of ``names`` on ``dev``; every one tried is recorded.
    ``rejected``: engines already found unable to build this model (reason code, detail)."""
    for name in names:
        if rejected and name in rejected:
            cands.append(_candidate(name, dev, "rejected", *rejected[name]))
            continue
        verdict, code, detail = _check(name, dev, exec_policy, named=named)
        cands.append(_candidate(name, dev, verdict, code, detail))
        if verdict == "supported":
            return name
    return None


def _resolve_requests(
    engine: str | None, device: str | None, exec_policy: Any
) -> tuple[str | None, str | None]:
    """Merge the session arguments with the policy's engine/target; conflicts raise."""
    arg_engine = None if _is_auto(engine) else canonical_name(engine)  # type: ignore[arg-type]
    pol_engine_raw = _policy_get(exec_policy, "engine")
    pol_engine = None if _is_auto(pol_engine_raw) else canonical_name(pol_engine_raw)
    if arg_engine and pol_engine and arg_engine != pol_engine:
        raise PolicyError(
            f"engine={engine!r} conflicts with ExecutionPolicy(engine={pol_engine_raw!r}); "
            "pass one of them, or make them agree"
        )
    arg_dev = None if _is_auto(device) else str(parse_device(device))  # type: ignore[arg-type]
    target_raw = _policy_get(exec_policy, "target")
    pol_dev = None if _is_auto(target_raw) else str(parse_device(target_raw))
    if arg_dev and pol_dev and parse_device(arg_dev).kind != parse_device(pol_dev).kind:
        raise PolicyError(
            f"device={device!r} conflicts with ExecutionPolicy(target={target_raw!r}); "
            "pass one of them, or make them agree"
        )
    return arg_engine or pol_engine, arg_dev or pol_dev


def _fallback_device(exec_policy: Any) -> _Device | None:
    raw = _policy_get(exec_policy, "allow_fallback")
    if raw is None or raw is False:
        return None
    if raw is True:  # a bare "yes" means the universal fallback, the CPU
        return _Device("cpu", None)
    return parse_device(str(raw))


def select_engine(
    engine: str | None,
    device: str | None,
    exec_policy: Any = None,
    rejected: dict[str, tuple[str, str]] | None = None,
) -> tuple[type[Engine], str, list[Decision]]:
    """Choose the engine class and the device for a session, deterministically.

    ``engine``: a name, alias, "auto" or None (then ``exec_policy.engine``, else auto).
    ``device``: "cpu", "cuda[:N]", "npu", "gpu", "auto" or None (then
    ``exec_policy.target``, else auto). Returns ``(EngineClass, device, decisions)``.

    Rules, in order: an explicit engine is never replaced by another engine; an
    explicit device is tried first and left only for ``exec_policy.allow_fallback``
    (rule ``fallback``); with neither, devices are tried in ``AUTO_DEVICE_ORDER`` and
    engines in ``AUTO_ORDER`` (rule ``auto.first_available``). When nothing fits, raises
    ``BackendUnavailableError`` listing every candidate and why it was rejected.
    ``rejected`` names engines that failed to build this model (engine -> (reason code,
    detail)): auto selection records them as rejected and takes the next one.
    """
    want_engine, want_device = _resolve_requests(engine, device, exec_policy)
    cands: list[Candidate] = []

    if want_device is None:
        devices = [_Device(k, None) for k in AUTO_DEVICE_ORDER]
        if want_engine is not None:
            devices = [d for d in devices if d.kind in _engine_device_kinds(want_engine)] or devices[-1:]
    else:
        devices = [parse_device(want_device)]

    chosen: str | None = None
    chosen_dev: _Device | None = None
    for dev in devices:
        names = (want_engine,) if want_engine else AUTO_ORDER[dev.kind]
        chosen = _try(names, dev, exec_policy, cands, want_engine is not None, rejected)
        if chosen:
            chosen_dev = dev
            break

    rule = _rule(want_engine, want_device)
    detail = ""
    if chosen is None and want_device is not None:
        fb = _fallback_device(exec_policy)
        if fb is not None and strict(exec_policy, "no_fallback"):
            cands.append(
                Candidate(
                    f"fallback@{fb}",
                    "rejected",
                    "strict_no_fallback",
                    "ExecutionPolicy(strict=['no_fallback']) forbids the fallback allow_fallback asks for",
                )
            )
            fb = None
        if fb is not None and fb.kind != devices[0].kind:
            names = (want_engine,) if want_engine else AUTO_ORDER[fb.kind]
            chosen = _try(names, fb, exec_policy, cands, want_engine is not None, rejected)
            if chosen:
                chosen_dev = fb
                rule = _core.rule.FALLBACK
                detail = f"{want_device} unavailable; ExecutionPolicy(allow_fallback={str(fb)!r}) allows {fb}"

    if chosen is None or chosen_dev is None:
        message = _no_engine_message(want_engine, want_device, exec_policy, cands)
        # Missing software or hardware is "unavailable"; an engine that is there but
        # cannot honour the policy (precision, shapes) is "unsupported".
        if all(
            c.reason_code
            in (
                _core.reason.BACKEND_UNAVAILABLE,
                "device_unavailable",
                "simulated_device",
                "strict_no_fallback",
            )
            for c in cands
        ):
            raise BackendUnavailableError(message)
        raise UnsupportedOperationError(message)

    label = f"{chosen}@{chosen_dev}"  # the chosen candidate's name
    if chosen_dev.kind == "cuda" and chosen_dev.index is None:
        chosen_dev = _Device("cuda", 0)
    decision = Decision(
        op="engine",
        device=str(chosen_dev),
        dtypes=[],
        shapes=[],
        candidates=cands,
        chosen=label,
        rule=rule,
        detail=detail or f"engine {chosen} on {chosen_dev}",
    )
    return get_engine_class(chosen), str(chosen_dev), [decision]


def _engine_device_kinds(name: str) -> tuple[str, ...]:
    return tuple(k for k, names in AUTO_ORDER.items() if name in names)


def _rule(want_engine: str | None, want_device: str | None) -> str:
    # Engine rules beside the dispatcher's RULES: an engine named by the caller or the
    # policy ("policy.engine"), or the first available in AUTO_ORDER.
    return "policy.engine" if want_engine else "auto.first_available"


def _no_engine_message(
    want_engine: str | None, want_device: str | None, exec_policy: Any, cands: list[Candidate]
) -> str:
    what = f"engine {want_engine!r}" if want_engine else "any engine"
    where = f"device {want_device!r}" if want_device else "any device"
    lines = [f"no usable engine: {what} on {where}"]
    for c in cands:
        lines.append(f"  - {c.kernel}: {c.reason_code}: {c.detail}")
    fb = _policy_get(exec_policy, "allow_fallback")
    if want_device is not None and fb is None:
        lines.append(
            "fallback to another device is off; allow it with ExecutionPolicy(allow_fallback='cpu') "
            "or choose another device/engine"
        )
    return "\n".join(lines)
