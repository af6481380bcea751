"""Mixed precision tied to the kernel policy (seed 002 §4.2)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .policy import set_precision_hint

__all__ = ["autocast"]

_HINTS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


@contextmanager
def autocast(
    dtype: torch.dtype = torch.float16,
    enabled: bool = True,
    cache_enabled: bool = True,
    device_type: str | None = None,
) -> Iterator[None]:
    """Mixed-precision context: torch's autocast plus the policy's precision hint.

    Inside the block torch autocasts eligible ops to ``dtype`` and the kernel
    policy's precision hint is ``"fp16"``/``"bf16"``: routing decisions record it
    and it is part of their cache key, so the same case under another precision is
    decided (and recorded) on its own. The previous hint is restored on exit.

    Args:
        dtype: ``torch.float16`` or ``torch.bfloat16``.
        enabled: False makes the block a no-op.
        cache_enabled: torch autocast's weight-cast cache.
        device_type: ``"cuda"`` or ``"cpu"``; default CUDA when available.

    Example::

        with xrt_torch.autocast(dtype=torch.bfloat16):
            loss = criterion(model(x), t)
        loss.backward()
    """
    if not enabled:
        yield
        return
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"autocast dtype must be torch.float16 or torch.bfloat16, got {dtype}")
    device = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    previous = set_precision_hint(_HINTS[dtype])
    try:
        with torch.autocast(device_type=device, dtype=dtype, cache_enabled=cache_enabled):
            yield
    finally:
        set_precision_hint(previous)
