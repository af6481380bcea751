"""Content-addressed TensorRT engine and timing caches (DESIGN.md §5, §6).

An engine is valid only for the exact model, policy and build options it was built
from, on the same GPU model and compute capability, with the same TensorRT and CUDA
versions. Each of those goes into the key, so a cached engine is never used where it
does not belong, and when a lookup misses, the cache says *why* ("TensorRT version
changed 10.3.0 → 11.4.0", "policy or build options changed", "payload corrupt").

Layout under the root (default ``$XRT_CACHE_DIR/tensorrt`` or
``~/.cache/xpuruntime/tensorrt``)::

    engines/<model sha256>/<build id>/<env id>.<payload sha256[:16]>.engine
    engines/<model sha256>/<build id>/<env id>.json     metadata: every key field, the
                                                        payload's name, sha256, size
    timing/<env id>.cache + .json                       timing cache (shared by models)

Writes are atomic: a file goes to a temporary name in the same folder, is flushed
and fsynced, then renamed over the target. The payload is written first under a
name derived from its own hash; the metadata, which names it, is renamed last and
commits the entry. A crash leaves the old entry, no entry, or a payload without
metadata (reported as an interrupted write), never a torn file. Readers verify the
payload's size and SHA-256 against the metadata before use.

Thread/process safety: concurrent writers of one key each commit a complete entry;
the last metadata rename wins and always names its own payload.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._io import atomic_write

#: Version of the metadata layout; entries written by another version are rebuilt.
CACHE_FORMAT = 1

_ENV_FIELDS = ("gpu_name", "compute_capability", "tensorrt_version", "cuda_version")
_FIELD_LABEL = {
    "gpu_name": "GPU",
    "compute_capability": "compute capability",
    "tensorrt_version": "TensorRT version",
    "cuda_version": "CUDA version",
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def default_root() -> Path:
    """``$XRT_CACHE_DIR/tensorrt``, else ``~/.cache/xpuruntime/tensorrt``: the artifact
    cache's root (:func:`xpuruntime.cache.store.default_root`) plus ``tensorrt``."""
    from .store import default_root as artifact_root

    return artifact_root() / "tensorrt"


@dataclass(frozen=True)
class BuildKey:
    """Everything a built engine depends on.

    ``policy_fingerprint`` is the fingerprint of the policies that shaped the build;
    ``build_options`` holds what else the builder saw (precision flags, shape
    profiles, workspace limit), as JSON-able values.
    """

    model_sha256: str
    policy_fingerprint: str
    gpu_name: str
    compute_capability: str
    tensorrt_version: str
    cuda_version: str
    build_options: dict[str, Any] = field(default_factory=dict)

    def build_id(self) -> str:
        """What is built: the policy and the build options (hash prefix)."""
        return _sha256(
            _canonical({"policy": self.policy_fingerprint, "options": self.build_options}).encode()
        )[:24]

    def env_id(self) -> str:
        """Where it is valid: GPU, compute capability, TensorRT and CUDA versions."""
        return _sha256(_canonical({f: getattr(self, f) for f in _ENV_FIELDS}).encode())[:24]

    def digest(self) -> str:
        """The full content address (SHA-256 of every field)."""
        return _sha256(_canonical(asdict(self)).encode())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CacheLookup:
    """Result of a lookup. ``status``: hit | miss | corrupt | stale | mismatch.

    ``reason`` says why anything but a hit happened, in words for the user.
    """

    status: str
    reason: str
    path: Path
    payload: bytes | None = None
    meta: dict[str, Any] | None = None

    @property
    def hit(self) -> bool:
        return self.status == "hit"


