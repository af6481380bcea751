"""A mutation fuzzer over model bytes: the native engine must reject or run every
mutant, raising only xpuruntime's typed errors, and never crash.

Seeds: the bundled demo model (conv stem + transformer block), a small MLP and a
small CNN. Mutations: byte-level (bit flips, byte overwrites, truncation, chunk
deletion/duplication/insertion) and structure-aware (attribute integers, tensor
dims, op types, input wiring, initializer sizes) so that many mutants pass the ONNX
checker and reach the compiler and kernels. The cases run in a child process so a
crash (signal) is detected and reported with the case that caused it; the child
exits 1 on any exception that is not an XpuRuntimeError. ``XRT_FUZZ_CASES`` sets the
number of cases (default 3000), ``XRT_FUZZ_SEED`` the seed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("onnx")

CHILD = textwrap.dedent(
    r"""
    import os, random, sys, warnings
    warnings.filterwarnings("ignore")
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import xpuruntime as xrt
    from xpuruntime.models import demo_model_path

    def mlp():
        r = np.random.default_rng(1)
        inits = [numpy_helper.from_array(r.standard_normal((8, 16)).astype(np.float32), "w1"),
                 numpy_helper.from_array(r.standard_normal(16).astype(np.float32), "b1"),
                 numpy_helper.from_array(np.array([0, -1], np.int64), "shape")]
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["a"]),
                 helper.make_node("Tanh", ["a"], ["t"]), helper.make_node("Reshape", ["t", "shape"], ["r"]),
                 helper.make_node("Softmax", ["r"], ["y"], axis=1)]
        g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    def cnn():
        r = np.random.default_rng(2)
        inits = [numpy_helper.from_array(r.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
                 numpy_helper.from_array(r.standard_normal(4).astype(np.float32), "b"),
                 numpy_helper.from_array(np.array([1, 1, 1, 1], np.int64), "pads")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
                 helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Pad", ["p", "pads"], ["q"], mode="reflect"),
                 helper.make_node("GlobalAveragePool", ["q"], ["g"]),
                 helper.make_node("Flatten", ["g"], ["y"])]
        g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    SEEDS = [demo_model_path().read_bytes(), mlp(), cnn()]

    def mutate_bytes(b, rng):
        b = bytearray(b)
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(7)
            if not b:
                break
            i = rng.randrange(len(b))
            if k == 0: b[i] ^= 1 << rng.randrange(8)
            elif k == 1: b[i] = rng.randrange(256)
            elif k == 2: del b[i:]
            elif k == 3: del b[i:i + rng.randint(1, 64)]
            elif k == 4: b[i:i] = b[i:i + rng.randint(1, 64)]
            elif k == 5: b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            else: b[i] = rng.choice([0x00, 0x7f, 0x80, 0xff])
        return bytes(b)

    OPS = ["Add", "Mul", "Relu", "Conv", "MatMul", "Reshape", "Transpose", "Softmax", "Gather", "Concat",
           "Slice", "Split", "Pad", "MaxPool", "ReduceMean", "LayerNormalization", "Expand", "Tile", "Where",
           "Cast", "Squeeze", "Unsqueeze", "Range", "CumSum", "Trilu", "ConstantOfShape", "Erf", "Gemm"]

    def mutate_proto(b, rng):
        m = onnx.load_from_string(b)
        g = m.graph
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(6)
            if k == 0 and g.node:
                n = rng.choice(g.node)
                ints = [a for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
                if ints:
                    a = rng.choice(ints)
                    if a.type == onnx.AttributeProto.INT: a.i = rng.randint(-4, 9)
                    elif a.ints: a.ints[rng.randrange(len(a.ints))] = rng.randint(-4, 9)
            elif k == 1 and g.node:
                rng.choice(g.node).op_type = rng.choice(OPS)
            elif k == 2 and g.node:
                n = rng.choice(g.node)
                names = [v for nd in g.node for v in nd.output] + [i.name for i in g.initializer] + [i.name for i in g.input]
                if n.input:
                    n.input[rng.randrange(len(n.input))] = rng.choice(names)
            elif k == 3 and g.initializer:
                t = rng.choice(g.initializer)
                if t.dims:
                    t.dims[rng.randrange(len(t.dims))] = rng.randint(0, 9)
            elif k == 4 and g.initializer:
                t = rng.choice(g.initializer)
                if t.data_type == TensorProto.INT64:
                    arr = numpy_helper.to_array(t).copy().reshape(-1)
                    if arr.size:
                        arr[rng.randrange(arr.size)] = rng.randint(-3, 70)
                        t.CopyFrom(numpy_helper.from_array(arr.reshape(numpy_helper.to_array(t).shape), t.name))
            else:
                vi = rng.choice(list(g.input) + list(g.output))
                dims = vi.type.tensor_type.shape.dim
                if dims:
                    d = dims[rng.randrange(len(dims))]
                    if rng.random() < 0.5: d.dim_value = rng.randint(0, 40)
                    else: d.dim_param = "s"
        return m.SerializeToString()

    def feeds(sess, rng):
        out = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) and d >= 0 else 2 for d in i.shape]
            if int(np.prod(shape)) > 1 << 20:
                return None
            dt = np.dtype("bool" if i.dtype == "bool" else i.dtype)
            if dt.kind == "f":
                out[i.name] = np.random.default_rng(0).standard_normal(shape).astype(dt)
            else:
                out[i.name] = np.random.default_rng(0).integers(0, 3, size=shape).astype(dt)
        return out

    cases = int(sys.argv[1]); seed = int(sys.argv[2])
    rng = random.Random(seed)
    counts = {"ran": 0, "rejected": 0}
    for case in range(cases):
        base = SEEDS[case % len(SEEDS)]
        try:
            data = mutate_proto(base, rng) if rng.random() < 0.5 else mutate_bytes(base, rng)
        except Exception:
            data = mutate_bytes(base, rng)
        sys.stderr.write(f"case {case}\n")
        try:
            sess = xrt.InferenceSession(data, device="cpu", engine="native")
            f = feeds(sess, rng)
            if f is not None:
                sess.run(f)
            counts["ran"] += 1
        except xrt.XpuRuntimeError:
            counts["rejected"] += 1
        except Exception as exc:
            path = f"fuzz_case_{seed}_{case}.onnx"
            open(path, "wb").write(data)
            print(f"case {case}: untyped {type(exc).__name__}: {exc} (mutant saved to {path})")
            sys.exit(1)
    print(f"fuzz: {cases} cases, {counts['ran']} ran, {counts['rejected']} rejected with typed errors")
    """
)


def test_mutated_models_never_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cases = int(os.environ.get("XRT_FUZZ_CASES", "3000"))
    seed = int(os.environ.get("XRT_FUZZ_SEED", "20261122"))
    env = dict(os.environ, XRT_MAX_TENSOR_BYTES=str(64 << 20), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(cases), str(seed)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=1800,
    )
    last_case = [line for line in proc.stderr.splitlines() if line.startswith("case ")][-1:]
    assert proc.returncode == 0, (
        f"fuzzer child failed (exit {proc.returncode}; a negative code is a crash by signal) at "
        f"{last_case}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    print(proc.stdout.strip().splitlines()[-1])
