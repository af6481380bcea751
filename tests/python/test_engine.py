"""The native engine through InferenceSession: API, policies, explain, plans, threads.

References: ONNX Runtime's CPU provider (independent implementation) on fresh random
inputs; tolerance 1e-5 relative to the output scale unless stated.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.models import demo_model_path


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions (and their arenas) before other modules run, so
    allocator-statistics tests elsewhere never see them released mid-test."""
    yield
    gc.collect()


DEMO = str(demo_model_path())


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def ort_run(model: str | bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def mlp_model(batch: int | str = "N") -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y0"], name="fc2"),
        helper.make_node("Softmax", ["y0"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [w1, b1, w2],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # readable by every onnxruntime the tests use
    return m


def image(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32), dtype=np.float32)


def test_demo_model_matches_onnxruntime_at_several_batch_sizes() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", engine="native")
    for batch, seed in ((1, 0), (3, 1), (1, 2)):
        x = image(batch, seed)
        out = sess.run({"image": x})["logits"]
        (ref,) = ort_run(DEMO, {"image": x})
        assert out.shape == (batch, 10) and out.dtype == np.float32
        assert rel_err(out, ref) < 1e-5


def test_io_info_keeps_symbolic_dims() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu")
    (inp,) = sess.get_inputs()
    (out,) = sess.get_outputs()
    assert (inp.name, inp.shape, inp.dtype) == ("image", ("batch", 3, 32, 32), "float32")
    assert (out.name, out.shape, out.dtype) == ("logits", ("batch", 10), "float32")
    assert sess.engine == "native" and sess.device == "cpu"


def test_model_from_bytes_proto_and_path_agree(tmp_path: Path) -> None:
    proto = mlp_model()
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, path)
    x = np.random.default_rng(3).standard_normal((5, 8), dtype=np.float32)
    outs = [
        xrt.InferenceSession(m, device="cpu").run({"x": x})["y"]
        for m in (proto, proto.SerializeToString(), str(path), path)
    ]
    (ref,) = ort_run(proto.SerializeToString(), {"x": x})
    for o in outs:
        np.testing.assert_array_equal(o, outs[0])
    assert rel_err(outs[0], ref) < 1e-5


def test_external_data_is_loaded(tmp_path: Path) -> None:
    proto = mlp_model()
    onnx.save(
        proto,
        tmp_path / "ext.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (tmp_path / "weights.bin").stat().st_size > 0
    x = np.random.default_rng(4).standard_normal((2, 8), dtype=np.float32)
    out = xrt.InferenceSession(str(tmp_path / "ext.onnx"), device="cpu").run({"x": x})["y"]
    (ref,) = ort_run(mlp_model().SerializeToString(), {"x": x})  # save() moved proto's data out
    assert rel_err(out, ref) < 1e-5


def test_inputs_as_tensor_and_dlpack_objects() -> None:
    sess = xrt.InferenceSession(mlp_model(), device="cpu")
    x = np.random.default_rng(5).standard_normal((3, 8), dtype=np.float32)
    ref = sess.run({"x": x})["y"]
    t = xrt.from_dlpack(x)  # an xpuruntime Tensor viewing x
    np.testing.assert_array_equal(sess.run({"x": t})["y"], ref)

    class Producer:  # anything with __dlpack__ works
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __dlpack__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return self.a.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):  # type: ignore[no-untyped-def]
            return self.a.__dlpack_device__()

    np.testing.assert_array_equal(sess.run({"x": Producer(x)})["y"], ref)
    np.testing.assert_array_equal(sess.run({"x": x[:, ::1].T.copy().T})["y"], ref)  # non-contiguous


def test_output_names_select_outputs() -> None:
    sess = xrt.InferenceSession(mlp_model(), device="cpu")
    x = np.ones((2, 8), np.float32)
    assert list(sess.run({"x": x}, output_names=["y"])) == ["y"]


def test_explain_records_every_node_and_the_engine() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [1, 3, 32, 32]})
    log = sess.explain()
    ops = [d.op for d in log]
    assert ops[0] == "engine" and log[0].chosen == "native@cpu"
    for key in ("matmul", "layernorm", "attention", "fusion"):  # softmax: fused into attention
        assert key in ops
    # convolutions: the model's NCHW Conv, or NhwcConv where oneDNN runs them channels-last
    assert "conv" in ops or ("conv_nhwc" in ops and "layout" in ops)
    assert len(log) >= len(sess.plan.steps) + 1
    for d in log:
        assert d.chosen and d.rule
    text = str(log)
    assert ("cpu_direct" in text or "cpu_im2col" in text) and "layernorm" in text


