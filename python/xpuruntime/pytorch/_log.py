"""Routed torch calls in the process decision log.

Routing records each distinct case once in the C++ Dispatcher's log (the one
inference writes to) and keeps, per case, the chosen kernel, its prepared launcher,
the decision's ``seq`` and the calls since the last flush. Later calls of a case
cost a dictionary lookup and a counter increment: their count reaches the log's
``hits`` and :data:`counts` when someone reads either
(:func:`xpuruntime.dispatch.log.flush`). :func:`decisions` is the torch view: the
decisions routing (and our fused ops falling back) recorded since
:func:`clear`.

Imports nothing from the rest of ``xpuruntime.pytorch``, so the ops modules and the
routing module may both import it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import torch

from .. import _core
from ..dispatch import log as _log
from ..dispatch.decision import Candidate, Decision, DecisionLog

__all__ = [
    "Entry",
    "clear",
    "counts",
    "decisions",
    "flush",
    "forget_cases",
    "lookup",
    "note",
    "record_direct_fallback",
    "remember",
]


class Entry:
    """One routed case: its kernel, its launcher, its decision and the calls not yet flushed.

    ``launch(*args, **kwargs)`` runs the case's kernel, called like the torch function
    (prepared once, on the miss); ``count_key`` is the :data:`counts` key its calls
    add to ("" for entries that are not routed calls).
    """

    __slots__ = ("count_key", "kernel", "launch", "pending", "seq")

    def __init__(
        self, kernel: str, seq: int, count_key: str, launch: Callable[..., Any] | None = None
    ) -> None:
        self.kernel = kernel
        self.seq = seq
        self.pending = 0
        self.count_key = count_key
        self.launch = launch


class _View:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cases: dict[tuple, Entry] = {}
        # site key -> [(tensor check, Entry)]: the fast way to a case (see _prepared.lookup);
        # emptied whenever a case is stored or forgotten, so it never holds a stale entry.
        self.sites: dict[tuple, list] = {}
        self.seqs: set[int] = set()
        self.counts: collections.Counter[str] = collections.Counter()


_view = _View()
#: case key -> Entry (read on every routed call; written only on a miss).
cases = _view.cases
#: site key -> [(tensor check, Entry)], read by _prepared.lookup.
sites = _view.sites
#: "op:kernel" -> calls routed since the last clear().
counts = _view.counts


def _flush() -> None:
    with _view.lock:
        pending = [(e.seq, e.pending) for e in _view.cases.values() if e.pending]
        for e in _view.cases.values():
            if e.pending and e.count_key:
                _view.counts[e.count_key] += e.pending
            e.pending = 0
    pending = [(seq, n) for seq, n in pending if seq]
    if pending:
        d = _log.dispatcher()
        for seq, n in pending:
            d.add_hits(seq, n)


def flush() -> None:
    """Hands the calls counted since the last flush to the log's hits and :data:`counts`."""
    _flush()


_log.add_flush_hook(_flush)


def lookup(key: tuple) -> Entry | None:
    """The case's entry, or None when the case was not routed yet."""
    return _view.cases.get(key)


def remember(
    key: tuple,
    kernel: str,
    seq: int,
    op: str,
    launch: Callable[..., Any] | None = None,
    counted: bool = True,
) -> Entry:
    """Stores a case (its decision already in the log as ``seq``; its first call is the
    decision's own hit, which the caller adds to :data:`counts`).

    ``counted=False``: not a routed call (our fused ops falling back): its later calls
    reach the decision's hits only, not :data:`counts`.
    """
    entry = Entry(kernel, seq, f"{op}:{kernel}" if counted else "", launch)
    with _view.lock:
        _view.cases[key] = entry
        _view.sites.clear()
        if seq:
            _view.seqs.add(seq)
    return entry


def note(seq: int) -> None:
    """Adds a decision recorded without a cached case (a compile-time decision) to the torch view."""
    with _view.lock:
        _view.seqs.add(seq)


def forget_cases() -> None:
    """Drops the per-case choices (the policy changed); their counts are kept."""
    _flush()
    with _view.lock:
        _view.cases.clear()
        _view.sites.clear()


def decisions() -> DecisionLog:
    """The decisions routing recorded since :func:`clear`, with their hit counts."""
    with _view.lock:
        mine = set(_view.seqs)
    return DecisionLog(d for d in _log.decisions() if d.seq in mine)


def clear() -> None:
    """Forgets the torch view: recorded seqs, per-case choices and call counts."""
    _flush()
    with _view.lock:
        _view.cases.clear()
        _view.sites.clear()
        _view.seqs.clear()
        _view.counts.clear()


def _tensor_key(t: Any) -> Any:
    # Cheap and hashable: this runs on every routed call.
    if isinstance(t, torch.Tensor):
        return (t.get_device(), t.dtype, t.shape, t.requires_grad)  # get_device: -1 on CPU
    return repr(t) if isinstance(t, (int, float, bool, str, type(None))) else type(t).__name__


def record_direct_fallback(op: str, kernel: str, why: tuple[str, str], tensors: tuple) -> None:
    """Records that a call of one of our kernels ran torch's instead (once per case).

    Used by the fused ops called directly (a case the kernel cannot take) and by
    routing when a kernel refuses a case only when it runs.
    """
    if torch.compiler.is_compiling():
        return
    ts = [t for t in tensors if isinstance(t, torch.Tensor)]
    key = ("direct", op, kernel, tuple(_tensor_key(t) for t in ts), why[0])
    entry = _view.cases.get(key)
    if entry is not None:
        entry.pending += 1
        return
    seq = _log.record(
        Decision(
            op=op,
            device=str(ts[0].device) if ts else "",
            dtypes=[str(t.dtype).replace("torch.", "") for t in ts],
            shapes=[list(t.shape) for t in ts],
            candidates=[Candidate(kernel, "rejected", why[0], why[1]), Candidate("torch", "supported")],
            chosen="torch",
            rule=_core.rule.FALLBACK,
            node=f"xpuruntime.pytorch.ops.fused_{op}",
            detail=f"{kernel} cannot run this case: {why[1]}",
        )
    )
    remember(key, "torch", seq, op, counted=False)
