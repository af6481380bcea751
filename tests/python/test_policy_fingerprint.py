"""Fingerprints: our C++ SHA-256 against hashlib, and equality across processes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys

import pytest
import xpuruntime as xrt
from xpuruntime import ExecutionPolicy, KernelPolicy

_sha = xrt._core.policy_util.sha256_hex


@pytest.mark.parametrize("n", [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4097])
def test_sha256_matches_hashlib(n):
    rng = random.Random(n)
    data = bytes(rng.randrange(256) for _ in range(n))
    assert _sha(data) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("portable", [False, True], ids=["sha_extensions_if_present", "portable"])
@pytest.mark.parametrize("n", [64 * 1024 - 1, 3 * 1024 * 1024 + 17])
def test_sha256_of_long_messages_matches_hashlib_on_both_paths(monkeypatch, portable, n):
    """Plan files hash their constants (hundreds of MB) with the SHA extensions where the
    CPU has them; XRT_SHA256_PORTABLE forces the portable loop. Both give hashlib's."""
    if portable:
        monkeypatch.setenv("XRT_SHA256_PORTABLE", "1")
    data = random.Random(n).randbytes(n)
    assert _sha(data) == hashlib.sha256(data).hexdigest()


def test_fingerprint_is_sha256_of_canonical_json():
    p = KernelPolicy(matmul=["cublasLt", "cublas"], attention="flash_v2", mode="require")
    canonical = p.canonical_json()
    assert p.fingerprint == hashlib.sha256(canonical.encode()).hexdigest()
    # The canonical form is sorted-keys, no-whitespace JSON: Python writes the same text.
    assert json.dumps(json.loads(canonical), sort_keys=True, separators=(",", ":")) == canonical
    e = ExecutionPolicy(target="npu", precision="int8", static_shape=True, allow_fallback="cpu")
    assert e.fingerprint == hashlib.sha256(e.canonical_json().encode()).hexdigest()


_CHILD = r"""
import json, sys
import xpuruntime as xrt
order = json.loads(sys.argv[1])
prefs = {"matmul": "cublasLt", "attention": ["flash_v2", "cudnn"], "conv": "cudnn", "layernorm": "fused"}
p = xrt.KernelPolicy(mode="require")
for op in order:
    p.set(op, prefs[op])
e = xrt.ExecutionPolicy(target="npu", precision="int8", static_shape=True, allow_fallback="cuda",
                        strict=["pinned_only", "no_cpu_fallback"] if order[0] == "layernorm" else ["no_cpu_fallback", "pinned_only"])
print(json.dumps({"kernel": p.fingerprint, "exec": e.fingerprint}))
"""


def _child_fingerprints(order: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = str(random.randrange(1, 2**31))  # different dict/set hashing per process
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(order)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fingerprints_equal_across_processes():
    a = _child_fingerprints(["matmul", "attention", "conv", "layernorm"])
    b = _child_fingerprints(["layernorm", "conv", "attention", "matmul"])
    assert a == b
    here = KernelPolicy(
        matmul="cublasLt", attention=["flash_v2", "cudnn"], conv="cudnn", layernorm="fused", mode="require"
    )
    assert a["kernel"] == here.fingerprint
    e = ExecutionPolicy(
        target="npu",
        precision="int8",
        static_shape=True,
        allow_fallback="cuda",
        strict=["pinned_only", "no_cpu_fallback"],
    )
    assert a["exec"] == e.fingerprint


def test_known_fingerprint_value():
    # A fixed policy has a fixed fingerprint on every machine and in every version that
    # keeps schema 1 (a change here means every saved fingerprint changes: bump the schema).
    p = KernelPolicy(matmul="cublasLt")
    assert p.canonical_json() == (
        '{"auto_strategy":"first_supported","kind":"kernel_policy","mode":"prefer","pins":{},'
        '"preferences":{"matmul":"cublasLt"},"schema_version":1}'
    )
    assert p.fingerprint == hashlib.sha256(p.canonical_json().encode()).hexdigest()
