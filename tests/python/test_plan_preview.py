"""The offline plan preview (issue: the native CUDA engine's speed, deliverable 2):
compiling for a device this machine lacks, through passes, fusions and dispatch,
without preparing a kernel. These tests run on a CPU-only machine and are where the
CUDA fusions are tested structurally (which steps and kernels a plan would have); the
GPU suites check the numbers.

Each fusion is asserted against the unfused plan of the same model (fuse=False), and
the CPU preview against a real CPU compile.
"""

from __future__ import annotations

import json

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
BF16 = xrt.ExecutionPolicy(precision="bf16")


def _model(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _f(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr.astype(np.float32), name)


def _conv_block() -> bytes:
    """Conv(+B) -> Relu -> Conv(+B) -> Add(residual) -> Relu: a ResNet basic block."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 8, 3, 3)) * 0.1
    w2 = rng.standard_normal((8, 8, 3, 3)) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "x"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    inits = [
        _init("w1", w1),
        _init("b1", rng.standard_normal(8)),
        _init("w2", w2),
        _init("b2", rng.standard_normal(8)),
    ]
    return _model(nodes, [_f("x", [2, 8, 16, 16])], [_f("y", [2, 8, 16, 16])], inits)


def _separable_block(act: str = "relu6", c: int = 32, k: int = 3, stride: int = 1) -> bytes:
    """A MobileNet/EfficientNet block: 1x1 expand + Relu, depthwise kxk (+B) + act
    (relu6 = Clip(0, 6), or silu = Sigmoid * x), squeeze-excitation (GlobalAveragePool,
    1x1, Relu, 1x1, HardSigmoid, Mul), 1x1 project, a residual Add where the shapes
    allow it, then a 3x3/2 MaxPool."""
    rng = np.random.default_rng(3)
    cin = 16
    pad = k // 2
    nodes = [
        helper.make_node("Conv", ["x", "we", "be"], ["e"], name="expand"),
        helper.make_node("Relu", ["e"], ["er"], name="expand_relu"),
        helper.make_node(
            "Conv", ["er", "wd", "bd"], ["d"], group=c, pads=[pad] * 4, strides=[stride] * 2, name="dw"
        ),
    ]
    if act == "relu6":
        nodes.append(helper.make_node("Clip", ["d", "zero", "six"], ["da"], name="relu6"))
    else:
        nodes += [
            helper.make_node("Sigmoid", ["d"], ["ds"], name="silu_sig"),
            helper.make_node("Mul", ["d", "ds"], ["da"], name="silu_mul"),
        ]
    nodes += [
        helper.make_node("GlobalAveragePool", ["da"], ["p"], name="se_pool"),
        helper.make_node("Conv", ["p", "ws1", "bs1"], ["s1"], name="se_reduce"),
        helper.make_node("Relu", ["s1"], ["s1r"], name="se_relu"),
        helper.make_node("Conv", ["s1r", "ws2", "bs2"], ["s2"], name="se_expand"),
        helper.make_node("HardSigmoid", ["s2"], ["gate"], alpha=1 / 6, beta=0.5, name="se_gate"),
        helper.make_node("Mul", ["da", "gate"], ["se"], name="se_mul"),
        helper.make_node("Conv", ["se", "wp", "bp"], ["proj"], name="project"),
    ]
    if stride == 1:
        nodes.append(helper.make_node("Add", ["proj", "x"], ["res"], name="residual"))
        last = "res"
    else:
        last = "proj"
    nodes.append(
        helper.make_node(
            "MaxPool", [last], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, name="pool"
        )
    )
    hw = 20 // stride
    inits = [
        _init("we", rng.standard_normal((c, cin, 1, 1)) * 0.2),
        _init("be", rng.standard_normal(c) * 0.1),
        _init("wd", rng.standard_normal((c, 1, k, k)) * 0.3),
        _init("bd", rng.standard_normal(c) * 0.1),
        _init("ws1", rng.standard_normal((8, c, 1, 1)) * 0.2),
        _init("bs1", rng.standard_normal(8) * 0.1),
        _init("ws2", rng.standard_normal((c, 8, 1, 1)) * 0.2),
        _init("bs2", rng.standard_normal(c) * 0.1),
        _init("wp", rng.standard_normal((cin, c, 1, 1)) * 0.2),
        _init("bp", rng.standard_normal(cin) * 0.1),
        _init("zero", np.array(0.0)),
        _init("six", np.array(6.0)),
    ]
    out = (hw + 1) // 2
    return _model(nodes, [_f("x", [2, cin, 20, 20])], [_f("y", [2, cin, out, out])], inits)


def _mlp(gelu: str) -> bytes:
    """MatMul -> Add(bias) -> activation -> MatMul; gelu: 'relu', 'tanh' or 'erf'."""
    rng = np.random.default_rng(2)
    act = {
        "relu": helper.make_node("Relu", ["h"], ["a"], name="act"),
        "tanh": helper.make_node("Gelu", ["h"], ["a"], approximate="tanh", name="act"),
        "erf": helper.make_node("Gelu", ["h"], ["a"], name="act"),
    }[gelu]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m"], name="fc1"),
        helper.make_node("Add", ["m", "b1"], ["h"], name="bias1"),
        act,
        helper.make_node("MatMul", ["a", "w2"], ["y"], name="fc2"),
    ]
    inits = [
        _init("w1", rng.standard_normal((32, 64))),
        _init("b1", rng.standard_normal(64)),
        _init("w2", rng.standard_normal((64, 16))),
    ]
    return _model(nodes, [_f("x", [4, 10, 32])], [_f("y", [4, 10, 16])], inits, opset=20)


def _chain() -> bytes:
    """x * sigmoid(x) + 1 -> tanh: four elementwise ops on one tensor."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("Mul", ["x", "s"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "one"], ["a"], name="add"),
        helper.make_node("Tanh", ["a"], ["y"], name="tanh"),
    ]
    return _model(nodes, [_f("x", [8, 128])], [_f("y", [8, 128])], [_init("one", np.ones(1))])


