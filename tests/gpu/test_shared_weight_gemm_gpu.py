"""Padded-pitch GEMMs in chunks of C, on the GPU, against ONNX Runtime's CPU provider.

A GEMM whose N leaves every row misaligned computes C a chunk of columns at a time
(about 16 MiB of padded C in the workspace) and copies each chunk out; a transposed B
(the tied embedding table GPT-2's LM head reads) is read in place for its full chunks,
only the last chunk's rows padded. These shapes take two or more chunks; the tied
model is tests/python/test_shared_weight_gemm.py's, its CPU checks there.

Run: ``pytest -m gpu tests/gpu/test_shared_weight_gemm_gpu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines.native import engine as native_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from test_shared_weight_gemm import _ids, _rel, ort_run, tied_lm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(bool(native_engine.unavailable_reason("cuda")), reason="no usable CUDA device"),
]
TOL = {"fp32": 1e-4, "fp16": 1.5e-2, "bf16": 6e-2}


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
def test_tied_head_in_chunks_matches_onnxruntime(precision, graph):
    # 2048 rows x 5003 columns: 20 MB of C in fp16 (2 chunks of 4096 columns) and
    # 41 MB in fp32 (3 of 2048); the full chunks read the shared table in place.
    vocab, hidden, seq, batch = 5003, 128, 256, 8
    model = tied_lm(vocab, hidden, seq, seed=3)
    sess = xrt.InferenceSession(
        model,
        device="cuda",
        engine="native",
        exec_policy=xrt.ExecutionPolicy(precision=precision, cuda_graph=graph),
        input_shapes={"ids": [batch, seq]},
    )
    assert {s["name"]: s["op_type"] for s in sess.plan.steps}["lm_head"] == "Gemm"
    for seed in range(2):  # with a graph: captured, then replayed on new ids
        ids = _ids(vocab, batch, seq, seed=20 + seed)
        got = sess.run({"ids": ids})["logits"]
        assert _rel(got, ort_run(model, ids)) <= TOL[precision]


def _gemm(m: int, n: int, k: int, trans_b: bool, bias: bool) -> bytes:
    rng = np.random.default_rng(m + n + trans_b)
    w = (rng.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(k)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b"))
        ins.append("b")
    node = helper.make_node("Gemm", ins, ["y"], transB=int(trans_b), name="gemm")
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    g = helper.make_graph([node], "g", [f("x", [m, k])], [f("y", [m, n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("trans_b", [False, True], ids=["b_kn", "b_nk"])
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_odd_n_gemm_in_chunks_matches_onnxruntime(trans_b, bias):
    m, n, k = 3000, 7001, 64  # 42 MB of fp16 C: 2560-column chunks, the last one short
    model = _gemm(m, n, k, trans_b, bias)
    x = np.random.default_rng(n).standard_normal((m, k)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    (ref,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    sess = xrt.InferenceSession(
        model, device="cuda", engine="native", exec_policy=xrt.ExecutionPolicy(precision="fp16")
    )
    (y,) = sess.run({"x": x}).values()
    assert _rel(y, ref) <= TOL["fp16"]
