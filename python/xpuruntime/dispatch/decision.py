"""Decisions and the decision log (DESIGN.md §4), as plain Python objects.

Every kernel or engine selection records a :class:`Decision`: what was asked (op,
device, dtypes, shapes), every :class:`Candidate` with its verdict and a stable
reason code, what was chosen and the rule that chose it. C++ decisions are
converted to these classes by the binding; Python engines build them directly.

This module imports nothing from ``_core`` so it works before the extension is
built and inside engines that never touch it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REASON_CODES",  # noqa: F822 - read from _core by __getattr__
    "RULES",  # noqa: F822
    "Candidate",
    "Decision",
    "DecisionLog",
]


def __getattr__(name: str) -> Any:
    # RULES and REASON_CODES are declared once, in C++ (decision.h, kernel_registry.h);
    # read on first use, so this module still imports before _core is built.
    if name in ("RULES", "REASON_CODES"):
        from .. import _core

        return tuple(getattr(_core, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Candidate:
    """One kernel (or engine) considered for a selection.

    Attributes:
        kernel: kernel or engine name.
        verdict: ``"supported"`` or ``"rejected"``.
        reason_code: a stable code when rejected (see :data:`REASON_CODES`), else "".
        detail: human-readable explanation.
        time_ms: best measured time in milliseconds when the selection was tuned.
        algorithm: the algorithm id that timed best for this kernel, when tuned.
    """

    kernel: str
    verdict: str
    reason_code: str = ""
    detail: str = ""
    time_ms: float | None = None
    algorithm: str = ""

    @property
    def supported(self) -> bool:
        """True when the candidate could run the case."""
        return self.verdict == "supported"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields."""
        return {
            "kernel": self.kernel,
            "verdict": self.verdict,
            "reason_code": self.reason_code,
            "detail": self.detail,
            "time_ms": self.time_ms,
            "algorithm": self.algorithm,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        """Inverse of :meth:`to_dict`."""
        return cls(
            kernel=d["kernel"],
            verdict=d["verdict"],
            reason_code=d.get("reason_code", ""),
            detail=d.get("detail", ""),
            time_ms=d.get("time_ms"),
            algorithm=d.get("algorithm", ""),
        )


@dataclass
class Decision:
    """One selection: the question, the candidates, the answer and the rule.

    Attributes:
        op: canonical op key (``matmul``, ``attention``, ...) or ``"engine"``.
        device: device string (``"cuda:0"``, ``"cpu"``, ``"npu"``).
        dtypes: input dtype names.
        shapes: input shapes.
        candidates: every candidate considered, in the order they were considered.
        chosen: the chosen kernel or engine ("" when nothing could run).
        rule: the rule that chose it (see :data:`RULES`).
        node: graph node or call-site name.
        pin: ``{"kernel": ..., "algorithm": ...}`` used or produced by tuning.
        timings: ``"kernel"`` or ``"kernel/algorithm"`` -> milliseconds, when tuned.
        detail: free text (why a fallback happened, which pin was refused, ...).
        algorithm: the chosen algorithm id ("" = the kernel's default).
        key: the case key used by tuning caches and pins.
        seq: position in the process log (0 for decisions built in Python).
        hits: calls this decision answered (a routed torch case is recorded once and
            its later calls counted here).
    """

    op: str
    device: str
    dtypes: list[str]
    shapes: list[list[int]]
    candidates: list[Candidate]
    chosen: str
    rule: str
    node: str = ""
    pin: dict[str, str] | None = None
    timings: dict[str, float] | None = None
    detail: str = ""
    algorithm: str = ""
    key: str = ""
    seq: int = 0
    hits: int = 1

    def candidate(self, kernel: str) -> Candidate | None:
        """The candidate named ``kernel``, or None."""
        for c in self.candidates:
            if c.kernel == kernel:
                return c
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields."""
        return {
            "op": self.op,
            "node": self.node,
            "device": self.device,
            "dtypes": list(self.dtypes),
            "shapes": [list(s) for s in self.shapes],
            "candidates": [c.to_dict() for c in self.candidates],
            "chosen": self.chosen,
            "algorithm": self.algorithm,
            "rule": self.rule,
            "pin": dict(self.pin) if self.pin is not None else None,
            "timings": dict(self.timings) if self.timings is not None else None,
            "detail": self.detail,
            "key": self.key,
            "seq": self.seq,
            "hits": self.hits,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Decision:
        """Inverse of :meth:`to_dict` (also reads the C++ ``Decision::to_json``)."""
        return cls(
            op=d["op"],
            device=d.get("device", ""),
            dtypes=list(d.get("dtypes", [])),
            shapes=[list(s) for s in d.get("shapes", [])],
            candidates=[Candidate.from_dict(c) for c in d.get("candidates", [])],
            chosen=d.get("chosen", ""),
            rule=d.get("rule", ""),
            node=d.get("node", ""),
            pin=d.get("pin") or None,
            timings=d.get("timings") or None,
            detail=d.get("detail", ""),
            algorithm=d.get("algorithm", ""),
            key=d.get("key", ""),
            seq=int(d.get("seq", 0)),
            hits=int(d.get("hits", 1)),
        )

    def summary(self) -> str:
        """One line: ``matmul@mm0 cpu -> cpu_blas (policy.prefer)``."""
        where = f"{self.op}@{self.node}" if self.node else self.op
        chosen = self.chosen or "<nothing>"
        if self.algorithm:
            chosen += f"[{self.algorithm}]"
        return f"{where} {self.device} -> {chosen} ({self.rule})"

    def __str__(self) -> str:
        return _decision_block(self, 1 if self.seq == 0 else self.seq)


def _fmt_inputs(d: Decision) -> str:
    parts = []
    for i, dt in enumerate(d.dtypes):
        shape = d.shapes[i] if i < len(d.shapes) else None
        parts.append(dt + ("[" + ",".join(str(x) for x in shape) + "]" if shape is not None else ""))
    return ", ".join(parts) if parts else "-"


def _fmt_ms(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"


def _rows_to_text(rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [r[i].ljust(widths[i]) for i in range(len(r))]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _decision_block(d: Decision, index: int) -> str:
    where = f" @ {d.node}" if d.node else ""
    lines = [f"[{index}] {d.op}{where}  device={d.device}  inputs={_fmt_inputs(d)}"]
    chosen = d.chosen or "<nothing>"
    if d.algorithm:
        chosen += f" (algorithm {d.algorithm})"
    calls = f"  calls: {d.hits}" if d.hits > 1 else ""  # a cached case answered more calls
    lines.append(f"    chosen: {chosen}  rule: {d.rule}{calls}")
    if d.pin:
        lines.append(f"    pin: {d.pin.get('kernel', '')} {d.pin.get('algorithm', '')}".rstrip())
    if d.detail:
        lines.append(f"    detail: {d.detail}")
    if d.candidates:
        rows = [["candidate", "verdict", "reason", "time_ms", "detail"]]
        for c in d.candidates:
            mark = "*" if c.kernel == d.chosen else " "
            rows.append([mark + c.kernel, c.verdict, c.reason_code, _fmt_ms(c.time_ms), c.detail])
        lines.extend(_rows_to_text(rows, "    "))
    return "\n".join(lines)


class DecisionLog:
    """An ordered collection of decisions with table and JSON views.

    Args:
        decisions: initial decisions (oldest first).
        capacity: keep at most this many (the oldest are dropped); None = unbounded.
    """

    def __init__(self, decisions: Iterable[Decision] = (), capacity: int | None = None) -> None:
        self._items: list[Decision] = []
        self._capacity = capacity
        for d in decisions:
            self.append(d)

    def append(self, decision: Decision) -> None:
        """Adds a decision (drops the oldest beyond capacity)."""
        if not isinstance(decision, Decision):
            raise TypeError(f"DecisionLog.append expects a Decision, got {type(decision).__name__}")
        self._items.append(decision)
        if self._capacity is not None and len(self._items) > self._capacity:
            del self._items[: len(self._items) - self._capacity]

    def extend(self, decisions: Iterable[Decision]) -> None:
        """Appends several decisions."""
        for d in decisions:
            self.append(d)

    def clear(self) -> None:
        """Removes every decision."""
        self._items.clear()

    def __iter__(self) -> Iterator[Decision]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> Decision:
        return self._items[i]

    def __bool__(self) -> bool:
        return bool(self._items)

    def filter(self, op: str | None = None, node: str | None = None) -> DecisionLog:
        """The decisions about ``op`` and/or ``node``."""
        return DecisionLog(
            d for d in self._items if (op is None or d.op == op) and (node is None or d.node == node)
        )

    def to_list(self) -> list[dict[str, Any]]:
        """Every decision as a dict."""
        return [d.to_dict() for d in self._items]

    def to_json(self, indent: int | None = 2) -> str:
        """JSON array of :meth:`Decision.to_dict` objects."""
        return json.dumps(self.to_list(), indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DecisionLog:
        """Inverse of :meth:`to_json`."""
        return cls(Decision.from_dict(d) for d in json.loads(text))

    def to_table(self, style: str = "auto") -> str:
        """A readable table: one block per decision, one row per candidate.

        Args:
            style: ``"plain"`` (ASCII, stable: used by golden tests), ``"rich"``
                (colored, via the ``rich`` package), or ``"auto"`` (rich when stdout
                is a terminal and rich is installed, else plain).
        """
        if style not in ("auto", "plain", "rich"):
            raise ValueError(f"to_table style must be 'auto', 'plain' or 'rich', got {style!r}")
        if style == "auto":
            style = "rich" if _stdout_is_terminal() and _have_rich() else "plain"
        if style == "rich":
            return self._rich_table()
        if not self._items:
            return "(no decisions recorded)"
        return "\n".join(_decision_block(d, i + 1) for i, d in enumerate(self._items))

    def _rich_table(self) -> str:
        import io

        from rich.console import Console
        from rich.table import Table

        console = Console(file=io.StringIO(), record=True, width=160, force_terminal=True)
        for i, d in enumerate(self._items):
            where = f" @ {d.node}" if d.node else ""
            title = f"[{i + 1}] {d.op}{where}  {d.device}  {_fmt_inputs(d)}"
            caption = f"chosen: {d.chosen or '<nothing>'}  rule: {d.rule}"
            if d.detail:
                caption += f"  ({d.detail})"
            table = Table(title=title, caption=caption, title_justify="left")
            for col in ("candidate", "verdict", "reason", "time_ms", "detail"):
                table.add_column(col)
            for c in d.candidates:
                style = "bold green" if c.kernel == d.chosen else ("" if c.supported else "red")
                table.add_row(c.kernel, c.verdict, c.reason_code, _fmt_ms(c.time_ms), c.detail, style=style)
            console.print(table)
        if not self._items:
            console.print("(no decisions recorded)")
        return console.export_text(styles=True)

    def __str__(self) -> str:
        return self.to_table(style="plain")

    def __repr__(self) -> str:
        return f"DecisionLog({len(self._items)} decisions)"


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _have_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True
