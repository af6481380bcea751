"""InferenceSession (seed 000 §7.3, §10.3; seed 004 §8): one model on one engine.

    sess = xrt.InferenceSession("model.onnx", device="cpu", engine="native",
                                kernel_policy=xrt.KernelPolicy(matmul="cpu_blas"))
    out = sess.run({"input": x})          # dict name -> array
    print(sess.explain())                 # every engine and kernel decision
    sess.save_plan("model.xrtplan")       # runs later without onnx

The engine (``engine=`` or its alias ``backend=``; ``"auto"`` by default) and the
device are chosen by :func:`xpuruntime.engines.registry.select_engine`, which records
the choice as a Decision; engines that are not installed raise
``BackendUnavailableError`` with the install hint. ``run`` is thread-safe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._core import InvalidArgumentError, PolicyError, UnsupportedOperationError, XpuRuntimeError
from ..engines._common import normalize_inputs, normalize_output_names


class InferenceSession:
    """Compile ``model`` for ``device`` with ``engine`` under the given policies.

    Args:
        model: path to an ``.onnx`` file, model bytes, an ``onnx.ModelProto``, or a plan
            saved by :meth:`save_plan` (path or bytes; native engine).
        device: ``"cpu"``, ``"cuda[:N]"``, ``"npu"``, ``"gpu"`` or ``"auto"``.
        engine: ``"native"``, ``"onnxruntime"``/``"onnxrt"``, ``"openvino"``, ``"tensorrt"``,
            ``"qnn"`` or ``"auto"``. ``backend`` is an alias. A list (``["native",
            "onnxruntime"]``) partitions the model across them (:mod:`xpuruntime.orchestrator`).
        kernel_policy: a :class:`xpuruntime.KernelPolicy` (op -> kernel).
        exec_policy: a :class:`xpuruntime.ExecutionPolicy` (target, precision, ...).
        fp16: shorthand for ``precision="fp16"``.
        lock: a lock file (path or :class:`xpuruntime.lock.LockFile`): the engine, device,
            kernels and algorithms come from it; deciding differently raises
            ``LockViolationError`` naming the field (see :mod:`xpuruntime.lock`).
        frozen: with ``lock``, input shapes the lock does not cover are refused.
        **engine_options: engine-specific options (e.g. ``input_shapes`` for native).
    """

    def __init__(
        self,
        model: Any,
        device: str | None = None,
        engine: str | Sequence[str] | None = None,
        *,
        backend: str | None = None,
        kernel_policy: Any = None,
        exec_policy: Any = None,
        fp16: bool = False,
        lock: Any = None,
        frozen: bool = False,
        **engine_options: Any,
    ) -> None:
        from ..engines.base import EngineOptions
        from ..engines.registry import canonical_name, select_engine
        from ..policies import coerce

        if isinstance(engine, (list, tuple)) and backend is not None:
            raise InvalidArgumentError("pass the engine list as engine=[...], without backend=")
        if backend is not None and engine is not None and canonical_name(backend) != canonical_name(engine):
            raise InvalidArgumentError(
                f"engine={engine!r} and backend={backend!r} disagree; backend is an alias of engine, pass one"
            )
        engine = engine if engine is not None else backend
        # One form from here on: every engine receives the core objects (or None).
        kernel_policy = coerce.core_kernel_policy(kernel_policy)
        exec_policy = coerce.core_exec_policy(exec_policy)
        if fp16:
            exec_policy = _with_fp16(exec_policy)
        if model is None:
            raise InvalidArgumentError(
                "model is required (a path, bytes, an onnx.ModelProto or a saved plan)"
            )
        self._model_source = model  # hashed when a lock is written
        self._lock_guard = None
        if lock is not None or frozen:
            from ..lock import LockGuard

            self._lock_guard = LockGuard.open(lock, frozen)
            engine, device = self._lock_guard.resolve(engine, device)
            kernel_policy = self._lock_guard.prepare(model, device, kernel_policy, exec_policy)
        from .. import orchestrator

        if orchestrator.requested(model, engine, exec_policy):
            # One model across engines and devices: islands, each built by its engine.
            part, self._device, self._decisions = orchestrator.build(
                model, device, engine, kernel_policy, exec_policy, dict(engine_options)
            )
            self._engine, self._engine_name = part, "+".join(part.engine_names)
            self._kernel_policy, self._exec_policy = kernel_policy, exec_policy
            return
        cls, dev, decisions = select_engine(engine, device, exec_policy)
        self._decisions: list[Any] = list(decisions)
        self._device = dev
        self._kernel_policy = kernel_policy
        self._exec_policy = exec_policy
        try:
            self._engine = cls(model, EngineOptions(dev, kernel_policy, exec_policy, dict(engine_options)))
        except UnsupportedOperationError as exc:
            # Auto selection only checks that an engine runs on the device; the native
            # engine learns at build time whether its kernels cover the model's ops. Then
            # the next engine gets the model, and the rejection is recorded.
            auto = self._decisions and self._decisions[0].rule == "auto.first_available"
            if not (auto and getattr(cls, "name", "") == "native" and _ops_uncovered(model, dev)):
                raise
            cls, dev, decisions = select_engine(
                engine, device, exec_policy, rejected={"native": ("op_unsupported", str(exc))}
            )
            try:
                engine_obj = cls(model, EngineOptions(dev, kernel_policy, exec_policy, dict(engine_options)))
            except XpuRuntimeError as other:
                # Nobody can run it: the native engine's account (every unsupported op,
                # named) stays the error, with the other engine's reason after it.
                raise UnsupportedOperationError(
                    f"{exc}; the next engine, {getattr(cls, 'name', cls.__name__)}, could not build it "
                    f"either: {other}"
                ) from other
            self._decisions = list(decisions)
            self._device = dev
            self._engine = engine_obj
        self._engine_name = getattr(cls, "name", cls.__name__)
        if self._lock_guard is not None:
            self._lock_guard.check_session(self)

    @classmethod
    def load_plan(
        cls, path: str | os.PathLike[str] | bytes, *, kernel_policy: Any = None, exec_policy: Any = None
    ) -> InferenceSession:
        """A session over a plan saved by :meth:`save_plan` (no onnx needed).

        The plan runs on the device its header names ("cpu", or "cuda" on the current
        CUDA device). It must come from this plan format version and the same policies,
        otherwise ``InvalidModelError`` says which differs; a plan for a device that is
        unavailable here raises ``BackendUnavailableError`` naming the device and why.
        """
        from .._core import BackendUnavailableError
        from ..engines.native.engine import _DRIVEN, plan_device
        from ..orchestrator import is_artifact

        if is_artifact(path):  # a partitioned session's artifact: every island's own
            return cls(path, kernel_policy=kernel_policy, exec_policy=exec_policy)
        kind = plan_device(path)
        # A header naming no device the engine drives is refused by the plan loader
        # (on the CPU session), which names the plan's device.
        device = kind if kind in _DRIVEN else "cpu"
        try:
            return cls(
                path, device=device, engine="native", kernel_policy=kernel_policy, exec_policy=exec_policy
            )
        except BackendUnavailableError as exc:
            if device == "cpu":
                raise
            raise BackendUnavailableError(
                f"the plan was compiled for device '{device}', which is unavailable here: {exc}"
            ) from exc

    # ------------------------------------------------------------------ running
    def run(
        self,
        inputs: Mapping[str, Any],
        output_names: Sequence[str] | None = None,
        *,
        outputs: Sequence[Any] | None = None,
        stream: Any = None,
    ) -> dict[str, Any]:
        """Run once. ``inputs``: name -> numpy array, xpuruntime Tensor or any ``__dlpack__`` object.

        The native engine on CUDA also takes device tensors (read in place), ``outputs``
        (caller buffers, one per requested output, written in place) and ``stream`` (the
        caller's CUDA stream: torch, cupy, ours or a raw handle).
        """
        # Every engine sees the same inputs: [] means every output (as in ONNX Runtime);
        # numpy arrays in a non-native byte order are converted exactly, masked or
        # structured ones refused naming the input (engines._common.host_array).
        output_names = normalize_output_names(output_names)
        inputs = normalize_inputs(inputs)
        guard = self._lock_guard
        bucket = guard.before_run(self, inputs) if guard is not None else None
        if outputs is None and stream is None:
            result = self._engine.run(inputs, output_names)
        elif self._engine_name != "native":
            raise UnsupportedOperationError(
                f"outputs= and stream= are taken by the native engine only; this session runs on "
                f"'{self._engine_name}' (pass engine='native', or drop them)"
            )
        else:
            result = self._engine.run(inputs, output_names, outputs=outputs, stream=stream)
        if guard is not None:
            guard.after_run(self, bucket)  # a plan compiled by this run must match the lock
        return result

    def get_inputs(self) -> list[Any]:
        """Model inputs: TensorInfo(name, shape with symbolic dims, dtype)."""
        return list(self._engine.inputs())

    def get_outputs(self) -> list[Any]:
        """Model outputs: TensorInfo(name, shape with symbolic dims, dtype)."""
        return list(self._engine.outputs())

    # ----------------------------------------------------------------- explaining
    def explain(self) -> Any:
        """Every decision behind this session (engine choice, then one per node) as a DecisionLog."""
        from ..dispatch.decision import DecisionLog

        return DecisionLog(self._decisions + list(self._engine.decisions()))

    def decisions(self) -> list[Any]:
        """The decisions of :meth:`explain` as a list."""
        return list(self.explain())

    @property
    def engine(self) -> str:
        """The engine that runs this session."""
        return str(self._engine_name)

    @property
    def device(self) -> str:
        return self._device

    @property
    def plan(self) -> Any:
        """The native engine's ExecutionPlan (None for other engines)."""
        return getattr(self._engine, "plan", None)

    def build_timings(self) -> dict[str, float]:
        """Native engine: where building or loading the plan went, in milliseconds.

        Keys: ``read``, ``verify`` (checksums) and ``parse`` for a loaded plan; ``passes``
        for a compiled one; ``prepare`` (every step's kernel set-up) and
        ``prepare:<kernel>`` (per kernel, sub-kernels included); ``upload`` (constants to
        the device); ``graph_first_run`` and ``graph_capture`` once a CUDA graph was
        captured. Other engines raise ``UnsupportedOperationError``.
        """
        fn = getattr(self._engine, "build_timings", None)
        if fn is None:
            raise UnsupportedOperationError(
                f"build_timings() is reported by the native engine, not by {self.engine}"
            )
        return dict(fn())

    def memory(self) -> dict[str, int]:
        """Native engine: arena (peak) bytes next to the sum of all intermediates."""
        fn = getattr(self._engine, "memory", None)
        if fn is None:
            raise UnsupportedOperationError(
                f"memory() is reported by the native engine, not by {self.engine}"
            )
        return dict(fn())

    def lock(self, path: str | os.PathLike[str]) -> Any:
        """Write this session's lock file (every decision, per input shape compiled so far)
        and return the :class:`xpuruntime.lock.LockFile`."""
        from ..lock import capture

        lock = capture(self)
        lock.source = str(path)
        lock.save(path)
        return lock

    def export_pins(self) -> Any:
        """The session's kernel policy plus a pin (kernel and algorithm, per case key) for
        every case it tuned.

        Under ``KernelPolicy(auto_strategy="best_performance")`` the native engine times
        each case's candidate kernels and algorithms while it builds a plan; this returns
        those winners (and pins the session already followed) as a
        :class:`xpuruntime.KernelPolicy`. Save it (``.save("pins.json")``) and build with
        it to choose the same kernels without timing again. Raises
        ``UnsupportedOperationError`` for an engine that records no kernel decisions.
        """
        from .. import _core
        from ..policies import KernelPolicy

        if self._engine_name != "native":
            raise UnsupportedOperationError(
                f"export_pins() reads the native engine's kernel decisions; this session runs on "
                f"{self.engine}, whose kernels its own library chooses"
            )
        base = self._lock_guard.user_kernel_policy if self._lock_guard is not None else self._kernel_policy
        core = (base if base is not None else _core.KernelPolicy()).copy()
        pins = dict(core.pins)
        for d in _native_decisions(self._engine):
            if d.rule in ("auto.best_performance", "pinned") and d.pin and d.key:
                pins[d.key] = {"kernel": str(d.pin["kernel"]), "algorithm": str(d.pin.get("algorithm", ""))}
        core.pins = pins
        return KernelPolicy._wrap(core, validate=False)

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Save the compiled plan (native engine); load it with :meth:`load_plan`."""
        fn = getattr(self._engine, "save_plan", None)
        if fn is None:
            raise UnsupportedOperationError(
                f"save_plan() needs the native engine; this session runs on {self.engine}"
            )
        fn(path)

    def __repr__(self) -> str:
        ins = ", ".join(repr(i) for i in self.get_inputs())
        return f"InferenceSession(engine={self.engine!r}, device={self.device!r}, inputs=[{ins}])"


def _with_fp16(exec_policy: Any) -> Any:
    """exec_policy with precision fp16 (a copy), or PolicyError when it says otherwise."""
    from .. import _core

    if exec_policy is None:
        return _core.ExecutionPolicy.from_json('{"precision": "fp16"}')
    prec = str(getattr(exec_policy, "precision", "fp16")).lower()
    if "fp16" not in prec and "float16" not in prec and "fp32" not in prec:
        raise PolicyError(f"fp16=True conflicts with ExecutionPolicy(precision={prec!r})")
    if "fp16" in prec or "float16" in prec:
        return exec_policy
    raise PolicyError(
        "fp16=True conflicts with the ExecutionPolicy's precision fp32; pass precision='fp16' in the policy "
        "or drop fp16=True"
    )


def _native_decisions(engine: Any) -> list[Any]:
    """The kernel decisions of every plan a native engine compiled (each input-shape
    specialization), in plan order."""
    import json

    from ..dispatch.decision import Decision

    plans = [v[0] for v in dict(getattr(engine, "_plans", {})).values()]
    if not plans and getattr(engine, "plan", None) is not None:
        plans = [engine.plan]
    return [Decision.from_dict(json.loads(d)) for p in plans for d in p.decisions]


def _ops_uncovered(model: Any, device: str) -> bool:
    """True when the native engine has no kernel for some op of ``model`` on ``device`` (the
    case where another engine may still run it); False for every other build failure (a
    kernel policy it cannot honour, a malformed model), which stays the session's error."""
    from ..engines.native import frontend

    try:
        frontend.check_supported(frontend.describe(frontend.load(model)), str(device).split(":")[0])
    except UnsupportedOperationError:
        return True
    except XpuRuntimeError:
        return False
    return False