class EngineCache:
    """Engine and timing caches under one root folder."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # ------------------------------------------------------------------ engines
    def meta_path(self, key: BuildKey) -> Path:
        """The metadata file of ``key``: the entry's commit point."""
        return self.root / "engines" / key.model_sha256 / key.build_id() / f"{key.env_id()}.json"

    def _payloads(self, key: BuildKey) -> list[Path]:
        folder = self.meta_path(key).parent
        return sorted(folder.glob(f"{key.env_id()}.*.engine")) if folder.is_dir() else []

    def lookup(self, key: BuildKey) -> CacheLookup:
        """Find the engine for ``key`` and verify it; say why when it cannot be used."""
        meta_path = self.meta_path(key)
        if not meta_path.exists():
            orphans = self._payloads(key)
            if orphans:
                return CacheLookup(
                    "corrupt",
                    f"cache entry {orphans[0].name} has no metadata (an interrupted write); rebuilding",
                    orphans[0],
                )
            return CacheLookup("miss", self._why_missing(key), meta_path)
        meta, problem = _read_meta(meta_path)
        if meta is None:
            return CacheLookup(
                "corrupt", f"cache metadata {meta_path} is unreadable ({problem}); rebuilding", meta_path
            )
        if meta.get("format") != CACHE_FORMAT:
            return CacheLookup(
                "stale",
                f"cache entry has format {meta.get('format')!r}, this xpuruntime writes {CACHE_FORMAT}; rebuilding",
                meta_path,
                meta=meta,
            )
        diffs = _key_diffs(meta.get("key", {}), key.to_dict())
        if diffs:
            return CacheLookup(
                "mismatch",
                f"cache entry at {meta_path} was written for another build ({'; '.join(diffs)}); rebuilding",
                meta_path,
                meta=meta,
            )
        payload_path = meta_path.parent / str(meta.get("payload", ""))
        try:
            payload = payload_path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return CacheLookup(
                "corrupt", f"cache payload {payload_path} is missing; rebuilding", payload_path, meta=meta
            )
        if len(payload) != meta.get("size"):
            return CacheLookup(
                "corrupt",
                f"cache payload {payload_path.name} has {len(payload)} bytes, its metadata says {meta.get('size')} (truncated); rebuilding",
                payload_path,
                meta=meta,
            )
        if _sha256(payload) != meta.get("sha256"):
            return CacheLookup(
                "corrupt",
                f"cache payload {payload_path.name} does not match its SHA-256 (corrupted on disk); rebuilding",
                payload_path,
                meta=meta,
            )
        return CacheLookup(
            "hit",
            f"cached engine {payload_path} (built {meta.get('created', '?')})",
            payload_path,
            payload,
            meta,
        )

    def store(self, key: BuildKey, payload: bytes, *, extra: dict[str, Any] | None = None) -> Path:
        """Write the engine for ``key`` atomically and return the payload's path.

        The payload file is named after its own hash and written first; renaming the
        metadata (which names the payload) commits the entry. Concurrent writers of one
        key therefore never pair one writer's metadata with another's payload.
        """
        digest = _sha256(payload)
        meta_path = self.meta_path(key)
        payload_path = meta_path.parent / f"{key.env_id()}.{digest[:16]}.engine"
        atomic_write(payload_path, payload)
        meta = {
            "format": CACHE_FORMAT,
            "key": key.to_dict(),
            "digest": key.digest(),
            "payload": payload_path.name,
            "sha256": digest,
            "size": len(payload),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "extra": extra or {},
        }
        atomic_write(meta_path, json.dumps(meta, indent=2, sort_keys=True).encode())
        return payload_path

    def invalidate(self, key: BuildKey) -> None:
        """Remove the entry of ``key`` and its payloads (e.g. TensorRT refused to load it)."""
        for p in [self.meta_path(key), *self._payloads(key)]:
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def _why_missing(self, key: BuildKey) -> str:
        build_dir = self.meta_path(key).parent
        model_dir = build_dir.parent
        siblings = (
            sorted(build_dir.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            if build_dir.is_dir()
            else []
        )
        for sib in siblings:
            meta, _ = _read_meta(sib)
            if meta is None:
                continue
            stored = meta.get("key", {})
            diffs = [
                f"{_FIELD_LABEL[f]} changed {stored.get(f)!r} → {getattr(key, f)!r}"
                for f in _ENV_FIELDS
                if stored.get(f) != getattr(key, f)
            ]
            if diffs:
                return "no engine for this environment: " + "; ".join(diffs) + " — rebuilding"
        if model_dir.is_dir() and any(p.is_dir() for p in model_dir.iterdir()):
            return "an engine exists for this model, but the policy or build options changed — rebuilding"
        return "no cached engine for this model — building"

    # ------------------------------------------------------------------ timing
    def timing_paths(self, key: BuildKey) -> tuple[Path, Path]:
        folder = self.root / "timing"
        return folder / f"{key.env_id()}.cache", folder / f"{key.env_id()}.json"

    def load_timing(self, key: BuildKey) -> tuple[bytes | None, str]:
        """The timing cache for ``key``'s environment, or (None, why not)."""
        payload_path, meta_path = self.timing_paths(key)
        if not meta_path.exists():
            return None, "no timing cache for this GPU/TensorRT/CUDA yet"
        meta, problem = _read_meta(meta_path)
        if meta is None:
            return None, f"timing cache metadata unreadable ({problem}); starting a new one"
        diffs = [f for f in _ENV_FIELDS if meta.get("key", {}).get(f) != getattr(key, f)]
        if meta.get("format") != CACHE_FORMAT or diffs:
            return None, "timing cache was written for another environment; starting a new one"
        try:
            data = payload_path.read_bytes()
        except FileNotFoundError:
            return None, "timing cache payload missing; starting a new one"
        if _sha256(data) != meta.get("sha256") or len(data) != meta.get("size"):
            return None, "timing cache corrupt (SHA-256 or size mismatch); starting a new one"
        return data, f"timing cache {payload_path} ({len(data)} bytes)"

    def store_timing(self, key: BuildKey, data: bytes) -> Path:
        payload_path, meta_path = self.timing_paths(key)
        atomic_write(payload_path, data)
        env = {f: getattr(key, f) for f in _ENV_FIELDS}
        meta = {"format": CACHE_FORMAT, "key": env, "sha256": _sha256(data), "size": len(data)}
        atomic_write(meta_path, json.dumps(meta, indent=2, sort_keys=True).encode())
        return payload_path


def _read_meta(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if not isinstance(meta, dict):
        return None, "not a JSON object"
    return meta, ""


def _key_diffs(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    out = []
    for name, value in wanted.items():
        if stored.get(name) != value:
            label = _FIELD_LABEL.get(name, name.replace("_", " "))
            out.append(f"{label}: cached {stored.get(name)!r}, wanted {value!r}")
    return out
