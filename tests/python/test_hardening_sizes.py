"""Issue 19 §3: size arithmetic never wraps. ``raw_alloc(2**64-1)`` and
``allocate_pinned(2**64-1)`` returned a valid pointer to a tiny block (the size class
rounded up past 2**64 to 0); now every size that cannot be served is
``OutOfMemoryError`` and every size that is not a byte count ``InvalidArgumentError``."""

from __future__ import annotations

import pytest
import xpuruntime as xrt

mem = xrt._core.memory
OOM = xrt._core.OutOfMemoryError
Invalid = xrt._core.InvalidArgumentError


@pytest.mark.parametrize("nbytes", [2**64 - 1, 2**64 - 4096, 2**63, 2**62 + 1, 2**64, 2**100])
def test_allocations_that_would_wrap_are_out_of_memory(nbytes: int) -> None:
    before = mem.stats("cpu")
    with pytest.raises(OOM):
        mem.raw_alloc(nbytes)
    with pytest.raises(OOM):
        mem.allocate_pinned(nbytes)
    after = mem.stats("cpu")
    assert after.reserved_bytes == before.reserved_bytes
    # and the allocator still serves ordinary requests
    p = mem.raw_alloc(1000)
    assert p
    mem.raw_free(p)


@pytest.mark.parametrize("bad", [-1, -(2**70), "100", 1.5, None, True])
def test_sizes_that_are_not_byte_counts_are_invalid_arguments(bad) -> None:
    with pytest.raises(Invalid):
        mem.raw_alloc(bad)
    with pytest.raises(Invalid):
        mem.allocate_pinned(bad)
    with pytest.raises(Invalid):
        mem.round_size_class(bad)
    with pytest.raises(Invalid):
        mem.set_memory_limit("cpu", bad)


def test_size_classes_near_the_cap_do_not_wrap() -> None:
    top = 2**62
    assert mem.round_size_class(top) >= top
    with pytest.raises(OOM):
        mem.round_size_class(top + 1)
    assert mem.round_size_class(0) == 512
