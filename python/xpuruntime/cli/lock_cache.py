"""``xpuruntime lock`` and ``xpuruntime cache``.

    xpuruntime lock MODEL -o FILE [--policy P] [--exec-policy E] [--device D] [--engine E]
                                  [--input-shape name=1x3x224x224 ...]
    xpuruntime cache ls                       every entry: kind, digest, model, size, age
    xpuruntime cache why MODEL [--kind K]     would a build hit? if not, which field changed
    xpuruntime cache verify [--repair]        check every payload against its SHA-256
    xpuruntime cache prune [--max-bytes N] [--older-than D]   keep the newest within the limits

``lock`` compiles the model (for the given input shapes; symbolic dimensions not given
are 1) and writes every decision to FILE; ``InferenceSession(model, lock=FILE)``
replays it. The cache lives under ``--root`` (default ``$XRT_CACHE_DIR``, else
``~/.cache/xpuruntime``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_lock_arguments", "add_parsers", "lock_kwargs", "lock_policies", "parse_input_shapes"]


def parse_input_shapes(items: Sequence[str]) -> dict[str, list[int]]:
    """``["x=1x3x64x64", "mask=1,16"]`` -> ``{"x": [1, 3, 64, 64], "mask": [1, 16]}``."""
    out: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        parts = [p for p in re.split(r"[x,]", dims.strip()) if p]
        if not sep or not name.strip() or not all(p.isdigit() for p in parts):
            raise SystemExit(
                f"error: --input-shape expects NAME=DIMS such as input=1x3x224x224, got {item!r}"
            )
        out[name.strip()] = [int(p) for p in parts]
    return out


def add_lock_arguments(p: argparse.ArgumentParser) -> None:
    """``--lock FILE`` and ``--frozen`` for commands that build a session (``run``)."""
    p.add_argument("--lock", default=None, metavar="FILE", help="take every decision from this lock file")
    p.add_argument(
        "--frozen", action="store_true", help="with --lock: refuse input shapes the lock does not cover"
    )


def lock_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The InferenceSession keywords of :func:`add_lock_arguments`' options."""
    lock = getattr(args, "lock", None)
    frozen = bool(getattr(args, "frozen", False))
    return {"lock": lock, "frozen": frozen} if lock or frozen else {}


def lock_policies(lock: str, kernel_policy: Any, exec_policy: Any) -> tuple[Any, Any]:
    """The policies a locked command builds with: the ones its flags give, else the lock's
    (so ``run MODEL --lock FILE`` needs no --policy; a flag that differs from the lock is
    refused by the session, naming the field)."""
    import json

    from .. import _core
    from ..lock import LockFile

    recorded = LockFile.load(lock).policy
    if kernel_policy is None and recorded.get("kernel"):
        kernel_policy = _core.KernelPolicy.from_json(json.dumps(recorded["kernel"]))
    if exec_policy is None and recorded.get("exec"):
        exec_policy = _core.ExecutionPolicy.from_json(json.dumps(recorded["exec"]))
    return kernel_policy, exec_policy


def _policies(args: argparse.Namespace) -> tuple[Any, Any]:
    from ..policies import ExecutionPolicy, KernelPolicy

    kp = KernelPolicy.load(args.policy) if getattr(args, "policy", None) else None
    ep = ExecutionPolicy.load(args.exec_policy) if getattr(args, "exec_policy", None) else None
    return kp, ep


# ----------------------------------------------------------------------- lock
def cmd_lock(args: argparse.Namespace) -> int:
    from ..inference import InferenceSession
    from .compare import make_inputs

    kp, ep = _policies(args)
    shapes = parse_input_shapes(args.input_shape)
    extra = {"input_shapes": shapes} if shapes and args.engine in ("native", "auto") else {}
    sess = InferenceSession(
        args.model, device=args.device, engine=args.engine, kernel_policy=kp, exec_policy=ep, **extra
    )
    if sess.engine == "native" and sess.plan is None or sess.engine != "native":
        infos = sess.get_inputs()
        feeds = make_inputs(infos, {}, 0, 10)
        for info in infos:  # the given shapes win over the default 1s
            if info.name in shapes:
                feeds[info.name] = make_inputs([_Shaped(info, shapes[info.name])], {}, 0, 10)[info.name]
        sess.run(feeds)
    lock = sess.lock(args.output)
    nodes = sum(len(b.get("nodes", [])) for b in lock.buckets)
    print(
        f"locked {args.model}: engine {lock.engine} on {lock.device}, {len(lock.buckets)} bucket(s) "
        f"({', '.join(lock.bucket_names())}), {nodes} decisions -> {args.output}"
    )
    return 0


class _Shaped:
    def __init__(self, info: Any, shape: list[int]) -> None:
        self.name, self.dtype, self.shape = info.name, info.dtype, tuple(shape)