def test_kernel_policy_selects_the_gemm_and_is_recorded() -> None:
    x = image(2, 9)
    base = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [2, 3, 32, 32]})
    pol = xrt.KernelPolicy(matmul="cpu_blocked")
    sess = xrt.InferenceSession(DEMO, device="cpu", kernel_policy=pol, input_shapes={"image": [2, 3, 32, 32]})
    mm = [d for d in sess.explain() if d.op == "matmul"]
    assert mm and all(d.chosen == "cpu_blocked" and d.rule == "policy.prefer" for d in mm)
    assert rel_err(sess.run({"image": x})["logits"], base.run({"image": x})["logits"]) < 1e-5
    assert sess.plan.policy_fingerprint != base.plan.policy_fingerprint


def test_policy_require_of_an_unfit_kernel_raises() -> None:
    pol = xrt.KernelPolicy(conv="cpu_depthwise", mode="require")
    with pytest.raises(xrt.UnsupportedOperationError, match="conv.*cpu_depthwise"):
        xrt.InferenceSession(DEMO, device="cpu", kernel_policy=pol, input_shapes={"image": [1, 3, 32, 32]})


def test_memory_plan_reuses_buffers() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [4, 3, 32, 32]})
    mem = sess.memory()
    assert 0 < mem["arena_bytes"] < mem["intermediate_bytes"]
    assert mem["dynamic_values"] == 0


def test_compiler_folds_batchnorm_and_fuses() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [1, 3, 32, 32]})
    ops = [s["op_type"] for s in sess.plan.steps]
    assert "BatchNormalization" not in ops and "Relu" not in ops and "Erf" not in ops
    assert "Gelu" not in ops  # the MLP's erf GELU: one Gelu, then fc1's epilogue
    assert any(s["op_type"] == "MatMul" and s["activation"] == "Gelu" for s in sess.plan.steps)
    assert any(s["activation"] == "Relu" for s in sess.plan.steps)


def test_saved_plan_runs_identically(tmp_path: Path) -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [2, 3, 32, 32]})
    path = tmp_path / "demo.xrtplan"
    sess.save_plan(path)
    x = image(2, 11)
    loaded = xrt.InferenceSession.load_plan(path)
    np.testing.assert_array_equal(loaded.run({"image": x})["logits"], sess.run({"image": x})["logits"])

    def plain(log):  # type: ignore[no-untyped-def]
        return [{k: v for k, v in d.to_dict().items() if k != "seq"} for d in list(log)[1:]]

    assert plain(loaded.explain()) == plain(sess.explain())


def test_saved_plan_runs_without_onnx_in_another_process(tmp_path: Path) -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [1, 3, 32, 32]})
    sess.save_plan(tmp_path / "p.xrtplan")
    x = image(1, 12)
    np.save(tmp_path / "x.npy", x)
    code = f"""
import sys
sys.modules["onnx"] = None  # any import of onnx now fails
import numpy as np
import xpuruntime as xrt
s = xrt.InferenceSession.load_plan({str(tmp_path / "p.xrtplan")!r})
np.save({str(tmp_path / "y.npy")!r}, s.run({{"image": np.load({str(tmp_path / "x.npy")!r})}})["logits"])
assert sys.modules["onnx"] is None
"""
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), sess.run({"image": x})["logits"])