def _ops(pv) -> list[str]:
    return [s["op_type"] for s in pv.steps if not s["view"]]


def test_preview_is_a_plan_for_the_target_that_cannot_run_or_save(tmp_path):
    pv = preview_plan(_conv_block(), device="cuda", target="sm_90", exec_policy=FP16)
    assert pv.plan.preview
    assert pv.environment["gpu_arch"] == "sm_90"
    assert "offline preview" in pv.summary()
    assert all(s["kernel"] for s in pv.steps if not s["view"])
    with pytest.raises(xrt.InvalidArgumentError, match="preview"):
        _core.graph.Executor(pv.plan)
    with pytest.raises(xrt.InvalidArgumentError, match="preview"):
        pv.plan.save(str(tmp_path / "p.xrtplan"))


def test_target_names_are_parsed_and_bad_ones_refused():
    for t in ("sm_90", "sm_90a", "9.0", "90"):
        assert preview_plan(_chain(), device="cuda", target=t).environment["gpu_arch"] == "sm_90"
    # This build's kernels are compiled for sm_90: an sm_80 preview says so, per kernel.
    with pytest.raises(xrt.UnsupportedOperationError, match="capability_too_low"):
        preview_plan(_chain(), device="cuda", target="sm_80", fuse=False)
    for bad in ("hopper", "sm_9", "sm_x0", "sm_20"):
        with pytest.raises(xrt.InvalidArgumentError, match="sm_XY"):
            preview_plan(_chain(), device="cuda", target=bad)
    with pytest.raises(xrt.InvalidArgumentError, match="no compile target"):
        preview_plan(_chain(), device="cpu", target="sm_90")


def test_cuda_conv_takes_bias_relu_and_residual_epilogues():
    fused = preview_plan(_conv_block(), device="cuda", target="sm_90", exec_policy=FP16)
    plain = preview_plan(_conv_block(), device="cuda", target="sm_90", exec_policy=FP16, fuse=False)
    assert _ops(plain).count("Relu") == 2 and "Add" in _ops(plain)
    convs = [s for s in fused.steps if s["op_type"] in ("Conv", "NhwcConv")]
    assert len(convs) == 2 and all(s["kernel"] == "cudnn" for s in convs)
    assert [s["activation"] for s in convs] == ["Relu", "Relu"]
    assert "Relu" not in _ops(fused) and "Add" not in _ops(fused)


