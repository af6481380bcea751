"""A model's configuration in the model repository (``config.json`` or ``config.yaml``).

Example (every field optional)::

    {
      "engine": "auto",                     # native, onnxruntime, openvino, tensorrt, qnn, auto
      "device": "cpu",                      # cpu, cuda[:N], npu, gpu, auto
      "kernel_policy": "kernel_policy.json",
      "exec_policy": "exec_policy.json",
      "max_batch_size": 8,                  # 0: no batch dimension (inputs served as declared)
      "dims": {"seq": 16},                  # values of symbolic dims other than the batch dim
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

The shape buckets of a model are its batch sizes: the preferred batch sizes plus
``max_batch_size`` (with batching), or the powers of two up to ``max_batch_size``
plus ``max_batch_size`` itself (without). A plan is built and run once for each bucket
when the model loads; a request or a batch is padded to the smallest bucket that
holds it, so no request ever waits for a compilation.
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
    "dynamic_batching",
    "versions",
    "model_file",
    "instances",
}
_BATCH_FIELDS = {"preferred_batch_sizes", "max_queue_delay_us", "max_queue_size"}


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
        mbs = _int(data.get("max_batch_size", 0), "max_batch_size", where, low=0)
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
            sizes = tuple(sorted({_int(p, "preferred_batch_sizes", where, low=1) for p in pref}))
            if sizes and sizes[-1] > mbs:
                raise ConfigError(
                    f"{where}: preferred batch size {sizes[-1]} exceeds max_batch_size {mbs}; "
                    "raise max_batch_size or drop the size"
                )
            batching = BatchingConfig(
                sizes,
                _int(db.get("max_queue_delay_us", 500), "max_queue_delay_us", where, low=0),
                _int(db.get("max_queue_size", 1024), "max_queue_size", where, low=1),
            )
        dims = data.get("dims", {}) or {}
        if not isinstance(dims, Mapping):
            raise ConfigError(f"{where}: dims must map a dimension name to an integer")
        dims = {str(k): _int(v, f"dims.{k}", where, low=1) for k, v in dims.items()}
        versions = data.get("versions")
        if versions is not None:
            if not isinstance(versions, list) or not versions:
                raise ConfigError(f"{where}: versions must be a non-empty list of integers")
            versions = tuple(sorted({_int(v, "versions", where, low=1) for v in versions}))
        return cls(
            name=str(data.get("name", default_name)),
            engine=_str(data.get("engine", "auto"), "engine", where),
            device=_str(data.get("device", "cpu"), "device", where),
            kernel_policy=_opt_str(data.get("kernel_policy"), "kernel_policy", where),
            exec_policy=_opt_str(data.get("exec_policy"), "exec_policy", where),
            max_batch_size=mbs,
            dims=dims,
            dynamic_batching=batching,
            versions=versions,
            model_file=_opt_str(data.get("model_file"), "model_file", where),
            instances=_int(data.get("instances", 1), "instances", where, low=1),
            given=frozenset(data),
            source=where,
        )

    @classmethod
    def load(cls, folder: Path) -> ModelConfig:
        """The config of the model in ``folder`` (defaults when it has no config file)."""
        for name in CONFIG_NAMES:
            path = folder / name
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                if name.endswith(".json"):
                    try:
                        data = json.loads(text)
                    except ValueError as exc:
                        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
                else:
                    try:
                        import yaml
                    except ImportError:
                        raise ConfigError(f"{path}: YAML configs need pyyaml (pip install pyyaml)") from None
                    try:
                        data = yaml.safe_load(text)
                    except yaml.YAMLError as exc:
                        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
                return cls.from_dict(data or {}, folder.name, str(path))
        return cls(name=folder.name)


def _int(value: Any, field: str, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{where}: {field} must be an integer >= {low}, got {value!r}")
    return int(value)


def _str(value: Any, field: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {field} must be a non-empty string, got {value!r}")
    return value


def _opt_str(value: Any, field: str, where: str) -> str | None:
    return None if value is None else _str(value, field, where)
