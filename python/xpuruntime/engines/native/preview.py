"""Offline plan preview (DESIGN.md §5): what the native engine would run on a device
this machine does not have.

``preview_plan(model, device="cuda", target="sm_90")`` compiles the model through every
pass, fusion and dispatch decision for the named target, without preparing a kernel or
touching a device, so it runs in CI and on laptops. The result lists the plan's steps,
the kernel each would run, the fusions made and every Decision: plans checked before
deployment, step budgets asserted in CI, and fusion work tested without a GPU.

A preview is for reading only: its plan cannot be run or saved (compile for real on the
device for that). Sub-kernels a kernel chooses while it is prepared (a convolution's
GEMM on the CPU) are not part of a preview.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ... import _core
from ..._core import InvalidArgumentError
from .._common import parse_input_shapes
from ..base import TensorInfo
from . import frontend
from .engine import core_exec_policy, core_kernel_policy


@dataclass(frozen=True)
class PlanPreview:
    """The native plan a model would compile to on ``device`` for ``target``."""

    device: str
    target: str
    plan: Any = field(repr=False)  # _core.graph.ExecutionPlan with preview=True
    # The input shapes the plan was compiled for (symbolic dims resolved from ``dims``).
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def steps(self) -> list[dict[str, Any]]:
        """One dict per plan step: name, op_type, kernel, rule, fused ops, activation, view."""
        return list(self.plan.steps)

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """Every Decision of the compile (kernels, fusions, layout, precision), as dicts."""
        return [json.loads(d) for d in self.plan.decisions]

    @property
    def environment(self) -> dict[str, str]:
        """What a plan for this target records (GPU architecture, library versions)."""
        return dict(self.plan.environment)

    def op_counts(self) -> Counter[str]:
        """Steps per op type (views included), e.g. ``{"Conv": 53, "FusedElementwise": 17}``."""
        return Counter(s["op_type"] for s in self.plan.steps)

    def kernel_counts(self) -> Counter[str]:
        """Steps per kernel that would run (views excluded)."""
        return Counter(s["kernel"] for s in self.plan.steps if not s["view"])

    def launches(self) -> int:
        """Steps that launch work (views run nothing)."""
        return sum(1 for s in self.plan.steps if not s["view"])

    def fusions(self) -> list[dict[str, Any]]:
        """The fusion and layout Decisions (what was fused, or why a match was left alone)."""
        return [d for d in self.decisions if d.get("op") in ("fusion", "layout")]

    def summary(self) -> str:
        """The plan listing (header, passes, one line per step) that ``explain`` prints."""
        return str(self.plan.summary())


def preview_plan(
    model: Any,
    device: str | None = None,
    target: str = "",
    *,
    kernel_policy: Any = None,
    exec_policy: Any = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    fold: bool = True,
    fuse: bool = True,
) -> PlanPreview:
    """Compiles ``model`` for ``device``/``target`` offline and returns what would run.

    ``model``: an ONNX path, bytes or ``onnx.ModelProto``. ``device``: a device kind with
    a native execution provider ("cpu", "cuda"); ``None``: the core's accelerator kind (the
    plugin table's first device, "cuda"). ``target``: the GPU architecture
    ("sm_90", "sm_80", ...; "" = this machine's device, which must then exist).
    ``input_shapes``: input name -> shape, as for a session; otherwise each input's
    symbolic dimensions take their value from ``dims`` (dimension name -> value), 1 when
    not named there (a session compiles its plan for the shapes it is run with, so a
    preview is always of concrete shapes; ``PlanPreview.input_shapes`` says which).
    Policies as for ``InferenceSession``. Raises ``InvalidArgumentError`` for an unknown
    target, ``UnsupportedOperationError`` naming ops with no kernel on the device.
    """
    kind = str(_core.accelerator_kind() if device is None else device).split(":")[0]
    if kind not in _core.graph.providers():
        raise InvalidArgumentError(
            f"device {device!r} has no native execution provider in this build "
            f"(registered: {', '.join(_core.graph.providers())})"
        )
    loaded = frontend.load(model)
    desc = frontend.describe(loaded)
    inputs = [TensorInfo(n, tuple(d), t) for n, t, d in desc["inputs"]]
    if input_shapes is None:
        named = dims or {}
        input_shapes = {
            i.name: [d if isinstance(d, int) and d >= 0 else int(named.get(str(d), 1)) for d in i.shape]
            for i in inputs
        }
    shapes = parse_input_shapes(input_shapes, inputs)
    plan = _core.graph.compile(
        desc,
        core_kernel_policy(kernel_policy),
        core_exec_policy(exec_policy),
        model_hash=loaded.model_hash,
        input_shapes=shapes,
        fold=fold,
        fuse=fuse,
        device=kind,
        dry_run=True,
        target=target,
    )
    return PlanPreview(
        device=kind,
        target=target or "this machine",
        plan=plan,
        input_shapes={k: tuple(int(d) for d in v) for k, v in input_shapes.items()},
    )