@pytest.mark.parametrize("policy", [FP16, BF16, None], ids=["fp16", "bf16", "fp32"])
def test_cuda_conv_regions_run_channels_last(policy):
    pv = preview_plan(_conv_block(), device="cuda", target="sm_90", exec_policy=policy)
    ops = _ops(pv)
    assert ops.count("NhwcConv") == 2 and "Conv" not in ops, ops
    assert all(s["kernel"] == "cudnn" for s in pv.steps if s["op_type"] == "NhwcConv")
    # One Transpose into channels-last at the plan's input, one back at its output.
    assert ops.count("Transpose") == 2, ops
    (layout,) = [d for d in pv.decisions if d["op"] == "layout"]
    assert layout["chosen"] == "channels_last", layout
    # A pinned NCHW Conv kernel keeps the model's layout, and says so.
    pinned = preview_plan(
        _conv_block(),
        device="cuda",
        target="sm_90",
        exec_policy=policy,
        kernel_policy=xrt.KernelPolicy(conv="cudnn"),
    )
    assert _ops(pinned).count("Conv") == 2 and "NhwcConv" not in _ops(pinned)


@pytest.mark.parametrize("policy", [FP16, BF16, None], ids=["fp16", "bf16", "fp32"])
def test_cuda_gemm_takes_bias_and_relu_or_tanh_gelu_epilogues(policy):
    for act in ("relu", "tanh"):
        pv = preview_plan(_mlp(act), device="cuda", target="sm_90", exec_policy=policy)
        mm = [s for s in pv.steps if s["op_type"] == "MatMul"]
        assert len(mm) == 2, _ops(pv)
        assert mm[0]["kernel"] == "cublasLt" and mm[0]["activation"] == ("Relu" if act == "relu" else "Gelu")
        assert "Add" not in _ops(pv) and "Relu" not in _ops(pv) and "Gelu" not in _ops(pv)


def test_cuda_lone_depthwise_convolution_stays_nchw():
    # One Conv between graph input and output: the Transposes on both sides would move
    # as much as the convolution reads and writes (the layout pass's cost rule).
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1], name="dw")]
    model = _model(
        nodes,
        [_f("x", [2, 8, 16, 16])],
        [_f("y", [2, 8, 16, 16])],
        [_init("w", rng.standard_normal((8, 1, 3, 3)))],
    )
    pv = preview_plan(model, device="cuda", target="sm_90", exec_policy=FP16)
    assert "NhwcConv" not in _ops(pv) and "Conv" in _ops(pv)


@pytest.mark.parametrize("act", ["relu6", "silu"])
@pytest.mark.parametrize("policy", [FP16, BF16, None], ids=["fp16", "bf16", "fp32"])
def test_cuda_depthwise_separable_blocks_run_channels_last_end_to_end(policy, act):
    pv = preview_plan(_separable_block(act), device="cuda", target="sm_90", exec_policy=policy)
    ops = _ops(pv)
    convs = [s for s in pv.steps if s["op_type"] == "NhwcConv"]
    # Five convolutions: the squeeze-excitation pair on the pooled pixel runs as MatMuls.
    assert len(convs) == 3 and "Conv" not in ops and ops.count("MatMul") == 2, ops
    (dw,) = [s for s in convs if s["name"].startswith("dw")]
    assert dw["kernel"] == "cuda_depthwise", dw
    assert {s["kernel"] for s in convs if s is not dw} == {"cudnn"}
    # The pools run channels-last too: the only Transposes are at the plan's edges.
    assert "NhwcGlobalAveragePool" in ops and "NhwcMaxPool" in ops, ops
    assert "GlobalAveragePool" not in ops and "MaxPool" not in ops
    assert ops.count("Transpose") == 2, ops
    # The depthwise layer's activation is its epilogue (Clip) or the SiLU post-op.
    if act == "relu6":
        assert dw["activation"] == "Clip" and "Clip" not in ops, (dw, ops)
    else:
        assert "Sigmoid" not in ops and "FusedElementwise" not in ops[: ops.index("NhwcGlobalAveragePool")]


def test_cuda_gemm_leaves_the_exact_gelu_to_its_own_kernel():
    # cuBLASLt's GELU epilogue is the tanh form: the erf GELU must not be folded in.
    pv = preview_plan(_mlp("erf"), device="cuda", target="sm_90", exec_policy=FP16)
    assert "Gelu" in _ops(pv)
    mm = [s for s in pv.steps if s["op_type"] == "MatMul"]
    assert mm[0]["activation"] == ""
    # The CPU's GEMM applies it: there it is fused.
    cpu = preview_plan(_mlp("erf"), device="cpu")
    assert "Gelu" not in _ops(cpu)


