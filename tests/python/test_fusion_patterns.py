"""Pattern fusions of the native compiler (graph/fusion_layernorm.cpp, fusion_attention.cpp).

The decomposed LayerNorm becomes one LayerNormalization node and the scaled-dot-product
attention subgraph one FusedAttention node, each only when the match is exact and a
kernel of the plan's device runs the fused node. Every fusion is a Decision with op
"fusion" in the session's explain(). Checked here on the CPU (float32): each variant
people export is fused, and the fused plan matches ONNX Runtime within 1e-4 relative on
random inputs; each near-miss (wrong axis, non-constant eps or scale, an intermediate
read elsewhere, a mask added before the scaling, a non-causal Where) is left alone and
still matches. The model zoo's BERT, GPT-2 and ViT exports are fused too.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))

REL_TOL = 1e-4
F = TensorProto.FLOAT


def _model(
    nodes: list[Any],
    inputs: dict[str, list[int]],
    outputs: dict[str, list[int]],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _const(name: str, value: Any, dtype: Any = np.float32) -> Any:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=dtype))
    )


def _reference(model: onnx.ModelProto) -> Any:
    """ONNX Runtime on the graph as written: its own optimizer fuses LayerNorm patterns too,
    and with it on onnxruntime 1.32 answers the Pow(d, 4) near-miss wrongly, so it is off."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[Any, list[Any]]:
    """Native session + its fusion decisions, after checking every output against ORT."""
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    ours = sess.run(feeds)
    ref_sess = _reference(model)
    ref = dict(zip([o.name for o in ref_sess.get_outputs()], ref_sess.run(None, feeds)))
    for name, b in ref.items():
        a = ours[name]
        assert a.shape == b.shape
        rel = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
        assert rel <= REL_TOL, f"{name}: relative error {rel:.3g} > {REL_TOL}"
    return sess, [d for d in sess.explain() if d.op == "fusion"]


def _ops(sess: Any) -> list[str]:
    return [s["op_type"] for s in sess.plan.steps]


# ---- LayerNorm --------------------------------------------------------------------------------
C = 16


