"""The decision output of ``run`` and ``explain`` (``--decisions all|chosen|none``).

``chosen`` (the default) is a compact table: one row per (op, chosen kernel, rule)
with the number of nodes it answered and the first node's name. ``all`` lists every
decision with its input shapes and the rejected candidates and why; candidates for
device kinds absent from this machine (CUDA kernels on a CPU-only machine, ...) are
hidden unless ``--verbose``. Both fit a 100-column terminal.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from .output import WIDTH, clip, print_table

MODES = ("chosen", "all", "none")


def _present_kinds() -> set[str]:
    from ..runtime.device import get_all_devices

    return {str(getattr(d, "type", "cpu")).split(".")[-1].lower() for d in get_all_devices()}


def _kernel_kinds() -> dict[tuple[str, str], set[str]]:
    from ..kernels import list_kernels

    kinds: dict[tuple[str, str], set[str]] = {}
    for k in list_kernels():
        kinds.setdefault((k.op, k.name), set()).update(k.devices or (k.device,))
    return kinds


def visible_candidates(
    decision: Any, verbose: bool, present: set[str], kinds: dict[Any, set[str]]
) -> tuple[list[Any], int]:
    """The rejected candidates to show, and how many were hidden (absent device kinds)."""
    shown, hidden = [], 0
    for c in decision.candidates:
        if c.verdict == "supported":
            continue
        if not verbose and _absent(decision.op, c, present, kinds):
            hidden += 1
            continue
        shown.append(c)
    return shown, hidden


def _absent(op: str, candidate: Any, present: set[str], kinds: dict[Any, set[str]]) -> bool:
    """Whether a rejected candidate is for a device kind this machine does not have."""
    _, at, device = candidate.kernel.partition("@")  # engine candidates: "name@device"
    if at:
        return device.split(":")[0] not in present
    if candidate.reason_code != "device_mismatch":
        return False
    ks = kinds.get((op, candidate.kernel))
    return ks is None or not (ks & present)


def chosen_rows(decisions: Sequence[Any]) -> list[list[str]]:
    """Rows (op, chosen, rule, nodes, first node) grouped by (op, chosen, rule), in plan order."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for d in decisions:
        groups.setdefault((d.op, d.chosen or "-", d.rule), []).append(d.node or "-")
    return [
        [op, clip(chosen, 24), clip(rule, 28), str(len(nodes)), clip(nodes[0], 30)]
        for (op, chosen, rule), nodes in groups.items()
    ]


def print_decisions(sess: Any, mode: str = "chosen", verbose: bool = False) -> None:
    """Print the session's decisions in ``mode`` (see the module docstring)."""
    if mode == "none":
        return
    decisions = list(sess.explain())
    if mode == "chosen":
        print_table(
            f"decisions ({len(decisions)}; --decisions all for every candidate)",
            ["op", "chosen", "rule", "nodes", "first node"],
            chosen_rows(decisions),
        )
        return
    present, kinds = _present_kinds(), _kernel_kinds()
    hidden_total = 0
    print(f"decisions ({len(decisions)})")
    for k, d in enumerate(decisions):
        shapes = ", ".join(f"{t}{list(s)}" for t, s in zip(d.dtypes, d.shapes)) if d.shapes else "-"
        head = f"{k:3d} {d.op} {d.node or '-'}: {d.chosen or '(none)'} by {d.rule} on {d.device}"
        print(textwrap.fill(head, WIDTH, subsequent_indent="      "))
        print(textwrap.fill(f"inputs: {shapes}", WIDTH, initial_indent="    ", subsequent_indent="      "))
        shown, hidden = visible_candidates(d, verbose, present, kinds)
        hidden_total += hidden
        if shown:
            rejected = "; ".join(f"{c.kernel}: {c.reason_code}" for c in shown)
            print(
                textwrap.fill(
                    f"rejected: {rejected}", WIDTH, initial_indent="    ", subsequent_indent="      "
                )
            )
        if d.detail:
            print(
                textwrap.fill(f"detail: {d.detail}", WIDTH, initial_indent="    ", subsequent_indent="      ")
            )
    if hidden_total:
        print(
            f"({hidden_total} candidates for device kinds absent from this machine hidden; --verbose shows them)"
        )
