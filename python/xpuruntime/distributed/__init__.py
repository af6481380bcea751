"""xpuruntime.distributed: the NCCL helper (DESIGN.md §9, issue 21).

Collectives on ``xpuruntime.Tensor``s and any CUDA tensor with ``__dlpack__`` (torch),
on the caller's stream, usable inside CUDA-graph capture, with async ``Work`` handles
that turn a dead peer or a timeout into a typed error. It runs alongside
torch.distributed, not instead of it: a communicator can be created from a torch
process group. Every collective is recorded in the decision log (and the profiler).
See docs/distributed.md.

Example::

    import xpuruntime.distributed as xd
    comm = xd.Communicator.from_torch_process_group()   # after dist.init_process_group
    comm.all_reduce(t, op="sum")                        # on torch's current stream
    work = comm.all_gather(out, t, async_op=True)
    work.wait(timeout=60)
"""

from __future__ import annotations

from ._collectives import group
from ._lib import CollectiveTimeoutError, CommunicatorAbortedError, DistributedError
from ._tensors import NCCL_DTYPES, NCCL_OPS
from .communicator import Communicator, is_available, nccl_version, unavailable_reason
from .unique_id import UniqueId
from .work import Work

__all__ = [
    "NCCL_DTYPES",
    "NCCL_OPS",
    "CollectiveTimeoutError",
    "Communicator",
    "CommunicatorAbortedError",
    "DistributedError",
    "UniqueId",
    "Work",
    "group",
    "is_available",
    "nccl_version",
    "unavailable_reason",
]
