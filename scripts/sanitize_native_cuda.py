#!/usr/bin/env python3
"""One run of each given ONNX model through the native engine on CUDA (fp32 and fp16),
for compute-sanitizer (scripts/gpu_check.sh sanitize). Imports neither torch nor onnx
at run time beyond what the engine needs, so the sanitized process is small.

    compute-sanitizer --tool memcheck python3 scripts/sanitize_native_cuda.py a.onnx b.onnx
"""

from __future__ import annotations

import sys

import numpy as np
import xpuruntime as xrt

_NP = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "bool": np.bool_}


def feeds(sess: xrt.InferenceSession, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else (2 if k == 0 else 16) for k, d in enumerate(i.shape)]
        dt = _NP[i.dtype]
        if dt is np.int64 or dt is np.int32:
            arr = rng.integers(0, 100, size=shape).astype(dt)
            if "mask" in i.name:
                arr = np.ones(shape, dt)
        else:
            arr = rng.standard_normal(shape).astype(dt)
        out[i.name] = arr
    return out


def main(paths: list[str]) -> int:
    rng = np.random.default_rng(0)
    for path in paths:
        for precision in ("fp32", "fp16"):
            sess = xrt.InferenceSession(
                path, engine="native", device="cuda", exec_policy=xrt.ExecutionPolicy(precision=precision)
            )
            outs = sess.run(feeds(sess, rng))
            finite = all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in outs.values())
            print(f"{path} {precision}: {len(outs)} outputs, finite={finite}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