def _layernorm_model(
    square: str = "Pow",
    normalize: str = "Div",
    two_subs: bool = False,
    gamma: bool = True,
    beta: bool = True,
    gamma_shape: tuple[int, ...] = (C,),
    axes: list[int] | None = None,
    axes_input: bool = False,
    eps_input: bool = False,
    exponent: float = 2.0,
    mean_is_output: bool = False,
    x_shape: tuple[int, ...] = (2, 5, C),
    swap_operands: bool = False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    axes = [-1] if axes is None else axes
    opset = 18 if axes_input else 17
    nodes: list[Any] = []
    inits: dict[str, np.ndarray] = {}

    def mean(src: str, dst: str) -> None:
        if axes_input:
            nodes.append(helper.make_node("ReduceMean", [src, "axes"], [dst], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [src], [dst], axes=axes, keepdims=1))

    if axes_input:
        inits["axes"] = np.asarray(axes, dtype=np.int64)
    mean("x", "mean")
    nodes.append(helper.make_node("Sub", ["x", "mean"], ["d"]))
    d2 = "d"
    if two_subs:
        nodes.append(helper.make_node("Sub", ["x", "mean"], ["d_b"]))
        d2 = "d_b"
    if square == "Pow":
        nodes.append(_const("two", exponent))
        nodes.append(helper.make_node("Pow", ["d", "two"], ["sq"]))
    else:
        nodes.append(helper.make_node("Mul", ["d", "d"], ["sq"]))
    mean("sq", "var")
    inputs = {"x": list(x_shape)}
    if eps_input:
        inputs["eps"] = []
    else:
        nodes.append(_const("eps", 1e-5))
    nodes.append(helper.make_node("Add", ["eps", "var"] if swap_operands else ["var", "eps"], ["ve"]))
    nodes.append(helper.make_node("Sqrt", ["ve"], ["std"]))
    if normalize == "Div":
        nodes.append(helper.make_node("Div", [d2, "std"], ["y"]))
    else:
        nodes.append(helper.make_node("Reciprocal", ["std"], ["inv"]))
        nodes.append(helper.make_node("Mul", ["inv", d2] if swap_operands else [d2, "inv"], ["y"]))
    out = "y"
    if gamma:
        inits["gamma"] = (1.0 + 0.5 * rng.standard_normal(gamma_shape)).astype(np.float32)
        nodes.append(helper.make_node("Mul", ["gamma", "y"] if swap_operands else ["y", "gamma"], ["yg"]))
        out = "yg"
    if beta:
        inits["beta"] = rng.standard_normal((C,)).astype(np.float32)
        nodes.append(helper.make_node("Add", [out, "beta"], ["yb"]))
        out = "yb"
    nodes.append(helper.make_node("Identity", [out], ["out"]))
    outputs = {"out": list(x_shape)}
    if mean_is_output:
        outputs["mean"] = [*x_shape[:-1], 1]
    return _model(nodes, inputs, outputs, inits, opset=opset)


def _ln_feeds(x_shape: tuple[int, ...] = (2, 5, C), eps: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    feeds = {"x": (3.0 * rng.standard_normal(x_shape) + 1.5).astype(np.float32)}
    if eps:
        feeds["eps"] = np.asarray(1e-5, dtype=np.float32)
    return feeds


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"square": "Mul", "normalize": "Reciprocal", "two_subs": True, "swap_operands": True},
        {"gamma": False, "beta": False},
        {"beta": False, "gamma_shape": (1, 1, C)},
        {"axes_input": True},
        {"axes": [2]},
    ],
    ids=[
        "torch_pow_div",
        "mul_reciprocal_two_subs",
        "no_affine",
        "gamma_only_3d",
        "axes_input",
        "axes_positive",
    ],
)
def test_decomposed_layernorm_is_fused(variant: dict[str, Any]) -> None:
    sess, fusions = _run(_layernorm_model(**variant), _ln_feeds())
    ops = _ops(sess)
    assert ops.count("LayerNormalization") == 1, ops
    assert "ReduceMean" not in ops and "Sqrt" not in ops
    (d,) = fusions
    assert d.chosen == "LayerNormalization" and d.rule == "fusion.pattern"
    assert "decomposed LayerNorm" in d.detail
    assert any(c.kernel == "cpu" and c.verdict == "supported" for c in d.candidates)
    assert any("layernorm pattern fusion (subgraphs fused): 1" == line for line in sess.plan.pass_log)


@pytest.mark.parametrize(
    "variant,x_shape,eps",
    [
        ({"axes": [1], "gamma": False, "beta": False, "x_shape": (2, C, C)}, (2, C, C), False),
        ({"eps_input": True}, (2, 5, C), True),
        ({"mean_is_output": True}, (2, 5, C), False),
        ({"exponent": 4.0}, (2, 5, C), False),
    ],
    ids=["wrong_axis", "eps_not_constant", "mean_read_elsewhere", "fourth_power_not_square"],
)
def test_layernorm_near_misses_are_not_fused(
    variant: dict[str, Any], x_shape: tuple[int, ...], eps: bool
) -> None:
    sess, fusions = _run(_layernorm_model(**variant), _ln_feeds(x_shape, eps))
    assert "LayerNormalization" not in _ops(sess)
    # The variance half alone is an RMSNorm of x - mean, and may be fused as one (the
    # outputs still match ONNX Runtime: _run checked them); never as a LayerNorm.
    assert [f for f in fusions if "RMSNorm" not in f.detail] == []


