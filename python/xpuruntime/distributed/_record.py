"""What the NCCL helper records (DESIGN.md §4) and how ``deterministic`` is honoured.

Each collective case (op, dtype, shape, device, world, settings) is one Decision in the
process log; later calls of the case count as its hits. With the profiler on, each
call is also a profiler event carrying op, bytes, dtype, NCCL version, the
NCCL_ALGO/NCCL_PROTO in force, the stream and (for async work) the device time.

Deterministic reductions: NCCL's result depends on the algorithm (ring, tree, NVLS,
CollNet) and protocol it picks per message size. ``ExecutionPolicy(deterministic=True)``
pins NCCL_ALGO=Ring and NCCL_PROTO=Simple in the environment *before the first
communicator of the process is created* (NCCL reads them at init): a ring reduces in
rank order, so same world, topology and NCCL version give the same bits. Where that
cannot be guaranteed (the environment already asks for another algorithm, or a
communicator was created earlier under other settings) it refuses with PolicyError.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .. import _core
from .._core import PolicyError
from ..dispatch import log as _log
from ..dispatch.decision import Candidate, Decision

DETERMINISTIC_ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
HOW_DETERMINISTIC = (
    "deterministic: NCCL_ALGO=Ring and NCCL_PROTO=Simple were set before the process's first "
    "communicator init; a ring reduces in rank order, so the same world, topology and NCCL version "
    "give the same bits"
)

_lock = threading.Lock()
_settings_at_first_init: dict[str, str] | None = None
_cases: dict[tuple, int] = {}


def nccl_settings() -> dict[str, str]:
    """NCCL_ALGO / NCCL_PROTO as NCCL will read them ("" = NCCL's own choice)."""
    return {k: os.environ.get(k, "") for k in DETERMINISTIC_ENV}


def prepare_init(deterministic: bool) -> dict[str, str]:
    """Called before each communicator init: applies (or refuses) determinism and
    remembers the settings the process's first init used. Returns the settings."""
    global _settings_at_first_init
    with _lock:
        current = nccl_settings()
        if deterministic:
            for key, want in DETERMINISTIC_ENV.items():
                if current[key] and current[key].lower() != want.lower():
                    raise PolicyError(
                        f"Communicator.init: ExecutionPolicy(deterministic=True) needs {key}={want} but the "
                        f"environment sets {key}={current[key]}: unset it (or set it to {want}) before starting "
                        "the process, or drop deterministic=True"
                    )
            if _settings_at_first_init is not None and _settings_at_first_init != DETERMINISTIC_ENV:
                raise PolicyError(
                    "Communicator.init: ExecutionPolicy(deterministic=True) cannot be guaranteed: this process "
                    f"already created a communicator with {_settings_at_first_init} and NCCL keeps the settings "
                    "of its first init; create deterministic communicators first (or in a fresh process)"
                )
            os.environ.update(DETERMINISTIC_ENV)
            current = nccl_settings()
        if _settings_at_first_init is None:
            _settings_at_first_init = dict(current)
        return current


def record(
    op: str,
    device: int,
    dtype: str,
    shape: tuple[int, ...],
    nbytes: int,
    stream: int,
    comm: Any,
    peer: int | None = None,
    reduce_op: str | None = None,
) -> int:
    """Records one call of a collective: a Decision per case (later calls are hits).
    Returns the decision's ``seq``."""
    settings = comm.nccl_settings
    key = (op, reduce_op, device, dtype, shape, comm.world, peer, tuple(settings.items()), comm.deterministic)
    with _lock:
        seq = _cases.get(key)
    if seq is not None and _log.dispatcher().add_hits(seq, 1):
        return seq
    algo = settings["NCCL_ALGO"] or "NCCL's choice"
    proto = settings["NCCL_PROTO"] or "NCCL's choice"
    detail = (
        (f"op {reduce_op}; " if reduce_op else "")
        + f"NCCL {comm.nccl_version_string}; NCCL_ALGO={algo}; NCCL_PROTO={proto}; {nbytes} bytes; "
        f"stream 0x{stream:x}; rank {comm.rank} of {comm.world}"
        + (f"; peer/root {peer}" if peer is not None else "")
        + (f"; {HOW_DETERMINISTIC}" if comm.deterministic else "")
    )
    decision = Decision(
        op=f"nccl.{op}",
        device=f"cuda:{device}",
        dtypes=[dtype],
        shapes=[list(shape)],
        candidates=[Candidate("nccl", "supported", "", f"libnccl {comm.nccl_version_string}")],
        chosen="nccl",
        rule=_core.rule.POLICY_REQUIRE if comm.deterministic else _core.rule.AUTO_FIRST_SUPPORTED,
        node=f"xpuruntime.distributed.{op}",
        detail=detail,
        key=f"nccl.{op}|{reduce_op or '-'}|{dtype}|{list(shape)}|world{comm.world}|{algo}/{proto}",
    )
    seq = _log.record(decision)
    with _lock:
        _cases[key] = seq
    return seq


def profile_event(op: str, start_ns: int, info: Any, stream: int, comm: Any, device_ms: float | None) -> None:
    """A profiler event for one call (only while the profiler is on)."""
    prof = _core.Profiler.instance()
    if not prof.enabled:
        return
    settings = comm.nccl_settings
    args = {
        "op": op,
        "bytes": str(info.nbytes),
        "dtype": info.dtype,
        "nccl_version": comm.nccl_version_string,
        "NCCL_ALGO": settings["NCCL_ALGO"] or "auto",
        "NCCL_PROTO": settings["NCCL_PROTO"] or "auto",
        "stream": f"0x{stream:x}",
        "rank": str(comm.rank),
        "world": str(comm.world),
    }
    if device_ms is not None:
        args["device_ms"] = f"{device_ms:.4f}"
    prof.add_complete(f"nccl.{op}", "nccl", start_ns, max(prof.now_ns() - start_ns, 0), args)
