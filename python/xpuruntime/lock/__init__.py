"""Lock files: a session's every decision, replayed exactly (DESIGN.md §3).

    sess = xrt.InferenceSession("model.onnx", device="cpu")
    sess.run(feeds)                       # compile the input shapes to lock
    sess.lock("model.lock.json")          # engine, device, libraries, policies, per-node kernels

    locked = xrt.InferenceSession("model.onnx", lock="model.lock.json", frozen=True)

A locked session takes its engine, device and every kernel and algorithm from the
lock and refuses to decide differently: a changed model, policy, device, library
version or node choice raises :class:`LockViolationError`, whose ``.diff`` names each
field. ``frozen=True`` also refuses input shapes the lock does not cover (naming the
bucket). See :mod:`.lockfile` for the format.
"""

from .errors import LockViolationError, lock_violation
from .guard import LockGuard, capture, policy_record
from .lockfile import FORMAT, SCHEMA_VERSION, LockFile, bucket_id

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "LockFile",
    "LockGuard",
    "LockViolationError",
    "bucket_id",
    "capture",
    "lock_violation",
    "policy_record",
]
