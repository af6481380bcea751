"""Launch-configuration sweep of the fused LayerNorm kernels (issue 5), on a GPU.

For each shape (32768x4096 bf16, 8192x768 bf16, 4096x1024 fp16, 32768x4096 fp32)
every forward configuration the plugin compiles (threads per row, persistent or
tile grid, next-row prefetch, cache hints for x/y; see
cpp/src/backends/cuda/kernels/layernorm/layernorm_config.h) and every backward
threads-per-row is

* checked against torch in float64 (y, and dx/dweight/dbias for the backward) with
  the outputs poisoned with NaN first, so an element left unwritten fails;
* timed with CUDA events as device time: a spin kernel queued ahead of the start
  event keeps the GPU busy while the host queues the call, so the number is the
  GPU time of everything the call launches, not the host's launch latency;
  inputs rotate over enough copies that they never sit in L2 (median of --iters);

next to torch.nn.functional.layer_norm (forward, and backward through autograd)
and a device-to-device copy of x (the bandwidth ceiling). GB/s counts x read + y
written forward, x and dy read + dx written backward.

Then, with the sweep's best forward configuration and with the launcher's default,
the public op ``fused_layernorm`` is timed both as device time and as the latency
of one synchronised call (host overhead included: what benchmarks/bench_layernorm.py
reported before it measured device time). Prints a table per shape and writes
benchmarks/results/layernorm_sweep_<device>.json.

Run from the repository root with a dev build (scripts/gpu_check.sh builds one):
    XRT_BUILD_DIR=/tmp/xrt-gpu-build PYTHONPATH=python python3 benchmarks/sweep_layernorm.py
(--extra adds more row lengths, to check that the default's rules generalise).

To adopt a winner, edit default_fwd_config() (or default_bwd_tpr()) in
cpp/src/backends/cuda/kernels/layernorm/layernorm_config.cpp; to try one without
rebuilding, set XRT_LN_CONFIG (e.g. "tpr=128,grid=persistent,prefetch=1,hint=default").
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from xpuruntime import _core
from xpuruntime.pytorch.ops import _bridge
from xpuruntime.pytorch.ops.layernorm import fused_layernorm, layer_norm_bwd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layernorm import ROTATE_BYTES, bench_ms, env, write_results

SHAPES = [
    (32768, 4096, torch.bfloat16),
    (8192, 768, torch.bfloat16),
    (4096, 1024, torch.float16),
    (32768, 4096, torch.float32),
]
# --extra: more row lengths, to check that the default's rules generalise.
EXTRA_SHAPES = [
    (16384, 8192, torch.bfloat16),
    (8192, 12288, torch.bfloat16),
    (65536, 512, torch.bfloat16),
    (8192, 2560, torch.float16),
    (16384, 1024, torch.float32),
]
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 1e-2}
LN_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


# ---- the plugin's configuration entry points --------------------------------------------------
class Plugin:
    def __init__(self) -> None:
        why = _bridge.cuda_kernels_unavailable()  # loads the plugin
        if why:
            sys.exit(f"our CUDA kernels are unavailable: {why}")
        # One process, one configuration: every later launch uses what set_config forced.
        self.kernels = _core.cuda_kernels

    def set_config(self, spec: str) -> None:
        try:
            self.kernels.layernorm_set_config(spec)
        except _core.InvalidArgumentError as e:
            raise ValueError(f"layernorm_set_config({spec!r}): {e}") from None

    def describe(self, rows: int, cols: int, dtype: torch.dtype) -> str:
        return self.kernels.layernorm_describe_config(dtype=LN_DTYPE[dtype], rows=rows, cols=cols)


def fwd_configs(cols: int, dtype: torch.dtype) -> list[str]:
    """Every compiled forward variant for this row length (at most 4 vectors a thread)."""
    n_vec = cols * torch.tensor([], dtype=dtype).element_size() // 16
    out = []
    for tpr in (32, 64, 128, 256, 512, 1024):
        if math.ceil(n_vec / tpr) > 4 or (tpr > 32 and tpr // 2 >= n_vec):
            continue  # needs the scalar kernel / half the group idle
        for grid in ("persistent", "tile"):
            for prefetch in (1, 0):
                for hint in ("default", "cs", "nol1"):
                    out.append(f"tpr={tpr},grid={grid},prefetch={prefetch},hint={hint}")
    return out


def bwd_configs(cols: int, dtype: torch.dtype) -> list[str]:
    n_vec = cols * torch.tensor([], dtype=dtype).element_size() // 16
    return [
        f"bwd_tpr={t}"
        for t in (32, 64, 128, 256, 512, 1024)
        if math.ceil(n_vec / t) <= 4 and (t == 32 or t // 2 < n_vec)
    ]


# ---- timing (bench_layernorm.bench_ms: device time, or one synchronised call) -------------------------
def device_ms(fn, iters: int, warmup: int = 3) -> float:
    """Median GPU time of ``fn()`` (fn(i) gets the iteration, to rotate inputs)."""
    return bench_ms(fn, iters, warmup, device_time=True)


def call_ms(fn, iters: int, warmup: int = 3) -> float:
    """Median latency of one synchronised call from an idle GPU (host overhead included)."""
    return bench_ms(fn, iters, warmup, device_time=False)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return float("nan")
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# ---- one shape --------------------------------------------------------------------------------------
class Case:
    def __init__(self, rows: int, cols: int, dtype: torch.dtype) -> None:
        self.rows, self.cols, self.dtype = rows, cols, dtype
        g = torch.Generator(device="cuda").manual_seed(rows * 7 + cols)
        nbytes = rows * cols * torch.tensor([], dtype=dtype).element_size()
        self.nbytes = nbytes
        self.sets = max(1, math.ceil(ROTATE_BYTES / (3 * nbytes)))
        # large mean: fp32 statistics and the two-pass variance matter
        self.xs = [
            (torch.randn(rows, cols, device="cuda", generator=g) * 2 + 8).to(dtype) for _ in range(self.sets)
        ]
        self.dys = [torch.randn(rows, cols, device="cuda", generator=g).to(dtype) for _ in range(self.sets)]
        self.w = torch.randn(cols, device="cuda", generator=g).to(dtype)
        self.b = torch.randn(cols, device="cuda", generator=g).to(dtype)
        self.ys = [torch.empty_like(x) for x in self.xs]
        self.dxs = [torch.empty_like(x) for x in self.xs]
        self.mean = [torch.empty(rows, device="cuda") for _ in range(self.sets)]
        self.rstd = [torch.empty(rows, device="cuda") for _ in range(self.sets)]
        self.dw = torch.empty_like(self.w)
        self.db = torch.empty_like(self.b)
        xd, wd, bd = (t.double().requires_grad_() for t in (self.xs[0], self.w, self.b))
        self.ref_y = F.layer_norm(xd, (cols,), wd, bd, 1e-5)
        self.ref_y.backward(self.dys[0].double())
        self.ref_y = self.ref_y.detach()
        self.ref = {"dx": xd.grad, "dw": wd.grad, "db": bd.grad}
        self.dt = _bridge.LN_DTYPES[dtype]
        self.stream = 0

    def _stream(self) -> int:
        return int(torch.cuda.current_stream().cuda_stream)

    def kernel_fwd(self, i: int) -> None:
        k = i % self.sets
        _core.cuda_kernels.layernorm_forward(
            dtype=self.dt,
            rows=self.rows,
            cols=self.cols,
            x=self.xs[k].data_ptr(),
            weight=self.w.data_ptr(),
            bias=self.b.data_ptr(),
            y=self.ys[k].data_ptr(),
            mean=self.mean[k].data_ptr(),
            rstd=self.rstd[k].data_ptr(),
            eps=1e-5,
            stream=self.stream,
        )

    def kernel_bwd(self, i: int) -> None:
        k = i % self.sets
        _core.cuda_kernels.layernorm_backward(
            dtype=self.dt,
            rows=self.rows,
            cols=self.cols,
            dy=self.dys[k].data_ptr(),
            x=self.xs[k].data_ptr(),
            mean=self.mean[k].data_ptr(),
            rstd=self.rstd[k].data_ptr(),
            weight=self.w.data_ptr(),
            dx=self.dxs[k].data_ptr(),
            dweight=self.dw.data_ptr(),
            dbias=self.db.data_ptr(),
            workspace=self.ws.data_ptr(),
            workspace_bytes=self.ws.numel() * 4,
            stream=self.stream,
        )

    def prepare_bwd(self) -> None:
        """Workspace for the configuration now set, and the statistics of every input set."""
        nbytes = _core.cuda_kernels.layernorm_backward_workspace_bytes(
            dtype=self.dt, rows=self.rows, cols=self.cols
        )
        self.ws = torch.empty(max(nbytes // 4, 4), device="cuda")
        for k in range(self.sets):
            self.kernel_fwd(k)

    def check_fwd(self) -> dict:
        self.ys[0].fill_(float("nan"))
        self.mean[0].fill_(float("nan"))
        self.kernel_fwd(0)
        x0 = self.xs[0].double()
        return {"y": rel(self.ys[0], self.ref_y), "mean": rel(self.mean[0], x0.mean(-1))}

    def check_bwd(self) -> dict:
        self.prepare_bwd()
        for t in (self.dxs[0], self.dw, self.db):
            t.fill_(float("nan"))
        self.kernel_bwd(0)
        return {
            "dx": rel(self.dxs[0], self.ref["dx"]),
            "dw": rel(self.dw, self.ref["dw"]),
            "db": rel(self.db, self.ref["db"]),
        }

    def gbps(self, ms: float, passes: int) -> float:
        return passes * self.nbytes / ms / 1e6


def sweep_case(plugin: Plugin, rows: int, cols: int, dtype: torch.dtype, iters: int) -> dict:
    c = Case(rows, cols, dtype)
    c.stream = c._stream()
    tol = TOL[dtype]
    res: dict = {"rows": rows, "cols": cols, "dtype": str(dtype).replace("torch.", ""), "input_sets": c.sets}
    plugin.set_config("")
    res["default_config"] = plugin.describe(rows, cols, dtype)

    # ceilings and torch
    src = torch.empty(c.sets * c.nbytes, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    n = c.nbytes
    res["copy_ms"] = device_ms(
        lambda i: dst[(i % c.sets) * n : (i % c.sets + 1) * n].copy_(
            src[(i % c.sets) * n : (i % c.sets + 1) * n]
        ),
        iters,
    )
    src = dst = None
    res["torch_fwd_ms"] = device_ms(lambda i: F.layer_norm(c.xs[i % c.sets], (cols,), c.w, c.b, 1e-5), iters)
    res["torch_fwd_call_ms"] = call_ms(
        lambda i: F.layer_norm(c.xs[i % c.sets], (cols,), c.w, c.b, 1e-5), iters
    )
    leaves = [
        (x.detach().requires_grad_(), c.w.detach().requires_grad_(), c.b.detach().requires_grad_())
        for x in c.xs
    ]
    outs = [F.layer_norm(xr, (cols,), wr, br, 1e-5) for xr, wr, br in leaves]
    res["torch_bwd_ms"] = device_ms(
        lambda i: torch.autograd.grad(
            outs[i % c.sets], leaves[i % c.sets], c.dys[i % c.sets], retain_graph=True
        ),
        iters,
    )
    outs = leaves = None

    # forward configurations
    fwd = []
    for spec in fwd_configs(cols, dtype):
        plugin.set_config(spec)
        err = c.check_fwd()
        ok = all(v <= tol for v in err.values())  # NaN compares False: unwritten output fails
        ms = device_ms(c.kernel_fwd, iters) if ok else float("nan")
        fwd.append({"config": spec, "ok": ok, "rel_err": err, "ms": ms, "GBps": c.gbps(ms, 2)})
    plugin.set_config("")
    err = c.check_fwd()
    default_fwd = {
        "config": res["default_config"],
        "rel_err": err,
        "ok": all(v <= tol for v in err.values()),
        "ms": device_ms(c.kernel_fwd, iters),
    }
    default_fwd["GBps"] = c.gbps(default_fwd["ms"], 2)
    res["fwd"], res["default_fwd"] = fwd, default_fwd
    good = [r for r in fwd if r["ok"]]
    best = min(good, key=lambda r: r["ms"]) if good else None
    res["best_fwd"] = best

    # the public op (fused_layernorm): best configuration, then the default
    def op(i):
        return fused_layernorm(c.xs[i % c.sets], cols, c.w, c.b, 1e-5)

    for name, spec in (("best", best["config"] if best else ""), ("default", "")):
        plugin.set_config(spec)
        res[f"op_fwd_{name}_ms"] = device_ms(op, iters)
        res[f"op_fwd_{name}_call_ms"] = call_ms(op, iters)
    plugin.set_config("")

    # backward configurations (forward at its default)
    bwd = []
    for spec in bwd_configs(cols, dtype) + [""]:
        plugin.set_config(spec)
        err = c.check_bwd()
        ok = all(v <= tol for v in err.values())
        ms = device_ms(c.kernel_bwd, iters) if ok else float("nan")
        bwd.append({"config": spec or "default", "ok": ok, "rel_err": err, "ms": ms, "GBps": c.gbps(ms, 3)})
    plugin.set_config("")
    res["bwd"] = bwd
    c.prepare_bwd()
    res["op_bwd_default_ms"] = device_ms(
        lambda i: layer_norm_bwd(
            c.dys[i % c.sets],
            c.xs[i % c.sets],
            [cols],
            c.mean[i % c.sets],
            c.rstd[i % c.sets],
            c.w,
            True,
            True,
        ),
        iters,
    )
    for k in ("copy", "torch_fwd"):
        res[f"{k}_GBps"] = c.gbps(res[f"{k}_ms"], 2)
    res["torch_bwd_GBps"] = c.gbps(res["torch_bwd_ms"], 3)
    return res


def print_case(r: dict, top: int) -> None:
    print(
        f"\n== {r['rows']}x{r['cols']} {r['dtype']}   copy {r['copy_GBps']:.0f} GB/s   "
        f"torch fwd {r['torch_fwd_ms'] * 1e3:.1f} us ({r['torch_fwd_GBps']:.0f} GB/s)   "
        f"torch bwd {r['torch_bwd_ms'] * 1e3:.1f} us ({r['torch_bwd_GBps']:.0f} GB/s)"
    )
    print(
        f"   {'forward config':48s} {'us':>8s} {'GB/s':>7s} {'%copy':>6s} {'x torch':>8s} {'rel err y':>10s}"
    )
    rows = sorted(r["fwd"], key=lambda e: (not e["ok"], e["ms"] if e["ok"] else 0))
    for e in rows[:top] + [dict(r["default_fwd"], config="DEFAULT " + r["default_fwd"]["config"])]:
        flag = "" if e["ok"] else "  FAILED"
        print(
            f"   {e['config']:48s} {e['ms'] * 1e3:8.1f} {e['GBps']:7.0f} {100 * e['GBps'] / r['copy_GBps']:6.1f} "
            f"{r['torch_fwd_ms'] / e['ms']:8.2f} {e['rel_err']['y']:10.2e}{flag}"
        )
    failed = [e["config"] for e in r["fwd"] if not e["ok"]]
    if failed:
        print(f"   FAILED forward configs ({len(failed)}): {failed}")
    print(
        f"   fused_layernorm op, best config: {r['op_fwd_best_ms'] * 1e3:.1f} us device, "
        f"{r['op_fwd_best_call_ms'] * 1e3:.1f} us per synchronised call; default: "
        f"{r['op_fwd_default_ms'] * 1e3:.1f} us device, {r['op_fwd_default_call_ms'] * 1e3:.1f} us per call "
        f"(torch {r['torch_fwd_call_ms'] * 1e3:.1f} us per call)"
    )
    for e in sorted(r["bwd"], key=lambda e: e["ms"] if e["ok"] else 1e9):
        flag = "" if e["ok"] else "  FAILED"
        print(
            f"   {'backward ' + e['config']:48s} {e['ms'] * 1e3:8.1f} {e['GBps']:7.0f} "
            f"{100 * e['GBps'] / r['copy_GBps']:6.1f} {r['torch_bwd_ms'] / e['ms']:8.2f} "
            f"{max(e['rel_err'].values()):10.2e}{flag}"
        )
    print(f"   layer_norm_bwd op (default): {r['op_bwd_default_ms'] * 1e3:.1f} us device")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--top", type=int, default=12, help="forward configurations printed per shape")
    ap.add_argument("--extra", action="store_true", help="also sweep EXTRA_SHAPES")
    ap.add_argument("--shapes", default="", help="subset, e.g. '32768x4096xbfloat16,8192x768xbfloat16'")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("sweep_layernorm needs a CUDA device")
    shapes = SHAPES + (EXTRA_SHAPES if args.extra else [])
    if args.shapes:
        want = {s.strip() for s in args.shapes.split(",")}
        shapes = [
            s for s in SHAPES + EXTRA_SHAPES if f"{s[0]}x{s[1]}x{str(s[2]).replace('torch.', '')}" in want
        ]
    plugin = Plugin()
    results = {
        "benchmark": "layernorm_sweep",
        "method": " ".join(__doc__.split("\n\n")[1:4]).replace("\n", " "),
        "env": env(),
        "cases": [],
    }
    for rows, cols, dtype in shapes:
        r = sweep_case(plugin, rows, cols, dtype, args.iters)
        results["cases"].append(r)
        print_case(r, args.top)
        torch.cuda.empty_cache()
    print(
        "\nbest forward configuration per shape (edit default_fwd_config() in "
        "cpp/src/backends/cuda/kernels/layernorm/layernorm_config.cpp to adopt):"
    )
    for r in results["cases"]:
        b = r["best_fwd"]
        print(
            f"   {r['rows']}x{r['cols']} {r['dtype']:9s} best {b['config'] if b else '-':44s} "
            f"{b['GBps'] if b else 0:6.0f} GB/s   default {r['default_config']} {r['default_fwd']['GBps']:6.0f} GB/s"
        )
    write_results(results, args.out, "layernorm_sweep")


if __name__ == "__main__":
    main()
