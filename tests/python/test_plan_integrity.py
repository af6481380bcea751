"""Saved plans are input from outside (issue 19; DESIGN.md §5): a damaged or edited plan
gives a typed error, never a crash or different outputs; a plan compiled from another
model than the caller names is refused naming both hashes; a CUDA plan records the
environment it was compiled for (issue 15 §7). The crafted-damage classes one by one are
in tests/cpp/test_plan_integrity.cpp; here the same contract through the Python API, on
a real conv + matmul model, with ONNX Runtime as the independent reference."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines.native import engine as native_engine

CUDA_USABLE = "cuda" in native_engine.devices()


def conv_net(seed: int = 0) -> bytes:
    """x[1,3,16,16] -> Conv(8, 3x3) -> Relu -> MaxPool 2 -> Flatten -> Gemm(10) -> Softmax."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    fc = numpy_helper.from_array((rng.standard_normal((512, 10)) / 16).astype(np.float32), "fc")
    fb = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fb")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["g"], name="fc"),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, b, fc, fb],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


X = np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, np.ndarray]:
    """(model bytes, plan bytes, the plan's output on X)."""
    model = conv_net()
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    path = tmp_path_factory.mktemp("plan") / "conv.xrtplan"
    sess.save_plan(path)
    return model, path.read_bytes(), sess.run({"x": X})["y"]


