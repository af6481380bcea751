"""Moved: the TensorRT engine cache is :mod:`xpuruntime.cache.tensorrt`, under the one
artifact cache root. This module re-exports it for existing imports."""

from ..cache.tensorrt import (  # noqa: F401
    CACHE_FORMAT,
    BuildKey,
    CacheLookup,
    EngineCache,
    atomic_write,
    default_root,
)
