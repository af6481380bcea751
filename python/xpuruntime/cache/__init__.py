"""One content-addressed cache for every built artifact (DESIGN.md §5).

:mod:`.store` holds the entries (keyed by model bytes, policy fingerprints, device and
library versions; atomic, process-safe writes; ``ls``/``why``/``verify``/``prune``);
:mod:`.artifacts` builds through it (native plans, ONNX Runtime optimized models,
OpenVINO compiled blobs) and records every hit or miss, with its reason, as a Decision;
:mod:`.tensorrt` is the TensorRT engine and timing cache under the same root.
"""

from .artifacts import (
    KINDS,
    CachedBuild,
    artifact_key,
    native_plan,
    onnxruntime_model,
    openvino_blob,
    pin_set,
)
from .store import CACHE_FORMAT, ArtifactCache, ArtifactKey, CacheEntry, CacheLookup, default_root

__all__ = [
    "CACHE_FORMAT",
    "KINDS",
    "ArtifactCache",
    "ArtifactKey",
    "CacheEntry",
    "CacheLookup",
    "CachedBuild",
    "artifact_key",
    "default_root",
    "native_plan",
    "onnxruntime_model",
    "openvino_blob",
    "pin_set",
]
