"""``xpuruntime.serving``: the Open Inference Protocol (KServe v2) over InferenceSession.

    xpuruntime serve --model-repository models/          # REST :8000, gRPC :8001

    from xpuruntime.serving import InferenceServer
    with InferenceServer("models/", http_port=0, grpc_port=0) as server:
        print(server.http_port, server.grpc_port)

REST and gRPC, health, metadata, inference (JSON tensors and the binary tensor
extension), the model-repository extension, an explain endpoint, Prometheus
metrics, dynamic batching bound to shape buckets, and provenance parameters on every
response. Needs the ``serve`` extra: ``pip install xpuruntime[serve]``. See
docs/serving.md.
"""

from __future__ import annotations

from .config import BatchingConfig, ConfigError, ModelConfig
from .protocol import InferRequest, InferResponse, ServingError
from .repository import ModelRepository
from .server import InferenceServer

__all__ = [
    "BatchingConfig",
    "ConfigError",
    "InferRequest",
    "InferResponse",
    "InferenceServer",
    "ModelConfig",
    "ModelRepository",
    "ServingError",
]
