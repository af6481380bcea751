"""The lock file (DESIGN.md §3): every decision a session made, as versioned JSON.

    {
      "format": "xpuruntime.lock", "schema_version": 1,
      "engine": "native", "device": "cpu",
      "device_info": {"kind": "cpu", "name": "...", "isa": "avx512", "vector_isa": "x86-64-v4"},
      "libraries": {"xpuruntime": "0.1.0", "plan_format": "3", "onednn": "3.6.0", ...},
      "model": {"sha256": "..."},
      "policy": {"kernel": {...}, "kernel_fingerprint": "...", "exec": {...}, "exec_fingerprint": "..."},
      "buckets": [
        {"inputs": {"input": [1, 3, 64, 64]},
         "nodes": [{"node": "/conv1/Conv", "op": "conv", "key": "conv|cpu|float32[...]...",
                    "kernel": "cpu_conv_onednn", "algorithm": "", "precision": "fp32",
                    "dtypes": ["float32", ...], "rule": "auto.first_supported", "fused": "",
                    "margin": "..."}, ...]}
      ]
    }

A bucket is one set of input shapes (a plan specialization); ``key`` is the
dispatcher's case key, which is what a lock pins. Editing a node's ``kernel`` or
``algorithm`` and running locked makes the session use that choice (every node of
that case: a pin covers a case, not a node name). External engines (ONNX Runtime,
OpenVINO) record their placements and policy mappings in one bucket with
``"inputs": null``; a locked session checks it makes the same ones.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core import InvalidArgumentError

__all__ = ["FORMAT", "SCHEMA_VERSION", "LockFile", "bucket_id", "node_key"]

FORMAT = "xpuruntime.lock"
SCHEMA_VERSION = 1

_NODE_FIELDS = ("node", "op", "kernel", "algorithm")


def bucket_id(inputs: dict[str, list[int]] | None) -> str:
    """A bucket's name: ``"input=1x3x64x64"``; ``"*"`` for an engine's one bucket."""
    if inputs is None:
        return "*"
    # Sorted by name: the file's JSON keeps its keys sorted, a run gives model order.
    return ",".join(f"{n}={'x'.join(str(d) for d in dims) or 'scalar'}" for n, dims in sorted(inputs.items()))


def node_key(entry: dict[str, Any], seen: dict[tuple[str, str], int]) -> tuple[str, str, int]:
    """(node, op, occurrence): a node may record several decisions of one op."""
    base = (str(entry.get("node", "")), str(entry.get("op", "")))
    n = seen.get(base, 0)
    seen[base] = n + 1
    return (*base, n)


@dataclass
class LockFile:
    """A parsed lock file. Build one with :meth:`from_session`, read one with :meth:`load`."""

    engine: str
    device: str
    device_info: dict[str, str]
    libraries: dict[str, str]
    model_sha256: str
    policy: dict[str, Any]
    buckets: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    source: str = ""  # where it was read from (messages only)

    # ------------------------------------------------------------------ queries
    def bucket(self, inputs: dict[str, list[int]] | None) -> dict[str, Any] | None:
        """The bucket for these input shapes (None when the lock does not cover them)."""
        want = bucket_id(inputs)
        for b in self.buckets:
            if bucket_id(b.get("inputs")) == want:
                return b
        return None

    def bucket_names(self) -> list[str]:
        return [bucket_id(b.get("inputs")) for b in self.buckets]

    def pins(self) -> dict[str, dict[str, str]]:
        """Case key -> {"kernel", "algorithm"} for every locked node with a case key.

        Raises LockViolationError when two nodes of one case were given different
        choices (a pin covers every node of a case).
        """
        from .. import _core
        from .errors import lock_violation

        # Only the Dispatcher's kernel choices become pins; fusions and engine mappings
        # carry a key too, and are checked after the build instead.
        kernel_rules = {str(r) for r in _core.RULES} - {"none"}
        pins: dict[str, dict[str, str]] = {}
        owner: dict[str, str] = {}
        clashes = []
        for b in self.buckets:
            for n in b.get("nodes", []):
                key = n.get("key") or ""
                if not key or not n.get("kernel") or n.get("rule") not in kernel_rules:
                    continue
                pin = {"kernel": str(n["kernel"]), "algorithm": str(n.get("algorithm", ""))}
                if key in pins and pins[key] != pin:
                    clashes.append(
                        f"case {key}: node {owner[key]} → {_pin_text(pins[key])}, node {n.get('node')} → "
                        f"{_pin_text(pin)}"
                    )
                    continue
                pins[key] = pin
                owner.setdefault(key, str(n.get("node", "")))
        if clashes:
            raise lock_violation(
                f"lock file {self.source or '(in memory)'} gives one case two different kernels",
                clashes,
                "A lock pins a case (op, dtypes, shapes, attributes), not a node name: give every node of a "
                "case the same kernel and algorithm.",
            )
        return pins

    # ------------------------------------------------------------- (de)serialize
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "schema_version": self.schema_version,
            "engine": self.engine,
            "device": self.device,
            "device_info": dict(self.device_info),
            "libraries": dict(self.libraries),
            "model": {"sha256": self.model_sha256},
            "policy": self.policy,
            "buckets": self.buckets,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (a reader sees the old file or the whole new one)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.to_json())
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p

    @classmethod
    def from_dict(cls, d: Any, source: str = "") -> LockFile:
        """Validate and parse; InvalidArgumentError names the file and the field."""
        where = f"lock file {source}" if source else "lock file"

        def need(cond: bool, what: str) -> None:
            if not cond:
                raise InvalidArgumentError(
                    f"{where}: {what}; write a lock with `xpuruntime lock MODEL -o FILE` "
                    "or session.lock(path)"
                )

        need(isinstance(d, dict), "is not a JSON object")
        need(d.get("format") == FORMAT, f"'format' must be {FORMAT!r}, got {d.get('format')!r}")
        version = d.get("schema_version")
        need(isinstance(version, int), "'schema_version' is missing or not an integer")
        need(
            version <= SCHEMA_VERSION,
            f"schema_version {version} is newer than this xpuruntime reads ({SCHEMA_VERSION}); "
            "upgrade xpuruntime",
        )
        for name in ("engine", "device"):
            need(isinstance(d.get(name), str) and d[name], f"'{name}' must be a non-empty string")
        for name in ("device_info", "libraries", "policy"):
            need(isinstance(d.get(name), dict), f"'{name}' must be an object")
        model = d.get("model")
        need(isinstance(model, dict) and isinstance(model.get("sha256"), str), "'model.sha256' is missing")
        buckets = d.get("buckets")
        need(isinstance(buckets, list), "'buckets' must be a list")
        for i, b in enumerate(buckets):
            need(
                isinstance(b, dict) and isinstance(b.get("nodes"), list), f"buckets[{i}] needs a 'nodes' list"
            )
            inputs = b.get("inputs")
            need(
                inputs is None
                or isinstance(inputs, dict)
                and all(isinstance(v, list) and all(isinstance(x, int) for x in v) for v in inputs.values()),
                f"buckets[{i}].inputs must map input names to integer shapes",
            )
            for j, n in enumerate(b["nodes"]):
                need(isinstance(n, dict), f"buckets[{i}].nodes[{j}] is not an object")
                for f in _NODE_FIELDS:
                    need(isinstance(n.get(f, ""), str), f"buckets[{i}].nodes[{j}].{f} must be a string")
        return cls(
            engine=d["engine"],
            device=d["device"],
            device_info={str(k): str(v) for k, v in d["device_info"].items()},
            libraries={str(k): str(v) for k, v in d["libraries"].items()},
            model_sha256=model["sha256"],
            policy=d["policy"],
            buckets=buckets,
            schema_version=version,
            source=source,
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LockFile:
        """Read a lock file; InvalidArgumentError says what is wrong with it."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"cannot read lock file {path}: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"lock file {path} is not valid JSON: {exc}") from exc
        return cls.from_dict(data, source=str(path))


def _pin_text(pin: dict[str, str]) -> str:
    return pin["kernel"] + (f" algorithm {pin['algorithm']}" if pin.get("algorithm") else "")
