"""Error figures of one output against a reference, shared by ``compare`` and bisection."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["diff_metrics", "within"]


def diff_metrics(out: Any, ref: Any) -> dict[str, float]:
    """max_abs, max_rel and cosine of ``out`` against ``ref`` (computed in float64).

    max_rel is elementwise |out−ref| / max(|ref|, 1e-6·max|ref|), so elements where
    the reference is (near) zero do not turn the ratio into noise.
    """
    a = np.asarray(out, dtype=np.float64).ravel()
    b = np.asarray(ref, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {np.shape(out)} vs reference {np.shape(ref)}")
    if a.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0}
    diff = np.abs(a - b)
    scale = np.abs(b).max()
    floor = max(1e-6 * scale, np.finfo(np.float64).tiny)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cosine = float(a @ b / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    return {
        "max_abs": float(diff.max()),
        "max_rel": float((diff / np.maximum(np.abs(b), floor)).max()),
        "cosine": cosine,
    }


def within(out: Any, ref: Any, atol: float, rtol: float) -> bool:
    """``|out - ref| <= atol + rtol * |ref|`` everywhere (float64; shapes, NaN and Inf
    positions must agree; integer and bool outputs must be equal)."""
    a, b = np.asarray(out), np.asarray(ref)
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True))