@pytest.mark.parametrize("policy", [FP16, BF16, None], ids=["fp16", "bf16", "fp32"])
def test_cuda_fuses_elementwise_chains_in_every_float_precision(policy):
    pv = preview_plan(_chain(), device="cuda", target="sm_90", exec_policy=policy)
    fused = [s for s in pv.steps if s["op_type"] == "FusedElementwise"]
    assert len(fused) == 1 and fused[0]["kernel"] == "cuda"
    assert fused[0]["fused"] == "Sigmoid,Mul,Add,Tanh"


@pytest.mark.parametrize("policy", [FP16, BF16], ids=["fp16", "bf16"])
def test_a_models_own_float32_casts_vanish_in_16_bit_plans(policy):
    # RMSNorm as transformers writes it: x.to(float32) ... .to(x.dtype) around the math.
    nodes = [
        helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT, name="up"),
        helper.make_node("Mul", ["x32", "x32"], ["sq"], name="sq"),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1, name="mean"),
        helper.make_node("Add", ["ms", "eps"], ["v"], name="eps_add"),
        helper.make_node("Sqrt", ["v"], ["r"], name="sqrt"),
        helper.make_node("Div", ["x32", "r"], ["n"], name="div"),
        helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT, name="down"),
    ]
    model = _model(nodes, [_f("x", [4, 64])], [_f("y", [4, 64])], [_init("eps", np.full(1, 1e-6))])
    pv = preview_plan(model, device="cuda", target="sm_90", exec_policy=policy)
    casts = [s for s in pv.steps if s["op_type"] == "Cast"]
    # Only the plan's edges cast (float32 in, float32 out); 'up' and 'down' are gone.
    assert len(casts) == 2 and not {"up", "down"} & {s["name"] for s in casts}, _ops(pv)


def test_cpu_keeps_float16_chains_unfused_where_its_fused_kernel_is_float32():
    # The CPU's FusedElementwise kernel is float32: a chain of another dtype stays as it
    # was (the registry is asked), a float32 chain fuses.
    assert "FusedElementwise" in _ops(preview_plan(_chain(), device="cpu"))


def test_cpu_preview_matches_a_real_cpu_compile():
    model = _conv_block()
    pv = preview_plan(model, device="cpu")
    sess = xrt.InferenceSession(model, device="cpu", engine="native")
    real = [(s["op_type"], s["kernel"]) for s in sess.plan.steps]
    assert [(s["op_type"], s["kernel"]) for s in pv.steps] == real
    # Same Decisions for every step (the preview has no sub-kernel decisions).
    chosen = [json.loads(d) for d in sess.plan.decisions]
    ours = {(d["node"], d["chosen"]) for d in pv.decisions}
    assert {(d["node"], d["chosen"]) for d in chosen if (d["node"], d["chosen"]) in ours} == ours


