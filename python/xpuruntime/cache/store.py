"""One content-addressed cache for every built artifact (DESIGN.md §5).

An artifact (a native plan, ONNX Runtime's optimized model, OpenVINO's compiled blob,
a pin set) is valid only for the model bytes, the policies, the device and the
library versions it was built from; all of them go into its :class:`ArtifactKey`,
whose SHA-256 is the entry's address. A lookup that misses finds the nearest entry
of the same kind and says which fields differ ("policy.kernel.preferences.matmul:
"cpu_blas" → "cpu_packed""; "libraries.onnxruntime: 1.22.0 → 1.23.0"); an entry
whose payload no longer matches its SHA-256 is reported corrupt and rebuilt.

Layout under the root (``$XRT_CACHE_DIR``, else ``~/.cache/xpuruntime``)::

    artifacts/<kind>/<digest>.json                metadata: key, payload name, sha256, size
    artifacts/<kind>/<digest>.<sha256[:16]>.bin   payload
    artifacts/<kind>/<digest>.lock                serializes writers of one key

Writes are atomic (temporary file, fsync, rename) and serialized per key by an
exclusive ``flock``: two processes storing one key leave one complete entry (the
last one), never a torn or mismatched one. Readers take no lock. The TensorRT
engine cache (:mod:`.tensorrt`) lives under the same root.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._io import atomic_write

__all__ = ["CACHE_FORMAT", "ArtifactCache", "ArtifactKey", "CacheEntry", "CacheLookup", "default_root"]

#: Version of the metadata layout; entries of another version are rebuilt.
CACHE_FORMAT = 1


def default_root() -> Path:
    """``$XRT_CACHE_DIR``, else ``~/.cache/xpuruntime``."""
    base = os.environ.get("XRT_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "xpuruntime"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class ArtifactKey:
    """Everything an artifact depends on.

    ``policy`` holds the fingerprints (``kernel_fingerprint``, ``exec_fingerprint``) that
    address the entry and the policies' JSON (``kernel``, ``exec``), kept so that a miss
    can name the policy field that changed; only the fingerprints enter the digest.
    """

    kind: str
    model_sha256: str
    policy: dict[str, Any]
    device: dict[str, str]
    libraries: dict[str, str]
    options: dict[str, Any] = field(default_factory=dict)

    def addressed(self) -> dict[str, Any]:
        """The fields the digest covers."""
        fps = {k: v for k, v in self.policy.items() if k.endswith("fingerprint")}
        return {
            "kind": self.kind,
            "model_sha256": self.model_sha256,
            "policy": fps,
            "device": self.device,
            "libraries": self.libraries,
            "options": self.options,
        }

    def digest(self) -> str:
        return _sha256(_canonical(self.addressed()).encode())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CacheLookup:
    """A lookup's result. ``status``: hit | miss | corrupt | stale; ``reason`` in words."""

    status: str
    reason: str
    key: ArtifactKey
    payload: bytes | None = None
    meta: dict[str, Any] | None = None

    @property
    def hit(self) -> bool:
        return self.status == "hit"


@dataclass
class CacheEntry:
    """One committed entry as ``cache ls`` shows it."""

    kind: str
    digest: str
    model_sha256: str
    size: int
    created: float
    path: Path
    meta: dict[str, Any]


def _flat(d: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}"))
    return out or {prefix: {}}


