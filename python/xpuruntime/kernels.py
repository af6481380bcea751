"""The kernel registry from Python: list kernels, declare names, register your own.

A researcher's kernel joins the same registry as the C++ ones, so the same policy
chooses it, the same dispatcher records why, and ``explain()`` shows it::

    import numpy as np
    import xpuruntime as xrt

    def my_matmul(a, b):                  # numpy arrays in (CPU), arrays out
        return a @ b

    xrt.kernels.register("matmul", "my_mm", my_matmul,
                         supports=lambda ctx: ctx.inputs[0].dtype == "float32",
                         dtypes=["float32"])
    out = xrt.kernels.run("matmul", a, b, policy=xrt.KernelPolicy(matmul="my_mm", mode="require"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _core

__all__ = [
    "KernelInfo",
    "declare",
    "is_registered",
    "known_kernel_names",
    "known_ops",
    "list_kernels",
    "register",
    "run",
    "unregister",
]


@dataclass(frozen=True)
class KernelInfo:
    """A kernel definition (metadata only; the registry holds the implementation)."""

    op: str
    name: str
    provider: str
    device: str
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    min_capability: int
    max_capability: int
    workspace_bytes: int
    priority: int
    deterministic: bool
    description: str
    devices: tuple[str, ...] = ()  # every device kind it runs on (device first)
    requested_only: bool = False  # a candidate only where a caller names it (routed torch calls)

    @classmethod
    def _from(cls, d: dict[str, Any]) -> KernelInfo:
        return cls(
            op=d["op"],
            name=d["name"],
            provider=d["provider"],
            device=d["device"],
            dtypes=tuple(d["dtypes"]),
            layouts=tuple(d["layouts"]),
            min_capability=int(d["min_capability"]),
            max_capability=int(d["max_capability"]),
            workspace_bytes=int(d["workspace_bytes"]),
            priority=int(d["priority"]),
            deterministic=bool(d["deterministic"]),
            description=d["description"],
            devices=tuple(d.get("devices", (d["device"],))),
            requested_only=bool(d.get("requested_only", False)),
        )


def _registry(registry: Any) -> Any:
    return _core.KernelRegistry.instance() if registry is None else registry


def _check_op(op: str, registry: Any, new_op: bool) -> None:
    if not isinstance(op, str) or not op:
        raise _core.InvalidArgumentError(f"op must be a non-empty string, got {op!r}")
    if registry.is_known_op(op):
        return
    canonical = _core.KernelRegistry.canonical_op_for_alias(op)
    if canonical:
        raise _core.InvalidArgumentError(
            f"op '{op}' is a spelling of the canonical key '{canonical}'; use '{canonical}'"
        )
    if new_op:
        registry.register_known_op(op)
        return
    near = _core.policy_util.closest_match(op, registry.known_ops())
    hint = f"; did you mean '{near}'?" if near else ""
    raise _core.InvalidArgumentError(
        f"unknown op '{op}'{hint} (canonical keys: {', '.join(_core.policy_util.canonical_ops())}, "
        "or a lower-case ONNX op type); pass new_op=True to register a kernel for a new op"
    )


def register(
    op: str,
    name: str,
    fn: Callable[..., Any],
    *,
    supports: Callable[[Any], Any] | None = None,
    device: str = "cpu",
    dtypes: Iterable[str] | None = None,
    layouts: Iterable[str] | None = None,
    priority: int = 0,
    description: str = "",
    min_capability: int = 0,
    max_capability: int = 0,
    workspace_bytes: int = 0,
    deterministic: bool = True,
    algorithms: Callable[[Any], Sequence[str]] | Sequence[str] | None = None,
    inputs_as: str = "auto",
    replace: bool = False,
    new_op: bool = False,
    registry: Any = None,
) -> None:
    """Registers a Python kernel for ``op`` under ``name``.

    Args:
        op: canonical op key (``matmul``, ``attention``, ...) or lower-case ONNX op type.
        name: kernel name, unique within the op; policies refer to it.
        fn: ``fn(*inputs, **attrs)`` returning the output (or a tuple of outputs).
            Inputs are numpy arrays for CPU kernels (zero-copy views; ``inputs_as``)
            or xpuruntime Tensors (DLPack-capable) otherwise. Attributes arrive as
            int, float or str; with ``algorithms`` the chosen id comes as ``algorithm``.
        supports: ``supports(ctx) -> bool | (bool, reason) | (False, code, reason) |
            reason-str`` on an ``OpContext`` (``ctx.inputs[i].dtype/.shape/.layout``,
            ``ctx.attrs``, ``ctx.device``). False is recorded as
            ``python_supports_false`` with the reason, or with ``code`` (one of
            ``_core.REASON_CODES``, e.g. ``_core.reason.SHAPE_UNSUPPORTED``); an
            exception as ``python_supports_error``.
        device: device kind the kernel runs on (``"cpu"`` or ``"cuda"``).
        dtypes: accepted input dtypes (checked before ``supports``); None = any.
        layouts: accepted input layouts (``contiguous``, ``transposed``, ``strided``).
        priority: order among auto candidates (higher first).
        description: shown by :func:`list_kernels`.
        min_capability / max_capability: CUDA sm range (e.g. 80 = sm80); 0 = none.
        workspace_bytes: workspace the kernel needs (checked against the policy limit).
        deterministic: False marks the kernel as not bitwise reproducible.
        algorithms: tunable algorithm ids (or a function of the context) for
            ``auto_strategy="best_performance"``.
        inputs_as: ``"auto"`` (numpy on CPU), ``"numpy"`` or ``"tensor"``.
        replace: replace an existing kernel with the same op and name.
        new_op: allow an op key the project does not know yet.
        registry: a ``_core.KernelRegistry`` (default: the process registry).

    Raises:
        InvalidArgumentError: bad op/name, duplicate registration, bad metadata.
    """
    reg = _registry(registry)
    _check_op(op, reg, new_op)
    if not callable(fn):
        raise _core.InvalidArgumentError(f"register({op!r}, {name!r}): fn must be callable")
    if inputs_as not in ("auto", "numpy", "tensor"):
        raise _core.InvalidArgumentError(f"inputs_as must be 'auto', 'numpy' or 'tensor', got {inputs_as!r}")
    reg.register_python_kernel(
        op,
        name,
        fn,
        supports,
        device,
        None if dtypes is None else list(dtypes),
        None if layouts is None else list(layouts),
        priority,
        description,
        min_capability,
        max_capability,
        workspace_bytes,
        deterministic,
        algorithms,
        inputs_as != "tensor",
        replace,
    )


def unregister(op: str, name: str, *, registry: Any = None) -> bool:
    """Removes a kernel; True when it was registered."""
    return bool(_registry(registry).unregister(op, name))


def is_registered(op: str, name: str, *, registry: Any = None) -> bool:
    """True when a kernel ``name`` for ``op`` is registered in this process."""
    return any(k.name == name for k in list_kernels(op, registry=registry))


def list_kernels(
    op: str | None = None, device: str | None = None, *, registry: Any = None
) -> list[KernelInfo]:
    """Registered kernels, optionally of one op and/or device kind, ordered by op,
    then priority (high first), then name."""
    return [KernelInfo._from(d) for d in _registry(registry).list(op, device)]


def declare(op: str, name: str, *, registry: Any = None) -> None:
    """Declares a kernel name that another subsystem routes to (e.g. a PyTorch routing
    target), so policies naming it validate even without a registered kernel."""
    _registry(registry).register_known_kernel_name(op, name)


def known_kernel_names(op: str, *, registry: Any = None) -> list[str]:
    """Names a policy may use for ``op``: "auto", declared and registered kernels."""
    return list(_registry(registry).known_kernel_names(op))


def known_ops(*, registry: Any = None) -> list[str]:
    """Op keys a policy may use."""
    return list(_registry(registry).known_ops())


def run(
    op: str,
    *inputs: Any,
    outputs: Sequence[Any] | None = None,
    policy: Any = None,
    exec_policy: Any = None,
    node: str = "",
    dispatcher: Any = None,
    **attrs: Any,
) -> Any:
    """Runs ``op`` on ``inputs`` with the kernel the policy chooses; returns the output
    (or a list when there are several). The choice is recorded (see
    :func:`xpuruntime.dispatch.explain`)."""
    from .dispatch.explain import dispatch

    outs, _ = dispatch(
        op,
        inputs,
        outputs,
        node=node,
        attrs=attrs,
        policy=policy,
        exec_policy=exec_policy,
        dispatcher=dispatcher,
    )
    return outs[0] if len(outs) == 1 else outs