def test_cli_explain_dry_run_lists_the_cuda_plan(tmp_path, capsys):
    from xpuruntime.cli.main import main

    path = tmp_path / "block.onnx"
    path.write_bytes(_conv_block())
    assert main(["explain", str(path), "--device", "cuda", "--target", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "offline preview" in out and "cudnn" in out
    assert "kernel launches on cuda (sm_90)" in out


def _bert_attention(b: int = 2, s: int = 40, h: int = 4, d: int = 64) -> bytes:
    """BERT's export of one attention: the projections [B, S, H, D] transposed to heads
    (K straight to K^T), scaled scores, softmax, P V, transposed back and flattened."""
    nodes = [
        helper.make_node("Transpose", ["q"], ["q4"], perm=[0, 2, 1, 3], name="q_heads"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1], name="k_heads"),
        helper.make_node("Transpose", ["v"], ["v4"], perm=[0, 2, 1, 3], name="v_heads"),
        helper.make_node("MatMul", ["q4", "kt"], ["s0"], name="scores"),
        helper.make_node("Div", ["s0", "c"], ["s1"], name="scale"),
        helper.make_node("Softmax", ["s1"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "v4"], ["o4"], name="pv"),
        helper.make_node("Transpose", ["o4"], ["o"], perm=[0, 2, 1, 3], name="o_heads"),
        helper.make_node("Reshape", ["o", "shape"], ["y"], name="merge"),
    ]
    inits = [
        _init("c", np.array(np.sqrt(d))),
        numpy_helper.from_array(np.array([b, s, h * d], np.int64), "shape"),
    ]
    return _model(nodes, [_f(n, [b, s, h, d]) for n in "qkv"], [_f("y", [b, s, h * d])], inits)


def test_cuda_attention_reads_the_projections_without_head_transposes():
    pv = preview_plan(_bert_attention(), device="cuda", target="sm_90", exec_policy=FP16)
    ops = _ops(pv)
    assert ops.count("FusedAttention") == 1 and "Transpose" not in ops, ops
    (folded,) = [d for d in pv.decisions if d["op"] == "fusion" and "head transposes" in d["detail"]]
    assert "_bshd 15" in folded["detail"]  # Q, K, V and the output
    # The CPU kernel reads [B, H, S, D] only: the CPU plan keeps its Transposes, silently.
    cpu = preview_plan(_bert_attention(), device="cpu")
    assert "Transpose" in _ops(cpu)
    assert not [d for d in cpu.decisions if d["op"] == "fusion" and "head transposes" in d["detail"]]


def _dense_block() -> bytes:
    """A stem Conv, then DenseNet's pre-activation layer four times: Concat(features) -> BatchNormalization ->
    Relu -> 3x3 Conv, each new map concatenated to what came before. The
    BatchNormalizations follow a Concat, so no Conv absorbs them."""
    rng = np.random.default_rng(4)
    ch = 8
    nodes = [helper.make_node("Conv", ["x", "stem_w"], ["stem"], pads=[1] * 4, name="stem")]
    inits = [_init("stem_w", rng.standard_normal((ch, 3, 3, 3)) * 0.2)]
    feats = ["stem"]
    for i in range(4):
        nodes += [
            helper.make_node("Concat", list(feats), [f"cat{i}"], axis=1, name=f"cat{i}"),
            helper.make_node(
                "BatchNormalization",
                [f"cat{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"],
                [f"bn{i}"],
                name=f"bn{i}",
            ),
            helper.make_node("Relu", [f"bn{i}"], [f"r{i}"], name=f"relu{i}"),
            helper.make_node("Conv", [f"r{i}", f"w{i}"], [f"f{i}"], pads=[1] * 4, name=f"conv{i}"),
        ]
        c = ch * (i + 1)
        inits += [
            _init(f"s{i}", rng.uniform(0.5, 1.5, c)),
            _init(f"b{i}", rng.standard_normal(c) * 0.1),
            _init(f"m{i}", rng.standard_normal(c) * 0.1),
            _init(f"v{i}", rng.uniform(0.5, 1.5, c)),
            _init(f"w{i}", rng.standard_normal((ch, c, 3, 3)) * 0.1),
        ]
        feats.append(f"f{i}")
    nodes.append(helper.make_node("Concat", feats, ["y"], axis=1, name="out"))
    return _model(nodes, [_f("x", [2, 3, 12, 12])], [_f("y", [2, 5 * ch, 12, 12])], inits)


@pytest.mark.parametrize("policy", [FP16, BF16, None], ids=["fp16", "bf16", "fp32"])
def test_cuda_dense_blocks_keep_batchnorm_channels_last(policy):
    """A BatchNormalization after a Concat becomes a per-channel Mul and Add in the
    plan's dtype inside the channels-last region (before, 16-bit plans kept it NCHW
    with a Transpose on each side: 124 of DenseNet-121's 434 launches)."""
    pv = preview_plan(_dense_block(), device="cuda", target="sm_90", exec_policy=policy)
    ops = _ops(pv)
    assert ops.count("NhwcConv") == 5 and "BatchNormalization" not in ops, ops
    assert ops.count("Transpose") == 2, ops  # the plan's input and output only


def _tokens_conv_tokens(h: int = 6, w: int = 8, c: int = 16, back_perm=(0, 2, 1)) -> bytes:
    """PVT's mixing step: tokens [B, H*W, C] transposed to [B, C, H*W], viewed as an
    image, a 3x3 depthwise and a 1x1 Conv, viewed back and transposed to tokens, then
    a token MatMul. ``back_perm`` other than (0, 2, 1) makes the way back a real
    permutation (kept)."""
    rng = np.random.default_rng(5)
    b = 2
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="to_channels"),
        helper.make_node("Reshape", ["xt", "img_shape"], ["img"], name="to_image"),
        helper.make_node("Conv", ["img", "wd"], ["d"], group=c, pads=[1] * 4, name="dw"),
        helper.make_node("Conv", ["d", "wp"], ["p"], name="pw"),
        helper.make_node("Reshape", ["p", "flat_shape"], ["pf"], name="to_flat"),
        helper.make_node("Transpose", ["pf"], ["tok"], perm=list(back_perm), name="to_tokens"),
        helper.make_node("MatMul", ["tok", "wm"], ["y"], name="mix"),
    ]
    out_tok = [b, h * w, c] if tuple(back_perm) == (0, 2, 1) else [h * w, c, b]
    inits = [
        numpy_helper.from_array(np.array([b, c, h, w], np.int64), "img_shape"),
        numpy_helper.from_array(np.array([b, c, h * w], np.int64), "flat_shape"),
        _init("wd", rng.standard_normal((c, 1, 3, 3)) * 0.3),
        _init("wp", rng.standard_normal((c, c, 1, 1)) * 0.3),
        _init("wm", rng.standard_normal((out_tok[-1], 8)) * 0.3),
    ]
    return _model(nodes, [_f("x", [b, h * w, c])], [_f("y", out_tok[:-1] + [8])], inits)


