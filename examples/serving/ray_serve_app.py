"""Serve a model repository on Ray Serve with 2 replicas (one GPU each when available).

    pip install "xpuruntime[serve]" "ray[serve]"
    python examples/serving/ray_serve_app.py examples/serving/model_repository
    curl localhost:8000/v2/models/mlp            # Ray's proxy speaks the protocol's REST API

Each replica runs xpuruntime's own server (repository, dynamic batching, provenance);
Ray routes requests across replicas. See docs/serving.md.
"""

from __future__ import annotations

import argparse
import time

import ray
from ray import serve
from xpuruntime.serving.ray_serve import build_app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_repository")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--gpus-per-replica", type=float, default=0)
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args()
    ray.init()
    serve.start(http_options={"host": "0.0.0.0", "port": args.port})
    serve.run(
        build_app(args.model_repository, num_replicas=args.replicas, num_gpus=args.gpus_per_replica),
        name="xpuruntime",
        route_prefix="/",
    )
    print(f"serving {args.model_repository} on :{args.port} with {args.replicas} replicas; Ctrl-C stops")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


if __name__ == "__main__":
    main()