# ---------------------------------------------------------------------- cache
def _cache(args: argparse.Namespace) -> Any:
    from ..cache import ArtifactCache

    return ArtifactCache(args.root)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def cmd_cache_ls(args: argparse.Namespace) -> int:
    entries = _cache(args).entries()
    now = time.time()
    rows = [[e.kind, e.digest[:16], e.model_sha256[:12], e.size, _age(now - e.created)] for e in entries]
    _table(f"cache {_cache(args).root}", ["kind", "digest", "model", "bytes", "age"], rows)
    print(f"{len(entries)} entries, {sum(e.size for e in entries)} bytes")
    return 0


def cmd_cache_why(args: argparse.Namespace) -> int:
    from ..cache import KINDS, artifact_key
    from ..cache.artifacts import openvino_options

    kp, ep = _policies(args)
    kinds = [args.kind] if args.kind else list(KINDS)
    shapes = parse_input_shapes(args.input_shape)
    cache = _cache(args)
    for kind in kinds:
        options = {
            "native_plan": {"input_shapes": shapes},
            "pin_set": {"input_shapes": shapes},
            "onnxruntime_model": {"graph_optimization_level": "extended"},
            "openvino_blob": None,
        }[kind]
        if kind == "openvino_blob":
            options = openvino_options(args.device, ep)
        key = artifact_key(
            kind, args.model, device=args.device, kernel_policy=kp, exec_policy=ep, options=options
        )
        look = cache.lookup(key)
        print(f"{kind}: {'hit' if look.hit else look.status} - {look.reason}")
    return 0


def cmd_cache_verify(args: argparse.Namespace) -> int:
    problems = _cache(args).verify(repair=args.repair)
    for p in problems:
        print(p)
    verb = "removed (rebuilt on next use)" if args.repair else "found"
    print(f"{len(problems)} problem(s) {verb}" if problems else "every entry matches its SHA-256")
    return 1 if problems and not args.repair else 0


def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30d, 12h, 90m or 3600, got {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def cmd_cache_prune(args: argparse.Namespace) -> int:
    if args.max_bytes is None and args.older_than is None:
        raise SystemExit("error: cache prune needs --max-bytes N and/or --older-than D")
    removed = _cache(args).prune(max_bytes=args.max_bytes, older_than_s=args.older_than)
    for e in removed:
        print(f"removed {e.kind}/{e.digest[:16]} ({e.size} bytes)")
    kept = _cache(args).entries()
    print(f"removed {len(removed)}, kept {len(kept)} entries ({sum(e.size for e in kept)} bytes)")
    return 0


# --------------------------------------------------------------------- parser
def add_parsers(sub: Any) -> None:
    """Register ``lock`` and ``cache`` on the ``xpuruntime`` subparsers."""
    from .compare import _bytes

    p = sub.add_parser("lock", help="write a lock file: every decision a session makes for MODEL")
    p.add_argument("model", help="path to an .onnx model")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the lock file to write")
    p.add_argument("--engine", default="native", help="engine (default native)")
    p.add_argument("--device", default="cpu", help="device (default cpu)")
    p.add_argument("--policy", default=None, help="KernelPolicy file")
    p.add_argument("--exec-policy", default=None, help="ExecutionPolicy file")
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="e.g. input=1x3x224x224 (repeatable)",
    )
    p.set_defaults(func=cmd_lock)

    c = sub.add_parser("cache", help="the artifact cache: ls, why, verify, prune")
    csub = c.add_subparsers(dest="cache_command", required=True)

    def root(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--root",
            default=None,
            type=Path,
            help="cache root (default $XRT_CACHE_DIR or ~/.cache/xpuruntime)",
        )

    q = csub.add_parser("ls", help="list entries, newest first")
    root(q)
    q.set_defaults(func=cmd_cache_ls)
    q = csub.add_parser("why", help="would building MODEL hit the cache? if not, why")
    q.add_argument("model")
    q.add_argument(
        "--kind", default=None, choices=["native_plan", "pin_set", "onnxruntime_model", "openvino_blob"]
    )
    q.add_argument("--device", default="cpu")
    q.add_argument("--policy", default=None, help="KernelPolicy file")
    q.add_argument("--exec-policy", default=None, help="ExecutionPolicy file")
    q.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS")
    root(q)
    q.set_defaults(func=cmd_cache_why)
    q = csub.add_parser(
        "verify", help="check every entry's payload against its SHA-256 (exit 1 on a problem)"
    )
    q.add_argument(
        "--repair", action="store_true", help="delete broken entries (they are rebuilt on next use)"
    )
    root(q)
    q.set_defaults(func=cmd_cache_verify)
    q = csub.add_parser("prune", help="delete old entries, keeping the newest within the limits")
    q.add_argument("--max-bytes", type=_bytes, default=None, metavar="N", help="keep at most N bytes (K/M/G)")
    q.add_argument(
        "--older-than",
        type=_duration,
        default=None,
        metavar="D",
        help="delete entries older than D (30d, 12h)",
    )
    root(q)
    q.set_defaults(func=cmd_cache_prune)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m xpuruntime.cli.lock_cache lock|cache ...``"""
    parser = argparse.ArgumentParser(prog="xpuruntime", description=__doc__)
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
