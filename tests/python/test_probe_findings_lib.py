"""Library-level findings of the outside probe of 2026-11-29 (issue 35): pointers that cannot
be addresses are typed errors (a negative or >64-bit int reached pybind11 as a TypeError)."""

from __future__ import annotations

import pytest
import xpuruntime as xrt
from xpuruntime import memory


@pytest.mark.parametrize("ptr", [-1, 1 << 64, 1 << 70])
@pytest.mark.parametrize("fn", [memory.free_pinned, lambda p: memory.raw_free(p, "cpu")])
def test_pointers_that_are_not_addresses_are_invalid_arguments(fn, ptr: int) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="is not an address"):
        fn(ptr)


def test_a_pointer_must_be_an_int() -> None:
    with pytest.raises(xrt.InvalidArgumentError, match="a pointer is an int address, got float"):
        memory.free_pinned(1.5)  # type: ignore[arg-type]


def test_pinned_blocks_still_round_trip() -> None:
    ptr = memory.allocate_pinned(4096)
    assert ptr > 0
    memory.free_pinned(ptr)
    with pytest.raises(xrt.InvalidArgumentError):
        memory.free_pinned(ptr)  # a double free is refused, not done