def _patch_plan(data: bytes, **fields: object) -> bytes:
    """The plan bytes with header fields replaced (keeps the constants blob intact)."""
    # Container XRTPLAN3: magic, header length, two SHA-256 digests, then the header.
    hl = int.from_bytes(data[8:16], "little")
    header = json.loads(data[144 : 144 + hl])
    header.update(fields)
    blob = data[(144 + hl + 63) // 64 * 64 :]
    new = json.dumps(header).encode()
    out = data[:8] + len(new).to_bytes(8, "little") + data[16:144] + new
    out += b"\0" * ((-len(out)) % 64)
    # Resealed: the loader then checks the edited fields, not the checksum.
    return xrt._core.graph.seal_plan(out + blob)


def test_plans_from_another_version_device_or_policy_are_refused(tmp_path: Path) -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [1, 3, 32, 32]})
    sess.save_plan(tmp_path / "p.xrtplan")
    data = (tmp_path / "p.xrtplan").read_bytes()
    assert xrt.InferenceSession.load_plan(_patch_plan(data)).run({"image": image(1, 0)})
    with pytest.raises(xrt.InvalidModelError, match="format version 99"):
        xrt.InferenceSession.load_plan(_patch_plan(data, format_version=99))
    with pytest.raises(xrt.InvalidModelError, match="device 'cuda:0'"):
        xrt.InferenceSession.load_plan(_patch_plan(data, device="cuda:0"))
    with pytest.raises(xrt.InvalidModelError, match="another policy"):
        xrt.InferenceSession.load_plan(
            tmp_path / "p.xrtplan", kernel_policy=xrt.KernelPolicy(matmul="cpu_blocked")
        )
    for cut in (10, 100, len(data) // 2, len(data) - 7):
        with pytest.raises(xrt.InvalidModelError):
            xrt.InferenceSession.load_plan(data[:cut])


def test_four_threads_share_one_session() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [2, 3, 32, 32]})
    inputs = [image(2, 100 + i) for i in range(8)]
    expected = [sess.run({"image": x})["logits"] for x in inputs]
    errors: list[BaseException] = []

    def worker(tid: int) -> None:
        try:
            for it in range(25):
                k = (tid + it) % len(inputs)
                np.testing.assert_array_equal(sess.run({"image": inputs[k]})["logits"], expected[k])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc (Linux) to read RSS")
def test_thousand_runs_keep_resident_memory_flat() -> None:
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [1, 3, 32, 32]})
    x = image(1, 5)
    for _ in range(100):
        sess.run({"image": x})
    before = _rss_bytes()
    for _ in range(1000):
        sess.run({"image": x})
    growth = _rss_bytes() - before
    assert growth < 2 * 1024 * 1024, f"RSS grew by {growth} bytes over 1000 runs"


def test_profiler_records_one_range_per_step() -> None:
    from xpuruntime.runtime import profiler

    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [1, 3, 32, 32]})
    x = image(1, 21)
    sess.run({"image": x})
    with profiler.profile() as prof:
        sess.run({"image": x})
    names = [e["name"] for e in prof.events() if e["category"] == "range"]
    steps = [s for s in sess.plan.steps if not s["view"]]
    for s in steps:
        assert f"{s['op_type']}:{s['name']}" in names
    assert "Conv:stem1" in names or "NhwcConv:stem1" in names


def test_fp16_request_is_refused_by_the_native_engine_with_the_reason() -> None:
    with pytest.raises((xrt.UnsupportedOperationError, xrt.BackendUnavailableError), match="fp16"):
        xrt.InferenceSession(DEMO, device="cpu", engine="native", fp16=True)


def test_input_shapes_compile_once_up_front() -> None:
    # A symbolic-batch model given input_shapes compiles that specialization when the
    # session is built; a run at those shapes uses it (no second compile at the first
    # run: it used to be keyed by the plan's symbolic dims and never found).
    sess = xrt.InferenceSession(DEMO, device="cpu", input_shapes={"image": [2, 3, 32, 32]})
    engine = sess._engine
    assert len(engine._plans) == 1
    plan = engine._plans[next(iter(engine._plans))][0]
    sess.run({"image": image(2, 3)})
    assert len(engine._plans) == 1 and engine._plans[((2, 3, 32, 32),)][0] is plan
    sess.run({"image": image(1, 4)})  # another shape: its own specialization
    assert len(engine._plans) == 2
