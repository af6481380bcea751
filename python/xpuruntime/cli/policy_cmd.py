"""``xpuruntime policy validate FILE``: check a KernelPolicy or ExecutionPolicy file.

JSON and YAML files are read into the same document and checked the same way. The
kind comes from ``--kind``, else from the file's own ``"kind"`` field, else from its
fields. A flat op key (``{"matmul": "cpu_blocked"}``, the keyword form of
``KernelPolicy(matmul=...)``) is refused with the file form it belongs in.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .errors import CliError, one_line

KINDS = {"kernel_policy": "kernel", "execution_policy": "exec"}
NAMES = {"kernel": "KernelPolicy", "exec": "ExecutionPolicy"}
KERNEL_FIELDS = {"auto_strategy", "kind", "mode", "pins", "preferences", "schema_version"}
EXEC_FIELDS = {
    "allow_fallback",
    "allow_tf32",
    "cuda_graph",
    "deterministic",
    "engine",
    "keep_io_types",
    "kind",
    "precision",
    "schema_version",
    "static_shape",
    "strict",
    "target",
    "threads",
    "workspace_limit_bytes",
}


def _document(path: str) -> tuple[str, dict[str, Any]]:
    """The file as JSON text and as a mapping (YAML converted); CliError when unreadable."""
    from .. import _core
    from ..policies import _io

    try:
        text = _io.read(path, None)
    except _core.PolicyError as exc:
        raise CliError(one_line(str(exc))) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CliError(f"policy file {path!r} is not valid JSON ({exc}); fix the syntax") from None
    except RecursionError:  # Python's parser recurses once per nesting level
        raise CliError(
            f"policy file {path!r} nests too deeply to be a policy (a policy is at most a few levels deep)"
        ) from None
    if not isinstance(data, dict):
        raise CliError(f"policy file {path!r} must hold an object (a mapping), got {type(data).__name__}")
    return text, data


def detect_kind(data: dict[str, Any], flag: str, path: str) -> str:
    """'kernel' or 'exec': from --kind, the file's "kind" field, or its fields."""
    declared = data.get("kind")
    from_file = None
    if declared is not None:
        from_file = KINDS.get(declared) if isinstance(declared, str) else None
        if from_file is None:
            raise CliError(
                f"policy file {path!r}: field 'kind' is {declared!r}; use \"kernel_policy\" or "
                '"execution_policy" (or drop the field)'
            )
    if flag != "auto":
        if from_file is not None and from_file != flag:
            raise CliError(
                f'policy file {path!r} says "kind": {declared!r} but --kind {flag} was given; '
                f"drop --kind or pass --kind {from_file}"
            )
        return flag
    if from_file is not None:
        return from_file
    return "exec" if set(data) & (EXEC_FIELDS - KERNEL_FIELDS) else "kernel"


def misplaced_keys(data: dict[str, Any], kind: str) -> str | None:
    """A hint for op keys written at the top level of a KernelPolicy file, else None."""
    if kind != "kernel":
        return None
    from ..kernels import known_ops

    ops = set(known_ops())
    for key, raw in data.items():
        if key in KERNEL_FIELDS:
            continue
        if "|" in key:
            return (
                f'unknown field {key!r}: a case key belongs under "pins", e.g. '
                f'{{"pins": {{"{key}": {{"kernel": "...", "algorithm": ""}}}}}}'
            )
        if key in ops:
            value = json.dumps(raw)
            return (
                f'unknown field {key!r}: a kernel choice for an op belongs under "preferences", e.g. '
                f'{{"preferences": {{"{key}": {value}}}}} (exact cases go under "pins")'
            )
    return None


def cmd_policy_validate(args: argparse.Namespace) -> int:
    """Execute ``policy validate``; 0 valid, 1 invalid (one line on stderr), 2 unreadable."""
    from .. import _core
    from ..policies import ExecutionPolicy, KernelPolicy

    text, data = _document(args.file)
    kind = detect_kind(data, args.kind, args.file)
    name = NAMES[kind]
    hint = misplaced_keys(data, kind)
    if hint is not None:
        print(f"xpuruntime policy validate: invalid {name} {args.file}: {hint}", file=sys.stderr)
        return 1
    try:
        pol: Any = KernelPolicy.from_json(text) if kind == "kernel" else ExecutionPolicy.from_json(text)
    except _core.XpuRuntimeError as exc:
        print(
            f"xpuruntime policy validate: invalid {name} {args.file}: {one_line(str(exc))}", file=sys.stderr
        )
        return 1
    fp = getattr(pol, "fingerprint", "-")
    fp = fp() if callable(fp) else fp
    print(f"ok: {args.file} is a valid {name} (fingerprint {fp})")
    return 0


def add_parser(sub: Any) -> Any:
    """Register ``policy validate`` on the top-level subparsers; returns the ``policy``
    subcommands (``policy check`` joins them from cli/orchestrate.py)."""
    p = sub.add_parser("policy", help="policy files", description="Policy files.")
    psub = p.add_subparsers(dest="policy_command", required=True)
    v = psub.add_parser(
        "validate",
        help="check a policy file (exit 1 with the reason when invalid)",
        description=__doc__,
    )
    v.add_argument("file", help="a .json, .yaml or .yml policy file")
    v.add_argument(
        "--kind",
        choices=["auto", "kernel", "exec"],
        default="auto",
        help='kernel (KernelPolicy), exec (ExecutionPolicy) or auto: the file\'s "kind", else its fields',
    )
    v.set_defaults(func=cmd_policy_validate)
    return psub
