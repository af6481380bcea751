"""Decoder-block fusions for CUDA plans, checked offline (no GPU): the plan preview of
a Llama/GPT-2-style block as torch exports it.

* grouped-query attention: K and V are read before their ``repeat_kv`` copies
  (Unsqueeze -> Expand -> Reshape), the FusedAttention taking fewer key/value heads;
* the dynamo exporter's K^T (Reshape -> Transpose(0, 2, 1) -> Reshape) handed to the
  attention as K itself, so K's head transpose folds like Q's and V's;
* the attention output's head transpose folded through a same-shape Reshape;
* the skip connection (MatMul [+ Reshape] + Add) read by cuBLASLt as the GEMM's C;
* and, on the CPU, whose kernels do none of that, the same model keeps those nodes.

The numbers are checked on the GPU in ``tests/gpu/test_decoder_fusions_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime import _core
from xpuruntime.engines.native.preview import preview_plan

pytestmark = pytest.mark.skipif(
    "cuda" not in _core.graph.providers(), reason="this build has no CUDA execution provider"
)

FP16 = xrt.ExecutionPolicy(precision="fp16")


def _i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def decoder_block(
    b: int = 2,
    s: int = 24,
    heads: int = 6,
    kv_heads: int = 2,
    d: int = 64,
    vocab: int = 203,
    flat_kt: bool = True,
    seed: int = 0,
) -> bytes:
    """x [B, S, E] -> attention (GQA when kv_heads < heads) -> o_proj + x -> LM head.

    K^T is the dynamo exporter's Reshape/Transpose/Reshape chain when ``flat_kt``, else
    one Transpose(0, 1, 3, 2); the attention output passes a same-shape Reshape before
    its head transpose (as Llama's exports do); the head has ``vocab`` columns (odd: its
    rows are not 16-byte aligned in any float type)."""
    rng = np.random.default_rng(seed)
    e, n_rep = heads * d, heads // kv_heads

    def w(name: str, shape) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name
        )

    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q0"], name="q_proj"),
        helper.make_node("Reshape", ["q0", "q_shape"], ["q1"], name="q_view"),
        helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3], name="q_heads"),
        helper.make_node("MatMul", ["x", "wk"], ["k0"], name="k_proj"),
        helper.make_node("Reshape", ["k0", "kv_shape"], ["k1"], name="k_view"),
        helper.make_node("Transpose", ["k1"], ["k"], perm=[0, 2, 1, 3], name="k_heads"),
        helper.make_node("MatMul", ["x", "wv"], ["v0"], name="v_proj"),
        helper.make_node("Reshape", ["v0", "kv_shape"], ["v1"], name="v_view"),
        helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3], name="v_heads"),
    ]
    inits = [
        w("wq", (e, e)),
        w("wk", (e, kv_heads * d)),
        w("wv", (e, kv_heads * d)),
        w("wo", (e, e)),
        w("wh", (e, vocab)),
        _i64("q_shape", [b, s, heads, d]),
        _i64("kv_shape", [b, s, kv_heads, d]),
        _i64("heads_shape", [b, heads, s, d]),
        _i64("axis2", [2]),
        _i64("merge_shape", [b, s, e]),
        numpy_helper.from_array(np.array(1.0 / np.sqrt(d), np.float32), "scale"),
    ]
    kk, vv = "k", "v"
    if n_rep > 1:  # repeat_kv, as transformers writes it
        inits.append(_i64("rep_shape", [b, kv_heads, n_rep, s, d]))
        for t in ("k", "v"):
            nodes += [
                helper.make_node("Unsqueeze", [t, "axis2"], [f"{t}_u"], name=f"{t}_unsqueeze"),
                helper.make_node("Expand", [f"{t}_u", "rep_shape"], [f"{t}_e"], name=f"{t}_expand"),
                helper.make_node("Reshape", [f"{t}_e", "heads_shape"], [f"{t}_r"], name=f"{t}_repeat"),
            ]
        kk, vv = "k_r", "v_r"
    if flat_kt:
        inits += [_i64("flat_shape", [b * heads, s, d]), _i64("kt_shape", [b, heads, d, s])]
        nodes += [
            helper.make_node("Reshape", [kk, "flat_shape"], ["k_flat"], name="k_flat"),
            helper.make_node("Transpose", ["k_flat"], ["kt_flat"], perm=[0, 2, 1], name="k_t"),
            helper.make_node("Reshape", ["kt_flat", "kt_shape"], ["kt"], name="k_t_view"),
        ]
    else:
        nodes.append(helper.make_node("Transpose", [kk], ["kt"], perm=[0, 1, 3, 2], name="k_t"))
    nodes += [
        helper.make_node("MatMul", ["q", "kt"], ["sc0"], name="scores"),
        helper.make_node("Mul", ["sc0", "scale"], ["sc"], name="scaled"),
        helper.make_node("Softmax", ["sc"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", vv], ["o0"], name="pv"),
        helper.make_node("Reshape", ["o0", "heads_shape"], ["o1"], name="o_same"),
        helper.make_node("Transpose", ["o1"], ["o2"], perm=[0, 2, 1, 3], name="o_heads"),
        helper.make_node("Reshape", ["o2", "merge_shape"], ["o3"], name="o_merge"),
        helper.make_node("MatMul", ["o3", "wo"], ["o4"], name="o_proj"),
        helper.make_node("Add", ["x", "o4"], ["h"], name="residual"),
        helper.make_node("MatMul", ["h", "wh"], ["logits"], name="lm_head"),
    ]
    g = helper.make_graph(
        nodes,
        "decoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, e])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, s, vocab])],
        initializer=inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _ops(pv) -> list[str]:
    return [s["op_type"] for s in pv.steps if not s["view"]]


def _fusions(pv, text: str) -> list[dict]:
    return [d for d in pv.decisions if d["op"] == "fusion" and text in d["detail"]]


@pytest.mark.parametrize("kv_heads", [2, 6], ids=["gqa", "mha"])
@pytest.mark.parametrize("flat_kt", [True, False], ids=["dynamo_kt", "transpose_kt"])
def test_cuda_decoder_block_is_projections_attention_and_gemms_only(kv_heads, flat_kt):
    pv = preview_plan(
        decoder_block(kv_heads=kv_heads, flat_kt=flat_kt), device="cuda", target="sm_90", exec_policy=FP16
    )
    ops = _ops(pv)
    # Every copy is gone: no Transpose, Expand, Reshape that runs, or elementwise Add.
    assert sorted(ops) == sorted(["MatMul"] * 5 + ["FusedAttention", "Cast", "Cast"]), ops
    (folded,) = _fusions(pv, "head transposes")
    assert "_bshd 15" in folded["detail"], folded  # Q, K, V and the output read in place
    assert bool(_fusions(pv, "grouped-query")) == (kv_heads < 6)
    # The residual rides on o_proj's GEMM.
    (o_proj,) = [s for s in pv.steps if s["name"] == "o_proj"]
    assert o_proj["kernel"] == "cublasLt"


def test_cpu_keeps_repeat_kv_and_the_residual_add():
    """The CPU attention kernel takes equal head counts and its GEMMs no residual: the
    CPU plan still fuses the attention, over the expanded K and V."""
    pv = preview_plan(decoder_block(), device="cpu")
    ops = _ops(pv)
    assert ops.count("FusedAttention") == 1 and "Expand" in ops and "Add" in ops, ops
    assert not _fusions(pv, "grouped-query")


def test_grouped_query_needs_the_exact_repeat_kv_shape():
    """An Expand that is not repeat_kv's (here: it repeats along the sequence) is not
    collapsed: the attention then keeps its expanded inputs or is left alone, never
    reads the wrong heads."""
    b, s, h, d = 2, 8, 4, 64
    nodes = [
        helper.make_node("Unsqueeze", ["k", "axis3"], ["k_u"], name="k_unsqueeze"),
        helper.make_node("Expand", ["k_u", "rep_shape"], ["k_e"], name="k_expand"),
        helper.make_node("Reshape", ["k_e", "heads_shape"], ["k_r"], name="k_repeat"),
        helper.make_node("Transpose", ["k_r"], ["kt"], perm=[0, 1, 3, 2], name="k_t"),
        helper.make_node("MatMul", ["q", "kt"], ["sc"], name="scores"),
        helper.make_node("Softmax", ["sc"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="pv"),
    ]
    inits = [_i64("axis3", [3]), _i64("rep_shape", [b, h, s // 2, 2, d]), _i64("heads_shape", [b, h, s, d])]
    f = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
    g = helper.make_graph(
        nodes,
        "g",
        [f("q", [b, h, s, d]), f("k", [b, h, s // 2, d]), f("v", [b, h, s, d])],
        [f("y", [b, h, s, d])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    pv = preview_plan(m.SerializeToString(), device="cuda", target="sm_90", exec_policy=FP16)
    assert "Expand" in _ops(pv) and not _fusions(pv, "grouped-query")


def test_residual_is_not_fused_after_an_activation():
    """Conv region -> pool -> MatMul -> Relu -> Add(skip). The first epilogue round puts
    the Relu into the MatMul; the second one, after the channels-last pass converted
    the convolution, sees MatMul -> Add and must leave it: the Add reads the activated
    values, and a residual epilogue adds before the activation."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1] * 4, name="conv"),
        helper.make_node("Relu", ["c"], ["cr"], name="conv_relu"),
        helper.make_node("GlobalAveragePool", ["cr"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["mr"], name="relu"),
        helper.make_node("Add", ["mr", "f"], ["y"], name="skip"),
    ]
    inits = [
        numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "wc"),
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    pv = preview_plan(m.SerializeToString(), device="cuda", target="sm_90", exec_policy=FP16)
    assert "NhwcConv" in _ops(pv), _ops(pv)  # the second epilogue round runs
    (mm,) = [st for st in pv.steps if st["name"] == "mm"]
    assert mm["activation"] == "Relu", mm
    assert "Add" in _ops(pv), _ops(pv)  # not folded into the GEMM as a residual