def key_diff(old: dict[str, Any], new: ArtifactKey) -> list[str]:
    """Field-by-field differences between a stored key (a dict) and ``new``, in words.

    Policy fields are compared by their JSON content when the fingerprints differ.
    """
    lines = []
    if old.get("model_sha256") != new.model_sha256:
        lines.append(f"model changed: sha256 {str(old.get('model_sha256'))[:12]} → {new.model_sha256[:12]}")
    old_pol, new_pol = old.get("policy", {}) or {}, new.policy
    for which in ("kernel", "exec"):
        fp = f"{which}_fingerprint"
        if old_pol.get(fp) == new_pol.get(fp):
            continue
        a = _flat(old_pol.get(which, {}), f"policy.{which}")
        b = _flat(new_pol.get(which, {}), f"policy.{which}")
        fields = [
            f"{k}: {json.dumps(a.get(k))} → {json.dumps(b.get(k))}"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
        lines.append(
            "policy changed: "
            + ("; ".join(fields) if fields else f"{fp} {old_pol.get(fp)} → {new_pol.get(fp)}")
        )
    for part, label in (
        ("device", "device changed"),
        ("libraries", "library changed"),
        ("options", "build options changed"),
    ):
        a = _flat(old.get(part, {}) or {}, part)
        b = _flat(getattr(new, part), part)
        fields = [
            f"{k.split('.', 1)[-1]} {a.get(k)} → {b.get(k)}"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
        if fields:
            lines.append(f"{label}: " + "; ".join(fields))
    return lines


class ArtifactCache:
    """Content-addressed artifacts under one root. Thread- and process-safe."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def _meta_path(self, key: ArtifactKey) -> Path:
        return self.artifacts / key.kind / f"{key.digest()}.json"

    # ------------------------------------------------------------------ lookup
    def lookup(self, key: ArtifactKey) -> CacheLookup:
        """The entry for ``key``, verified; otherwise why it cannot be used."""
        meta_path = self._meta_path(key)
        if not meta_path.exists():
            return CacheLookup("miss", self.why_missing(key), key)
        meta, problem = _read_meta(meta_path)
        if meta is None:
            return CacheLookup("corrupt", f"cache metadata {meta_path.name} is unreadable ({problem})", key)
        if meta.get("format") != CACHE_FORMAT:
            return CacheLookup(
                "stale",
                f"cache entry has format {meta.get('format')!r}, this xpuruntime writes {CACHE_FORMAT}",
                key,
            )
        payload_path = meta_path.parent / str(meta.get("payload", ""))
        try:
            payload = payload_path.read_bytes()
        except OSError:
            return CacheLookup("corrupt", f"cache payload {payload_path.name} is missing", key, meta=meta)
        if len(payload) != meta.get("size") or _sha256(payload) != meta.get("sha256"):
            return CacheLookup(
                "corrupt",
                f"cache payload {payload_path.name} does not match its SHA-256 ({len(payload)} bytes, "
                f"metadata says {meta.get('size')}): corrupted on disk",
                key,
                meta=meta,
            )
        os.utime(meta_path)  # newest-used first when pruning
        return CacheLookup("hit", f"cached {key.kind} {payload_path.name}", key, payload, meta)

    def why_missing(self, key: ArtifactKey) -> str:
        """Why ``key`` has no entry: the field differences to the nearest entry of its kind."""
        best: list[str] | None = None
        for entry in self.entries(key.kind):
            diff = key_diff(entry.meta.get("key", {}), key)
            if diff and (best is None or len(diff) < len(best)):
                best = diff
        if best is None:
            return f"no cached {key.kind} yet: first build"
        return "; ".join(best)

    # ------------------------------------------------------------------- store
    @contextmanager
    def _writer(self, key: ArtifactKey) -> Iterator[None]:
        folder = self.artifacts / key.kind
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{key.digest()}.lock", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def store(self, key: ArtifactKey, payload: bytes, *, extra: dict[str, Any] | None = None) -> Path:
        """Write the artifact of ``key`` (atomically; the metadata rename commits it)."""
        digest = _sha256(payload)
        meta_path = self._meta_path(key)
        payload_path = meta_path.parent / f"{key.digest()}.{digest[:16]}.bin"
        with self._writer(key):
            atomic_write(payload_path, payload)
            meta = {
                "format": CACHE_FORMAT,
                "key": key.to_dict(),
                "digest": key.digest(),
                "payload": payload_path.name,
                "sha256": digest,
                "size": len(payload),
                "created": time.time(),
                "extra": extra or {},
            }
            atomic_write(meta_path, json.dumps(meta, indent=2, sort_keys=True).encode())
            for other in meta_path.parent.glob(f"{key.digest()}.*.bin"):
                if other != payload_path:
                    other.unlink(missing_ok=True)
        return payload_path

    def remove(self, kind: str, digest: str) -> int:
        """Delete one entry (metadata, payloads, lock file); returns the bytes freed."""
        folder = self.artifacts / kind
        freed = 0
        for p in [folder / f"{digest}.json", *folder.glob(f"{digest}.*.bin"), folder / f"{digest}.lock"]:
            try:
                freed += p.stat().st_size
                p.unlink()
            except FileNotFoundError:
                pass
        return freed

    # ------------------------------------------------------------- maintenance
    def entries(self, kind: str | None = None) -> list[CacheEntry]:
        """Committed entries (newest first); unreadable metadata is skipped (see verify)."""
        kinds = [kind] if kind else sorted(p.name for p in self.artifacts.glob("*") if p.is_dir())
        out = []
        for k in kinds:
            for meta_path in (self.artifacts / k).glob("*.json"):
                meta, _ = _read_meta(meta_path)
                if meta is None:
                    continue
                payload = meta_path.parent / str(meta.get("payload", ""))
                size = meta_path.stat().st_size + (payload.stat().st_size if payload.is_file() else 0)
                out.append(
                    CacheEntry(
                        k,
                        meta_path.stem,
                        str(meta.get("key", {}).get("model_sha256", "")),
                        size,
                        meta_path.stat().st_mtime,
                        meta_path,
                        meta,
                    )
                )
        out.sort(key=lambda e: e.created, reverse=True)
        return out

    def verify(self, *, repair: bool = False) -> list[str]:
        """Every problem found (unreadable metadata, missing or corrupted payloads, payloads
        no metadata names); ``repair`` deletes the broken entries (rebuilt on next use)."""
        problems = []
        for folder in sorted(p for p in self.artifacts.glob("*") if p.is_dir()):
            named = set()
            for meta_path in sorted(folder.glob("*.json")):
                meta, why = _read_meta(meta_path)
                bad = ""
                if meta is None:
                    bad = f"unreadable metadata ({why})"
                else:
                    payload = folder / str(meta.get("payload", ""))
                    named.add(payload.name)
                    try:
                        data = payload.read_bytes()
                    except OSError:
                        data = None
                    if data is None:
                        bad = f"payload {payload.name} is missing"
                    elif len(data) != meta.get("size") or _sha256(data) != meta.get("sha256"):
                        bad = f"payload {payload.name} does not match its SHA-256 (corrupted)"
                if bad:
                    problems.append(f"{folder.name}/{meta_path.stem}: {bad}")
                    if repair:
                        self.remove(folder.name, meta_path.stem)
            for payload in sorted(folder.glob("*.bin")):
                if payload.name not in named and payload.exists():
                    problems.append(
                        f"{folder.name}/{payload.name}: payload without metadata (an interrupted write)"
                    )
                    if repair:
                        payload.unlink(missing_ok=True)
        return problems

    def prune(self, *, max_bytes: int | None = None, older_than_s: float | None = None) -> list[CacheEntry]:
        """Delete entries older than ``older_than_s`` and then the oldest ones until the rest
        fit in ``max_bytes``; the newest (most recently used) are kept. Returns the removed."""
        now = time.time()
        removed = []
        total = 0
        for e in self.entries():  # newest first
            too_old = older_than_s is not None and now - e.created > older_than_s
            too_big = max_bytes is not None and total + e.size > max_bytes
            if too_old or too_big:
                self.remove(e.kind, e.digest)
                removed.append(e)
            else:
                total += e.size
        return removed


def _read_meta(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if not isinstance(meta, dict):
        return None, "not a JSON object"
    return meta, ""
