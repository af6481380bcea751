"""Scale-out on Ray Serve: the same model server, one per replica, behind Ray's HTTP proxy.

    from ray import serve
    from xpuruntime.serving.ray_serve import build_app

    serve.run(build_app("models/", num_replicas=2, num_gpus=1), route_prefix="/")
    # clients speak the Open Inference Protocol's REST API to Ray's proxy (:8000)

Each replica runs an :class:`~xpuruntime.serving.InferenceServer` without sockets of
its own: the model repository, the dynamic batcher and the REST app (mounted as the
deployment's ASGI ingress) are the ones ``xpuruntime serve`` uses. Ray's own
``@serve.batch`` is not used: our batcher pads to the shape buckets whose plans exist,
which Ray's cannot know. Ray spreads requests over replicas (its power-of-two-choices
router); every response names its replica in the ``server_instance`` parameter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import serve

from .rest import build_app as _build_rest_app
from .server import InferenceServer


@serve.deployment(name="xpuruntime", max_ongoing_requests=256)
@serve.ingress()
class XpuRuntimeDeployment:
    """One replica: a socket-less InferenceServer whose REST app is the deployment's ingress."""

    def __init__(self, model_repository: str, server_options: dict[str, Any] | None = None) -> None:
        ctx = serve.get_replica_context()
        instance = f"{ctx.deployment}#{ctx.replica_id.unique_id}"
        self.server = InferenceServer(
            model_repository, http_port=None, grpc_port=None, instance=instance, **(server_options or {})
        ).start()

    def __serve_build_asgi_app__(self) -> Any:
        return _build_rest_app(self.server)

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.stop(grace=5)


def build_app(
    model_repository: str | Path,
    *,
    num_replicas: int = 1,
    num_gpus: float = 0,
    num_cpus: float = 1,
    server_options: dict[str, Any] | None = None,
) -> Any:
    """A bound Ray Serve application serving ``model_repository`` on ``num_replicas`` replicas.

    ``num_gpus``/``num_cpus`` are each replica's Ray resource request (a replica with
    ``num_gpus=1`` sees one GPU; set the models' ``device`` to ``cuda``). ``server_options``
    go to :class:`~xpuruntime.serving.InferenceServer` (``max_request_bytes``, ...).
    """
    deployment = XpuRuntimeDeployment.options(
        num_replicas=num_replicas,
        ray_actor_options={"num_gpus": num_gpus, "num_cpus": num_cpus},
    )
    return deployment.bind(str(Path(model_repository).resolve()), server_options)