def test_torch_layernorm_exported_below_opset_17_is_fused() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(24, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.LayerNorm(32)
    )
    with torch.no_grad():
        for ln in (net[1], net[3]):
            ln.weight.normal_(1.0, 0.3)
            ln.bias.normal_()
    import io

    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net.eval(),
            (torch.randn(3, 7, 24),),
            buf,
            dynamo=False,
            opset_version=14,
            input_names=["x"],
            output_names=["y"],
        )
    model = onnx.load_from_string(buf.getvalue())
    assert "LayerNormalization" not in {n.op_type for n in model.graph.node}  # decomposed at opset 14
    feeds = {"x": np.random.default_rng(3).standard_normal((3, 7, 24)).astype(np.float32)}
    sess, fusions = _run(model, feeds)
    assert _ops(sess).count("LayerNormalization") == 2
    # nn.GELU's decomposed erf form is a pattern too (fusion_gelu.cpp, test_gelu_fusion.py).
    assert [d.chosen for d in fusions] == ["LayerNormalization"] * 2 + ["Gelu"]


# ---- attention --------------------------------------------------------------------------------
B, H, S, D = 2, 3, 5, 8


def _attention_model(
    q_layout: str = "bhsd",
    scale: str = "div",
    mask: str = "none",
    kt_source: str = "transpose",
    softmax_axis: int = -1,
    cast_after_softmax: bool = False,
    scores_output: bool = False,
    sk: int = S,
    nan_guard: float | None = None,
) -> onnx.ModelProto:
    """Q from `q` ([B, H, S, D], or [B, S, H, D] transposed in with q_layout='bshd'),
    Kᵀ from `k` through a Transpose (or `kt` given transposed), V from `v`."""
    nodes: list[Any] = []
    inputs: dict[str, list[int]] = {}
    inits: dict[str, np.ndarray] = {}
    if q_layout == "bshd":  # what BERT exports: Transpose of the reshaped projections
        inputs.update({"q": [B, S, H, D], "k": [B, sk, H, D], "v": [B, sk, H, D]})
        nodes.append(helper.make_node("Transpose", ["q"], ["q4"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Transpose", ["v"], ["v4"], perm=[0, 2, 1, 3]))
        q, v = "q4", "v4"
    else:
        inputs.update({"q": [B, H, S, D], "v": [B, H, sk, D]})
        q, v = "q", "v"
        if kt_source == "transpose":
            inputs["k"] = [B, H, sk, D]
            nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
        else:
            inputs["kt"] = [B, H, D, sk]
    if scale == "sdpa":  # what torch exports for scaled_dot_product_attention: both sides
        nodes.append(_const("rs", D**-0.25))
        nodes.append(helper.make_node("Mul", [q, "rs"], ["qs"]))
        nodes.append(helper.make_node("Mul", ["kt", "rs"], ["kts"]))
        nodes.append(helper.make_node("MatMul", ["qs", "kts"], ["s0"]))
    else:
        nodes.append(helper.make_node("MatMul", [q, "kt"], ["s0"]))
    cur = "s0"
    if mask == "add_before_scale":
        inputs["mask"] = [B, 1, 1, sk]
        nodes.append(helper.make_node("Add", [cur, "mask"], ["s_m"]))
        cur = "s_m"
    if scale == "div":
        nodes.append(_const("c", np.sqrt(D)))
        nodes.append(helper.make_node("Div", [cur, "c"], ["s1"]))
        cur = "s1"
    elif scale in ("mul", "input"):
        if scale == "mul":
            nodes.append(_const("c", D**-0.5))
        else:
            inputs["c"] = []
        nodes.append(helper.make_node("Mul", ["c", cur], ["s1"]))
        cur = "s1"
    tril = np.tril(np.ones((S, sk), dtype=bool))[None, None]
    if mask in ("where_keep", "where_hide", "where_random"):
        cond = tril if mask == "where_keep" else ~tril
        if mask == "where_random":
            cond = np.random.default_rng(5).random((1, 1, S, sk)) < 0.5
            cond[..., 0] = True
        nodes.append(_const("cond", cond, bool))
        nodes.append(_const("fill", np.finfo(np.float32).min))
        args = ["cond", cur, "fill"] if mask != "where_hide" else ["cond", "fill", cur]
        nodes.append(helper.make_node("Where", args, ["s2"]))
        cur = "s2"
    elif mask == "additive":
        inputs["mask"] = [B, 1, 1, sk]
        nodes.append(helper.make_node("Add", [cur, "mask"], ["s2"]))
        cur = "s2"
    elif mask == "causal_constant":
        inits["causal"] = np.where(tril, 0.0, -1e9).astype(np.float32)
        nodes.append(helper.make_node("Add", ["causal", cur], ["s2"]))
        cur = "s2"
    nodes.append(helper.make_node("Softmax", [cur], ["p"], axis=softmax_axis))
    p = "p"
    if cast_after_softmax:
        nodes.append(helper.make_node("Cast", ["p"], ["pc"], to=F))
        p = "pc"
    if nan_guard is not None:  # torch's SDPA export: Where(IsNaN(P), 0, P)
        nodes.append(_const("nan_fill", nan_guard))
        nodes.append(helper.make_node("IsNaN", [p], ["p_nan"]))
        nodes.append(helper.make_node("Where", ["p_nan", "nan_fill", p], ["pg"]))
        p = "pg"
    nodes.append(helper.make_node("MatMul", [p, v], ["o"]))
    nodes.append(helper.make_node("Transpose", ["o"], ["out"], perm=[0, 2, 1, 3]))
    outputs = {"out": [B, S, H, D]}
    if scores_output:
        outputs[cur] = [B, H, S, sk]
    return _model(nodes, inputs, outputs, inits)


def _attention_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(13)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "mask":
            m = np.zeros(shape, dtype=np.float32)
            m[..., -2:] = -10000.0  # padded keys
            feeds[i.name] = m
        elif i.name == "c":
            feeds[i.name] = np.asarray(D**-0.5, dtype=np.float32)
        else:
            feeds[i.name] = (2.0 * rng.standard_normal(shape)).astype(np.float32)
    return feeds


@pytest.mark.parametrize(
    "variant,causal,masked",
    [
        ({}, False, False),
        ({"sk": 7}, False, False),
        ({"q_layout": "bshd", "scale": "mul", "mask": "additive"}, False, True),
        ({"mask": "where_keep"}, True, False),
        ({"mask": "where_hide", "scale": "mul"}, True, False),
        ({"mask": "causal_constant", "cast_after_softmax": True}, True, False),
        ({"scale": "sdpa"}, False, False),
        ({"kt_source": "input", "softmax_axis": 3, "scale": "none"}, False, False),
        ({"scale": "sdpa", "mask": "additive", "nan_guard": 0.0}, False, True),
    ],
    ids=[
        "plain",
        "more_keys",
        "bert_like",
        "where_causal",
        "where_hide",
        "gpt2_like",
        "sdpa_export",
        "kt_input",
        "sdpa_nan_guard",
    ],
)
def test_attention_subgraph_is_fused(variant: dict[str, Any], causal: bool, masked: bool) -> None:
    model = _attention_model(**variant)
    sess, fusions = _run(model, _attention_feeds(model))
    ops = _ops(sess)
    assert ops.count("FusedAttention") == 1, ops
    assert "Softmax" not in ops and "MatMul" not in ops
    (d,) = fusions
    assert d.chosen == "FusedAttention" and d.rule == "fusion.pattern"
    assert d.detail.startswith("attention")
    assert f"is_causal={int(causal)}" in d.key
    assert f"mask_kind={'additive' if masked else 'none'}" in d.key
    step = next(s for s in sess.plan.steps if s["op_type"] == "FusedAttention")
    assert step["op_key"] == "attention" and step["kernel"] == "cpu"
    # Kᵀ's Transpose either became K's or went away; a Kᵀ input gets one of its own.
    expected = 4 if variant.get("q_layout") == "bshd" else 1  # + the output's Transpose
    assert ops.count("Transpose") == expected + (variant.get("kt_source") == "input")


@pytest.mark.parametrize(
    "variant",
    [
        {"softmax_axis": 2},
        {"scale": "input"},
        {"scores_output": True},
        {"mask": "add_before_scale"},
        {"mask": "where_random"},
        {"mask": "additive", "nan_guard": 1.0},
    ],
    ids=[
        "softmax_wrong_axis",
        "scale_not_constant",
        "scores_read_elsewhere",
        "mask_before_scale",
        "where_not_causal",
        "nan_guard_fills_one",
    ],
)
def test_attention_near_misses_are_not_fused(variant: dict[str, Any]) -> None:
    model = _attention_model(**variant)
    sess, fusions = _run(model, _attention_feeds(model))
    assert "FusedAttention" not in _ops(sess)
    assert fusions == []


def test_nan_guard_zeroes_fully_masked_rows_as_the_graph_does() -> None:
    """SDPA's -inf mask hiding every key of batch 1: the softmax rows are NaN, the
    Where(IsNaN) guard makes them 0, so batch 1's output is 0; one NaN score zeroes its
    row too. Checked against ONNX Runtime on the unfused graph."""
    model = _attention_model(scale="sdpa", mask="additive", nan_guard=0.0)
    feeds = _attention_feeds(model)
    feeds["mask"][1] = -np.inf
    feeds["q"][0, 0, 1, 2] = np.nan  # batch 0, head 0, query 1
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    assert "FusedAttention" in _ops(sess)
    got = sess.run(feeds)["out"]
    want = _reference(model).run(None, feeds)[0]
    assert np.isnan(want).sum() == 0 and np.all(want[1] == 0) and np.all(want[0, 1, 0] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fuse_false_leaves_the_patterns() -> None:
    model = _attention_model(mask="additive")
    feeds = _attention_feeds(model)
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native", fuse=False)
    assert "FusedAttention" not in _ops(sess) and not [d for d in sess.explain() if d.op == "fusion"]
    fused = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    np.testing.assert_allclose(fused.run(feeds)["out"], sess.run(feeds)["out"], rtol=1e-4, atol=1e-5)


def test_fused_plan_saves_and_reloads(tmp_path: Path) -> None:
    model = _attention_model(q_layout="bshd", scale="mul", mask="additive")
    feeds = _attention_feeds(model)
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    path = tmp_path / "attn.xrtplan"
    sess.save_plan(path)
    again = xrt.InferenceSession(str(path), device="cpu", engine="native")
    assert "FusedAttention" in _ops(again)
    np.testing.assert_array_equal(again.run(feeds)["out"], sess.run(feeds)["out"])


# ---- the model zoo ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,causal", [("bert_tiny", False), ("gpt2_tiny", True), ("vit_tiny", False)])
def test_zoo_attention_is_fused_and_matches_onnxruntime(name: str, causal: bool) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("torchvision")
    import model_zoo

    model = onnx.load(str(model_zoo.export(name)))
    spec = model_zoo.ZOO[name]
    sess = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native")
    ref_sess = _reference(model)
    for seed in (1, 2):
        feeds = spec.inputs(np.random.default_rng(seed), 2)
        ours = sess.run(feeds)
        ref = dict(zip([o.name for o in ref_sess.get_outputs()], ref_sess.run(None, feeds)))
        for out in spec.output_names:
            rel = float(np.abs(ours[out] - ref[out]).max() / max(np.abs(ref[out]).max(), 1e-30))
            assert rel <= REL_TOL, f"{name}: relative error {rel:.3g}"
    fusions = [d for d in sess.explain() if d.op == "fusion" and d.chosen == "FusedAttention"]
    assert len(fusions) == 2  # two layers
    assert all(f"is_causal={int(causal)}" in d.key for d in fusions)
    assert _ops(sess).count("FusedAttention") == 2 and "Softmax" not in _ops(sess)
