"""One served model version: its sessions, its shape buckets, validation and execution.

A :class:`ServedModel` owns one :class:`xpuruntime.InferenceSession` per shape bucket
(native engine: each compiled for its bucket's shapes) or one session warmed at every
bucket (engines that take any shape). Loading runs every bucket once, so a plan exists
for every shape a request can be run at and nothing compiles or tunes on a request's
path. Requests are validated against the model's inputs before they are queued.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .config import DEFAULT_MAX_BATCH_SIZE, ConfigError, ModelConfig
from .protocol import InferRequest, datatype_of, invalid

log = logging.getLogger("xpuruntime.serving")

PLATFORM = "xpuruntime"
WARM_RUNS = 5  # timed warm runs per bucket at load (see ServedModel._warm)
WARM_BUDGET_S = 0.05  # ... fewer when the runs take longer than this together
PADDED = -2  # in ServedModel._fixed: a dimension served padded to the config's sizes (``pad``)


class ServedModel:
    """A loaded model version, ready to run batches of validated requests.

    Thread safety: :meth:`run_batch` may be called from several threads at once
    (``InferenceSession.run`` is thread-safe); the rest is read-only after load.
    """

    def __init__(self, config: ModelConfig, version: str, model_path: Path, folder: Path) -> None:
        import xpuruntime as xrt
        from xpuruntime.policies import ExecutionPolicy, KernelPolicy

        self.name = config.name
        self.version = version
        self.path = model_path
        kp = KernelPolicy.load(folder / config.kernel_policy) if config.kernel_policy else None
        ep = ExecutionPolicy.load(folder / config.exec_policy) if config.exec_policy else None
        kfp = (kp or KernelPolicy()).fingerprint
        efp = (ep or ExecutionPolicy()).fingerprint
        # One fingerprint for the pair, so a client compares a single string.
        self.policy_fingerprint = hashlib.sha256(f"{kfp}:{efp}".encode()).hexdigest()

        def session(**options: Any) -> Any:
            return xrt.InferenceSession(
                str(model_path),
                device=config.device,
                engine=config.engine,
                kernel_policy=kp,
                exec_policy=ep,
                **options,
            )

        probe = session()
        self.engine = probe.engine
        self.device = probe.device
        self.inputs = [(i.name, np.dtype(i.dtype), tuple(i.shape)) for i in probe.get_inputs()]
        self.outputs = [(o.name, np.dtype(o.dtype), tuple(o.shape)) for o in probe.get_outputs()]
        self.input_names = {n for n, _, _ in self.inputs}
        self.output_names = {n for n, _, _ in self.outputs}
        self.config = config = auto_complete(config, self.inputs, self.outputs)
        self.buckets = config.buckets()
        self._fixed = {n: self._resolve(n, s) for n, _, s in self.inputs}
        # Variable (non-batch) dimensions: one plan per shape a request brings.
        self.variable = any(d is None for s in self._fixed.values() for d in s)
        # Padded dimensions (config ``pad``): their sizes, and the output axes cut back.
        used = {str(s[k]) for n, _, s in self.inputs for k, d in enumerate(self._fixed[n]) if d == PADDED}
        unused = sorted(set(config.pad) - used)
        if unused:
            raise ConfigError(
                f"model '{self.name}': pad names dimension {unused[0]!r:.64}, which no input has as a "
                "symbolic dimension; the inputs' dimensions are "
                + "; ".join(f"'{n}' {[str(d) for d in s]}" for n, _, s in self.inputs)
            )
        self.padded = {k: v for k, v in config.pad.items() if k in used}
        self._crop = {
            n: [
                (k, str(d))
                for k, d in enumerate(s)
                if str(d) in self.padded and not (k == 0 and self.buckets)
            ]
            for n, _, s in self.outputs
        }
        self._pad_keys = list(itertools.product(*(self.padded[k] for k in sorted(self.padded))))
        if self.variable and config.dynamic_batching is not None:
            raise ConfigError(
                f"model '{self.name}': dynamic batching needs every non-batch dimension fixed, but "
                f'{self._variable_names()} vary; fix them in the config ("dims"), pad them ("pad", '
                "where zero padding leaves the other positions' results unchanged) or drop dynamic_batching"
            )
        # Sessions by (batch bucket or 0, padded sizes in sorted dimension-name order).
        self._sessions: dict[tuple[int, tuple[int, ...]], Any] = {}
        symbolic = any(not _is_fixed(d) for _, _, s in self.inputs for d in s)
        keys = [(b, pk) for b in self.buckets or (0,) for pk in self._pad_keys]
        if (self.buckets or self.padded) and self.engine == "native" and symbolic and not self.variable:
            # The native engine compiles one plan per input shapes; a session per bucket
            # keeps every bucket's plan resident, whatever the engine's own cache holds.
            for b, pk in keys:
                self._sessions[(b, pk)] = session(input_shapes=self._shapes(b, pads=pk))
        else:
            for key in keys:
                self._sessions[key] = probe
        # The Decisions of a session that has built its plan (the smallest bucket's).
        self._explain_session = self._sessions[keys[0]]
        self.warm_run_us = 0.0  # the slowest bucket's warm run time
        self._output_shapes: dict[str, tuple[int, ...]] = {}
        for key in keys:
            self._warm(*key)
        self.loaded_at = time.time()

    # ------------------------------------------------------------------ shapes
    def _resolve(self, name: str, shape: Sequence[Any]) -> tuple[int | None, ...]:
        """The input's shape: the batch dim -1, a variable dim None, the others their value."""
        dims = list(shape)
        out: list[int | None] = []
        for k, d in enumerate(dims):
            if k == 0 and self.config.max_batch_size > 0:
                if isinstance(d, int) and d >= 0 and self.buckets != (d,):
                    raise ConfigError(
                        f"model '{self.name}': input '{name}' has a fixed batch dimension {d}, so it "
                        f"cannot be batched to {list(self.buckets)}; export it with a dynamic first "
                        "dimension or set max_batch_size to 0"
                    )
                out.append(-1)
            elif isinstance(d, int) and d >= 0:
                out.append(d)
            elif str(d) in self.config.dims:
                out.append(int(self.config.dims[str(d)]))
            elif str(d) in self.config.pad:
                out.append(PADDED)
            else:
                out.append(None)  # variable: any size a request brings
        return tuple(out)

    def _variable_names(self) -> str:
        names = []
        for n, _, s in self.inputs:
            for k, d in enumerate(self._fixed[n]):
                if d is None:
                    names.append(f"'{n}' dimension {k} ('{s[k]}')")
        return ", ".join(names)

    def _shapes(self, bucket: int, variable: int = 1, pads: tuple[int, ...] = ()) -> dict[str, list[int]]:
        size = dict(zip(sorted(self.padded), pads))
        declared = {n: s for n, _, s in self.inputs}
        return {
            n: [
                bucket
                if d == -1
                else (variable if d is None else size[str(declared[n][k])] if d == PADDED else d)
                for k, d in enumerate(s)
            ]
            for n, s in self._fixed.items()
        }

    def _warm(self, bucket: int, pads: tuple[int, ...] = ()) -> None:
        t_start = time.perf_counter()
        rng = np.random.default_rng(0)
        feeds = {}
        for n, dt, _ in self.inputs:
            shape = self._shapes(bucket, pads=pads)[n]
            if dt.kind == "f":
                feeds[n] = rng.standard_normal(shape).astype(dt)
            else:
                feeds[n] = np.zeros(shape, dtype=dt)
        session = self._sessions[(bucket, pads)]
        outs = session.run(feeds)
        first_s = time.perf_counter() - t_start
        # Timed runs: what one request costs once the plan is warm. The fastest of a few
        # (up to WARM_RUNS, within WARM_BUDGET_S) is the run's own cost: on a shared
        # machine a single run may include a preemption many times longer than itself.
        best = float("inf")
        t_end = time.perf_counter() + WARM_BUDGET_S
        for _ in range(WARM_RUNS):
            t0 = time.perf_counter()
            session.run(feeds)
            t1 = time.perf_counter()
            best = min(best, t1 - t0)
            if t1 > t_end:
                break
        self.warm_run_us = max(self.warm_run_us, best * 1e6)
        if not self._output_shapes:
            self._output_shapes = {k: tuple(np.shape(v)) for k, v in outs.items()}
        padded = ", ".join(f"{k} {v}" for k, v in zip(sorted(self.padded), pads))
        log.info(
            "model %s version %s: warm-up at %s: first run %.1f ms, warm run %.3f ms",
            self.name,
            self.version,
            (f"batch {bucket}" if bucket else "its shapes") + (f" ({padded})" if padded else ""),
            first_s * 1e3,
            best * 1e3,
        )
        if bucket:
            for name, value in outs.items():
                if np.ndim(value) == 0 or np.shape(value)[0] != bucket:
                    raise ConfigError(
                        f"model '{self.name}': output '{name}' has shape {list(np.shape(value))} at batch "
                        f"{bucket}; batching needs every output's first dimension to be the batch "
                        "dimension (set max_batch_size to 0 to serve it unbatched)"
                    )

    # ------------------------------------------------------------------ metadata
    def input_shape(self, name: str) -> list[int]:
        """An input's served shape: the batch, variable and padded dims -1, the others their value."""
        return [-1 if d is None or d == PADDED else d for d in self._fixed[name]]

    def output_shape(self, name: str) -> list[int]:
        """An output's served shape, consistent with the inputs' (batch and variable dims -1).

        A symbolic dim takes its value from the config's ``dims``; without variable input
        dims the others are what the warm-up run produced (they follow from fixed shapes).
        """
        declared = next(s for n, _, s in self.outputs if n == name)
        seen = self._output_shapes.get(name, ())
        shape: list[int] = []
        for k, d in enumerate(declared):
            if k == 0 and self.buckets:
                shape.append(-1)
            elif _is_fixed(d):
                shape.append(int(d))
            elif str(d) in self.config.dims:
                shape.append(int(self.config.dims[str(d)]))
            elif str(d) in self.padded:
                shape.append(-1)
            elif not self.variable and not self.padded and k < len(seen) and len(seen) == len(declared):
                shape.append(int(seen[k]))
            else:
                shape.append(-1)
        return shape

    def metadata(self) -> dict[str, Any]:
        """The protocol's model metadata (batch and variable dimensions reported as -1)."""
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": PLATFORM,
            "inputs": [
                {"name": n, "datatype": datatype_of(dt), "shape": self.input_shape(n)}
                for n, dt, _ in self.inputs
            ],
            "outputs": [
                {"name": n, "datatype": datatype_of(dt), "shape": self.output_shape(n)}
                for n, dt, _ in self.outputs
            ],
        }

    def explain(self) -> list[dict[str, Any]]:
        """Every Decision of the session (engine choice, then one per node), as dicts."""
        log = self._explain_session.explain()
        to_list = getattr(log, "to_list", None)
        if callable(to_list):
            return list(to_list())
        return [d.to_dict() for d in log]

    # ------------------------------------------------------------------ requests
    def validate(self, req: InferRequest) -> int:
        """Check names, dtypes and shapes; returns the request's batch size (1 unbatched)."""
        where = f"model '{self.name}'"
        missing = [n for n, _, _ in self.inputs if n not in req.inputs]
        extra = sorted(set(req.inputs) - self.input_names)
        if extra:
            raise invalid(
                f"{where}: unknown input '{extra[0]}'; the model's inputs are "
                f"{', '.join(n for n, _, _ in self.inputs)}"
            )
        if missing:
            raise invalid(f"{where}: input '{missing[0]}' is missing; send every input of the model")
        for r in req.outputs or ():
            if r.name not in self.output_names:
                raise invalid(
                    f"{where}: unknown output '{r.name}'; the model's outputs are "
                    f"{', '.join(n for n, _, _ in self.outputs)}"
                )
        batch = None
        for n, dt, _ in self.inputs:
            arr = req.inputs[n]
            if arr.dtype != dt:
                raise invalid(
                    f"{where}: input '{n}' has datatype {datatype_of(arr.dtype)}, the model expects "
                    f"{datatype_of(dt)}"
                )
            want = self._fixed[n]
            ok = arr.ndim == len(want) and all(w in (-1, None, PADDED, g) for w, g in zip(want, arr.shape))
            if not ok:
                note = " (-1: any size" + (
                    f"; the first is the batch size, 1..{self.buckets[-1]})" if self.buckets else ")"
                )
                raise invalid(
                    f"{where}: input '{n}' has shape {list(arr.shape)}, the model expects "
                    f"{self.input_shape(n)}{note if -1 in self.input_shape(n) else ''}"
                )
            if self.buckets:
                b = int(arr.shape[0])
                if batch is not None and b != batch:
                    raise invalid(f"{where}: inputs disagree on the batch size ({batch} vs {b} at '{n}')")
                batch = b
        if self.variable or self.padded:
            self._check_same_variable_dims(req)
        if not self.buckets:
            return 1
        assert batch is not None
        if batch < 1 or batch > self.buckets[-1]:
            raise invalid(
                f"{where}: batch size {batch} is outside 1..{self.buckets[-1]} (max_batch_size); "
                "split the request"
            )
        return batch

    def bucket_for(self, rows: int) -> int:
        """The smallest bucket that holds ``rows`` (0 for an unbatched model)."""
        for b in self.buckets:
            if b >= rows:
                return b
        return 0

    def _check_same_variable_dims(self, req: InferRequest) -> None:
        """Inputs that share a symbolic dimension name must agree on its size."""
        sizes: dict[str, tuple[int, str]] = {}
        for n, _, s in self.inputs:
            for k, d in enumerate(self._fixed[n]):
                if d is None or d == PADDED:
                    got = int(req.inputs[n].shape[k])
                    if d == PADDED and not 1 <= got <= self.padded[str(s[k])][-1]:
                        raise invalid(
                            f"model '{self.name}': input '{n}' dimension {k} ('{s[k]}') is {got}; this model "
                            f"serves it from 1 to {self.padded[str(s[k])][-1]} (padded to "
                            f"{list(self.padded[str(s[k])])}); send a shorter input or split it"
                        )
                    prev = sizes.setdefault(str(s[k]), (got, n))
                    if prev[0] != got:
                        raise invalid(
                            f"model '{self.name}': inputs disagree on dimension '{s[k]}' ({prev[0]} at "
                            f"'{prev[1]}' vs {got} at '{n}')"
                        )

    def run_batch(
        self, requests: Sequence[InferRequest], rows: Sequence[int], timings: list[float] | None = None
    ) -> list[dict[str, np.ndarray]]:
        """Run requests together, padded to a bucket; each request gets its own rows back.

        ``timings``, when given, receives the seconds spent gathering the inputs, running
        the model and splitting the outputs (Triton's compute_input/infer/output).
        """
        t0 = time.perf_counter()
        pads, sizes = self._pad_sizes(requests)
        if not self.buckets:
            (req,) = requests
            feeds0 = self._padded_inputs(req, pads) if pads else req.inputs
            t1 = time.perf_counter()
            outs0 = self._sessions[(0, pads)].run(feeds0)
            t2 = time.perf_counter()
            result0 = [{k: np.asarray(v) for k, v in outs0.items()}]
            if pads:
                result0 = [self._cut(result0[0], sizes[0])]
            if timings is not None:
                timings[:] = [t1 - t0, t2 - t1, time.perf_counter() - t2]
            return result0
        total = sum(rows)
        bucket = self.bucket_for(total)
        feeds = {}
        padded = [self._padded_inputs(r, pads) for r in requests] if pads else [r.inputs for r in requests]
        for n, dt, _ in self.inputs:
            parts = [p[n] for p in padded]
            if bucket > total:  # padding rows: zeros, computed and dropped
                parts.append(np.zeros((bucket - total, *parts[0].shape[1:]), dtype=dt))
            feeds[n] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        t1 = time.perf_counter()
        outs = self._sessions[(bucket, pads)].run(feeds)
        t2 = time.perf_counter()
        results: list[dict[str, np.ndarray]] = []
        if len(requests) == 1 and bucket == total:
            results = [{k: np.asarray(v) for k, v in outs.items()}]
        else:
            start = 0
            for n in rows:
                results.append({k: np.asarray(v)[start : start + n] for k, v in outs.items()})
                start += n
        if pads:
            results = [self._cut(r, s) for r, s in zip(results, sizes)]
        if timings is not None:
            timings[:] = [t1 - t0, t2 - t1, time.perf_counter() - t2]
        return results

    # ------------------------------------------------------------------ padding
    def _pad_sizes(self, requests: Sequence[InferRequest]) -> tuple[tuple[int, ...], list[dict[str, int]]]:
        """The padded sizes a batch runs at (per dimension, the smallest that holds every
        request) and each request's own sizes; ((), []) for a model without padding."""
        if not self.padded:
            return (), []
        sizes: list[dict[str, int]] = []
        for req in requests:
            own: dict[str, int] = {}
            for n, _, s in self.inputs:
                for k, d in enumerate(self._fixed[n]):
                    if d == PADDED:
                        own[str(s[k])] = int(req.inputs[n].shape[k])
            sizes.append(own)
        pads = tuple(
            next(b for b in self.padded[name] if b >= max(own[name] for own in sizes))
            for name in sorted(self.padded)
        )
        return pads, sizes

    def _padded_inputs(self, req: InferRequest, pads: tuple[int, ...]) -> dict[str, np.ndarray]:
        """The request's inputs zero-padded along their padded dimensions to ``pads``."""
        size = dict(zip(sorted(self.padded), pads))
        out = {}
        for n, _, s in self.inputs:
            arr = req.inputs[n]
            widths = [
                (0, size[str(s[k])] - arr.shape[k]) if d == PADDED else (0, 0)
                for k, d in enumerate(self._fixed[n])
            ]
            out[n] = np.pad(arr, widths) if any(w for _, w in widths) else arr
        return out

    def _cut(self, outs: dict[str, np.ndarray], own: dict[str, int]) -> dict[str, np.ndarray]:
        """Outputs cut back along every axis named by a padded dimension to the request's size."""
        cut = {}
        for name, value in outs.items():
            index = [slice(None)] * value.ndim
            for k, dim in self._crop.get(name, ()):
                if k < value.ndim:
                    index[k] = slice(0, own[dim])
            cut[name] = value[tuple(index)] if self._crop.get(name) else value
        return cut


def _is_fixed(d: Any) -> bool:
    return isinstance(d, int) and d >= 0


def auto_complete(
    config: ModelConfig,
    inputs: Sequence[tuple[str, Any, tuple[Any, ...]]],
    outputs: Sequence[tuple[str, Any, tuple[Any, ...]]],
) -> ModelConfig:
    """``config`` with ``max_batch_size`` completed from the model where the file left it out.

    As Triton's auto-complete: when every input's and output's first dimension is
    symbolic, it is the batch dimension and ``max_batch_size`` is DEFAULT_MAX_BATCH_SIZE.
    """
    if "max_batch_size" in config.given:
        return config
    tensors = [s for _, _, s in (*inputs, *outputs)]
    if tensors and all(len(s) > 0 and not _is_fixed(s[0]) for s in tensors):
        return dataclasses.replace(config, max_batch_size=DEFAULT_MAX_BATCH_SIZE)
    return config