@pytest.mark.parametrize("policy", [FP16, None], ids=["fp16", "fp32"])
def test_transpose_reshape_transpose_chains_become_views(policy):
    pv = preview_plan(_tokens_conv_tokens(), device="cuda", target="sm_90", exec_policy=policy)
    ops = _ops(pv)
    assert ops.count("NhwcConv") == 2 and "Transpose" not in ops, ops
    # A way back that really permutes keeps its Transpose.
    kept = preview_plan(
        _tokens_conv_tokens(back_perm=(2, 1, 0)), device="cuda", target="sm_90", exec_policy=policy
    )
    assert "Transpose" in _ops(kept)


@pytest.mark.parametrize("back_perm", [(0, 2, 1), (2, 1, 0)])
def test_transpose_reshape_transpose_folding_matches_onnxruntime_on_the_cpu(back_perm):
    ort = pytest.importorskip("onnxruntime")
    model = _tokens_conv_tokens(back_perm=back_perm)
    x = np.random.default_rng(6).standard_normal((2, 48, 16)).astype(np.float32)
    (ref,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = xrt.InferenceSession(model, device="cpu", engine="native").run({"x": x})
    np.testing.assert_allclose(next(iter(got.values())), ref, rtol=1e-4, atol=1e-4)


def _one_head_attention_transposes(heads: int = 1) -> bytes:
    """PVT's attention layout: tokens [B, N, C] split as [B, N, heads, D], transposed to
    [B, heads, N, D], scaled, and transposed back before the projection."""
    rng = np.random.default_rng(8)
    b, n, d = 2, 12, 8
    c = heads * d
    nodes = [
        helper.make_node("Reshape", ["x", "split"], ["xs"]),
        helper.make_node("Transpose", ["xs"], ["xh"], perm=[0, 2, 1, 3], name="to_heads"),
        helper.make_node("Mul", ["xh", "scale"], ["xm"]),
        helper.make_node("Transpose", ["xm"], ["xb"], perm=[0, 2, 1, 3], name="from_heads"),
        helper.make_node("Reshape", ["xb", "merge"], ["xt"]),
        helper.make_node("MatMul", ["xt", "w"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([b, n, heads, d], np.int64), "split"),
        numpy_helper.from_array(np.array([b, n, c], np.int64), "merge"),
        _init("scale", rng.standard_normal((1, 1, 1, d)) + 1.0),
        _init("w", rng.standard_normal((c, 5)) * 0.3),
    ]
    return _model(nodes, [_f("x", [b, n, c])], [_f("y", [b, n, 5])], inits)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_transposes_that_move_only_size_one_dims_become_views(device):
    kw = {"target": "sm_90"} if device == "cuda" else {}
    pv = preview_plan(_one_head_attention_transposes(1), device=device, exec_policy=FP16, **kw)
    assert "Transpose" not in _ops(pv), _ops(pv)
    assert "unit-dim transposes (made views): 2" in pv.summary(), pv.summary()
    # Two heads: the transposes really permute and stay.
    kept = preview_plan(_one_head_attention_transposes(2), device=device, exec_policy=FP16, **kw)
    assert _ops(kept).count("Transpose") == 2, _ops(kept)


@pytest.mark.parametrize("heads", [1, 2])
def test_unit_dim_transpose_views_match_onnxruntime_on_the_cpu(heads):
    ort = pytest.importorskip("onnxruntime")
    model = _one_head_attention_transposes(heads)
    x = np.random.default_rng(9).standard_normal((2, 12, 8 * heads)).astype(np.float32)
    (ref,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = xrt.InferenceSession(model, device="cpu", engine="native").run({"x": x})
    np.testing.assert_allclose(next(iter(got.values())), ref, rtol=1e-5, atol=1e-5)


def test_symbolic_dims_are_previewed_as_the_shapes_a_session_would_compile():
    """A session compiles for the shapes it runs with; a preview without input_shapes
    resolves each symbolic dim from ``dims`` (1 when not named) and says so. (It raised
    before: CUDA's fused LayerNorm saw a rank-0 placeholder, every MatMul 'shapes only
    known at run time'.)"""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, name="ln"),
        helper.make_node("MatMul", ["y", "w"], ["z"], name="mm"),
    ]
    inits = [_init("g", rng.uniform(0.5, 1.5, 64)), _init("b", rng.standard_normal(64) * 0.1)]
    inits.append(_init("w", rng.standard_normal((64, 32)) * 0.1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 32])
    model = _model(nodes, [x], [z], inits)
    for device in ("cuda", "cpu"):
        pv = preview_plan(model, device=device, target="sm_90" if device == "cuda" else "", exec_policy=FP16)
        assert pv.input_shapes == {"x": (1, 1, 64)}
        assert _ops(pv).count("LayerNormalization") == 1 and _ops(pv).count("MatMul") == 1
    pv = preview_plan(model, device="cuda", target="sm_90", exec_policy=FP16, dims={"batch": 8, "seq": 128})
    assert pv.input_shapes == {"x": (8, 128, 64)}


def test_keep_io_types_false_gives_the_plan_a_16_bit_interface_without_edge_casts():
    """ExecutionPolicy(keep_io_types=False): the fp16/bf16 plan takes and returns its own
    type (as torch's ``.half()`` model does); by default Casts at both edges keep float32."""
    default = preview_plan(_conv_block(), device="cuda", target="sm_90", exec_policy=FP16)
    ops = _ops(default)
    assert ops[0] == "Cast" and ops[-1] == "Cast", ops
    for prec, dtype in (("fp16", "float16"), ("bf16", "bfloat16")):
        pol = xrt.ExecutionPolicy(precision=prec, keep_io_types=False)
        pv = preview_plan(_conv_block(), device="cuda", target="sm_90", exec_policy=pol)
        assert "Cast" not in _ops(pv), _ops(pv)
        assert len(_ops(pv)) == len(ops) - 2
        assert [i[1] for i in pv.plan.inputs] == [dtype]
        assert [o[1] for o in pv.plan.outputs] == [dtype]
    # fp32 plans have no edge casts either way; the field changes nothing there.
    fp32 = preview_plan(
        _conv_block(), device="cuda", target="sm_90", exec_policy=xrt.ExecutionPolicy(keep_io_types=False)
    )
    assert [i[1] for i in fp32.plan.inputs] == ["float32"]


def test_keep_io_types_policy_field_round_trips_and_keeps_old_fingerprints():
    base = xrt.ExecutionPolicy(precision="fp16")
    narrow = xrt.ExecutionPolicy(precision="fp16", keep_io_types=False)
    assert base.keep_io_types is True and narrow.keep_io_types is False
    # The default is not written: every existing policy keeps its fingerprint.
    assert "keep_io_types" not in json.loads(base.to_json())
    assert json.loads(narrow.to_json())["keep_io_types"] is False
    assert base.fingerprint != narrow.fingerprint
    assert xrt.ExecutionPolicy.from_json(narrow.to_json()) == narrow
    assert "keep_io_types=False" in repr(narrow)
    with pytest.raises(xrt.PolicyError, match="keep_io_types"):
        xrt.ExecutionPolicy(keep_io_types="no")  # type: ignore[arg-type]
    with pytest.raises(xrt.PolicyError, match="keep_io_types"):
        xrt.ExecutionPolicy.from_json('{"kind": "execution_policy", "keep_io_types": 0}')
