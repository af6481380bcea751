"""The model repository: one folder per model, numeric version subfolders, a config.

    models/
      classifier/
        config.json                 # optional: engine, device, batching, policy files, ...
        kernel_policy.json          # optional, named by the config
        1/model.onnx                # version 1 (or model.xrtplan, a saved plan)
        2/model.onnx
      tiny/
        model.onnx                  # no version folders: served as version 1

A model that fails to load is reported (index state ``UNAVAILABLE`` with the reason)
and does not stop the others.

Names are names, not paths: a model name is 1 to 128 letters, digits, ``_ . -`` not
starting with a dot (:func:`protocol.check_model_name`). Every lookup, load and unload
checks the name before anything else, so a request never reaches a path outside the
repository and the answer to an invalid name is the same whatever exists on the
host's disk; folders of the repository with other names are not served.

Thread safety: every method may be called from any thread; loads and unloads are
serialized, lookups never wait for a load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

from .config import MODEL_FILES, ConfigError, ModelConfig
from .metrics import ServerMetrics
from .model import ServedModel
from .protocol import ServingError, check_model_name, check_version, is_model_name, not_found, unavailable
from .scheduler import ModelScheduler

log = logging.getLogger("xpuruntime.serving")

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"


@dataclasses.dataclass
class _Entry:
    state: str
    reason: str = ""
    versions: dict[str, ModelScheduler] = dataclasses.field(default_factory=dict)
    default_version: str = ""


class ModelRepository:
    """Models of one repository folder, loaded, unloaded and looked up by name and version."""

    def __init__(
        self,
        root: str | Path,
        metrics: ServerMetrics | None = None,
        max_inflight: int = 256,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        self.root = Path(root)
        self.provenance = dict(provenance or {})
        if not self.root.is_dir():
            raise ConfigError(f"model repository {self.root} is not a folder")
        self.metrics = metrics or ServerMetrics()
        self.max_inflight = max_inflight
        self._entries: dict[str, _Entry] = {}
        self._load_lock = threading.Lock()

    # ------------------------------------------------------------------ discovery
    def model_names(self) -> list[str]:
        """Every model folder of the repository (loaded or not)."""
        return sorted(p.name for p in self.root.iterdir() if is_model_name(p.name) and p.is_dir())

    def load_all(self) -> None:
        """Load every model; failures are recorded, never raised."""
        for name in self.model_names():
            with contextlib.suppress(ServingError):  # recorded in the index with its reason
                self.load(name)

    # ------------------------------------------------------------------ load / unload
    def load(self, name: str) -> None:
        """(Re)load every version of model ``name``; ServingError with the reason on failure."""
        folder = self.root / check_model_name(name)
        if not folder.is_dir():
            raise not_found(f"model '{name}' is not in the repository")
        with self._load_lock:
            log.info("model %s: loading from %s", name, folder)
            t0 = time.perf_counter()
            try:
                entry = self._build(folder)
            except ServingError as exc:
                log.warning("model %s: UNAVAILABLE: %s", name, exc)
                msg = self._shown(str(exc))
                self._swap(name, _Entry(UNAVAILABLE, msg))
                raise ServingError(msg, exc.http_status, exc.grpc_code) from exc
            except Exception as exc:  # a model or policy the runtime refuses: typed, with its message
                log.warning("model %s: UNAVAILABLE: %s: %s", name, type(exc).__name__, exc)
                msg = self._shown(f"model '{name}' failed to load: {type(exc).__name__}: {exc}")
                self._swap(name, _Entry(UNAVAILABLE, msg))
                raise ServingError(msg, 400, "INVALID_ARGUMENT") from exc
            self._swap(name, entry)
            for v, sched in entry.versions.items():
                m = sched.model
                log.info(
                    "model %s version %s: READY in %.2f s (engine %s, device %s, batch buckets %s)",
                    name,
                    v,
                    time.perf_counter() - t0,
                    m.engine,
                    m.device,
                    list(m.buckets) or "none",
                )

    def _shown(self, message: str) -> str:
        """A message for clients: paths inside the repository relative to it (the host's
        folders stay in the server's log), C++ source locations dropped."""
        import re

        for root in {str(self.root.resolve()), str(self.root.absolute()), str(self.root)}:
            message = message.replace(root + "/", "").replace(root, "the model repository")
        return re.sub(r"\s*\[[^\[\]]*\.(?:cpp|cc|h|hpp|cu):\d+\]", "", message)

    def unload(self, name: str) -> None:
        """Stop serving ``name``: queued requests finish, new ones get UNAVAILABLE."""
        check_model_name(name)
        with self._load_lock:
            if name not in self._entries:
                raise not_found(f"model '{name}' is not loaded")
            self._swap(name, None)
            log.info("model %s: unloaded", name)

    def close(self) -> None:
        """Unload everything (queued requests finish first)."""
        with self._load_lock:
            for name in list(self._entries):
                self._swap(name, None)

    def _swap(self, name: str, entry: _Entry | None) -> None:
        old = self._entries.pop(name, None)
        if entry is not None:
            self._entries[name] = entry
        if old is not None:
            for s in old.versions.values():
                s.close(drain=True)

    def _build(self, folder: Path) -> _Entry:
        config = ModelConfig.load(folder)
        numeric = sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
        if config.versions is not None:
            absent = [v for v in config.versions if v not in numeric]
            if absent:
                raise ConfigError(
                    f"model '{folder.name}': version folder {absent[0]} named by the config is missing"
                )
            numeric = list(config.versions)
        places = [(str(v), folder / str(v)) for v in numeric] or [("1", folder)]
        versions: dict[str, ModelScheduler] = {}
        try:
            for version, place in places:
                path = self._model_file(config, place)
                model = ServedModel(config, version, path, folder)
                versions[version] = ModelScheduler(model, self.metrics, self.max_inflight, self.provenance)
        except BaseException:
            for s in versions.values():
                s.close(drain=False)
            raise
        return _Entry(READY, "", versions, places[-1][0])

    @staticmethod
    def _model_file(config: ModelConfig, place: Path) -> Path:
        names = (config.model_file,) if config.model_file else MODEL_FILES
        for n in names:
            if (place / n).is_file():
                return place / n
        raise ConfigError(f"model '{config.name}': no {' or '.join(names)} in {place}")

    # ------------------------------------------------------------------ lookups
    def get(self, name: str, version: str = "") -> ModelScheduler:
        """The scheduler of a ready model version (the newest when ``version`` is empty)."""
        entry = self._entries.get(name)
        if entry is None:
            check_model_name(name)
            check_version(version)
            # A folder of the repository (listed by the index) that is not loaded.
            if (self.root / name).is_dir():
                raise unavailable(f"model '{name}' is not loaded; load it with the repository load endpoint")
            raise not_found(
                f"model '{name}' is not in the repository; see the repository index for the models"
            )
        if entry.state != READY:
            raise unavailable(f"model '{name}' is not ready: {entry.reason}")
        v = version or entry.default_version
        sched = entry.versions.get(v)
        if sched is None:
            check_version(version)
            raise not_found(f"model '{name}' has no version {v}; versions: {', '.join(entry.versions)}")
        return sched

    def is_ready(self, name: str, version: str = "") -> bool:
        """Whether the model version is loaded and serving."""
        try:
            self.get(name, version)
        except ServingError:
            return False
        return True

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """The repository index: every model folder with its state and, when not ready, why."""
        out: list[dict[str, Any]] = []
        for name in self.model_names():
            entry = self._entries.get(name)
            if entry is None:
                if not ready_only:
                    out.append({"name": name, "state": UNAVAILABLE, "reason": "unloaded"})
                continue
            if entry.state != READY:
                if not ready_only:
                    out.append({"name": name, "state": entry.state, "reason": entry.reason})
                continue
            for v in entry.versions:
                out.append({"name": name, "version": v, "state": READY, "reason": ""})
        return out

    def schedulers(self) -> list[ModelScheduler]:
        """Every loaded model version's scheduler."""
        return [s for e in list(self._entries.values()) for s in e.versions.values()]

    def devices(self) -> list[str]:
        """Devices the loaded models run on."""
        return sorted({s.model.device for s in self.schedulers()})
