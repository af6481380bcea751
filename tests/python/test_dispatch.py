"""Dispatcher from Python: Python-registered kernels chosen and run by policy, prefer vs
require, reason codes, determinism over repeated calls and threads, tuning and pins."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import KernelPolicy, UnsupportedOperationError
from xpuruntime.dispatch import Decision, DecisionLog

_core = xrt._core


def P(**kwargs):
    """A policy for the private registry (the process registry does not know its kernels;
    Dispatcher.set_policy still validates against the private one)."""
    return KernelPolicy(validate=False, **kwargs)


def _mm(a, b, **attrs):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


@pytest.fixture()
def env():
    """A private registry and dispatcher, so tests neither see nor disturb the process one."""
    reg = _core.KernelRegistry()
    d = _core.Dispatcher(reg)
    return reg, d


def _register_pair(reg, calls=None):
    """Two CPU matmul kernels: 'even_k' (K must be even, float32) and 'any_k' (any)."""

    def even_k(a, b, **attrs):
        if calls is not None:
            calls.append("even_k")
        return _mm(a, b)

    def any_k(a, b, **attrs):
        if calls is not None:
            calls.append("any_k")
        return _mm(a, b)

    xrt.kernels.register(
        "matmul",
        "even_k",
        even_k,
        supports=lambda ctx: (ctx.inputs[0].shape[-1] % 2 == 0, f"K={ctx.inputs[0].shape[-1]} is odd"),
        dtypes=["float32"],
        priority=10,
        registry=reg,
    )
    xrt.kernels.register("matmul", "any_k", any_k, priority=1, registry=reg)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_python_kernel_chosen_by_policy_and_correct(env):
    reg, d = env
    calls: list[str] = []
    _register_pair(reg, calls)
    rng = np.random.default_rng(0)
    a, b = _rand(rng, 17, 6), _rand(rng, 6, 9)
    ref = a.astype(np.float64) @ b.astype(np.float64)

    # The policy picks the lower-priority kernel; it runs and its result is right.
    outs, dec = xrt.dispatch.dispatch(
        "matmul", [a, b], policy=P(matmul="any_k", mode="require"), dispatcher=d, node="mm"
    )
    assert isinstance(dec, Decision)
    assert (dec.chosen, dec.rule, dec.node) == ("any_k", "policy.require", "mm")
    assert calls == ["any_k"]
    np.testing.assert_allclose(np.asarray(outs[0]), ref, rtol=1e-5, atol=1e-5)
    assert dec.candidate("even_k").reason_code == "not_in_policy"

    # Preallocated outputs are filled in place.
    out = np.zeros((17, 9), np.float32)
    outs, dec = xrt.dispatch.dispatch("matmul", [a, b], [out], dispatcher=d)
    assert outs[0] is out and dec.chosen == "even_k" and dec.rule == "auto.first_supported"
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_supports_false_is_recorded_with_reason(env):
    reg, d = env
    _register_pair(reg)
    rng = np.random.default_rng(1)
    a, b = _rand(rng, 4, 7), _rand(rng, 7, 3)  # odd K: even_k says no
    outs, dec = xrt.dispatch.dispatch("matmul", [a, b], policy=P(matmul="even_k"), dispatcher=d)
    assert dec.chosen == "any_k" and dec.rule == "fallback"
    c = dec.candidate("even_k")
    assert (c.verdict, c.reason_code, c.detail) == ("rejected", "python_supports_false", "K=7 is odd")
    np.testing.assert_allclose(np.asarray(outs[0]), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)

    # float64 input: rejected by the declared dtypes before supports() runs.
    dec = xrt.dispatch.select("matmul", [("float64", [4, 8]), ("float64", [8, 3])], dispatcher=d)
    assert dec.candidate("even_k").reason_code == "dtype_unsupported"


def test_require_unsupported_raises_naming_op_kernel_reason(env):
    reg, d = env
    _register_pair(reg)
    pol = P(matmul="even_k", mode="require")
    with pytest.raises(UnsupportedOperationError) as ei:
        xrt.dispatch.select("matmul", [("float32", [4, 7]), ("float32", [7, 3])], policy=pol, dispatcher=d)
    msg = str(ei.value)
    assert (
        "op 'matmul'" in msg and "'even_k'" in msg and "python_supports_false" in msg and "K=7 is odd" in msg
    )
    last = d.explain(1)[0]
    assert last.rule == "none" and last.chosen == ""
    # Named but not registered here: backend_unavailable.
    with pytest.raises(UnsupportedOperationError, match="backend_unavailable"):
        xrt.dispatch.select(
            "matmul",
            [("float32", [4, 8]), ("float32", [8, 3])],
            policy=P(matmul="cublasLt", mode="require"),
            dispatcher=d,
        )


def test_supports_that_raises_is_a_rejection(env):
    reg, d = env
    _register_pair(reg)

    def broken(ctx):
        raise RuntimeError("kaboom")

    xrt.kernels.register("matmul", "broken", _mm, supports=broken, priority=100, registry=reg)
    dec = xrt.dispatch.select("matmul", [("float32", [4, 8]), ("float32", [8, 3])], dispatcher=d)
    assert dec.chosen == "even_k"
    c = dec.candidate("broken")
    assert c.reason_code == "python_supports_error" and "kaboom" in c.detail


def test_kernel_that_raises_reports_its_name(env):
    reg, d = env

    def bad(a, b):
        raise ValueError("shape trouble")

    xrt.kernels.register("matmul", "bad", bad, registry=reg)
    with pytest.raises(
        xrt.XpuRuntimeError, match="Python kernel 'bad' for op 'matmul' raised.*shape trouble"
    ):
        xrt.dispatch.dispatch("matmul", [np.ones((2, 2), np.float32)] * 2, dispatcher=d)


def test_same_selection_100_calls_and_8_threads(env):
    reg, d = env
    _register_pair(reg)
    d.set_policy(P(matmul=["cublasLt", "any_k", "even_k"]))
    spec = [("float32", [32, 64]), ("float32", [64, 16])]
    first = xrt.dispatch.select("matmul", spec, dispatcher=d)
    assert first.chosen == "any_k" and first.rule == "policy.prefer"
    ref = first.to_dict()
    for _ in range(100):
        again = xrt.dispatch.select("matmul", spec, dispatcher=d).to_dict()
        again.pop("seq")
        ref_no_seq = dict(ref)
        ref_no_seq.pop("seq")
        assert again == ref_no_seq

    rng = np.random.default_rng(2)
    a, b = _rand(rng, 32, 64), _rand(rng, 64, 16)
    want = a.astype(np.float64) @ b
    results: list[tuple[str, str, bool]] = []
    errors: list[BaseException] = []

    def worker():
        try:
            for _ in range(25):
                outs, dec = xrt.dispatch.dispatch("matmul", [a, b], dispatcher=d)
                ok = np.allclose(np.asarray(outs[0]), want, rtol=1e-4, atol=1e-4)
                results.append((dec.chosen, dec.rule, ok))
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 200
    assert set(results) == {("any_k", "policy.prefer", True)}


def test_policy_scope_is_per_thread(env):
    reg, d = env
    _register_pair(reg)
    spec = [("float32", [4, 8]), ("float32", [8, 3])]
    d.set_policy(P(matmul="even_k", mode="require"))
    seen_elsewhere = []
    with xrt.dispatch.policy_scope(P(matmul="any_k", mode="require"), dispatcher=d):
        assert xrt.dispatch.select("matmul", spec, dispatcher=d).chosen == "any_k"
        t = threading.Thread(
            target=lambda: seen_elsewhere.append(xrt.dispatch.select("matmul", spec, dispatcher=d).chosen)
        )
        t.start()
        t.join()
    assert seen_elsewhere == ["even_k"]
    assert xrt.dispatch.select("matmul", spec, dispatcher=d).chosen == "even_k"


def test_best_performance_tunes_once_and_exports_pins(env, tmp_path):
    reg, d = env
    runs = {"slow": 0, "fast": 0}

    def slow(a, b):
        runs["slow"] += 1
        time.sleep(0.003)
        return _mm(a, b)

    def tunable(a, b, algorithm=""):
        runs["fast"] += 1
        if algorithm != "vectorized":
            time.sleep(0.003)
        return _mm(a, b)

    xrt.kernels.register("matmul", "slow", slow, priority=5, registry=reg)
    xrt.kernels.register(
        "matmul", "tunable", tunable, algorithms=["loop", "vectorized"], priority=1, registry=reg
    )
    d.set_tuning_options(warmup=1, iterations=3)
    pol = P(auto_strategy="best_performance")
    rng = np.random.default_rng(3)
    a, b = _rand(rng, 8, 8), _rand(rng, 8, 8)

    outs, dec = xrt.dispatch.dispatch("matmul", [a, b], policy=pol, dispatcher=d)
    assert (dec.chosen, dec.algorithm, dec.rule) == ("tunable", "vectorized", "auto.best_performance")
    assert set(dec.timings) == {"slow", "tunable/loop", "tunable/vectorized"}
    assert dec.timings["slow"] > 2.0 and dec.timings["tunable/vectorized"] < dec.timings["slow"]
    assert dec.candidate("slow").time_ms == pytest.approx(dec.timings["slow"])
    assert dec.pin == {"kernel": "tunable", "algorithm": "vectorized"}
    np.testing.assert_allclose(np.asarray(outs[0]), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert runs["slow"] == 4  # warmup + 3, once

    _, dec2 = xrt.dispatch.dispatch("matmul", [a, b], policy=pol, dispatcher=d)
    assert dec2.chosen == "tunable" and runs["slow"] == 4  # cached

    pinned = xrt.dispatch.export_pins(pol, dispatcher=d)
    assert list(pinned.pins.values()) == [{"kernel": "tunable", "algorithm": "vectorized"}]
    path = tmp_path / "pins.json"
    pinned.save(path, format="json")
    # Production: a fresh dispatcher, the pinned policy, no tuning.
    d2 = _core.Dispatcher(reg)
    _, dec3 = xrt.dispatch.dispatch(
        "matmul", [a, b], policy=KernelPolicy.load(path, validate=False), dispatcher=d2
    )
    assert (dec3.rule, dec3.chosen, dec3.algorithm) == ("pinned", "tunable", "vectorized")
    assert runs["slow"] == 4


def test_global_registry_register_list_unregister():
    name = "test_py_softmax"
    try:
        xrt.kernels.register(
            "softmax",
            name,
            lambda x, axis=-1: (
                np.exp(x - x.max(axis, keepdims=True))
                / np.exp(x - x.max(axis, keepdims=True)).sum(axis, keepdims=True)
            ),
            description="numpy softmax",
            dtypes=["float32", "float64"],
        )
        infos = xrt.kernels.list_kernels("softmax", "cpu")
        assert [k.name for k in infos if k.name == name] == [name]
        info = next(k for k in infos if k.name == name)
        assert (info.provider, info.device, info.dtypes, info.description) == (
            "python",
            "cpu",
            ("float32", "float64"),
            "numpy softmax",
        )
        assert name in [k.name for k in xrt.kernels.list_kernels()]
        assert xrt.kernels.list_kernels(device="cuda") == [k for k in xrt.kernels.list_kernels(device="cuda")]
        with pytest.raises(xrt.InvalidArgumentError, match="already has a kernel"):
            xrt.kernels.register("softmax", name, lambda x: x)
        x = np.random.default_rng(4).standard_normal((3, 5))
        y = xrt.kernels.run("softmax", x, policy=KernelPolicy(softmax=name, mode="require"), axis=1)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(np.asarray(y), e / e.sum(1, keepdims=True), rtol=1e-12)
        log = xrt.dispatch.explain(1)
        assert isinstance(log, DecisionLog) and log[0].chosen == name
    finally:
        assert xrt.kernels.unregister("softmax", name)
    assert not xrt.kernels.is_registered("softmax", name)


def test_register_errors():
    with pytest.raises(xrt.InvalidArgumentError, match="did you mean 'softmax'"):
        xrt.kernels.register("sofmax", "k", lambda x: x)
    with pytest.raises(xrt.InvalidArgumentError, match="use 'layernorm'"):
        xrt.kernels.register("LayerNormalization", "k", lambda x: x)
    with pytest.raises(xrt.InvalidArgumentError, match="'auto' is reserved"):
        xrt.kernels.register("softmax", "auto", lambda x: x, registry=_core.KernelRegistry())
    with pytest.raises(xrt.InvalidArgumentError, match="must be callable"):
        xrt.kernels.register("softmax", "k", 3, registry=_core.KernelRegistry())
    reg = _core.KernelRegistry()
    xrt.kernels.register("my_new_op", "k", lambda x: x, new_op=True, registry=reg)
    assert "my_new_op" in xrt.kernels.known_ops(registry=reg)
