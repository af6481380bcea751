"""Bit-exact NumPy mirror of the attention kernels' dropout mask.

The CUDA kernels (``cpp/src/backends/cuda/kernels/flash_v2/philox.cuh``) draw the
dropout mask from Philox4x32-10 keyed by the 64-bit seed, with the counter
``(key column // 8, query row, batch * heads + head, offset)``; one call gives the
eight 16-bit uniforms of eight consecutive key columns. An element is kept when
its uniform is ``>= floor(p * 65536)``. This module computes the same mask on the
CPU, so the CPU reference path of ``fused_attention`` and the GPU tests reproduce
the kernels' dropout exactly.

This file imports only NumPy (the GPU harness loads it by path).
"""

from __future__ import annotations

import numpy as np

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint32(0x9E3779B9)
_W1 = np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def philox4x32_10(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int, k1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32 with 10 rounds on broadcastable uint32 counter arrays."""
    x0, x1, x2, x3 = (np.asarray(c, dtype=np.uint32) for c in (c0, c1, c2, c3))
    x0, x1, x2, x3 = np.broadcast_arrays(x0, x1, x2, x3)
    key0, key1 = np.uint32(k0 & 0xFFFFFFFF), np.uint32(k1 & 0xFFFFFFFF)
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = _M0 * x0.astype(np.uint64)
            p1 = _M1 * x2.astype(np.uint64)
            hi0, lo0 = (p0 >> _SHIFT).astype(np.uint32), (p0 & _LO).astype(np.uint32)
            hi1, lo1 = (p1 >> _SHIFT).astype(np.uint32), (p1 & _LO).astype(np.uint32)
            x0, x1, x2, x3 = hi1 ^ x1 ^ key0, lo1, hi0 ^ x3 ^ key1, lo0
            key0 = np.uint32(key0 + _W0)
            key1 = np.uint32(key1 + _W1)
    return x0, x1, x2, x3


def dropout_keep_mask(
    batch: int,
    heads: int,
    seqlen_q: int,
    seqlen_k: int,
    p: float,
    seed: int,
    offset: int,
) -> np.ndarray:
    """Boolean keep mask ``[batch, heads, seqlen_q, seqlen_k]`` of the kernels' dropout."""
    seed &= (1 << 64) - 1
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    threshold = int(np.float32(p) * np.float32(65536.0))
    n8 = (seqlen_k + 7) // 8
    bh = np.arange(batch * heads, dtype=np.uint32).reshape(-1, 1, 1)
    rows = np.arange(seqlen_q, dtype=np.uint32).reshape(1, -1, 1)
    col8 = np.arange(n8, dtype=np.uint32).reshape(1, 1, -1)
    off = np.uint32(offset & 0xFFFFFFFF)
    words = philox4x32_10(col8, rows, bh, off, k0, k1)  # each [BH, Sq, n8]
    stacked = np.stack(words, axis=-1)  # [BH, Sq, n8, 4]
    lo = (stacked & np.uint32(0xFFFF)).astype(np.uint32)
    hi = (stacked >> np.uint32(16)).astype(np.uint32)
    u16 = np.stack([lo, hi], axis=-1).reshape(batch * heads, seqlen_q, n8 * 8)[..., :seqlen_k]
    return (u16 >= threshold).reshape(batch, heads, seqlen_q, seqlen_k)
