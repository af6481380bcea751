"""Coverage-guided Python fuzzer (atheris) for the session front end and the policy
wrappers (issue 19).

The contract under test: whatever a caller passes — random model bytes, a mutated
valid model, random policy JSON, random nested dicts as policies, random inputs —
``xpuruntime`` answers with a result or a typed ``XpuRuntimeError`` whose message is
valid UTF-8, never another exception type (``TypeError`` from pybind11,
``UnicodeDecodeError``, ``RecursionError``, ``KeyError``...) and never a crash.

Each input is routed by its first byte to one of the targets below. Run it with a
bounded time (libFuzzer flags pass through)::

    PYTHONPATH=python XRT_BUILD_DIR=build/<dir> python3 fuzz/py_session_fuzzer.py \\
        -max_total_time=60 [corpus_dir ...]

Without ``-max_total_time`` or ``-runs`` it stops after 60 seconds. Needs
``pip install atheris`` (the ``test`` extra), onnx and numpy. A finding is written
as ``crash-<sha1>`` (reproduce: run the fuzzer with that file as its argument) and
becomes a regression test.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import atheris
import numpy as np
from onnx import TensorProto, helper

with atheris.instrument_imports():  # coverage of our code only, not numpy's or onnx's
    import xpuruntime as xrt
    import xpuruntime.engines._common
    import xpuruntime.engines.native.engine
    import xpuruntime.engines.native.frontend
    import xpuruntime.engines.onnx_model
    import xpuruntime.engines.registry
    import xpuruntime.inference.session  # instrumented for coverage
    from xpuruntime.policies import coerce

_core = xrt._core
TYPED = _core.XpuRuntimeError

# Names that reach deep code paths more often than random text does.
_WORDS = [
    "matmul", "conv", "attention", "layernorm", "softmax", "relu", "gemm", "auto",
    "cpu_blas", "cpu_blocked", "cublasLt", "flash_v2", "cudnn", "torch", "mode", "require",
    "prefer", "auto_strategy", "best_performance", "pins", "preferences", "kind",
    "kernel_policy", "execution_policy", "schema_version", "target", "cpu", "cuda", "npu",
    "precision", "fp16", "bf16", "int8", "static_shape", "allow_fallback", "engine", "native",
    "threads", "strict", "no_fallback", "pinned_only", "workspace_limit_bytes", "validate",
]  # fmt: skip


def _model() -> bytes:
    """A small valid model (MatMul + Add + Relu) whose bytes the fuzzer mutates."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.5, -1.0, 2.0])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


MODEL = _model()


def _text(fdp: atheris.FuzzedDataProvider) -> str:
    if fdp.ConsumeBool():
        return fdp.PickValueInList(_WORDS)
    return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 24))  # surrogates included


def _value(fdp: atheris.FuzzedDataProvider, depth: int) -> Any:
    kind = fdp.ConsumeIntInRange(0, 9 if depth < 12 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 20))  # up to 160-bit integers
    if kind == 3:
        return fdp.ConsumeFloat()
    if kind in (4, 5, 6):
        return _text(fdp)
    if kind == 7:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    if kind == 8 and fdp.ConsumeBool():  # a deep chain, as hostile input nests
        inner: Any = _value(fdp, 12)
        for _ in range(fdp.ConsumeIntInRange(0, 3000)):
            inner = {"a": inner} if fdp.ConsumeBool() else [inner]
        return inner
    return {_text(fdp): _value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 5))}


def _mapping(fdp: atheris.FuzzedDataProvider) -> dict:
    return {_text(fdp): _value(fdp, 1) for _ in range(fdp.ConsumeIntInRange(0, 6))}


def _check_message(exc: BaseException) -> None:
    msg = str(exc)
    msg.encode("utf-8")  # UnicodeEncodeError here is a finding: messages are valid UTF-8
    if len(msg) > 1 << 20:
        raise AssertionError(f"unbounded message ({len(msg)} chars): {msg[:200]!r}")


