"""The orchestrator's commands (DESIGN.md §6):

xpuruntime explain MODEL --engines native,onnxruntime,openvino --device cuda --dry-run [--format json]
    the coverage matrix, the partition the policy would produce and the bytes
    crossing each island boundary, before anything is built;
xpuruntime explain MODEL --engines native,onnxruntime
    builds the partitioned session and shows its islands, placements and copies;
xpuruntime policy check MODEL POLICY [--device D] [--engines ...]
    the policy's budgets against the partition, for CI: exit 0 when it holds, 1
    when it breaks (each violation named), 2 on an unusable model or policy file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def _engines(text: str | None) -> list[str]:
    return [e.strip() for e in (text or "").split(",") if e.strip()]


def _dims(items: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items or []:
        if isinstance(item, tuple):  # main's --dim parses NAME=VALUE already
            out[str(item[0])] = int(item[1])
            continue
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise SystemExit(f"--dim expects NAME=VALUE with an integer value, got {item!r}")
        out[name.strip()] = int(value)
    return out


def _exec_policy(path: str | None) -> Any:
    if not path:
        return None
    from ..policies import ExecutionPolicy

    return ExecutionPolicy.load(path)


def _print_tables(args: argparse.Namespace, result: dict[str, Any]) -> None:
    from ..orchestrator.preview import format_text

    for title, cols, rows in format_text(result):
        args.print_table(title, cols, rows)


def _kind(device: str | None) -> str:
    return "cpu" if not device or device == "auto" else device


# ------------------------------------------------------------------ explain
def add_explain_options(p: argparse.ArgumentParser, print_table: Callable[..., None]) -> None:
    """Add --engines, --dry-run and --format to the ``explain`` parser, routing them here
    (``print_table(title, columns, rows)`` draws the tables)."""
    known = set(p._option_string_actions)
    p.add_argument(
        "--engines",
        default=None,
        metavar="E1,E2",
        help="partition across these engines, in order of preference (the orchestrator)",
    )
    if "--dry-run" not in known:  # main's explain has it: the native plan offline
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="with --engines: show coverage, partition and boundary bytes without building",
        )
    if "--format" not in known:
        p.add_argument("--format", choices=["text", "json"], default="text", help="output format")
    original = p.get_default("func")

    def dispatch(args: argparse.Namespace) -> int:
        # --engines: the orchestrator (with --dry-run: its preview); otherwise explain as
        # main defines it (--dry-run alone: the native plan for a target device).
        if args.engines:
            return cmd_explain_engines(args)
        return int(original(args) or 0)

    p.set_defaults(func=dispatch, print_table=print_table)


def cmd_explain_engines(args: argparse.Namespace) -> int:
    ep = _exec_policy(getattr(args, "exec_policy", None))
    engines = _engines(args.engines) or list(getattr(ep, "engines", None) or [])
    if not engines:
        print("error: --dry-run needs --engines E1,E2 (or an --exec-policy listing engines)", file=sys.stderr)
        return 2
    device = _kind(args.device)
    if args.dry_run:
        from ..orchestrator import preview

        result = preview(args.model, engines, device, ep, dims=_dims(getattr(args, "dim", [])))
        if getattr(args, "format", "text") == "json":
            print(json.dumps(result, indent=1, sort_keys=True))
        else:
            _print_tables(args, result)
        return 0
    from ..inference import InferenceSession
    from .compare import make_inputs

    sess = InferenceSession(args.model, device=device, engine=engines, exec_policy=ep)
    # One run on random inputs: the copies are then measured, not only estimated.
    sess.run(
        make_inputs(
            sess.get_inputs(),
            _dims(getattr(args, "dim", [])),
            getattr(args, "seed", 0),
            getattr(args, "int_high", 10),
        )
    )
    if getattr(args, "format", "text") == "json":
        print(sess.explain().to_json())
    else:
        part = sess._engine.partition
        _print_tables(
            args,
            {
                "places": [],
                "coverage": [],
                "partition": part.to_dict(),
                "violations": part.violations,
                "error": None,
            },
        )
        print(sess.explain())
    return 0


# ------------------------------------------------------------------ policy check
def add_policy_check(psub: Any) -> None:
    """Add ``policy check MODEL POLICY`` to the ``policy`` subcommands."""
    c = psub.add_parser(
        "check",
        help="check a model's partition against an ExecutionPolicy's budgets (exit 1 naming each violation)",
    )
    c.add_argument("model", help="path to an .onnx model")
    c.add_argument("policy", help="ExecutionPolicy file (JSON or YAML)")
    c.add_argument("--device", default="cpu", help="device kind the session would run on (default cpu)")
    c.add_argument("--engines", default=None, metavar="E1,E2", help="engines (default: the policy's engines)")
    c.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension for the byte estimates (default 1)",
    )
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.set_defaults(func=cmd_policy_check)


def cmd_policy_check(args: argparse.Namespace) -> int:
    from ..orchestrator import preview

    ep = _exec_policy(args.policy)
    engines = _engines(args.engines) or list(ep.engines) or ([ep.engine] if ep.engine else [])
    if not engines:
        print(
            f'error: {args.policy} lists no engines; add "engines": [...] to it or pass --engines',
            file=sys.stderr,
        )
        return 2
    result = preview(args.model, engines, _kind(args.device), ep, dims=_dims(args.dim))
    problems = ([result["error"]] if result["error"] else []) + list(result["violations"])
    if args.format == "json":
        print(
            json.dumps(
                {"ok": not problems, "problems": problems, "partition": result["partition"]},
                indent=1,
                sort_keys=True,
            )
        )
    else:
        part = result["partition"]
        if part is not None:
            islands = ", ".join(f"{i['place']} ({len(i['nodes'])} nodes)" for i in part["islands"])
            print(
                f"partition: {len(part['islands'])} island(s): {islands}; "
                f"{len(part['fallback_nodes'])} fallback node(s); {part['copy_bytes']} bytes across boundaries"
            )
        for p in problems:
            print(f"violation: {p}")
        print(f"{'FAIL' if problems else 'ok'}: {args.model} under {args.policy} on {_kind(args.device)}")
    return 1 if problems else 0