def edited(data: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    """``data`` with ``edit(header)`` applied to its JSON header, resealed."""
    hl = int.from_bytes(data[8:16], "little")
    header = json.loads(data[144 : 144 + hl])
    edit(header)
    blob = data[(144 + hl + 63) // 64 * 64 :]
    new = json.dumps(header).encode()
    out = data[:8] + len(new).to_bytes(8, "little") + data[16:144] + new
    out += b"\0" * ((-len(out)) % 64)
    return bytes(xrt._core.graph.seal_plan(out + blob))


def test_saved_plan_matches_onnxruntime_and_reloads_bit_identical(saved) -> None:  # type: ignore[no-untyped-def]
    ort = pytest.importorskip("onnxruntime")
    model, data, want = saved
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-6)
    assert data[:8] == b"XRTPLAN3"
    loaded = xrt.InferenceSession.load_plan(data)
    assert loaded.plan.format_version == xrt._core.graph.PLAN_FORMAT_VERSION == 3
    assert loaded.plan.environment == {}  # the CPU records none (see docs/plans.md)
    np.testing.assert_array_equal(loaded.run({"x": X})["y"], want)
    assert native_engine.plan_device(data) == "cpu"


def test_single_bit_flips_are_typed_errors_or_bit_identical(saved) -> None:  # type: ignore[no-untyped-def]
    """A few hundred random single-bit flips, each loaded and run in this process: a
    crash fails the test run; a different output fails the assertion."""
    _, data, want = saved
    rng = np.random.default_rng(2026)
    refused = 0
    positions = rng.choice(len(data) * 8, size=300, replace=False)
    for bit in positions:
        b = bytearray(data)
        b[bit // 8] ^= 1 << (bit % 8)
        try:
            out = xrt.InferenceSession.load_plan(bytes(b)).run({"x": X})["y"]
        except xrt.XpuRuntimeError as exc:
            str(exc).encode("utf-8")  # a message, whatever the damage
            refused += 1
            continue
        np.testing.assert_array_equal(out, want, err_msg=f"bit {bit} changed the outputs")
    # Both digests together cover every byte: no flip goes unnoticed.
    assert refused == len(positions)


def test_checksum_mismatch_names_the_damaged_part(saved) -> None:  # type: ignore[no-untyped-def]
    _, data, _ = saved
    blob = bytearray(data)
    blob[-5] ^= 0x40
    with pytest.raises(xrt.InvalidModelError, match="checksum mismatch in the constants blob"):
        xrt.InferenceSession.load_plan(bytes(blob))
    head = bytearray(data)
    head[200] ^= 0x02
    with pytest.raises(xrt.InvalidModelError, match="checksum mismatch in the header"):
        xrt.InferenceSession.load_plan(bytes(head))


def test_crafted_damage_is_refused_typed(saved) -> None:  # type: ignore[no-untyped-def]
    _, data, _ = saved

    def first_arena_value(h: dict) -> dict:
        return next(v for v in h["values"] if v["arena_offset"] >= 0)

    cases = {
        "plan input id -1": lambda h: h["inputs"].__setitem__(0, -1),
        "arena of 0 bytes": lambda h: h["memory"].__setitem__("arena_bytes", 0),
        "offset past the arena": lambda h: first_arena_value(h).__setitem__(
            "arena_offset", h["memory"]["arena_bytes"]
        ),
        "kernel swapped": lambda h: h["steps"][-1].__setitem__("kernel", "cpu_blas"),
        "op type swapped": lambda h: h["steps"][-1].__setitem__("op_type", "Sigmoid"),
    }
    for what, edit in cases.items():
        with pytest.raises(xrt.XpuRuntimeError) as info:
            xrt.InferenceSession.load_plan(edited(data, edit))
        str(info.value).encode("utf-8")
        assert "plan" in str(info.value) or "kernel" in str(info.value), what
    # Raw bytes that are no UTF-8 inside a header string: typed, and a UTF-8 message.
    hl = int.from_bytes(data[8:16], "little")
    header = data[144 : 144 + hl].replace(b'"name":"x"', b'"name":"\xff\xfe"', 1)
    assert header != data[144 : 144 + hl]
    raw = data[:8] + len(header).to_bytes(8, "little") + data[16:144] + header
    raw += b"\0" * ((-len(raw)) % 64) + data[(144 + hl + 63) // 64 * 64 :]
    with pytest.raises(xrt.XpuRuntimeError) as info:
        xrt.InferenceSession.load_plan(bytes(xrt._core.graph.seal_plan(raw)))
    str(info.value).encode("utf-8")


def test_older_container_is_refused_with_a_re_save_hint(saved) -> None:  # type: ignore[no-untyped-def]
    _, data, _ = saved
    old = b"XRTPLAN1" + data[8:]
    with pytest.raises(xrt.InvalidModelError, match="older xpuruntime.*re-save"):
        xrt.InferenceSession.load_plan(old)


def test_model_hash_is_checked_where_the_model_is_given(saved, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, data, want = saved
    path = tmp_path / "conv.xrtplan"
    path.write_bytes(data)
    model_file = tmp_path / "conv.onnx"
    model_file.write_bytes(model)
    digest = hashlib.sha256(model).hexdigest()
    assert xrt._core.graph.ExecutionPlan.deserialize(data).model_hash == digest
    for source in (model, model_file, str(model_file)):
        sess = xrt.InferenceSession(path, device="cpu", engine="native", source_model=source)
        np.testing.assert_array_equal(sess.run({"x": X})["y"], want)
    xrt.InferenceSession(path, device="cpu", engine="native", model_hash=digest.upper())

    other = conv_net(seed=1)
    other_digest = hashlib.sha256(other).hexdigest()
    with pytest.raises(xrt.InvalidModelError) as info:
        xrt.InferenceSession(path, device="cpu", engine="native", source_model=other)
    assert digest in str(info.value) and other_digest in str(info.value)
    with pytest.raises(xrt.InvalidModelError, match="check_model_hash=False"):
        xrt.InferenceSession(path, device="cpu", engine="native", model_hash="0" * 64)
    # Opting out runs the plan anyway.
    sess = xrt.InferenceSession(
        path, device="cpu", engine="native", source_model=other, check_model_hash=False
    )
    np.testing.assert_array_equal(sess.run({"x": X})["y"], want)
    # An in-memory plan is checked the same way.
    plan = xrt._core.graph.ExecutionPlan.deserialize(data)
    with pytest.raises(xrt.InvalidModelError, match=other_digest):
        xrt.InferenceSession(plan, device="cpu", engine="native", source_model=other)
    with pytest.raises(xrt.InvalidArgumentError, match="model_hash must be"):
        xrt.InferenceSession(path, device="cpu", engine="native", model_hash=123)


@pytest.mark.skipif(not CUDA_USABLE, reason="needs a usable CUDA device (GPU test)")
def test_cuda_plan_records_its_environment_and_refuses_another(tmp_path: Path) -> None:
    model = conv_net()
    sess = xrt.InferenceSession(model, device="cuda", engine="native")
    sess.save_plan(tmp_path / "conv_cuda.xrtplan")
    data = (tmp_path / "conv_cuda.xrtplan").read_bytes()
    env = xrt._core.graph.ExecutionPlan.deserialize(data).environment
    assert set(env) == {"gpu_arch", "cuda_runtime", "cublaslt", "cudnn"}
    major, minor = xrt.runtime.device.Device("cuda:0").compute_capability
    assert env["gpu_arch"] == f"sm_{major}{minor}"
    assert env["cuda_runtime"].isdigit() and env["cublaslt"].isdigit()
    loaded = xrt.InferenceSession.load_plan(data)
    np.testing.assert_array_equal(loaded.run({"x": X})["y"], sess.run({"x": X})["y"])
    other = "sm_80" if env["gpu_arch"] != "sm_80" else "sm_90"
    bad = edited(data, lambda h: h["environment"].__setitem__("gpu_arch", other))
    with pytest.raises(xrt.InvalidModelError, match=f"gpu_arch: plan {other}, this device {env['gpu_arch']}"):
        xrt.InferenceSession.load_plan(bad)


def big_constant_model(n: int = 3 << 20) -> bytes:
    """y = x * c + 1 with a float32 constant of ``n`` elements (12 MiB: three 4 MiB
    chunks of the blob digest and a short fourth)."""
    c = numpy_helper.from_array(np.random.default_rng(3).standard_normal(n + 17).astype(np.float32), "c")
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "c"], ["m"], name="mul"),
            helper.make_node("Add", ["m", "one"], ["y"], name="add"),
        ],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n + 17])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n + 17])],
        [c, one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def test_blob_digest_covers_every_chunk_and_older_container_still_loads(tmp_path: Path) -> None:
    """XRTPLAN3 digests the constants in 4 MiB chunks (hashed in parallel): a flip in any
    chunk, the short last one included, is refused; an XRTPLAN2 file (one SHA-256 over
    the blob) still loads and runs bit-identically."""
    model = big_constant_model()
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    x = np.random.default_rng(11).standard_normal((3 << 20) + 17).astype(np.float32)
    want = sess.run({"x": x})["y"]
    c = numpy_helper.to_array(onnx_initializer(model, "c")).astype(np.float64)
    np.testing.assert_allclose(want, x.astype(np.float64) * c + 1, rtol=1e-6, atol=1e-6)
    sess.save_plan(tmp_path / "big.xrtplan")
    data = (tmp_path / "big.xrtplan").read_bytes()
    assert data[:8] == b"XRTPLAN3"
    hl = int.from_bytes(data[8:16], "little")
    blob = (144 + hl + 63) // 64 * 64
    assert len(data) - blob > 3 * (4 << 20)  # more than three chunks
    for at in (blob + 5, blob + (4 << 20) + 3, blob + 2 * (4 << 20) + 101, len(data) - 9):
        damaged = bytearray(data)
        damaged[at] ^= 0x10
        with pytest.raises(xrt.InvalidModelError, match="checksum mismatch in the constants blob"):
            xrt.InferenceSession.load_plan(bytes(damaged))
    v2 = bytes(xrt._core.graph.seal_plan(b"XRTPLAN2" + data[8:]))
    assert v2[80:144] != data[80:144]  # another blob digest: one SHA-256 over the blob
    assert v2[80:144].decode() == hashlib.sha256(data[blob:]).hexdigest()
    np.testing.assert_array_equal(xrt.InferenceSession.load_plan(v2).run({"x": x})["y"], want)
    loaded = xrt.InferenceSession.load_plan(tmp_path / "big.xrtplan")
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], want)
    t = loaded.build_timings()
    for key in ("read", "verify", "parse", "prepare", "upload"):
        assert key in t and t[key] >= 0, (key, t)
    assert any(k.startswith("prepare:") for k in t), t
    assert "passes" in sess.build_timings() and "read" not in sess.build_timings()


def onnx_initializer(model: bytes, name: str):  # type: ignore[no-untyped-def]
    import onnx

    return next(i for i in onnx.load_from_string(model).graph.initializer if i.name == name)
