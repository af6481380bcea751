"""A model's configuration in the model repository (``config.json`` or ``config.yaml``).

Example (every field optional)::

    {
      "engine": "auto",                     # native, onnxruntime, openvino, tensorrt, qnn, auto
      "device": "cpu",                      # cpu, cuda[:N], npu, gpu, auto
      "kernel_policy": "kernel_policy.json",
      "exec_policy": "exec_policy.json",
      "max_batch_size": 8,                  # 0: no batch dimension (inputs served as declared)
      "dims": {"seq": 16},                  # values of symbolic dims other than the batch dim
      "pad": {"seq": [16, 32, 64, 128]},    # or: a symbolic dim served padded to these sizes
      "dynamic_batching": {                 # omitted or null: every request runs on its own
        "preferred_batch_sizes": [4, 8],
        "max_queue_delay_us": 500,
        "max_queue_size": 1024
      },
      "instances": 1,                       # batcher threads taking batches from the queue
      "versions": [1, 2],                   # omitted: every numeric version folder
      "model_file": "model.onnx"            # omitted: model.onnx, then model.xrtplan
    }

Without a config file, or without ``max_batch_size`` in it, the configuration is
auto-completed from the model as Triton does: when every input's and output's first
dimension is symbolic, it is the batch dimension and ``max_batch_size`` is
``DEFAULT_MAX_BATCH_SIZE`` (4). Symbolic dimensions other than the batch dimension
that ``dims`` does not fix are variable (-1 in the metadata and the configuration):
each shape a request brings gets its own plan, compiled on first use and cached with
a bound (the native engine keeps 8 per model), so no padding changes what the model
computes. The ``GET /v2/models/{m}/config`` route reports the completed configuration.

Padding, only where the model allows it: ``pad`` names symbolic dimensions whose
inputs may be padded with zeros without changing the other positions' results (a
BERT's ``seq``, where the padded positions' ``attention_mask`` is 0), each with its
shape buckets. A request's size along such a dimension is padded to the smallest
bucket that holds it, every output axis of that name is cut back to the request's
size, and a plan is built at load for every batch bucket and padded size, so nothing
compiles on a request's path and requests of different lengths batch together
(dynamic batching allows padded dimensions, not variable ones). The server cannot
tell whether zeros are neutral for a model: a dimension is padded only when the
config says so.

The shape buckets of a model are its batch sizes: the preferred batch sizes plus
``max_batch_size`` (with batching), or the powers of two up to ``max_batch_size``
plus ``max_batch_size`` itself (without). A plan is built and run once for each bucket
when the model loads; a request or a batch is padded to the smallest bucket that
holds it, so no request ever waits for a compilation.

Every number has a bound (``LIMITS``): a config asking for more instances, batch sizes,
buckets or queue than a server can hold is refused with a ConfigError at load, before
anything is started. YAML configs are read without aliases (anchors and ``*refs``), so
a small file cannot expand into an exponentially large document.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .protocol import ServingError

CONFIG_NAMES = ("config.json", "config.yaml", "config.yml")
DEFAULT_MAX_BATCH_SIZE = 4  # Triton's default-max-batch-size for auto-completed configs
MODEL_FILES = ("model.onnx", "model.xrtplan")

_FIELDS = {
    "name",
    "engine",
    "device",
    "kernel_policy",
    "exec_policy",
    "max_batch_size",
    "dims",
    "pad",
    "dynamic_batching",
    "versions",
    "model_file",
    "instances",
}
_BATCH_FIELDS = {"preferred_batch_sizes", "max_queue_delay_us", "max_queue_size"}

#: Upper bounds of the config's numbers (each refused above, with the bound in the message).
LIMITS = {
    "instances": 64,  # batcher threads per model version
    "max_batch_size": 65536,  # buckets: powers of two up to it, 17 at most
    "preferred_batch_sizes": 64,  # how many (each a bucket, each a plan built at load)
    "max_queue_delay_us": 60_000_000,  # one minute
    "max_queue_size": 1_000_000,
    "dims": 2**31 - 1,
    "pad_sizes": 16,  # padded sizes per dimension (each a plan per batch bucket, built at load)
    "pad_dims": 4,  # padded dimensions
    "versions": 2**31 - 1,
    "config_bytes": 1 << 20,  # config file size
}


class ConfigError(ServingError):
    """A model configuration that cannot be used (reported by the repository index)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 400, "INVALID_ARGUMENT")


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    """Dynamic batching: which batch sizes to form, how long to wait, how much to queue."""

    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 500
    max_queue_size: int = 1024


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """How one model of the repository is served (see the module docstring)."""

    name: str
    engine: str = "auto"
    device: str = "cpu"
    kernel_policy: str | None = None
    exec_policy: str | None = None
    max_batch_size: int = 0
    dims: Mapping[str, int] = dataclasses.field(default_factory=dict)
    pad: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    dynamic_batching: BatchingConfig | None = None
    versions: tuple[int, ...] | None = None
    model_file: str | None = None
    instances: int = 1
    # The fields the config file gave (the rest may be auto-completed from the model).
    given: frozenset[str] = frozenset()
    source: str = ""  # the config file, or "" when the model has none

    def buckets(self) -> tuple[int, ...]:
        """The batch sizes a plan is built for at load (empty without a batch dimension)."""
        if self.max_batch_size <= 0:
            return ()
        if self.dynamic_batching is not None and self.dynamic_batching.preferred_batch_sizes:
            sizes = set(self.dynamic_batching.preferred_batch_sizes)
        else:
            sizes = {1 << k for k in range(self.max_batch_size.bit_length()) if 1 << k <= self.max_batch_size}
        sizes.add(self.max_batch_size)
        return tuple(sorted(sizes))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default_name: str, where: str) -> ModelConfig:
        """Validate ``data`` (a parsed config file); ConfigError names the field and the fix."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: the config must be an object, got {type(data).__name__}")
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown field {unknown[0]!r}; known fields: {', '.join(sorted(_FIELDS))}"
            )
        mbs = _int(
            data.get("max_batch_size", 0), "max_batch_size", where, low=0, high=LIMITS["max_batch_size"]
        )
        if not isinstance(data.get("name", default_name), str):
            raise ConfigError(f"{where}: name must be a string")
        batching = None
        if data.get("dynamic_batching") is not None:
            db = data["dynamic_batching"]
            if not isinstance(db, Mapping):
                raise ConfigError(f"{where}: dynamic_batching must be an object or null")
            bad = sorted(set(db) - _BATCH_FIELDS)
            if bad:
                raise ConfigError(
                    f"{where}: unknown dynamic_batching field {bad[0]!r}; known: {', '.join(sorted(_BATCH_FIELDS))}"
                )
            if mbs <= 0:
                raise ConfigError(
                    f"{where}: dynamic_batching needs max_batch_size >= 1 (the batch dimension)"
                )
            pref = db.get("preferred_batch_sizes", [])
            if not isinstance(pref, list):
                raise ConfigError(f"{where}: preferred_batch_sizes must be a list of integers")
            if len(pref) > LIMITS["preferred_batch_sizes"]:
                raise ConfigError(
                    f"{where}: {len(pref)} preferred_batch_sizes; at most {LIMITS['preferred_batch_sizes']} "
                    "(each is a plan built at load)"
                )
            sizes = tuple(sorted({_int(p, "preferred_batch_sizes", where, low=1) for p in pref}))
            if sizes and sizes[-1] > mbs:
                raise ConfigError(
                    f"{where}: preferred batch size {sizes[-1]} exceeds max_batch_size {mbs}; "
                    "raise max_batch_size or drop the size"
                )
            batching = BatchingConfig(
                sizes,
                _int(
                    db.get("max_queue_delay_us", 500),
                    "max_queue_delay_us",
                    where,
                    low=0,
                    high=LIMITS["max_queue_delay_us"],
                ),
                _int(
                    db.get("max_queue_size", 1024),
                    "max_queue_size",
                    where,
                    low=1,
                    high=LIMITS["max_queue_size"],
                ),
            )
        dims = data.get("dims", {}) or {}
        if not isinstance(dims, Mapping):
            raise ConfigError(f"{where}: dims must map a dimension name to an integer")
        if len(dims) > 64:
            raise ConfigError(f"{where}: dims names {len(dims)} dimensions; at most 64")
        dims = {str(k): _int(v, f"dims.{k}", where, low=1, high=LIMITS["dims"]) for k, v in dims.items()}
        pad = _pad(data.get("pad"), dims, where)
        versions = data.get("versions")
        if versions is not None:
            if not isinstance(versions, list) or not versions or len(versions) > 64:
                raise ConfigError(f"{where}: versions must be a non-empty list of integers (at most 64)")
            versions = tuple(
                sorted({_int(v, "versions", where, low=1, high=LIMITS["versions"]) for v in versions})
            )
        return cls(
            name=str(data.get("name", default_name)),
            engine=_str(data.get("engine", "auto"), "engine", where),
            device=_str(data.get("device", "cpu"), "device", where),
            kernel_policy=_file(data.get("kernel_policy"), "kernel_policy", where),
            exec_policy=_file(data.get("exec_policy"), "exec_policy", where),
            max_batch_size=mbs,
            dims=dims,
            pad=pad,
            dynamic_batching=batching,
            versions=versions,
            model_file=_file(data.get("model_file"), "model_file", where),
            instances=_int(data.get("instances", 1), "instances", where, low=1, high=LIMITS["instances"]),
            given=frozenset(data),
            source=where,
        )

    @classmethod
    def load(cls, folder: Path) -> ModelConfig:
        """The config of the model in ``folder`` (defaults when it has no config file).

        Messages name the file relative to the repository (``model/config.yaml``): they
        reach clients through the repository index and the load endpoint.
        """
        for name in CONFIG_NAMES:
            path = folder / name
            if path.is_file():
                shown = f"{folder.name}/{name}"
                if path.stat().st_size > LIMITS["config_bytes"]:
                    raise ConfigError(f"{shown}: {path.stat().st_size} bytes; a config holds at most 1 MiB")
                text = path.read_text(encoding="utf-8", errors="replace")
                if name.endswith(".json"):
                    try:
                        data = json.loads(text)
                    except ValueError as exc:
                        raise ConfigError(f"{shown}: not valid JSON ({exc})") from None
                    except RecursionError:
                        raise ConfigError(f"{shown}: nests too deeply to be a config") from None
                else:
                    from ..policies._io import YamlRefused, load_yaml

                    try:
                        data = load_yaml(text)
                    except YamlRefused as exc:
                        raise ConfigError(f"{shown}: {exc}") from None
                return cls.from_dict(data or {}, folder.name, shown)
        return cls(name=folder.name)


def _int(value: Any, field: str, where: str, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        want = f">= {low}" if high is None else f">= {low} and <= {high}"
        raise ConfigError(f"{where}: {field} must be an integer {want}, got {value!r:.64}")
    return int(value)


def _pad(value: Any, dims: Mapping[str, int], where: str) -> dict[str, tuple[int, ...]]:
    """The ``pad`` field: dimension name -> ascending padded sizes (bounded in count and size)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f'{where}: pad must map a dimension name to a list of sizes, e.g. {{"seq": [16, 32]}}'
        )
    if len(value) > LIMITS["pad_dims"]:
        raise ConfigError(f"{where}: pad names {len(value)} dimensions; at most {LIMITS['pad_dims']}")
    out: dict[str, tuple[int, ...]] = {}
    for name, sizes in value.items():
        if str(name) in dims:
            raise ConfigError(
                f"{where}: dimension {str(name)!r:.64} is both fixed (dims) and padded (pad); keep one"
            )
        if not isinstance(sizes, list) or not sizes or len(sizes) > LIMITS["pad_sizes"]:
            raise ConfigError(
                f"{where}: pad.{name!s:.64} must be a list of 1 to {LIMITS['pad_sizes']} sizes, "
                f"got {sizes!r:.64}"
            )
        out[str(name)] = tuple(
            sorted({_int(v, f"pad.{name}", where, low=1, high=LIMITS["dims"]) for v in sizes})
        )
    return out


def _str(value: Any, field: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {field} must be a non-empty string, got {value!r}")
    return value


def _opt_str(value: Any, field: str, where: str) -> str | None:
    return None if value is None else _str(value, field, where)


def _file(value: Any, field: str, where: str) -> str | None:
    """A file the config names: a relative path inside the model's folder."""
    name = _opt_str(value, field, where)
    if name is not None:
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ":" in name or ".." in parts or "\0" in name:
            raise ConfigError(
                f"{where}: {field} {name!r:.80} must name a file inside the model's folder "
                "(a relative path without '..')"
            )
    return name
