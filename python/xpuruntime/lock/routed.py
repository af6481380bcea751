"""Locks for routed PyTorch calls (DESIGN.md §3, §8): the same lock file as a session's,
keyed by the Dispatcher's case key (op, device class, dtypes, shapes, attributes).

    import xpuruntime.pytorch as xpt
    xpt.set_kernel_policy(xrt.KernelPolicy(auto_strategy="best_performance"))
    train_step()                              # every routed case decides (and is tuned) once
    xpt.save_lock("train.lock.json")          # kernel, algorithm, timings and margin per case

    # another process, the same model and policy:
    xpt.set_kernel_policy(policy, lock="train.lock.json", frozen=True)
    train_step()                              # the locked kernels; anything else refuses

A locked policy gets the lock's choices as pins, so the Dispatcher answers every locked
case ``pinned``; a routed decision that still differs (the pinned kernel no longer
runs the case here) raises :class:`LockViolationError` naming the case and both
kernels, and with ``frozen=True`` a case the lock does not cover raises naming it.
The policy, the device and the library versions (torch, its CUDA and cuDNN) are
checked against the lock when it is applied.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import Any

from .. import _core
from ..policies.coerce import core_kernel_policy
from .environment import device_fields, diff_fields
from .errors import lock_violation
from .guard import _node_entries, _policy_diffs, policy_record
from .lockfile import LockFile

__all__ = ["ENGINE", "RoutedLockGuard", "capture_routed", "routed_libraries", "save_lock"]

#: The lock's ``engine`` for routed PyTorch calls.
ENGINE = "pytorch"


def routed_libraries() -> dict[str, str]:
    """The versions whose kernels a routed call may run: xpuruntime, torch, and torch's
    CUDA runtime and cuDNN where torch has them."""
    import torch

    from .. import __version__

    out = {"xpuruntime": str(__version__), "torch": str(torch.__version__)}
    if torch.version.cuda:
        out["torch_cuda"] = str(torch.version.cuda)
    # cuDNN only matters where routed calls can reach it. torch raises when another cuDNN
    # is already loaded in the process (the CUDA plugin's): recorded, not fatal.
    if torch.cuda.is_available() and torch.backends.cudnn.is_available():
        try:
            out["torch_cudnn"] = str(torch.backends.cudnn.version())
        except RuntimeError as exc:
            out["torch_cudnn"] = f"unusable: {str(exc).splitlines()[0][:120]}"
    return out


def _device_of(decisions: list[Any]) -> str:
    kinds = {str(d.device).split(":")[0] for d in decisions if d.device}
    if len(kinds) > 1:
        raise _core.InvalidArgumentError(
            f"routed calls ran on several device kinds ({', '.join(sorted(kinds))}): a lock covers one; "
            "clear the decision log (xpuruntime.pytorch.clear_decision_log()) between devices"
        )
    return kinds.pop() if kinds else "cpu"


def capture_routed(policy: Any, decisions: Iterable[Any]) -> LockFile:
    """The lock of the routed calls behind ``decisions`` (xpuruntime.pytorch.decision_log())
    under ``policy``. Raises InvalidArgumentError when no routed call was decided yet."""
    ds = [d for d in decisions if d.key and d.chosen and d.rule != "none"]
    if not ds:
        raise _core.InvalidArgumentError(
            "nothing to lock yet: no routed torch call was decided under the kernel policy; run the "
            "model once (each shape to lock) after xpuruntime.pytorch.set_kernel_policy(...)"
        )
    device = _device_of(ds)
    seen: set[str] = set()
    unique = []
    for d in ds:  # one entry per case: a case is decided once (later ones are cache hits)
        if d.key not in seen:
            seen.add(d.key)
            unique.append(d)
    return LockFile(
        engine=ENGINE,
        device=device,
        device_info=device_fields(device),
        libraries=routed_libraries(),
        model_sha256="",
        policy=policy_record(core_kernel_policy(policy), None),
        buckets=[{"inputs": None, "nodes": _node_entries(unique, "", [])}],
    )


def save_lock(path: str | os.PathLike[str], policy: Any, decisions: Iterable[Any]) -> LockFile:
    """Writes :func:`capture_routed` of ``decisions`` under ``policy`` to ``path``
    (atomically) and returns the LockFile. Users call ``xpuruntime.pytorch.save_lock(path)``,
    which passes the policy it set and its decision log."""
    if policy is None:
        raise _core.InvalidArgumentError(
            "save_lock: no kernel policy is set; call xpuruntime.pytorch.set_kernel_policy(...) and run "
            "the model first"
        )
    lock = capture_routed(policy, decisions)
    lock.source = str(path)
    lock.save(path)
    return lock


class RoutedLockGuard:
    """Holds routed PyTorch calls to a lock. Thread-safe."""

    def __init__(self, lock: LockFile, frozen: bool) -> None:
        if lock.engine != ENGINE:
            raise lock_violation(
                f"lock file {lock.source or '(in memory)'} was taken from a session on engine "
                f"'{lock.engine}', not from routed PyTorch calls",
                [f"engine: {lock.engine} → {ENGINE}"],
                "Pass a lock written by xpuruntime.pytorch.save_lock(path) to set_kernel_policy, and a "
                "session's lock to InferenceSession(model, lock=...).",
            )
        self.lock = lock
        self.frozen = frozen
        self._cases = {str(n["key"]): n for b in lock.buckets for n in b.get("nodes", []) if n.get("key")}
        self._mutex = threading.Lock()
        self._checked: set[str] = set()

    @classmethod
    def open(cls, lock: Any, frozen: bool) -> RoutedLockGuard:
        """A guard over ``lock`` (a path or a LockFile)."""
        return cls(lock if isinstance(lock, LockFile) else LockFile.load(lock), bool(frozen))

    def locked_policy(self) -> Any:
        """The kernel policy the lock was taken under (core form)."""
        return _core.KernelPolicy.from_json(json.dumps(self.lock.policy.get("kernel", {})))

    def _where(self) -> str:
        return f"lock file {self.lock.source or '(in memory)'}"

    def prepare(self, policy: Any, device: str) -> Any:
        """Checks the policy, ``device`` and the libraries against the lock; returns the core
        policy with the lock's choices as pins."""
        core = core_kernel_policy(policy)
        diff = _policy_diffs(self.lock.policy, policy_record(core, None))
        diff += diff_fields("device", self.lock.device_info, device_fields(device))
        diff += diff_fields("libraries", self.lock.libraries, routed_libraries())
        if diff:
            raise lock_violation(
                f"routed PyTorch calls differ from {self._where()}",
                diff,
                "Run under the locked policy, device and libraries, or take a new lock "
                "(xpuruntime.pytorch.save_lock(path)) if the change is intended.",
            )
        pinned = core.copy()
        pinned.pins = {**dict(core.pins), **self.lock.pins()}
        return pinned

    def check(self, decision: Any) -> None:
        """Refuses a routed decision that differs from the lock (or, frozen, one it lacks)."""
        key = str(decision.key)
        with self._mutex:
            if key in self._checked:
                return
        entry = self._cases.get(key)
        label = f"case {key}"
        if entry is None:
            if self.frozen:
                raise lock_violation(
                    f"frozen: routed call {decision.op} ({', '.join(decision.dtypes)}"
                    f"{' ' + str(decision.shapes) if decision.shapes else ''}) is not covered by {self._where()}",
                    [f"{label}: not in the lock (it covers {len(self._cases)} case(s))"],
                    "Run this shape once unfrozen and take a new lock (xpuruntime.pytorch.save_lock), "
                    "or feed a locked shape.",
                )
        else:
            diff = [
                f"{label}: {f} {entry.get(f) or '(default)'} → {getattr(decision, g) or '(default)'}"
                for f, g in (("kernel", "chosen"), ("algorithm", "algorithm"))
                if str(entry.get(f, "")) != str(getattr(decision, g) or "")
            ]
            if diff:
                why = f" ({decision.detail})" if decision.detail else ""
                raise lock_violation(
                    f"routed call {decision.op} decided differently from {self._where()}{why}",
                    diff,
                    "Run where the locked kernel runs this case, or take a new lock if the change is "
                    "intended.",
                )
        with self._mutex:
            self._checked.add(key)
