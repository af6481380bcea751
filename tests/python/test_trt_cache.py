"""The TensorRT engine/timing cache without TensorRT: keys, atomic writes, corruption,
version and policy changes, and the adapter's unavailability message."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from xpuruntime.engines import registry
from xpuruntime.engines.trt_cache import CACHE_FORMAT, BuildKey, EngineCache, atomic_write


def _key(**changes: object) -> BuildKey:
    base = BuildKey(
        model_sha256="a" * 64,
        policy_fingerprint="f" * 64,
        gpu_name="NVIDIA H100 80GB HBM3",
        compute_capability="9.0",
        tensorrt_version="10.3.0",
        cuda_version="12.4",
        build_options={"precision": "fp16", "flags": ["FP16"], "profiles": {}, "workspace_limit_bytes": 0},
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _payload(n: int = 4096, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# ---------------------------------------------------------------------- keys
def test_key_depends_on_every_field() -> None:
    k = _key()
    variants = [
        _key(model_sha256="b" * 64),
        _key(policy_fingerprint="e" * 64),
        _key(gpu_name="NVIDIA A100-SXM4-80GB"),
        _key(compute_capability="8.0"),
        _key(tensorrt_version="10.4.0"),
        _key(cuda_version="12.6"),
        _key(build_options={**k.build_options, "precision": "fp32"}),
    ]
    digests = {k.digest()} | {v.digest() for v in variants}
    assert len(digests) == len(variants) + 1
    # the environment id ignores what is built; the build id ignores where
    assert _key(tensorrt_version="11.0").build_id() == k.build_id()
    assert _key(policy_fingerprint="e" * 64).env_id() == k.env_id()
    assert _key(tensorrt_version="11.0").env_id() != k.env_id()


def test_key_is_stable_and_order_independent() -> None:
    a = _key(build_options={"x": 1, "y": [1, 2]})
    b = _key(build_options={"y": [1, 2], "x": 1})
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64 and int(a.digest(), 16) >= 0


# ------------------------------------------------------------------ round trip
def test_store_then_hit(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key, data = _key(), _payload()
    assert cache.lookup(key).status == "miss"
    path = cache.store(key, data)
    assert path.read_bytes() == data
    look = cache.lookup(key)
    assert look.hit and look.payload == data
    meta = json.loads(cache.meta_path(key).read_text())
    assert (
        meta["format"] == CACHE_FORMAT
        and meta["size"] == len(data)
        and meta["key"]["tensorrt_version"] == "10.3.0"
    )


def test_miss_reasons_name_what_changed(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.store(_key(), _payload())
    assert "no cached engine for this model" in cache.lookup(_key(model_sha256="c" * 64)).reason
    trt = cache.lookup(_key(tensorrt_version="11.4.0"))
    assert trt.status == "miss" and "TensorRT version changed '10.3.0' → '11.4.0'" in trt.reason
    gpu = cache.lookup(_key(gpu_name="NVIDIA A100", compute_capability="8.0"))
    assert "GPU changed" in gpu.reason and "compute capability changed '9.0' → '8.0'" in gpu.reason
    cuda = cache.lookup(_key(cuda_version="13.0"))
    assert "CUDA version changed" in cuda.reason
    pol = cache.lookup(_key(policy_fingerprint="0" * 64))
    assert "policy or build options changed" in pol.reason


# ------------------------------------------------------------------ corruption
def test_flipped_byte_is_detected(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    payload_path = cache.store(key, _payload())
    raw = bytearray(payload_path.read_bytes())
    raw[100] ^= 0xFF
    payload_path.write_bytes(bytes(raw))
    look = cache.lookup(key)
    assert look.status == "corrupt" and "SHA-256" in look.reason and look.payload is None


def test_truncated_payload_is_detected(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    payload_path = cache.store(key, _payload())
    payload_path.write_bytes(payload_path.read_bytes()[:1000])
    look = cache.lookup(key)
    assert look.status == "corrupt" and "truncated" in look.reason


def test_unreadable_or_missing_metadata(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    cache.store(key, _payload())
    meta_path = cache.meta_path(key)
    meta_path.write_text("{not json")
    look = cache.lookup(key)
    assert look.status == "corrupt" and "unreadable" in look.reason
    meta_path.unlink()  # payload without metadata = an interrupted write
    look = cache.lookup(key)
    assert look.status == "corrupt" and "interrupted" in look.reason


def test_payload_missing(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    cache.store(key, _payload()).unlink()
    assert cache.lookup(key).status == "corrupt"


def test_old_format_is_stale(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    cache.store(key, _payload())
    meta_path = cache.meta_path(key)
    meta = json.loads(meta_path.read_text())
    meta["format"] = CACHE_FORMAT - 1
    meta_path.write_text(json.dumps(meta))
    look = cache.lookup(key)
    assert look.status == "stale" and f"format {CACHE_FORMAT - 1}" in look.reason


def test_entry_for_other_key_is_a_mismatch(tmp_path: Path) -> None:
    # An entry copied into the wrong slot (or edited) must not be used.
    cache = EngineCache(tmp_path)
    key = _key()
    cache.store(key, _payload())
    meta_path = cache.meta_path(key)
    meta = json.loads(meta_path.read_text())
    meta["key"]["tensorrt_version"] = "9.9.9"
    meta_path.write_text(json.dumps(meta))
    look = cache.lookup(key)
    assert look.status == "mismatch" and "TensorRT version: cached '9.9.9', wanted '10.3.0'" in look.reason


def test_invalidate_then_rebuild(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    cache.store(key, _payload(seed=1))
    cache.invalidate(key)
    assert cache.lookup(key).status == "miss"
    cache.store(key, _payload(seed=2))
    assert cache.lookup(key).payload == _payload(seed=2)


# ------------------------------------------------------------------ atomic writes
def test_atomic_write_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "x.bin"
    atomic_write(target, b"old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]  # no temporary left behind


def test_concurrent_writers_leave_a_complete_entry(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    payloads = [_payload(200_000, seed=i) for i in range(6)]
    threads = [threading.Thread(target=cache.store, args=(key, p)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    look = cache.lookup(key)
    # the last committed metadata names its own payload: always a consistent hit
    assert look.hit and look.payload in payloads
    leftovers = [p for p in cache.meta_path(key).parent.iterdir() if p.suffix == ".tmp"]
    assert leftovers == []


# ------------------------------------------------------------------ timing cache
def test_timing_cache_round_trip_and_checks(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    key = _key()
    data, why = cache.load_timing(key)
    assert data is None and "no timing cache" in why
    cache.store_timing(key, b"T" * 777)
    data, _ = cache.load_timing(replace(key, model_sha256="d" * 64))  # shared across models
    assert data == b"T" * 777
    assert cache.load_timing(_key(tensorrt_version="11.0"))[0] is None
    path = cache.timing_paths(key)[0]
    path.write_bytes(b"T" * 776 + b"X")
    data, why = cache.load_timing(key)
    assert data is None and "corrupt" in why


def test_default_root_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XRT_CACHE_DIR", str(tmp_path))
    assert EngineCache().root == tmp_path / "tensorrt"


# ------------------------------------------------------------------ availability
def test_tensorrt_unavailable_message() -> None:
    av = registry.availability("tensorrt", refresh=True)
    if av.available:
        pytest.skip("TensorRT and a CUDA device are present here; the GPU tests cover it")
    assert av.install_hint == "pip install xpuruntime[tensorrt]"
    assert "TensorRT" in av.reason
    with pytest.raises(Exception) as info:
        registry.select_engine("tensorrt", "cuda", None)
    text = str(info.value)
    assert "tensorrt@cuda" in text and "pip install xpuruntime[tensorrt]" in text
    assert type(info.value).__name__ == "BackendUnavailableError"
