"""The content-addressed artifact cache (issue 32), for every artifact kind the CPU has:
native plans, ONNX Runtime optimized models, OpenVINO compiled blobs. A second build
hits; each key change misses and names the reason (recorded as a Decision); a corrupted
entry is detected, rebuilt and reported; two processes writing one key leave one valid
entry; prune keeps the newest within the byte limit; the `cache` CLI.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import cache as xcache
from xpuruntime.cache import ArtifactCache, artifact_key

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(path: Path, seed: int = 0) -> Path:
    """x[4, 32] -> MatMul(32x16) -> Add -> Relu (static shapes)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
            helper.make_node("Relu", ["hb"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [w, b],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _reference(path: Path, x: np.ndarray) -> np.ndarray:
    m = onnx.load(str(path))
    p = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
    return np.maximum(x.astype(np.float64) @ p["w"] + p["b"], 0)


def _run(kind: str, runnable, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    if kind == "openvino_blob":
        return np.asarray(runnable({"x": x})[runnable.outputs[0]])
    return np.asarray(runnable.run({"x": x})["y"])


def _build(kind: str, model: Path, cache: ArtifactCache, **kw):  # type: ignore[no-untyped-def]
    if kind == "native_plan":
        return xcache.native_plan(str(model), cache=cache, **kw)
    if kind == "onnxruntime_model":
        pytest.importorskip("onnxruntime")
        kw.pop("kernel_policy", None)
        return xcache.onnxruntime_model(str(model), cache=cache, **kw)
    pytest.importorskip("openvino")
    kw.pop("kernel_policy", None)
    return xcache.openvino_blob(str(model), cache=cache, **kw)


KINDS = ["native_plan", "onnxruntime_model", "openvino_blob"]


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    return _model(tmp_path / "m.onnx")


@pytest.mark.parametrize("kind", KINDS)
def test_second_build_hits_and_gives_the_same_outputs(kind: str, model: Path, tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    first, b1 = _build(kind, model, cache)
    assert b1.status == "miss" and "first build" in b1.reason
    assert b1.decision.rule == "cache.miss" and b1.decision.op == "cache"
    second, b2 = _build(kind, model, cache)
    assert b2.hit and b2.decision.rule == "cache.hit", b2.reason
    y1, y2 = _run(kind, first, x), _run(kind, second, x)
    np.testing.assert_allclose(y1, _reference(model, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(y1, y2)
    if kind != "openvino_blob":
        assert second.explain()[0].rule == "cache.hit"  # the session's own log says so


@pytest.mark.parametrize("kind", KINDS)
def test_each_key_change_misses_with_its_reason(kind: str, model: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cache = ArtifactCache(tmp_path / "cache")
    _build(kind, model, cache)
    # the policy
    _, b = _build(kind, model, cache, exec_policy=xrt.ExecutionPolicy(threads=1))
    assert b.status == "miss" and "policy changed" in b.reason and "policy.exec.threads" in b.reason, b.reason
    if kind == "native_plan":
        kp = xrt.KernelPolicy(matmul=["cpu_blas", "auto"])
        _, b = _build(kind, model, cache, kernel_policy=kp)
        assert "policy.kernel.preferences.matmul" in b.reason, b.reason
    # the model
    other = _model(tmp_path / "other.onnx", seed=7)
    _, b = _build(kind, other, cache)
    assert b.status == "miss" and "model changed" in b.reason, b.reason
    # a library version and the device (as a new release or another machine would report them)
    import xpuruntime.cache.artifacts as art

    real_libs, real_dev = art.library_versions, art.device_fields
    monkeypatch.setattr(art, "library_versions", lambda *a: {**real_libs(*a), "xpuruntime": "99.0"})
    _, b = _build(kind, model, cache)
    assert b.status == "miss" and f"library changed: xpuruntime {xrt.__version__} → 99.0" in b.reason, (
        b.reason
    )
    assert b.decision.rule == "cache.miss" and "xpuruntime" in b.decision.detail
    monkeypatch.setattr(art, "library_versions", real_libs)
    monkeypatch.setattr(art, "device_fields", lambda d: {**real_dev(d), "name": "Another CPU"})
    _, b = _build(kind, model, cache)
    assert b.status == "miss" and "device changed: name" in b.reason and "Another CPU" in b.reason, b.reason


@pytest.mark.parametrize("kind", KINDS)
def test_corrupted_entry_is_detected_rebuilt_and_reported(kind: str, model: Path, tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    _, b1 = _build(kind, model, cache)
    payload = b1.path
    assert payload is not None and payload.is_file()
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    problems = cache.verify()
    assert len(problems) == 1 and "SHA-256" in problems[0]
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    runnable, b2 = _build(kind, model, cache)
    assert b2.status == "corrupt" and "SHA-256" in b2.reason, b2.reason
    assert b2.decision.rule == "cache.corrupt" and "rebuilt" in b2.decision.detail
    np.testing.assert_allclose(_run(kind, runnable, x), _reference(model, x), rtol=1e-4, atol=1e-5)
    assert cache.verify() == []
    _, b3 = _build(kind, model, cache)
    assert b3.hit


def _writer(root: str, key_fields: dict, seed: int, rounds: int) -> None:  # type: ignore[type-arg]
    from xpuruntime.cache import ArtifactCache, ArtifactKey

    cache = ArtifactCache(root)
    key = ArtifactKey(**key_fields)
    payload = np.random.default_rng(seed).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    for _ in range(rounds):
        cache.store(key, payload)


def test_two_processes_writing_one_key_leave_one_valid_entry(model: Path, tmp_path: Path) -> None:
    key = artifact_key("native_plan", str(model))
    root = tmp_path / "cache"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(root), key.to_dict(), seed, 40)) for seed in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    cache = ArtifactCache(root)
    folder = root / "artifacts" / "native_plan"
    assert len(list(folder.glob("*.json"))) == 1
    assert len(list(folder.glob("*.bin"))) == 1
    assert not list(folder.glob(".*tmp"))
    look = cache.lookup(key)
    assert look.hit, look.reason
    candidates = [
        np.random.default_rng(s).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes() for s in (1, 2)
    ]
    assert look.payload in candidates
    assert cache.verify() == []


def _builder(root: str, model: str, kind: str, barrier) -> None:  # type: ignore[no-untyped-def]
    from xpuruntime import cache as xc

    barrier.wait(60)  # both processes build and store at the same moment
    build = {"native_plan": xc.native_plan, "onnxruntime_model": xc.onnxruntime_model}[kind]
    build(model, cache=xc.ArtifactCache(root))


@pytest.mark.parametrize("kind", ["native_plan", "onnxruntime_model"])
def test_two_processes_building_one_artifact_leave_one_valid_entry(
    kind: str, model: Path, tmp_path: Path
) -> None:
    if kind == "onnxruntime_model":
        pytest.importorskip("onnxruntime")
    root = tmp_path / "cache"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_builder, args=(str(root), str(model), kind, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    folder = root / "artifacts" / kind
    assert len(list(folder.glob("*.json"))) == 1 and len(list(folder.glob("*.bin"))) == 1
    cache = ArtifactCache(root)
    assert cache.verify() == []
    runnable, build = _build(kind, model, cache)
    assert build.hit, build.reason
    x = np.random.default_rng(4).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(kind, runnable, x), _reference(model, x), rtol=1e-4, atol=1e-5)


def test_prune_keeps_the_newest_within_the_byte_limit(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    base = artifact_key("native_plan", b"model bytes")
    now = time.time()
    for i in range(5):
        key = replace(base, options={"i": i})
        cache.store(key, bytes([i]) * 1000)
        meta = cache.artifacts / "native_plan" / f"{key.digest()}.json"
        os.utime(meta, (now - 100 * (5 - i), now - 100 * (5 - i)))  # entry 4 is the newest
    sizes = {e.meta["key"]["options"]["i"]: e.size for e in cache.entries()}
    limit = sizes[4] + sizes[3] + sizes[2] // 2  # room for two entries and a half
    removed = cache.prune(max_bytes=limit)
    assert sorted(e.meta["key"]["options"]["i"] for e in removed) == [0, 1, 2]
    kept = cache.entries()
    assert [e.meta["key"]["options"]["i"] for e in kept] == [4, 3]
    assert sum(e.size for e in kept) <= limit
    removed = cache.prune(older_than_s=150)  # entry 3 is 200 s old
    assert [e.meta["key"]["options"]["i"] for e in removed] == [3]
    assert cache.verify() == []


def test_cache_cli(model: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from xpuruntime.cli.main import main

    root = tmp_path / "cache"
    cache = ArtifactCache(root)
    xcache.native_plan(str(model), cache=cache)
    assert main(["cache", "why", str(model), "--kind", "native_plan", "--root", str(root)]) == 0
    assert "native_plan: hit" in capsys.readouterr().out
    pol = tmp_path / "ep.json"
    pol.write_text('{"threads": 1}')
    assert (
        main(
            [
                "cache",
                "why",
                str(model),
                "--kind",
                "native_plan",
                "--exec-policy",
                str(pol),
                "--root",
                str(root),
            ]
        )
        == 0
    )
    assert "policy.exec.threads" in capsys.readouterr().out
    assert main(["cache", "ls", "--root", str(root)]) == 0
    assert "native_plan" in capsys.readouterr().out
    assert main(["cache", "verify", "--root", str(root)]) == 0
    entry = cache.entries()[0]
    payload = entry.path.parent / entry.meta["payload"]
    payload.write_bytes(b"garbage")
    assert main(["cache", "verify", "--root", str(root)]) == 1
    assert "SHA-256" in capsys.readouterr().out
    assert main(["cache", "verify", "--repair", "--root", str(root)]) == 0
    assert cache.entries() == []
    xcache.native_plan(str(model), cache=cache)
    assert main(["cache", "prune", "--max-bytes", "1", "--root", str(root)]) == 0
    assert "removed 1" in capsys.readouterr().out
    assert cache.entries() == []


def test_cache_cli_user_mistakes_are_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from xpuruntime.cli.main import main

    assert main(["cache", "why", str(tmp_path / "missing.onnx"), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "error: InvalidArgumentError: cannot read the model" in err and "\n" not in err
    with pytest.raises(SystemExit, match="needs --max-bytes"):
        main(["cache", "prune", "--root", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["cache", "prune", "--older-than", "soon", "--root", str(tmp_path)])
    assert "expected a duration" in capsys.readouterr().err
