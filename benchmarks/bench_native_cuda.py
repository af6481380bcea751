"""The native CUDA engine against PyTorch on public architectures (fp16, GPU machine).

For each model of ``native_cuda_models.py`` (random weights, exported to ONNX in the
run): the native engine's fp16 plan replayed as one CUDA graph, torch eager fp16,
torch fp16 captured as a CUDA graph, and ``torch.compile`` (default inductor,
``mode="reduce-overhead"``: CUDA graphs) — and ONNX Runtime's CUDA provider where its
wheel is installed. Outputs are checked against torch fp32 (TF32 off) before anything is
timed; every column is timed in interleaved rounds in one process with CUDA events
(median of the rounds' per-iteration times). Also recorded: the native plan's cold build
time (session construction + first run), a rebuild from its saved plan, and peak device
memory of the native run and of torch eager.

    python3 benchmarks/bench_native_cuda.py [--models a,b] [--no-compile] [--budget-s 480]

Writes benchmarks/results/native_cuda_<GPU>.json after every model (a time-out keeps
what was measured) with a top-level ``goals`` list (issue 30's goals).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

import native_cuda_models as zoo
import torch
import xpuruntime as xrt


def export(model: zoo.CudaModel, out: Path) -> tuple[Path, Any, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    module, feeds = model.build()
    module.eval()
    with torch.no_grad():
        for p in module.parameters():  # zero-initialised heads would make outputs constant
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02)
    path = out / f"{model.name}.onnx"
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=False,
                opset_version=17,
                input_names=list(feeds),
                output_names=["output"],
            )
        except Exception:  # noqa: BLE001  (the TorchScript exporter refuses some models)
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=True,
                opset_version=18,
                input_names=list(feeds),
                output_names=["output"],
                external_data=False,
            )
    return path, module, feeds


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    if not torch.isfinite(a).all():
        return math.inf
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def time_columns(
    cols: dict[str, Callable[[], Any]], rounds: int = 7, min_ms: float = 40.0
) -> dict[str, float]:
    """Median per-iteration milliseconds of each column, interleaved round by round."""
    iters: dict[str, int] = {}
    for name, fn in cols.items():  # warm-up and size each column's batch of launches
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        one = max((time.perf_counter() - t0) * 1e3, 1e-3)
        iters[name] = max(3, min(200, int(min_ms / one)))
    samples: dict[str, list[float]] = {n: [] for n in cols}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        for name, fn in cols.items():
            start.record()
            for _ in range(iters[name]):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / iters[name])
    return {n: statistics.median(v) for n, v in samples.items()}


def cuda_graph_of(fn: Callable[[], Any]) -> Callable[[], Any]:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


IO = "fp16"  # the native plan's interface (--io)

_NP_OF_ORT = {
    "tensor(float16)": np.float16,
    "tensor(float)": np.float32,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}
_TORCH_OF_NP = {
    np.float16: torch.float16,
    np.float32: torch.float32,
    np.int64: torch.int64,
    np.int32: torch.int32,
    np.bool_: torch.bool,
}


def _ort_version() -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "not installed"
    return f"{ort.__version__} ({', '.join(ort.get_available_providers())})"


def ort_cuda_columns(
    path: Path, names: list[str], xs: list[torch.Tensor], ref: torch.Tensor, row: dict[str, Any]
) -> dict[str, Callable[[], Any]]:
    """ONNX Runtime's CUDA provider on the same model in fp16, as its users run it.

    The float32 export is converted with ORT's own ``float16`` tool (inputs and outputs
    fp16, as torch's .half() model), then run through IOBinding on torch's device
    tensors and torch's current stream (``user_compute_stream``), with ORT's default
    optimizations and its exhaustive cuDNN algorithm search. Two columns where each
    builds: ``ort_cuda`` and ``ort_cuda_graph`` (``enable_cuda_graph``; ORT refuses it
    for models with nodes outside the CUDA provider). Each output is checked against
    torch fp32 before timing and recorded (``err_ort_*``, ``ort_match``). Where the
    wheel is missing (it is carried for a final run only), ``row["ort"]`` says so.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        row["ort"] = "onnxruntime not installed"
        return {}
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        row["ort"] = f"onnxruntime {ort.__version__} has no CUDAExecutionProvider"
        return {}
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    row["ort"] = f"onnxruntime-gpu {ort.__version__}"
    fp16_path = path.with_name(path.stem + ".ort_fp16.onnx")
    onnx.save(convert_float_to_float16(onnx.load(str(path)), keep_io_types=False), str(fp16_path))
    stream = torch.cuda.current_stream().cuda_stream
    cols: dict[str, Callable[[], Any]] = {}
    for col, graph in (("ort_cuda", False), ("ort_cuda_graph", True)):
        opts = {"device_id": "0", "user_compute_stream": str(stream)}
        if graph:
            opts["enable_cuda_graph"] = "1"
        try:
            t0 = time.perf_counter()
            so = ort.SessionOptions()
            so.log_severity_level = 3  # errors only: its fp16 constant-folding notes flood the log
            sess = ort.InferenceSession(str(fp16_path), so, providers=[("CUDAExecutionProvider", opts)])
            binding = sess.io_binding()
            keep: list[torch.Tensor] = []  # bound device memory lives as long as the column
            by_name = dict(zip(names, xs))
            for i in sess.get_inputs():
                npt = _NP_OF_ORT[i.type]
                t = by_name[i.name].to(_TORCH_OF_NP[npt]).contiguous()
                keep.append(t)
                binding.bind_input(i.name, "cuda", 0, npt, list(t.shape), t.data_ptr())
            out_meta = sess.get_outputs()[0]
            y = torch.empty(ref.shape, dtype=_TORCH_OF_NP[_NP_OF_ORT[out_meta.type]], device=ref.device)
            keep.append(y)
            binding.bind_output(
                out_meta.name, "cuda", 0, _NP_OF_ORT[out_meta.type], list(y.shape), y.data_ptr()
            )

            def run(sess=sess, binding=binding, keep=keep) -> None:
                sess.run_with_iobinding(binding)

            run()
            torch.cuda.synchronize()
            row[f"{col}_build_s"] = round(time.perf_counter() - t0, 2)
            err = rel_err(y.float(), ref)
            row[f"err_{col}"] = err
            row[f"{col}_match"] = err <= max(1.5 * row["err_torch_fp16"], 1e-2)
            cols[col] = run
        except Exception as exc:  # noqa: BLE001
            row[f"{col}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    row["ort_match"] = any(row.get(f"{c}_match") for c in cols)
    return cols


def measure(
    model: zoo.CudaModel, tmp: Path, use_compile: bool, out_profile: Path | None, use_ort: bool = True
) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model.name, "family": model.family, "source": model.source}
    t0 = time.perf_counter()
    path, module, feeds = export(model, tmp)
    row["export_s"] = round(time.perf_counter() - t0, 2)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref_mod = module.to(dev).float()
    x32 = [torch.from_numpy(v).to(dev) for v in feeds.values()]
    with torch.no_grad():
        ref = ref_mod(*x32).float()
    m16 = module.to(dev).half()
    x16 = [t.half() if t.is_floating_point() else t for t in x32]

    # Native: fp16 plan, one CUDA graph, torch tensors in and a caller buffer out. With
    # --io fp16 (the default) the plan's interface is fp16 as well
    # (ExecutionPolicy(keep_io_types=False)), the same inference as torch's .half() model:
    # fp16 in, fp16 out. --io fp32 keeps the model's float32 interface (edge casts).
    fp16_io = IO == "fp16"
    policy = xrt.ExecutionPolicy(precision="fp16", cuda_graph=True, keep_io_types=not fp16_io)
    torch.cuda.synchronize()
    # Blocks an earlier model's session left cached would serve this one's requests at
    # their own (up to a quarter larger) sizes: start from an empty cache, as a fresh
    # process would.
    xrt.memory.empty_cache("cuda:0")
    xrt.memory.reset_peak_stats("cuda:0")
    base_native = xrt.memory.memory_stats("cuda:0").allocated_bytes
    t0 = time.perf_counter()
    sess = xrt.InferenceSession(str(path), device="cuda", engine="native", exec_policy=policy)
    after_build = xrt.memory.memory_stats("cuda:0").allocated_bytes - base_native
    names = [i.name for i in sess.get_inputs()]
    inputs = dict(zip(names, x16 if fp16_io else x32))
    got = sess.run(inputs)["output"]
    torch.cuda.synchronize()
    row["native_build_s"] = round(time.perf_counter() - t0, 3)
    row["native_build_parts_ms"] = {k: round(v, 1) for k, v in sess.build_timings().items()}
    got_t = torch.as_tensor(np.asarray(got)).to(dev) if not isinstance(got, torch.Tensor) else got
    y = torch.empty(ref.shape, dtype=torch.float16 if fp16_io else torch.float32, device=dev)
    stream = torch.cuda.current_stream()

    def native() -> None:
        sess.run(inputs, outputs=[y], stream=stream)

    native()
    torch.cuda.synchronize()
    # Build peak: everything the build and the first runs held at once (host-result
    # output of the first run included).
    row["native_build_peak_bytes"] = xrt.memory.memory_stats("cuda:0").peak_allocated_bytes - base_native
    # Inference peak, measured as torch's below: what the session holds (constants, the
    # graph's arena, workspace and edge buffers) plus what a run allocates, plus the
    # caller's output buffer (torch's output is in its own figure).
    # Steady state: the second run with the same buffers captures the graph on them
    # (the plan's own edge buffers are then freed) and later runs replay it.
    del got, got_t
    native()
    torch.cuda.synchronize()
    xrt.memory.reset_peak_stats("cuda:0")
    native()
    torch.cuda.synchronize()
    row["native_peak_bytes"] = (
        xrt.memory.memory_stats("cuda:0").peak_allocated_bytes - base_native + y.numel() * y.element_size()
    )
    last = sess._engine.last_run_stats()
    row["native_run_edge_copy_bytes"] = int(last["device_copy_bytes"]) + int(last["copy_bytes"])
    # Where the device bytes are: after construction (uploaded constants and what kernels
    # packed), held between runs (plus arena, workspaces, edge buffers), and the shared
    # workspace of steps whose prepared need exceeds what the arena planned for them.
    steps = sess.plan.steps
    row["native_device_bytes"] = {
        "after_build": int(after_build),
        "steady": int(xrt.memory.memory_stats("cuda:0").allocated_bytes - base_native),
        "shared_workspace": max(
            (
                s["prepared_workspace_bytes"]
                for s in steps
                if s["prepared_workspace_bytes"] > s["workspace_bytes"]
            ),
            default=0,
        ),
    }
    mem = sess.plan.memory
    row["native_plan_bytes"] = {"constants": int(mem["constant_bytes"]), "arena": int(mem["arena_bytes"])}
    # The steps with the largest workspaces planned in the arena (where a peak may come from).
    row["native_largest_workspaces"] = [
        {"step": s["name"], "kernel": s["kernel"], "bytes": int(s["workspace_bytes"])}
        for s in sorted(steps, key=lambda s: -s["workspace_bytes"])[:4]
        if s["workspace_bytes"] > 0
    ]
    plan_file = tmp / f"{model.name}.xrtplan"
    sess.save_plan(str(plan_file))
    t0 = time.perf_counter()
    s2 = xrt.InferenceSession.load_plan(str(plan_file), exec_policy=policy)
    s2.run(inputs)
    torch.cuda.synchronize()
    row["native_load_s"] = round(time.perf_counter() - t0, 3)
    row["native_load_parts_ms"] = {k: round(v, 1) for k, v in s2.build_timings().items()}
    del s2
    with torch.no_grad():
        t16 = m16(*x16).float()
    native()
    torch.cuda.synchronize()
    row["err_native_buffer"] = rel_err(y.float(), ref)
    row["err_torch_fp16"] = rel_err(t16, ref)
    row["match"] = row["err_native_buffer"] <= max(1.5 * row["err_torch_fp16"], 1e-2)
    plan_steps = [s for s in sess.plan.steps if not s["view"]] if sess.plan is not None else []
    row["native_launches"] = len(plan_steps)

    # torch eager's inference peak: parameters plus what the forward allocates, its
    # cuBLAS workspace included (freed first so the forward allocates it again, as the
    # session's workspace is counted in the native figure).
    del t16
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base_torch = torch.cuda.memory_allocated()
    with torch.no_grad():
        m16(*x16)
    torch.cuda.synchronize()
    row["torch_eager_peak_bytes"] = (
        torch.cuda.max_memory_allocated()
        - base_torch
        + sum(p.numel() * p.element_size() for p in m16.parameters())
    )
    row["native_peak_bytes"] = int(row["native_peak_bytes"])
    del ref_mod

    cols: dict[str, Callable[[], Any]] = {"native": native}
    with torch.no_grad():
        cols["torch_eager"] = lambda: m16(*x16)
        cols["torch_graph"] = cuda_graph_of(lambda: m16(*x16))
        if use_compile:
            t0 = time.perf_counter()
            try:
                compiled = torch.compile(m16, mode="reduce-overhead")
                for _ in range(3):
                    compiled(*x16)
                torch.cuda.synchronize()
                row["compile_s"] = round(time.perf_counter() - t0, 1)
                cols["torch_compile_graph"] = lambda: compiled(*x16)
            except Exception as exc:  # noqa: BLE001
                row["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if use_ort:
            cols.update(ort_cuda_columns(path, names, x16 if fp16_io else x32, ref, row))
        times = time_columns(cols)
    # A check of the event timing: wall clock around single runs, synchronized before and
    # after (host launch and sync latency included, so a little above the event figure; a
    # much larger one would mean work outside the timed stream).
    walls = []
    for _ in range(20):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        native()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    row["native_wall_sync_ms"] = round(statistics.median(walls), 4)
    ort_cols = [times[c] for c in ("ort_cuda", "ort_cuda_graph") if c in times]
    if ort_cols:  # against ORT's faster configuration
        row["native/ort_best"] = round(times["native"] / min(ort_cols), 3)
    row["ms"] = {k: round(v, 4) for k, v in times.items()}
    for k, v in times.items():
        if k != "native":
            row[f"native/{k}"] = round(times["native"] / v, 3)
    if out_profile is not None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(3):
                native()
            torch.cuda.synchronize()
            row["native_profiled_wall_ms_per_run"] = round((time.perf_counter() - t0) * 1e3 / 3, 4)
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=100)
        (out_profile / f"{model.name}_native_profile.txt").write_text(table)
    sess = None  # the plan's device memory goes before the next model
    return row


