"""A tied embedding read transposed by the output projection (GPT-2's LM head).

MatMul(x, Transpose(W)) with W also the Gather's table becomes Reshape -> Gemm(transB)
-> Reshape on W itself (graph/shared_weight_gemm.cpp), so the plan holds W once, and
the final Reshape into the graph output is a view: the Gemm writes the output buffer
(PlanValue.output_home). Checked against ONNX Runtime on fresh inputs, on the CPU
here and on the CUDA plan's preview; tests/gpu/test_shared_weight_gemm_gpu.py runs it.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper


def tied_lm(vocab: int, hidden: int, seq: int, seed: int = 0, shared: bool = True) -> bytes:
    """ids [B, seq] -> Gather(W) -> LayerNorm -> MatMul(., Transpose(W)) -> logits.
    shared=False gives the head its own weight (nothing to share: folded as before)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((vocab, hidden)) * 0.5).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "wte"),
        numpy_helper.from_array(np.ones(hidden, np.float32), "ln_w"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "ln_b"),
    ]
    head = "wte"
    if not shared:
        inits.append(numpy_helper.from_array(w.copy(), "head_w"))
        head = "head_w"
    nodes = [
        helper.make_node("Gather", ["wte", "ids"], ["emb"], name="embed"),
        helper.make_node("LayerNormalization", ["emb", "ln_w", "ln_b"], ["h"], axis=-1, name="ln"),
        helper.make_node("Transpose", [head], ["wt"], perm=[1, 0], name="head_t"),
        helper.make_node("MatMul", ["h", "wt"], ["logits"], name="lm_head"),
    ]
    g = helper.make_graph(
        nodes,
        "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", seq, vocab])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def ort_run(model: bytes, ids: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]


def _rel(a, ref: np.ndarray) -> float:
    a = np.asarray(a).astype(np.float64)
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def _ids(vocab: int, batch: int, seq: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (batch, seq)).astype(np.int64)


@pytest.mark.parametrize("batch", [1, 3])
def test_tied_head_reads_the_table_once_and_matches_onnxruntime(batch, tmp_path):
    vocab, hidden, seq = 3001, 96, 7  # 3001 x 96 float32: 1.15 MB, above the 1 MiB bound
    model = tied_lm(vocab, hidden, seq, seed=batch)
    ids = _ids(vocab, batch, seq, seed=10 + batch)
    sess = xrt.InferenceSession(model, device="cpu", engine="native", input_shapes={"ids": [batch, seq]})
    steps = sess.plan.steps
    head = [s for s in steps if s["name"] == "lm_head"]
    assert [s["op_type"] for s in head] == ["Gemm"], [(s["name"], s["op_type"]) for s in steps]
    assert not any(s["op_type"] == "Transpose" for s in steps)
    # W once: no folded [hidden, vocab] copy among the constants.
    assert sess.plan.memory["constant_bytes"] < 1.1 * vocab * hidden * 4
    # The output Reshape is a view: the Gemm writes the logits buffer itself.
    assert steps[-1]["op_type"] == "Reshape" and steps[-1]["view"], steps[-1]
    ref = ort_run(model, ids)
    got = sess.run({"ids": ids})["logits"]
    assert got.shape == (batch, seq, vocab)
    assert _rel(got, ref) <= 1e-4
    # A caller's output buffer is written in place, and a saved plan replays the same bits.
    out = np.full((batch, seq, vocab), np.nan, np.float32)
    sess.run({"ids": ids}, outputs=[out])
    assert np.array_equal(out, got)
    path = tmp_path / "tied.xrtplan"
    sess.save_plan(str(path))
    again = xrt.InferenceSession.load_plan(str(path))
    assert np.array_equal(again.run({"ids": ids})["logits"], got)


def test_unshared_head_weight_is_folded_as_before():
    vocab, hidden, seq = 3001, 96, 5
    model = tied_lm(vocab, hidden, seq, seed=4, shared=False)
    sess = xrt.InferenceSession(model, device="cpu", engine="native", input_shapes={"ids": [2, seq]})
    ops = {s["name"]: s["op_type"] for s in sess.plan.steps}
    assert ops.get("lm_head") == "MatMul", ops
    ids = _ids(vocab, 2, seq, seed=5)
    assert _rel(sess.run({"ids": ids})["logits"], ort_run(model, ids)) <= 1e-4


def test_cuda_preview_reads_the_shared_table_in_place():
    """The CUDA plan (offline preview, no GPU needed): one fp16 copy of W, the Gemm on
    cuBLASLt, the output Reshape a view and no arena buffer for the logits."""
    vocab, hidden, seq, batch = 5003, 128, 256, 8
    model = tied_lm(vocab, hidden, seq)
    pv = xrt.preview_plan(
        model,
        device="cuda",
        target="sm_90",
        exec_policy=xrt.ExecutionPolicy(precision="fp16", keep_io_types=False),
        input_shapes={"ids": [batch, seq]},
    )
    kernels = {s["name"]: (s["op_type"], s["kernel"]) for s in pv.steps}
    assert kernels["lm_head"] == ("Gemm", "cublasLt"), kernels
    memory = pv.plan.memory
    assert memory["constant_bytes"] < 1.1 * vocab * hidden * 2
    logits = batch * seq * vocab * 2
    assert memory["arena_bytes"] < logits / 4, memory
    assert pv.steps[-1]["op_type"] == "Reshape" and pv.steps[-1]["view"]


def test_crafted_output_home_is_refused_typed(tmp_path):
    """A plan file whose values send a buffer into the wrong place (an input, a value
    that does not exist, an output of another size) is refused when loaded."""
    from test_plan_integrity import edited

    vocab, hidden, seq = 3001, 96, 5
    model = tied_lm(vocab, hidden, seq, seed=6)
    sess = xrt.InferenceSession(model, device="cpu", engine="native", input_shapes={"ids": [2, seq]})
    path = tmp_path / "tied.xrtplan"
    sess.save_plan(str(path))
    data = path.read_bytes()

    def homed(h: dict) -> dict:
        return next(v for v in h["values"] if v.get("output_home", -1) >= 0)

    ln_out = lambda h: next(i for i, v in enumerate(h["values"]) if v["name"] == "h")  # noqa: E731
    cases = {
        "home is the graph input": lambda h: homed(h).__setitem__("output_home", h["inputs"][0]),
        "home out of range": lambda h: homed(h).__setitem__("output_home", len(h["values"]) + 5),
        "an arena value homed too": lambda h: h["values"][ln_out(h)].__setitem__(
            "output_home", homed(h)["output_home"]
        ),
    }
    for what, edit in cases.items():
        with pytest.raises(xrt.XpuRuntimeError, match="plan file is corrupt"):
            xrt.InferenceSession.load_plan(edited(data, edit))
        assert what
