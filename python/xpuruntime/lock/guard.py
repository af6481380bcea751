"""Taking a lock from a session, and holding a session to one (DESIGN.md §3).

:func:`capture` writes what a session decided. :class:`LockGuard` is what
``InferenceSession(model, lock=FILE, frozen=...)`` holds: before the build it fills
the engine and device from the lock, checks the model, the policies, the device and
the library versions against it and turns every locked node into a pin (native
engine); after each compile (at construction, or at the first run of an input
shape) it compares the plan's decisions with the lock, node by node. Any difference
raises ``LockViolationError`` whose ``.diff`` names the fields.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _core
from .._core import InvalidArgumentError
from .environment import device_fields, diff_fields, library_versions
from .errors import lock_violation
from .lockfile import LockFile, bucket_id, node_key

__all__ = ["LockGuard", "capture", "policy_record"]

#: Library fields a compiled plan adds (its provider's environment); checked after the build.
_PLAN_ENV = ("gpu_arch", "cuda_runtime", "cublaslt", "cudnn")
_AUTO = (None, "", "auto")


def _policy_dict(p: Any) -> dict[str, Any]:
    return json.loads(p.to_json()) if p is not None else {}


def policy_record(kernel_policy: Any, exec_policy: Any) -> dict[str, Any]:
    """The policies as a lock records them (JSON and fingerprints; None = the defaults)."""
    kp = kernel_policy if kernel_policy is not None else _core.KernelPolicy()
    ep = exec_policy if exec_policy is not None else _core.ExecutionPolicy()
    return {
        "kernel": _policy_dict(kp),
        "kernel_fingerprint": str(kp.fingerprint),
        "exec": _policy_dict(ep),
        "exec_fingerprint": str(ep.fingerprint),
    }


def _flat(d: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}") if isinstance(v, dict) else {f"{prefix}.{k}": v})
    return out


def _policy_diffs(locked: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    lines = []
    for which in ("kernel", "exec"):
        # Content first (a hand-edited lock may keep the old fingerprint), then the fingerprint.
        fp = f"{which}_fingerprint"
        a = _flat(locked.get(which, {}), f"policy.{which}")
        b = _flat(now.get(which, {}), f"policy.{which}")
        fields = [
            f"{k}: {json.dumps(a.get(k))} → {json.dumps(b.get(k))}"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
        if fields or locked.get(fp) != now.get(fp):
            lines += fields or [f"policy.{fp}: {locked.get(fp)} → {now.get(fp)}"]
    return lines


def _node_entries(decisions: list[Any], precision: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    fused = {str(s.get("name", "")): str(s.get("fused", "")) for s in steps}
    out = []
    for d in decisions:
        e: dict[str, Any] = {
            "node": d.node,
            "op": d.op,
            "key": d.key,
            "kernel": d.chosen,
            "algorithm": d.algorithm,
            "precision": precision,
            "dtypes": list(d.dtypes),
            "rule": d.rule,
            "fused": fused.get(d.node, ""),
        }
        if d.rule == "auto.best_performance":
            e["timings_ms"] = dict(d.timings or {})
            e["margin"] = d.detail
            e.update(_margin(d))
        out.append(e)
    return out


def _margin(d: Any) -> dict[str, Any]:
    """A tuned decision's margin as numbers: ``margin_pct``, how much slower (percent) the
    next-best candidate ran than the chosen one (negative when the choice is a tie within
    noise that an earlier candidate won), and ``tie``. Empty when fewer than two ran."""
    timings = dict(d.timings or {})
    label = d.chosen + (f"/{d.algorithm}" if d.algorithm else "")
    mine = timings.pop(label, None)
    if mine is None or not timings or mine <= 0:
        return {}
    runner_up = min(timings.values())
    return {"margin_pct": round(100.0 * (runner_up - mine) / mine, 3), "tie": runner_up < mine}


def _precision(exec_policy: Any) -> str:
    v = getattr(exec_policy, "precision", "fp32") if exec_policy is not None else "fp32"
    return str(getattr(v, "name", v)).lower().replace("precision.", "")


def _plan_decisions(plan: Any) -> list[Any]:
    from ..dispatch.decision import Decision

    return [Decision.from_dict(json.loads(d)) for d in plan.decisions]


def _native_plans(session: Any) -> dict[tuple[Any, ...], Any]:
    # The native engine keeps one plan per input-shape specialization, keyed by the
    # shapes in model-input order (NativeEngine._plans: shapes -> (plan, executor)).
    return {k: v[0] for k, v in dict(getattr(session._engine, "_plans", {})).items()}


def _model_hash(model: Any) -> str | None:
    """SHA-256 of an ONNX model as plans record it; None for a saved plan (its header has it)."""
    from ..engines.native.engine import is_plan, model_sha256

    if model is None or is_plan(model):
        return None
    return model_sha256(model)


def capture(session: Any) -> LockFile:
    """The lock of ``session``: everything it decided, for every input shape compiled so far.

    Raises InvalidArgumentError when a native session has compiled nothing yet (symbolic
    input dimensions and no run): run it once per input shape to lock, or pass input_shapes.
    """
    guard = getattr(session, "_lock_guard", None)
    kp = guard.user_kernel_policy if guard is not None else session._kernel_policy
    ep = session._exec_policy
    engine, device = session.engine, session.device
    precision = _precision(ep)
    source = getattr(session, "_model_source", None)
    if engine == "native":
        plans = _native_plans(session)
        if not plans:
            raise InvalidArgumentError(
                "nothing to lock yet: the model has symbolic input dimensions and no plan was compiled; "
                "run the "
                "session once for each input shape to lock, or pass input_shapes={name: shape}"
            )
        names = [i.name for i in session.get_inputs()]
        buckets = []
        for shapes, plan in plans.items():
            if not all(isinstance(x, int) for sh in shapes for x in sh):
                raise InvalidArgumentError(
                    f"cannot lock a loaded plan whose inputs declare symbolic dimensions ({list(shapes)}): a "
                    "lock records concrete input shapes; lock the session that compiled the plan, from the "
                    "ONNX model, instead"
                )
            dims = [[int(x) for x in s] for s in shapes]
            buckets.append(
                {
                    "inputs": dict(zip(names, dims)),
                    "nodes": _node_entries(_plan_decisions(plan), precision, list(plan.steps)),
                }
            )
        first = next(iter(plans.values()))
        model_hash = str(first.model_hash) or (_model_hash(source) or "")
        libraries = library_versions(engine, device, first)
    else:
        decisions = list(session._engine.decisions())
        buckets = [{"inputs": None, "nodes": _node_entries(decisions, precision, [])}]
        model_hash = _model_hash(source) or ""
        libraries = library_versions(engine, device)
    return LockFile(
        engine=engine,
        device=device,
        device_info=device_fields(device),
        libraries=libraries,
        model_sha256=model_hash,
        policy=policy_record(kp, ep),
        buckets=buckets,
    )


class LockGuard:
    """Holds one session to a lock file. Thread-safe (runs may come from any thread)."""

    def __init__(self, lock: LockFile, frozen: bool) -> None:
        self.lock = lock
        self.frozen = frozen
        self.user_kernel_policy: Any = None
        self._verified: set[str] = set()
        self._mutex = threading.Lock()

    @classmethod
    def open(cls, lock: Any, frozen: bool) -> LockGuard:
        """A guard over ``lock`` (a path or a LockFile)."""
        if lock is None:
            raise InvalidArgumentError(
                "frozen=True needs lock=FILE: frozen forbids deciding anything not in a lock file; write one "
                "with session.lock(path) or `xpuruntime lock MODEL -o FILE`"
            )
        return cls(lock if isinstance(lock, LockFile) else LockFile.load(lock), bool(frozen))

    def _fail(self, what: str, diff: list[str]) -> None:
        if diff:
            raise lock_violation(
                f"{what} differs from lock file {self.lock.source or '(in memory)'}",
                diff,
                "Run under the locked policies, device and libraries, or take a new lock "
                "(session.lock(path) / `xpuruntime lock`) if the change is intended.",
            )

    # ------------------------------------------------------------ before the build
    def resolve(self, engine: str | None, device: str | None) -> tuple[str, str]:
        """Engine and device: the lock's unless the caller names them (then they must agree)."""
        from ..engines.registry import canonical_name

        diff = []
        if engine in _AUTO:
            engine = self.lock.engine
        elif canonical_name(str(engine)) != self.lock.engine:
            diff.append(f"engine: {self.lock.engine} → {canonical_name(str(engine))}")
        if device in _AUTO:
            device = self.lock.device
        elif str(device).split(":")[0] != self.lock.device.split(":")[0]:
            diff.append(f"device: {self.lock.device} → {device}")
        self._fail("the session", diff)
        return str(engine), str(device)

    def prepare(self, model: Any, device: str, kernel_policy: Any, exec_policy: Any) -> Any:
        """Checks model, policies, device and libraries; returns the kernel policy with the
        lock's pins (native engine) that the engine is built with."""
        self.user_kernel_policy = kernel_policy
        diff = []
        want = _model_hash(model)
        if want is not None and self.lock.model_sha256 and want != self.lock.model_sha256:
            diff.append(f"model.sha256: {self.lock.model_sha256} → {want}")
        diff += _policy_diffs(self.lock.policy, policy_record(kernel_policy, exec_policy))
        diff += diff_fields("device", self.lock.device_info, device_fields(device))
        now = library_versions(self.lock.engine, device)
        old = {k: v for k, v in self.lock.libraries.items() if k not in _PLAN_ENV}
        diff += diff_fields("libraries", old, now)
        self._fail("this session", diff)
        if self.lock.engine != "native":
            return kernel_policy
        base = kernel_policy if kernel_policy is not None else _core.KernelPolicy()
        pinned = base.copy()
        pinned.pins = {**dict(base.pins), **self.lock.pins()}
        return pinned

    # ------------------------------------------------------------- after a build
    def check_session(self, session: Any) -> None:
        """Verifies what the session compiled at construction."""
        if session.engine != "native":
            bucket = self.lock.bucket(None)
            nodes = _node_entries(list(session._engine.decisions()), "", [])
            self._verify("*", bucket, nodes, library_versions(session.engine, session.device))
            return
        for key in list(_native_plans(session)):
            self._check_plan(session, key)

    def before_run(self, session: Any, inputs: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The run's bucket key (native); frozen: refuses a bucket the lock does not cover."""
        if session.engine != "native":
            return None
        names = [i.name for i in session.get_inputs()]
        shapes = tuple(tuple(int(x) for x in np.shape(inputs[n])) for n in names if n in inputs)
        if len(shapes) != len(names):
            return None  # the engine reports the missing input
        bucket = dict(zip(names, [list(s) for s in shapes]))
        if self.frozen and self.lock.bucket(bucket) is None:
            raise lock_violation(
                f"frozen session: input shapes {bucket_id(bucket)} are not covered by lock file "
                f"{self.lock.source or '(in memory)'}",
                [
                    (
                        f"bucket {bucket_id(bucket)}: not in the lock "
                        f"(it covers: {', '.join(self.lock.bucket_names())})"
                    )
                ],
                "Run this shape once unfrozen and take a new lock (session.lock(path)), "
                "or feed a locked shape.",
            )
        return shapes

    def after_run(self, session: Any, key: tuple[Any, ...] | None) -> None:
        """Verifies a plan the run compiled (once per bucket)."""
        if key is not None:
            self._check_plan(session, key)

    def _check_plan(self, session: Any, key: tuple[Any, ...]) -> None:
        names = [i.name for i in session.get_inputs()]
        inputs = dict(zip(names, [[int(x) for x in s] for s in key]))
        bid = bucket_id(inputs)
        with self._mutex:
            if bid in self._verified:
                return
        plan = _native_plans(session).get(key)
        if plan is None:
            return
        bucket = self.lock.bucket(inputs)
        if bucket is None:  # not frozen: a new shape decides as usual
            with self._mutex:
                self._verified.add(bid)
            return
        nodes = _node_entries(_plan_decisions(plan), "", list(plan.steps))
        diff = []
        if self.lock.model_sha256 and plan.model_hash and plan.model_hash != self.lock.model_sha256:
            diff.append(f"model.sha256: {self.lock.model_sha256} → {plan.model_hash}")
        self._verify(bid, bucket, nodes, library_versions("native", session.device, plan), diff)

    def _verify(
        self,
        bid: str,
        bucket: dict[str, Any] | None,
        nodes: list[dict[str, Any]],
        libraries: dict[str, str],
        diff: list[str] | None = None,
    ) -> None:
        diff = list(diff or [])
        libs = diff_fields("libraries", self.lock.libraries, libraries)
        diff += libs
        # A node's change next to the library changes that likely caused it.
        why = f" ({'; '.join(line.split('.', 1)[1] for line in libs)})" if libs else ""
        locked = bucket.get("nodes", []) if bucket else []
        seen: dict[tuple[str, str], int] = {}
        have = {node_key(n, seen): n for n in nodes}
        seen = {}
        for entry in locked:
            k = node_key(entry, seen)
            got = have.pop(k, None)
            label = f"node {k[0] or '(unnamed)'}" + (f" ({k[1]})" if k[1] else "")
            if got is None:
                diff.append(f"{label}: locked {entry.get('kernel')}, but the session made no such decision")
                continue
            for f in ("kernel", "algorithm"):
                a, b = str(entry.get(f, "")), str(got.get(f, ""))
                if a != b:
                    diff.append(f"{label}: {f} {a or '(default)'} → {b or '(default)'}{why}")
        for k, got in have.items():
            diff.append(f"node {k[0]} ({k[1]}): not in the lock (the session chose {got.get('kernel')})")
        self._fail(f"bucket {bid}", diff)
        with self._mutex:
            self._verified.add(bid)