def geomean(v: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def ort_goal(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """native / ORT CUDA EP (its faster configuration, graph or not), over the models whose
    ORT output matched torch as the native one must; every model under 0.5 to meet it."""
    vs = [r["native/ort_best"] for r in ok if "native/ort_best" in r and r.get("ort_match")]
    goal: dict[str, Any] = {
        "name": "native / ONNX Runtime CUDA EP (faster of plain and CUDA graph)",
        "target": "<= 0.5",
    }
    if not vs:
        return {**goal, "figure": "not measured (wheel not carried)", "met": False}
    g = geomean(vs)
    return {
        **goal,
        "name": goal["name"] + f", geometric mean over {len(vs)} models",
        "figure": round(g, 3),
        "worst": round(max(vs), 3),
        "models_over_0.5": [
            r["model"] for r in ok if r.get("native/ort_best", 0) > 0.5 and r.get("ort_match")
        ],
        "ort_output_mismatch": [
            r["model"] for r in ok if "ort" in r and "native/ort_best" in r and not r.get("ort_match")
        ],
        "met": bool(max(vs) <= 0.5),
    }


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ok = [r for r in rows if "ms" in r and r.get("match")]
    vs_compile = [r["native/torch_compile_graph"] for r in ok if "native/torch_compile_graph" in r]
    g = geomean(vs_compile)
    worst = max(vs_compile, default=float("nan"))
    builds = [r["native_build_s"] for r in ok]
    loads = [r["native_load_s"] for r in ok if "native_load_s" in r]
    mem = [r for r in ok if r["native_peak_bytes"] <= r["torch_eager_peak_bytes"]]
    return [
        {
            "name": f"native / torch.compile+CUDA graph, geometric mean over {len(vs_compile)} models",
            "figure": round(g, 3),
            "target": "<= 1.0 (moonshot 0.8)",
            "met": bool(g <= 1.0),
        },
        {
            "name": "native / torch.compile+CUDA graph, worst model",
            "figure": round(worst, 3),
            "target": "<= 1.5",
            "met": bool(worst <= 1.5),
        },
        ort_goal(ok),
        {
            "name": "plan build cold, worst model (s)",
            "figure": max(builds, default=float("nan")),
            "target": "<= 5",
            "met": bool(builds) and max(builds) <= 5,
        },
        {
            "name": "plan build from a saved plan, worst model (s)",
            "figure": max(loads, default=float("nan")),
            "target": "<= 0.5",
            "met": bool(loads) and max(loads) <= 0.5,
        },
        {
            "name": "peak device memory of an inference, native <= torch eager (session + run + output "
            "buffer vs parameters + forward)",
            "figure": f"{len(mem)} of {len(ok)}",
            "target": f"{len(ok)} of {len(ok)}",
            "met": bool(ok) and len(mem) == len(ok),
            "worst_native_over_torch": round(
                max((r["native_peak_bytes"] / r["torch_eager_peak_bytes"] for r in ok), default=float("nan")),
                3,
            ),
        },
        {
            "name": "models whose native fp16 output matches torch (<= max(1.5x torch fp16 error, 1e-2))",
            "figure": f"{len(ok)} of {len(rows)}",
            "target": f"{len(rows)} of {len(rows)}",
            "met": len(ok) == len(rows),
        },
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated subset, run in that order (default: all)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime's CUDA provider columns")
    ap.add_argument("--budget-s", type=float, default=500.0, help="stop starting new models after this")
    ap.add_argument(
        "--compile-budget-s",
        type=float,
        default=300.0,
        help="stop compiling with torch.compile once this much time went into it",
    )
    ap.add_argument("--profile", action="store_true", help="write a per-kernel profile of each native run")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--io",
        choices=("fp16", "fp32"),
        default="fp16",
        help="the native plan's interface: fp16 (keep_io_types=False, as torch's .half() model) "
        "or the model's float32 (edge casts)",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the measured rows of models not in this run from the existing results file "
        "(one benchmark split over several GPU calls); goals are computed over all rows",
    )
    args = ap.parse_args()
    global IO
    IO = args.io
    name = torch.cuda.get_device_name().replace(" ", "_")
    out = Path(args.out or HERE / "results" / f"native_cuda_{name}.json")
    # In the order given (a time budget then cuts the last ones), else the zoo's order.
    by_name = {m.name: m for m in zoo.MODELS}
    unknown = [n for n in args.models.split(",") if n and n not in by_name]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(by_name)}")
    wanted = [by_name[n] for n in args.models.split(",") if n] if args.models else list(zoo.MODELS)
    meta = {
        "benchmark": "bench_native_cuda.py",
        "device": torch.cuda.get_device_name(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "xpuruntime": getattr(xrt, "__version__", "?"),
            "onnxruntime": _ort_version(),
        },
        "settings": "fp16; vision 32x3x224x224, text 8x128; native: fp16 plan + CUDA graph, "
        + (
            "fp16 inputs and outputs (keep_io_types=False)"
            if IO == "fp16"
            else "float32 inputs and outputs (edge casts)"
        )
        + "; torch: .half() eager, CUDA graph, torch.compile(mode='reduce-overhead'); ONNX Runtime "
        "CUDA EP where installed (fp16 by its float16 tool, IOBinding on torch's stream, plain and "
        "enable_cuda_graph); median of 7 "
        "interleaved rounds; memory: inference peak (session + run + output buffer vs parameters + "
        "forward incl. cuBLAS workspace)",
    }
    rows: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    if args.merge and out.is_file():
        prev = json.loads(out.read_text())
        names = {m.name for m in wanted}
        kept = [r for r in prev.get("models", []) if r["model"] not in names and "ms" in r]
        for r in kept:
            r.setdefault("measured", prev.get("date"))
        meta["merged_from"] = sorted({str(r["measured"]) for r in kept})
    t_start = time.perf_counter()
    compile_spent = 0.0
    prof_dir = out.parent / "native_cuda_profiles" if args.profile else None
    if prof_dir:
        prof_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for m in wanted:
            if time.perf_counter() - t_start > args.budget_s:
                rows.append({"model": m.name, "skipped": "time budget"})
                continue
            use_compile = not args.no_compile and compile_spent < args.compile_budget_s
            try:
                row = measure(m, Path(tmp), use_compile, prof_dir, use_ort=not args.no_ort)
            except Exception as exc:  # noqa: BLE001
                row = {
                    "model": m.name,
                    "error": f"{type(exc).__name__}: {str(exc)[:400]}",
                    "trace": traceback.format_exc()[-1500:],
                }
            compile_spent += row.get("compile_s", 0.0)
            rows.append(row)
            torch.cuda.empty_cache()
            torch._dynamo.reset()
            row.setdefault("measured", meta["date"])
            out.write_text(json.dumps({**meta, "goals": goals(rows + kept), "models": rows + kept}, indent=1))
            r = row
            print(
                f"{m.name:20s} "
                + (
                    f"native {r['ms']['native']:.3f} ms  "
                    + "  ".join(f"{k} {v}" for k, v in r.items() if k.startswith("native/"))
                    + f"  err {r['err_native_buffer']:.2e}"
                    f" (torch16 {r['err_torch_fp16']:.2e})  build {r['native_build_s']} s  launches {r['native_launches']}"
                    if "ms" in r
                    else r.get("error", r.get("skipped", ""))
                ),
                flush=True,
            )
    print("\n| goal | figure | target | met |\n|---|---|---|---|")
    for g in goals(rows + kept):
        print(f"| {g['name']} | {g['figure']} | {g['target']} | {g['met']} |")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
