"""best_performance inside sessions (issue 30, deliverable 4), on the CPU.

A native session built under ``KernelPolicy(auto_strategy="best_performance")`` times the
candidate kernels of every case while it builds the plan (each prepared on scratch inputs
of the node's shapes, repeated runs on the host clock), once per case, records the timings
and the margin in the Decision, and pins the winners: ``export_pins`` writes them, a saved
plan replays them, and a session built with the exported pins chooses the same kernels and
gives the same bits. A default (first_supported) build times nothing.

Model: a small MLP built here (MatMul has several CPU kernels: cpu_blas, cpu_blocked,
cpu_packed where AVX-512F exists, onednn where built), random weights and inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime.lock import LockFile

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

BEST = "auto.best_performance"


def mlp(path: Path, seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """x[16, 96] -> MatMul(96x96) -> Relu -> MatMul(96x96) -> Relu -> MatMul(96x40) -> Softmax.

    The first two MatMuls are one case (same shapes and attributes): tuned once.
    """
    rng = np.random.default_rng(seed)
    w = {
        "w1": rng.standard_normal((96, 96)).astype(np.float32) / 10,
        "w2": rng.standard_normal((96, 96)).astype(np.float32) / 10,
        "w3": rng.standard_normal((96, 40)).astype(np.float32) / 10,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        helper.make_node("MatMul", ["r2", "w3"], ["h3"], name="mm3"),
        helper.make_node("Softmax", ["h3"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 40])],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path, w


def reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in w.items()}
    h = np.maximum(x.astype(np.float64) @ f["w1"], 0)
    h = np.maximum(h @ f["w2"], 0)
    h = h @ f["w3"]
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def matmuls(sess: xrt.InferenceSession) -> dict[str, object]:
    return {d.node: d for d in sess.decisions() if d.op == "matmul"}


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    return mlp(tmp_path / "mlp.onnx")


def test_best_performance_session_times_pins_and_replays(model, tmp_path: Path) -> None:
    path, w = model
    x = np.random.default_rng(1).standard_normal((16, 96)).astype(np.float32)
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pol)
    out = sess.run({"x": x})["y"]
    np.testing.assert_allclose(out, reference(x, w), rtol=1e-4, atol=1e-4)

    tuned = matmuls(sess)
    assert set(tuned) == {"mm1", "mm2", "mm3"}
    for d in tuned.values():
        assert d.rule == BEST, (d.node, d.rule, d.detail)
        supported = [c for c in d.candidates if c.verdict == "supported"]
        assert len(supported) >= 2, [(c.kernel, c.reason_code) for c in d.candidates]
        # every supported candidate (and each of its algorithms) was timed on the host clock
        assert len(d.timings) >= 2 and all(v > 0 for v in d.timings.values()), d.timings
        assert all(c.time_ms is not None for c in supported)
        assert "plan step, host clock" in d.detail
        assert "margin" in d.detail or "a tie" in d.detail, d.detail
        assert d.pin == {"kernel": d.chosen, "algorithm": d.algorithm}
        # the winner is the fastest, or a tie within noise that an earlier candidate won
        fastest = min(d.timings.values())
        label = d.chosen + (f"/{d.algorithm}" if d.algorithm else "")
        assert d.timings[label] == fastest or "a tie" in d.detail
    # one case, timed once: the second MatMul took the first one's result
    assert tuned["mm1"].key == tuned["mm2"].key and tuned["mm1"].timings == tuned["mm2"].timings
    assert tuned["mm1"].key != tuned["mm3"].key

    # export_pins: one pin per case the build chose by best_performance (timed or the only
    # candidate), the winners
    pins = sess.export_pins()
    assert pins.auto_strategy == "best_performance"
    best = {d.key: d.chosen for d in sess.decisions() if d.rule == BEST}
    assert {k: v["kernel"] for k, v in pins.pins.items()} == best
    assert {d.key: d.chosen for d in tuned.values()}.items() <= best.items()
    pins_file = tmp_path / "pins.json"
    pins.save(str(pins_file))

    # a saved plan replays the same kernels and bits
    plan_file = tmp_path / "mlp.xrtplan"
    sess.save_plan(plan_file)
    loaded = xrt.InferenceSession.load_plan(plan_file, kernel_policy=pol)
    assert {n: (d.chosen, d.algorithm) for n, d in matmuls(loaded).items()} == {
        n: (d.chosen, d.algorithm) for n, d in tuned.items()
    }
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], out)

    # a session built with the exported pins: pinned, the same kernels, no timing, same bits
    pinned_policy = xrt.KernelPolicy.load(str(pins_file))
    again = xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pinned_policy)
    for n, d in matmuls(again).items():
        assert (d.rule, d.chosen, d.algorithm) == ("pinned", tuned[n].chosen, tuned[n].algorithm)
        assert not d.timings
    np.testing.assert_array_equal(again.run({"x": x})["y"], out)


def test_a_second_build_in_the_process_reuses_the_tuned_cases(model) -> None:
    path, _ = model
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    first = matmuls(xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pol))
    second = matmuls(xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pol))
    for n, d in first.items():
        assert (second[n].chosen, second[n].timings) == (d.chosen, d.timings)


def test_default_build_times_nothing(model) -> None:
    path, _ = model
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native")
    for d in matmuls(sess).values():
        assert d.rule == "auto.first_supported" and not d.timings, (d.rule, d.timings)
        assert "best_performance" not in d.detail
    assert not sess.export_pins().pins


def test_single_candidate_cases_are_not_run(model) -> None:
    """Softmax has one CPU kernel: best_performance records it as the only candidate, untimed."""
    path, _ = model
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pol)
    (d,) = [d for d in sess.decisions() if d.op == "softmax"]
    assert [c.kernel for c in d.candidates if c.verdict == "supported"] == [d.chosen]
    assert d.rule == BEST and not d.timings and "only candidate" in d.detail, d.detail


def test_lock_of_a_tuned_session_shows_the_margin(model, tmp_path: Path) -> None:
    path, _ = model
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pol)
    lock = sess.lock(tmp_path / "mlp.lock.json")
    nodes = [n for b in lock.buckets for n in b["nodes"] if n["op"] == "matmul"]
    assert nodes and all(n["rule"] == BEST for n in nodes)
    for n in nodes:
        assert len(n["timings_ms"]) >= 2
        assert n["margin_pct"] >= 0.0 or n["tie"], n
        assert "margin" in n["margin"] or "a tie" in n["margin"]
    data = json.loads((tmp_path / "mlp.lock.json").read_text())
    assert any("margin_pct" in n for b in data["buckets"] for n in b["nodes"])
    # the locked session replays the tuned kernels without timing
    x = np.random.default_rng(3).standard_normal((16, 96)).astype(np.float32)
    ref = sess.run({"x": x})["y"]
    locked = xrt.InferenceSession(str(path), lock=tmp_path / "mlp.lock.json", kernel_policy=pol)
    np.testing.assert_array_equal(locked.run({"x": x})["y"], ref)
    for n, d in matmuls(locked).items():
        assert d.rule == "pinned" and d.chosen == matmuls(sess)[n].chosen


def test_export_pins_needs_the_native_engine(model) -> None:
    pytest.importorskip("onnxruntime")
    path, _ = model
    sess = xrt.InferenceSession(str(path), device="cpu", engine="onnxruntime")
    with pytest.raises(xrt.UnsupportedOperationError, match="native engine"):
        sess.export_pins()


def test_cli_run_with_a_lock_replays_the_tuned_kernels(model, tmp_path: Path, capsys) -> None:
    from xpuruntime.cli.main import main

    path, w = model
    pol = tmp_path / "best.json"
    xrt.KernelPolicy(auto_strategy="best_performance").save(str(pol))
    lock_path = tmp_path / "cli.lock.json"
    assert main(["lock", str(path), "-o", str(lock_path), "--policy", str(pol), "--device", "cpu"]) == 0
    tuned = [n for b in LockFile.load(lock_path).buckets for n in b["nodes"] if n["op"] == "matmul"]
    assert tuned and all(n["rule"] == BEST and "margin_pct" in n for n in tuned)
    x = np.random.default_rng(7).standard_normal((16, 96)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    capsys.readouterr()
    # no --policy: the lock's own policies; every locked case is pinned
    argv = ["run", str(path), "--lock", str(lock_path), "--frozen", "--inputs", str(tmp_path / "in.npz")]
    assert main([*argv, "--save-outputs", str(tmp_path / "out.npz")]) == 0
    text = capsys.readouterr().out
    assert "pinned" in text, text
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["y"], reference(x, w), rtol=1e-4, atol=1e-4)
        kernels = {n["node"]: n["kernel"] for n in tuned}
        sess = xrt.InferenceSession(str(path), lock=lock_path, kernel_policy=xrt.KernelPolicy.load(str(pol)))
        assert {n: d.chosen for n, d in matmuls(sess).items()} == kernels
        np.testing.assert_array_equal(z["y"], sess.run({"x": x})["y"])
    # a changed library version in the lock: one line naming the field, exit status 1
    data = json.loads(lock_path.read_text())
    data["libraries"]["xpuruntime"] = "0.0.1"
    lock_path.write_text(json.dumps(data))
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "libraries.xpuruntime: 0.0.1" in err and len(err.strip().splitlines()) == 1, err


def test_pin_sets_are_cached_and_say_why_they_rebuilt(model, tmp_path: Path, monkeypatch) -> None:
    from xpuruntime import cache as xcache
    from xpuruntime.cache import ArtifactCache

    path, w = model
    store = ArtifactCache(tmp_path / "cache")
    pins, first = xcache.pin_set(str(path), cache=store)
    assert first.status == "miss" and "first build" in first.reason and first.decision.rule == "cache.miss"
    assert pins.auto_strategy == "best_performance" and pins.pins
    again, second = xcache.pin_set(str(path), cache=store)
    assert second.hit and again.pins == pins.pins
    # the cached pins build a session that times nothing and chooses the tuned kernels
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=again)
    assert all(d.rule == "pinned" and not d.timings for d in matmuls(sess).values())
    assert {d.key: d.chosen for d in matmuls(sess).values()}.items() <= {
        k: v["kernel"] for k, v in pins.pins.items()
    }.items()
    x = np.random.default_rng(9).standard_normal((16, 96)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})["y"], reference(x, w), rtol=1e-4, atol=1e-4)
    # a key change misses with its reason
    _, b = xcache.pin_set(str(path), cache=store, kernel_policy=xrt.KernelPolicy(matmul=["cpu_blas", "auto"]))
    assert b.status == "miss" and "policy.kernel.preferences.matmul" in b.reason, b.reason
    import xpuruntime.cache.artifacts as art

    real = art.library_versions
    monkeypatch.setattr(art, "library_versions", lambda *a: {**real(*a), "onednn": "0.0"})
    _, b = xcache.pin_set(str(path), cache=store)
    assert b.status == "miss" and "library changed: onednn" in b.reason, b.reason
    monkeypatch.setattr(art, "library_versions", real)
    # a corrupted entry is detected by its digest, rebuilt and reported
    payload = second.path
    assert payload is not None and payload.is_file()
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0x01
    payload.write_bytes(bytes(data))
    rebuilt, b = xcache.pin_set(str(path), cache=store)
    assert b.status == "corrupt" and "SHA-256" in b.reason and rebuilt.pins
    assert xcache.pin_set(str(path), cache=store)[1].hit


def test_an_offline_preview_times_nothing_and_says_so(model) -> None:
    path, _ = model
    pol = xrt.KernelPolicy(auto_strategy="best_performance")
    xrt._core.Dispatcher.instance().clear_tuning_cache()  # no case tuned in this process yet
    preview = xrt.preview_plan(str(path), device="cpu", kernel_policy=pol)
    mms = [d for d in preview.decisions if d["op"] == "matmul"]
    assert mms
    for d in mms:
        assert d["rule"] == "auto.first_supported" and not d.get("timings"), d
        assert "timing skipped (an offline preview runs no kernels" in d["detail"], d["detail"]
    # once a build has tuned the cases, a preview shows the winners that build would reuse
    built = matmuls(xrt.InferenceSession(str(path), device="cpu", engine="native", kernel_policy=pol))
    after = {d["node"]: d for d in xrt.preview_plan(str(path), device="cpu", kernel_policy=pol).decisions}
    for n, d in built.items():
        assert (after[n]["rule"], after[n]["chosen"]) == (BEST, d.chosen)