def _typed(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Runs fn; a typed error is an answer, any other exception propagates (a finding)."""
    try:
        return fn(*args, **kwargs)
    except TYPED as exc:
        _check_message(exc)
        return None


def _mutate(fdp: atheris.FuzzedDataProvider, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(fdp.ConsumeIntInRange(1, 8)):
        if not out:
            break
        pos = fdp.ConsumeIntInRange(0, len(out) - 1)
        op = fdp.ConsumeIntInRange(0, 2)
        if op == 0:
            out[pos] = fdp.ConsumeIntInRange(0, 255)
        elif op == 1:
            del out[pos : pos + fdp.ConsumeIntInRange(1, 16)]
        else:
            out[pos:pos] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 16))
    return bytes(out)


def _run_session(sess: Any, fdp: atheris.FuzzedDataProvider) -> None:
    feeds = {}
    for info in sess.get_inputs():
        shape = [
            d if isinstance(d, int) and 0 <= d <= 64 else fdp.ConsumeIntInRange(0, 8) for d in info.shape
        ]
        if int(np.prod(shape, dtype=np.int64)) > 1 << 16:
            return  # keep one input fast
        dtype = np.dtype(info.dtype) if isinstance(info.dtype, str) else np.float32
        feeds[info.name] = np.frombuffer(
            fdp.ConsumeBytes(int(np.prod(shape)) * dtype.itemsize).ljust(
                int(np.prod(shape)) * dtype.itemsize, b"\0"
            ),
            dtype=dtype,
        ).reshape(shape)
    names = None if fdp.ConsumeBool() else [_text(fdp) for _ in range(fdp.ConsumeIntInRange(0, 2))]
    _typed(sess.run, feeds, names)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    target = fdp.ConsumeIntInRange(0, 7)
    if target == 0:  # policy JSON text (any bytes)
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        p = _typed(xrt.KernelPolicy.from_json, raw)
        if p is not None:
            assert xrt.KernelPolicy.from_json(p.to_json()) == p
    elif target == 1:
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        p = _typed(xrt.ExecutionPolicy.from_json, raw)
        if p is not None:
            assert xrt.ExecutionPolicy.from_json(p.to_json()) == p
    elif target == 2:  # dicts: keyword form, JSON form, and through coerce
        d = _mapping(fdp)
        _typed(coerce.core_kernel_policy, d)
        _typed(xrt.KernelPolicy.from_dict, d)
        _typed(lambda: xrt.KernelPolicy(**{k: v for k, v in d.items() if isinstance(k, str)}))
    elif target == 3:
        d = _mapping(fdp)
        _typed(coerce.core_exec_policy, d)
        _typed(xrt.ExecutionPolicy.from_dict, d)
    elif target == 4:  # method calls on a policy with random arguments
        k = xrt.KernelPolicy(matmul="cpu_blas")
        e = xrt.ExecutionPolicy()
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            which = fdp.ConsumeIntInRange(0, 5)
            a, b = _value(fdp, 10), _value(fdp, 10)
            if which == 0:
                _typed(k.set, a, b)
            elif which == 1:
                _typed(k.set_pin, a, b)
            elif which == 2:
                _typed(setattr, k, fdp.PickValueInList(["mode", "auto_strategy"]), a)
            elif which == 3:
                _typed(setattr, e, fdp.PickValueInList(_WORDS), a)
            elif which == 4:
                _typed(e.replace, **{fdp.PickValueInList(_WORDS): a})
            else:
                _typed(k.get, a)
        assert xrt.KernelPolicy.from_json(k.to_json()) == k
        assert xrt.ExecutionPolicy.from_json(e.to_json()) == e
    elif target == 5:  # random bytes as a model
        _typed(xrt.InferenceSession, fdp.ConsumeBytes(fdp.remaining_bytes()), device="cpu", engine="native")
    elif target == 6:  # a mutated valid model, run when it builds
        sess = _typed(xrt.InferenceSession, _mutate(fdp, MODEL), device="cpu", engine="native")
        if sess is not None:
            _run_session(sess, fdp)
    else:  # a valid model under random policies and options
        kp = _mapping(fdp) if fdp.ConsumeBool() else None
        ep = _mapping(fdp) if fdp.ConsumeBool() else None
        options = {}
        if fdp.ConsumeBool():
            options["input_shapes"] = {_text(fdp): _value(fdp, 10)}
        sess = _typed(
            xrt.InferenceSession,
            MODEL,
            device="cpu",
            engine="native",
            kernel_policy=kp,
            exec_policy=ep,
            **options,
        )
        if sess is not None:
            _run_session(sess, fdp)


def main() -> None:
    argv = list(sys.argv)
    if not any(a.startswith(("-max_total_time=", "-runs=")) for a in argv[1:]):
        argv.append("-max_total_time=60")  # bounded by default: CI gives each fuzzer a budget
    if not any(a.startswith("-timeout=") for a in argv[1:]):
        argv.append("-timeout=30")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
