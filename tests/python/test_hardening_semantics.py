"""Issue 19 §4: no silent wrong result from the native CPU engine.

One regression class per section, each failing on the code before the fix:
- NaN (and ±inf) through activations, their fused forms (Conv+act, MatMul/Gemm+act,
  FusedElementwise chains) and max pooling, against ``onnx.reference`` (numpy) or, where
  that reference ignores NaN by construction (its pools pad with NaN and use nanmax),
  against torch;
- numpy inputs in every dtype form (byte order, alignment, strides, masked, structured,
  object, unsupported dtypes) on the static- and dynamic-shape paths, and ORT's engine;
- invalid attribute/shape combinations refused at build with the node named;
- ``run(..., output_names=[])`` (every output, as ONNX Runtime does) and ``input_shapes``
  with values that are not integers.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

F = TensorProto.FLOAT
RNG = np.random.default_rng(19)


def make_model(nodes, inputs, outputs, inits=(), opset: int = 20) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str, shape, t: int = F):
    """A tensor value info; an int shape means that rank with symbolic dimensions."""
    if isinstance(shape, int):
        shape = [f"{name}_d{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, t, shape)


def with_ref_outputs(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[onnx.ModelProto, list]:
    """The model with its outputs' shapes set from onnx.reference's results, and those results."""
    ref = ReferenceEvaluator(m).run(None, feeds)
    for o, r in zip(m.graph.output, ref):
        o.CopyFrom(vi(o.name, list(r.shape), helper.np_dtype_to_tensor_dtype(r.dtype)))
    return m, ref


def native(m: onnx.ModelProto, **kw):
    return xrt.InferenceSession(m.SerializeToString(), engine="native", device="cpu", **kw)


def assert_same_nan(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """NaN exactly where the reference has NaN, infinities equal, the rest close."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions differ")
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol)


def special(shape, seed: int = 0, scale: float = 3.0) -> np.ndarray:
    """Random normals with NaN, +inf and -inf sprinkled at random positions."""
    r = np.random.default_rng(seed)
    x = (r.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    pos = r.permutation(flat.size)
    k = max(1, flat.size // 9)
    flat[pos[:k]] = np.nan
    flat[pos[k : k + 2]] = np.inf
    flat[pos[k + 2 : k + 4]] = -np.inf
    return x


# ------------------------------------------------------------------------ NaN
UNARY = [
    ("Relu", {}),
    ("LeakyRelu", {"alpha": 0.1}),
    ("Sigmoid", {}),
    ("Tanh", {}),
    ("HardSigmoid", {}),
    ("HardSwish", {}),
    ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}),
    ("Elu", {}),
    ("Softplus", {}),
    ("Sign", {}),
    ("Abs", {}),
    ("Neg", {}),
    ("Exp", {}),
    ("Erf", {}),
    ("Floor", {}),
    ("Ceil", {}),
    ("Round", {}),
    ("Reciprocal", {}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op,attrs", UNARY, ids=[f"{o}-{a.get('approximate', '')}" for o, a in UNARY])
def test_unary_nan_inf_match_reference(op: str, attrs: dict, dtype: type) -> None:
    # 1031 elements: the vector loops and their scalar tails both see NaN.
    x = special((1031,), seed=len(op)).astype(dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m, ref = with_ref_outputs(
        make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [vi("x", [1031], t)], [vi("y", 1, t)]),
        {"x": x},
    )
    (got,) = native(m).run({"x": x}).values()
    assert_same_nan(got, ref[0], rtol=2e-6, atol=1e-6)


def test_exp_overflow_and_underflow_are_ieee() -> None:
    # exp overflows to +inf above 88.72 and underflows to 0 below -103.97 (float32).
    x = np.array(
        [
            88.0,
            88.5,
            88.7,
            88.75,
            89.0,
            100.0,
            np.inf,
            -87.0,
            -90.0,
            -100.0,
            -103.0,
            -104.0,
            -200.0,
            -np.inf,
            np.nan,
            0.0,
        ],
        dtype=np.float32,
    )
    m, _ = with_ref_outputs(
        make_model([helper.make_node("Exp", ["x"], ["y"])], [vi("x", [16])], [vi("y", 1)]), {"x": x}
    )
    (got,) = native(m).run({"x": x}).values()
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert_same_nan(got, want, rtol=3e-6, atol=2e-44)


def test_clip_nan_and_sign_zero() -> None:
    x = special((257,), seed=3)
    x[:4] = [0.0, -0.0, 0.5, -0.5]
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("Sign", ["x"], ["s"]),
    ]
    inits = [numpy_helper.from_array(np.float32(-1.0), "lo"), numpy_helper.from_array(np.float32(1.0), "hi")]
    m, ref = with_ref_outputs(make_model(nodes, [vi("x", [257])], [vi("c", 1), vi("s", 1)], inits), {"x": x})
    got = native(m).run({"x": x})
    assert_same_nan(got["c"], ref[0])
    assert_same_nan(got["s"], ref[1])


def test_max_min_nan_match_reference() -> None:
    x, y = special((4, 33), seed=5), special((4, 33), seed=6)
    nodes = [helper.make_node("Max", ["x", "y"], ["a"]), helper.make_node("Min", ["x", "y", "y"], ["b"])]
    m, ref = with_ref_outputs(
        make_model(nodes, [vi("x", [4, 33]), vi("y", [4, 33])], [vi("a", 2), vi("b", 2)]), {"x": x, "y": y}
    )
    got = native(m).run({"x": x, "y": y})
    assert_same_nan(got["a"], ref[0])
    assert_same_nan(got["b"], ref[1])


CONV_ACTS = [
    ("Relu", {}),
    ("LeakyRelu", {"alpha": 0.2}),
    ("Clip", {}),
    ("HardSigmoid", {}),
    ("HardSwish", {}),
    ("Sigmoid", {}),
]


@pytest.mark.parametrize("act,attrs", CONV_ACTS, ids=[a for a, _ in CONV_ACTS])
@pytest.mark.parametrize("cin,group", [(3, 1), (16, 1), (16, 16)], ids=["c3", "c16", "depthwise16"])
def test_fused_conv_activation_propagates_nan(act: str, attrs: dict, cin: int, group: int) -> None:
    cout = 8 if group == 1 else cin
    x = RNG.standard_normal((2, cin, 11, 13)).astype(np.float32)
    x.reshape(-1)[RNG.permutation(x.size)[: x.size // 15]] = np.nan
    w = RNG.standard_normal((cout, cin // group, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    if act == "Clip":
        inits += [
            numpy_helper.from_array(np.float32(-0.5), "lo"),
            numpy_helper.from_array(np.float32(0.5), "hi"),
        ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group, name="conv"),
        helper.make_node(act, ["c", "lo", "hi"] if act == "Clip" else ["c"], ["y"], name="act", **attrs),
    ]
    m, ref = with_ref_outputs(make_model(nodes, [vi("x", list(x.shape))], [vi("y", 4)], inits), {"x": x})
    sess = native(m)
    # the activation must be the Conv's epilogue here (NhwcConv where the layout pass
    # moved it to channels-last, between the two layout Transposes)
    steps = [s for s in sess._engine.plan.steps if s["op_type"] != "Transpose"]
    assert [s["op_type"] for s in steps] in (["Conv"], ["NhwcConv"]) and steps[0]["activation"] == act
    (got,) = sess.run({"x": x}).values()
    assert np.isnan(ref[0]).any()
    assert_same_nan(got, ref[0], rtol=1e-4, atol=1e-4)


def test_fused_conv_residual_relu_propagates_nan() -> None:
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    r = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    r.reshape(-1)[::11] = np.nan
    w = numpy_helper.from_array(RNG.standard_normal((8, 8, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "r"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    m, ref = with_ref_outputs(
        make_model(nodes, [vi("x", [1, 8, 9, 9]), vi("r", [1, 8, 9, 9])], [vi("y", 4)], [w]), {"x": x, "r": r}
    )
    (got,) = native(m).run({"x": x, "r": r}).values()
    assert_same_nan(got, ref[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["Relu", "Gelu", "Sigmoid", "Tanh", "LeakyRelu"])
@pytest.mark.parametrize("form", ["matmul_add", "gemm"])
def test_fused_gemm_activation_propagates_nan(act: str, form: str) -> None:
    x = special((16, 40), seed=11, scale=1.0)
    w = numpy_helper.from_array(RNG.standard_normal((40, 24)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(24).astype(np.float32), "b")
    if form == "gemm":
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"])]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"])]
    nodes.append(helper.make_node(act, ["h"], ["y"]))
    m, ref = with_ref_outputs(make_model(nodes, [vi("x", [16, 40])], [vi("y", 2)], [w, b]), {"x": x})
    (got,) = native(m).run({"x": x}).values()
    assert_same_nan(got, ref[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["Relu", "Sign", "Sigmoid", "HardSigmoid", "LeakyRelu", "Clip"])
def test_fused_elementwise_chain_propagates_nan(act: str) -> None:
    x = special((3, 700), seed=13)
    inits = [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.float32(0.1), "t")]
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["a"]),
        helper.make_node("Add", ["a", "t"], ["b"]),
        helper.make_node(act, ["b"], ["c"]),
        helper.make_node("Max", ["c", "t"], ["y"]),
    ]
    m, ref = with_ref_outputs(make_model(nodes, [vi("x", [3, 700])], [vi("y", 2)], inits), {"x": x})
    sess = native(m)
    assert any(s["op_type"] == "FusedElementwise" for s in sess._engine.plan.steps)
    (got,) = sess.run({"x": x}).values()
    assert_same_nan(got, ref[0])


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 2], "dilations": [2, 2]},
    ],
)
def test_maxpool_propagates_nan_like_torch(attrs: dict) -> None:
    # onnx.reference's pools pad with NaN and take nanmax, so they drop NaN inputs too;
    # numpy's max (GlobalMaxPool, ReduceMax) and torch's max_pool propagate it.
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 12, 12)).astype(np.float32)
    x.reshape(-1)[RNG.permutation(x.size)[:20]] = np.nan
    p = attrs.get("pads", [0, 0, 0, 0])
    want = torch.nn.functional.max_pool2d(
        torch.from_numpy(x),
        attrs["kernel_shape"],
        stride=attrs.get("strides", 1),
        padding=p[:2],
        dilation=attrs.get("dilations", 1),
    ).numpy()
    for with_indices in (False, True):  # two kernels: row/column maxima, and the indexed one
        outs = [vi("y", list(want.shape))] + (
            [vi("i", list(want.shape), TensorProto.INT64)] if with_indices else []
        )
        node = helper.make_node("MaxPool", ["x"], ["y", "i"] if with_indices else ["y"], **attrs)
        got = native(make_model([node], [vi("x", list(x.shape))], outs)).run({"x": x})["y"]
        assert np.isnan(want).any()
        assert_same_nan(got, want, rtol=0, atol=0)


def test_global_maxpool_propagates_nan_like_reference() -> None:
    x = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[1, 2, 0, 0] = np.nan
    m, ref = with_ref_outputs(
        make_model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], [vi("x", [2, 3, 5, 5])], [vi("y", 4)]),
        {"x": x},
    )
    (got,) = native(m).run({"x": x}).values()
    assert_same_nan(got, ref[0], rtol=0, atol=0)


# ------------------------------------------------------------- numpy inputs
def _relu_add(dynamic: bool) -> onnx.ModelProto:
    shape = ["N", 5] if dynamic else [3, 5]
    nodes = [helper.make_node("Add", ["x", "k"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return make_model(nodes, [vi("x", shape), vi("k", shape)], [vi("y", shape)])


def _int_model(dynamic: bool) -> onnx.ModelProto:
    shape = ["N", 4] if dynamic else [2, 4]
    t = TensorProto.INT64
    return make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [vi("a", shape, t), vi("b", shape, t)],
        [vi("y", shape, t)],
    )


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_big_endian_inputs_are_read_by_value(dynamic: bool) -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    k = RNG.standard_normal((3, 5)).astype(np.float32)
    sess = native(_relu_add(dynamic))
    want = np.maximum(x + k, 0)
    got = sess.run({"x": x.astype(">f4"), "k": k.astype(">f4")})["y"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    a = RNG.integers(-(2**40), 2**40, (2, 4))
    b = RNG.integers(-(2**40), 2**40, (2, 4))
    got = native(_int_model(dynamic)).run({"a": a.astype(">i8"), "b": b.astype(">i8")})["y"]
    np.testing.assert_array_equal(got, a + b)


def test_engine_level_run_converts_byte_order_too() -> None:
    # The engine object (not only InferenceSession.run) converts, for callers inside the package.
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    eng = native(_relu_add(False))._engine
    got = eng.run({"x": x.astype(">f4"), "k": np.zeros((3, 5), ">f4")})["y"]
    np.testing.assert_array_equal(got, np.maximum(x, 0))


def test_big_endian_inputs_on_onnxruntime_engine() -> None:
    pytest.importorskip("onnxruntime")
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    sess = xrt.InferenceSession(_relu_add(False).SerializeToString(), engine="onnxruntime", device="cpu")
    got = sess.run({"x": x.astype(">f4"), "k": np.zeros((3, 5), ">f4")})["y"]
    np.testing.assert_array_equal(got, np.maximum(x, 0))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_strided_unaligned_and_readonly_inputs(dynamic: bool) -> None:
    sess = native(_relu_add(dynamic))
    base = RNG.standard_normal((5, 3)).astype(np.float32)
    k = np.zeros((3, 5), np.float32)
    cases = {
        "transposed": base.T,
        "reversed": base.T[::-1, ::-1],
        "every_other": np.repeat(base.T, 2, axis=1)[:, ::2],
    }
    raw = np.zeros(3 * 5 * 4 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(3, 5)
    assert not unaligned.flags.aligned
    unaligned[...] = base.T
    cases["unaligned"] = unaligned
    ro = base.T.copy()
    ro.flags.writeable = False
    cases["readonly"] = ro
    for name, arr in cases.items():
        got = sess.run({"x": arr, "k": k})["y"]
        np.testing.assert_array_equal(got, np.maximum(np.asarray(arr), 0), err_msg=name)


@pytest.mark.parametrize(
    "bad,words",
    [
        (np.ma.masked_array(np.ones((3, 5), np.float32), mask=np.eye(3, 5, dtype=bool)), "masked"),
        (np.zeros((3, 5), dtype=[("a", "<f4")]), "structured"),
        (np.zeros((3, 5), dtype=[("a", ">f4"), ("b", "<i4")]), "structured"),
        (np.zeros((3, 5), dtype="V4"), "raw-bytes"),
        (np.empty((3, 5), dtype=object), "object"),
        (np.zeros((3, 5), dtype=np.complex64), "complex64"),
        (np.zeros((3, 5), dtype=np.uint16), "uint16"),
        (np.zeros((3, 5), dtype="U3"), "<U3"),
        (np.zeros((3, 5), dtype="datetime64[s]"), "datetime64"),
    ],
    ids=[
        "masked",
        "structured",
        "structured_mixed_order",
        "void",
        "object",
        "complex",
        "uint16",
        "str",
        "datetime",
    ],
)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_unreadable_dtypes_are_refused_naming_the_input(bad: np.ndarray, words: str, dynamic: bool) -> None:
    sess = native(_relu_add(dynamic))
    with pytest.raises(xrt.InvalidArgumentError, match=r"input 'x'.*" + words.replace("[", r"\[")):
        sess.run({"x": bad, "k": np.zeros((3, 5), np.float32)})


# ------------------------------------------------------- invalid models at build
def _build_error(nodes, inputs, outputs, inits=(), opset: int = 17) -> str:
    m = make_model(nodes, inputs, outputs, inits, opset)
    with pytest.raises(xrt.InvalidModelError) as e:
        native(m)
    return str(e.value)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [0, 0, 0, 0]},
        {"auto_pad": "VALID"},
        {"pads": [1, 0, 1, 0], "strides": [2, 2]},
        {"dilations": [3, 3]},
    ],
)
def test_conv_kernel_larger_than_padded_input_is_an_error(attrs: dict) -> None:
    w = numpy_helper.from_array(np.ones((2, 1, 5, 5), np.float32), "w")
    msg = _build_error(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="big_conv", **attrs)],
        [vi("x", [1, 1, 3, 3])],
        [vi("y", 4)],
        [w],
    )
    assert "big_conv" in msg and "kernel" in msg


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [4, 4]},
        {"kernel_shape": [4, 4], "auto_pad": "VALID"},
        {"kernel_shape": [2, 2], "dilations": [4, 4]},
        {"kernel_shape": [4, 4], "ceil_mode": 1},
    ],
)
def test_pool_kernel_larger_than_padded_input_is_an_error(op: str, attrs: dict) -> None:
    if op == "AveragePool" and "dilations" in attrs:
        attrs = {**attrs, "kernel_shape": [5, 5]}
        attrs.pop("dilations")
    msg = _build_error(
        [helper.make_node(op, ["x"], ["y"], name="big_pool", **attrs)], [vi("x", [1, 2, 3, 3])], [vi("y", 4)]
    )
    assert "big_pool" in msg and "kernel" in msg


def test_pool_kernel_larger_than_input_in_a_dynamic_model_fails_at_first_run() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y"], name="late_pool", kernel_shape=[4, 4])
    sess = native(make_model([node], [vi("x", [1, 1, "H", "W"])], [vi("y", 4)]))
    with pytest.raises(xrt.InvalidModelError, match="late_pool.*kernel"):
        sess.run({"x": np.zeros((1, 1, 3, 3), np.float32)})
    assert sess.run({"x": np.zeros((1, 1, 4, 4), np.float32)})["y"].shape == (1, 1, 1, 1)


def test_conv_kernel_shape_attribute_must_match_weights() -> None:
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    msg = _build_error(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="ks_conv", kernel_shape=[5, 5])],
        [vi("x", [1, 1, 8, 8])],
        [vi("y", 4)],
        [w],
    )
    assert "ks_conv" in msg and "kernel_shape" in msg


@pytest.mark.parametrize("which", [1, 2, 3, 4])
def test_batchnorm_parameters_of_wrong_length_are_an_error(which: int) -> None:
    params = [np.ones(3, np.float32) for _ in range(4)]
    params[which - 1] = np.ones(2, np.float32)
    names = ["scale", "B", "mean", "var"]
    inits = [numpy_helper.from_array(p, n) for p, n in zip(params, names)]
    msg = _build_error(
        [helper.make_node("BatchNormalization", ["x"] + names, ["y"], name="bn")],
        [vi("x", [2, 3, 4, 4])],
        [vi("y", 4)],
        inits,
    )
    assert "bn" in msg and names[which - 1] in msg


def test_batchnorm_parameters_of_wrong_length_unfolded_dynamic_input() -> None:
    # Parameters as graph inputs: not folded; the schema still checks their length.
    x = vi("x", ["N", 3, 4, 4])
    ins = [x] + [vi(n, [2 if n == "var" else 3]) for n in ["scale", "B", "mean", "var"]]
    node = helper.make_node("BatchNormalization", ["x", "scale", "B", "mean", "var"], ["y"], name="bn2")
    sess = native(make_model([node], ins, [vi("y", 4)]))
    feeds = {
        "x": np.ones((1, 3, 4, 4), np.float32),
        "scale": np.ones(3, np.float32),
        "B": np.ones(3, np.float32),
        "mean": np.ones(3, np.float32),
        "var": np.ones(2, np.float32),
    }
    with pytest.raises((xrt.InvalidModelError, xrt.InvalidArgumentError), match="bn2|var"):
        sess.run(feeds)


@pytest.mark.parametrize(
    "node,inputs,what",
    [
        (helper.make_node("Conv", ["x", "w"], ["y"], name="n", strides=[0, 1]), [[1, 1, 5, 5]], "positive"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="n", strides=[-1, 1]), [[1, 1, 5, 5]], "positive"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="n", dilations=[1, 0]), [[1, 1, 5, 5]], "positive"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[1, 1]), [[1, 1, 5, 5]], "pads"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[-1, 0, 0, 0]), [[1, 1, 5, 5]], "pads"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="n", group=2), [[1, 1, 5, 5]], "group"),
        (helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2]), [[1, 1, 5, 5]], "kernel"),
        (
            helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[0, 2]),
            [[1, 1, 5, 5]],
            "positive",
        ),
        (helper.make_node("Softmax", ["x"], ["y"], name="n", axis=4), [[1, 1, 5, 5]], "axis"),
        (helper.make_node("Concat", ["x", "x"], ["y"], name="n", axis=-5), [[1, 1, 5, 5]], "axis"),
        (helper.make_node("Flatten", ["x"], ["y"], name="n", axis=6), [[1, 1, 5, 5]], "axis"),
        (helper.make_node("Transpose", ["x"], ["y"], name="n", perm=[0, 1, 1, 2]), [[1, 1, 5, 5]], "perm"),
        (
            helper.make_node("LayerNormalization", ["x", "w"], ["y"], name="n", axis=-5),
            [[1, 1, 5, 5]],
            "axis",
        ),
        (helper.make_node("Split", ["x", "sp"], ["y", "z"], name="n", axis=2), [[1, 1, 5, 5]], "split"),
        (helper.make_node("GatherElements", ["x", "i"], ["y"], name="n", axis=7), [[1, 1, 5, 5]], "axis"),
    ],
    ids=[
        "stride0",
        "stride_neg",
        "dilation0",
        "pads_count",
        "pads_neg",
        "group",
        "pool_rank",
        "pool_k0",
        "softmax_axis",
        "concat_axis",
        "flatten_axis",
        "perm",
        "layernorm_axis",
        "split_sum",
        "gather_el_axis",
    ],
)
def test_invalid_attributes_are_refused_at_build_naming_the_node(node, inputs, what: str) -> None:
    inits = [
        numpy_helper.from_array(np.ones((1, 1, 3, 3) if node.op_type == "Conv" else (5,), np.float32), "w"),
        numpy_helper.from_array(np.zeros((1, 1, 5, 5), np.int64), "i"),
        numpy_helper.from_array(np.array([2, 2], np.int64), "sp"),
    ]
    used = [i for i in inits if i.name in node.input]
    outs = [vi(o, 2 if node.op_type == "Flatten" else 4) for o in node.output]
    with pytest.raises((xrt.InvalidModelError, xrt.UnsupportedOperationError)) as e:
        native(make_model([node], [vi("x", s) for s in inputs], outs, used, opset=17))
    assert "'n'" in str(e.value) and what in str(e.value).lower()


def test_reshape_with_two_inferred_dims_and_gather_float_indices() -> None:
    shape = numpy_helper.from_array(np.array([-1, -1], np.int64), "s")
    msg = _build_error(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [vi("x", [2, 6])], [vi("y", 2)], [shape]
    )
    assert "rs" in msg and "-1" in msg
    idx = numpy_helper.from_array(np.zeros(2, np.float32), "i")
    msg = _build_error(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="ga")],
        [vi("x", [2, 6])],
        [vi("y", 2)],
        [idx],
        opset=11,
    )
    assert "ga" in msg and "int" in msg


# ----------------------------------------------------------- run() arguments
def _two_outputs() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])]
    return make_model(nodes, [vi("x", [2, 3])], [vi("a", [2, 3]), vi("b", [2, 3])])


@pytest.mark.parametrize("engine", ["native", "onnxruntime"])
def test_empty_output_names_returns_every_output_like_ort(engine: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    m = _two_outputs().SerializeToString()
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run([], {"x": x})
    assert len(ref) == 2  # ONNX Runtime's own meaning of []
    sess = xrt.InferenceSession(m, engine=engine, device="cpu")
    got = sess.run({"x": x}, output_names=[])
    assert list(got) == ["a", "b"]
    np.testing.assert_array_equal(got["a"], ref[0])
    np.testing.assert_array_equal(got["b"], ref[1])
    assert list(sess.run({"x": x}, output_names=("b",))) == ["b"]
    assert list(sess.run({"x": x}, output_names="a")) == ["a"]


@pytest.mark.parametrize("bad", [[1], [b"a"], 5, {"a": 1}, [None]])
def test_output_names_of_wrong_type_are_typed_errors(bad) -> None:
    sess = native(_two_outputs())
    with pytest.raises(xrt.InvalidArgumentError, match="output_names"):
        sess.run({"x": np.zeros((2, 3), np.float32)}, output_names=bad)


def _dyn_model() -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 4])], [vi("y", ["N", 4])])


@pytest.mark.parametrize(
    "shapes,words",
    [
        ({"x": [2.5, 4]}, "dimension 0 is float"),
        ({"x": [2.0, 4]}, "dimension 0 is float"),
        ({"x": ["2", 4]}, "dimension 0 is str"),
        ({"x": [True, 4]}, "dimension 0 is bool"),
        ({"x": [None, 4]}, "dimension 0 is NoneType"),
        ({"x": [-1, 4]}, ">= 0"),
        ({"x": [2]}, "rank 1"),
        ({"x": [2, 5]}, "dimension 1"),
        ({"x": "2,4"}, "list of integers"),
        ({"y": [2, 4]}, "not an input"),
        ([("x", [2, 4])], "dict"),
    ],
)
def test_input_shapes_must_be_integers_of_the_inputs(shapes, words: str) -> None:
    with pytest.raises(xrt.InvalidArgumentError, match=words.replace("(", r"\(")):
        native(_dyn_model(), input_shapes=shapes)


def test_input_shapes_take_numpy_integers() -> None:
    sess = native(_dyn_model(), input_shapes={"x": np.array([3, 4], np.int64)})
    assert sess._engine.plan is not None
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(sess.run({"x": x})["y"], np.maximum(x, 0))


# ----------------------------------------- found by fuzz/onnx_graph_fuzzer.cpp
def test_size_of_a_dynamic_input_is_computed_at_run_time() -> None:
    # Size's schema claimed a known result for an input of unknown shape; folding then
    # read a shape that did not exist.
    m = make_model(
        [helper.make_node("Size", ["x"], ["y"])], [vi("x", ["N", 3])], [vi("y", [], TensorProto.INT64)]
    )
    sess = native(m)
    for n in (1, 4):
        assert int(sess.run({"x": np.zeros((n, 3), np.float32)})["y"]) == 3 * n


@pytest.mark.parametrize(
    "nodes,inits,what",
    [
        ([helper.make_node("Sum", ["x", "", "x"], ["y"], name="n")], [], "missing"),
        ([helper.make_node("Concat", ["x", "", "x"], ["y"], name="n", axis=0)], [], "missing"),
        (
            [helper.make_node("CumSum", ["x", "ax"], ["y"], name="n")],
            [numpy_helper.from_array(np.array([0, 1], np.int64), "ax")],
            "axis",
        ),
        (
            [helper.make_node("CumSum", ["x", "ax"], ["y"], name="n")],
            [numpy_helper.from_array(np.array([0.0], np.float32), "ax")],
            "axis",
        ),
        (
            [helper.make_node("Trilu", ["x", "k"], ["y"], name="n")],
            [numpy_helper.from_array(np.zeros(0, np.int64), "k")],
            "k",
        ),
        (
            [helper.make_node("Range", ["s", "l", "d"], ["y"], name="n")],
            [
                numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "s"),
                numpy_helper.from_array(np.float32(4.0), "l"),
                numpy_helper.from_array(np.float32(1.0), "d"),
            ],
            "start",
        ),
    ],
    ids=[
        "sum_omitted",
        "concat_omitted",
        "cumsum_axis_shape",
        "cumsum_axis_dtype",
        "trilu_empty_k",
        "range_vector",
    ],
)
def test_malformed_inputs_found_by_the_graph_fuzzer_are_typed_errors(nodes, inits, what: str) -> None:
    with pytest.raises(xrt.InvalidModelError) as e:
        native(
            make_model(nodes, [vi("x", [2, 3])], [vi("y", 2 if nodes[0].op_type != "Range" else 1)], inits)
        )
    msg = str(e.value)
    assert what in msg, msg


def test_integer_reductions_wrap_like_numpy_instead_of_overflowing() -> None:
    """ReduceProd/ReduceSumSquare/ReduceL1 on int64 values that overflow wrap modulo 2**64
    (numpy's result) - found by the graph fuzzer as signed-overflow UB under UBSan."""
    x = np.array([[-(2**62), -4, 3], [2**40, 2**40, 5]], dtype=np.int64)
    for op in ("ReduceProd", "ReduceSumSquare", "ReduceL1"):
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
        g = helper.make_graph(
            [node],
            "r",
            [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
            initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        got = xrt.InferenceSession(m.SerializeToString(), engine="native", device="cpu").run({"x": x})["y"]
        with np.errstate(over="ignore"):
            want = {
                "ReduceProd": np.prod(x, axis=1),
                "ReduceSumSquare": np.sum(x * x, axis=1),
                "ReduceL1": np.sum(np.abs(x), axis=1),
            }[op]
        np.testing.assert_array_equal(got, want, err_msg=op)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
def test_integer_clip_with_default_or_partial_bounds_matches_numpy(dtype) -> None:
    """Clip on integers with a missing bound uses the type's own range: the int64 default
    (2**63 as a double) used to be cast back to int64, undefined behaviour found by the
    graph fuzzer under UBSan."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng()
    x = rng.integers(info.min, info.max, size=(4, 5), dtype=dtype, endpoint=True)
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    lo = np.array(rng.integers(info.min, info.max, dtype=dtype), dtype=dtype)
    for inputs, want in (
        (["x"], x),
        (["x", "lo"], np.maximum(x, lo)),
        (["x", "", "lo"], np.minimum(x, lo)),
    ):
        g = helper.make_graph(
            [helper.make_node("Clip", inputs, ["y"])],
            "clip",
            [helper.make_tensor_value_info("x", tp, [4, 5])],
            [helper.make_tensor_value_info("y", tp, [4, 5])],
            initializer=[numpy_helper.from_array(lo, "lo")],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        got = xrt.InferenceSession(m.SerializeToString(), engine="native", device="cpu").run({"x": x})["y"]
        np.testing.assert_array_equal(got, want, err_msg=f"{dtype.__name__} {inputs}")


def test_integer_logsumexp_and_l2_saturate_instead_of_undefined_casts() -> None:
    """ReduceLogSumExp over an empty int64 axis is -inf, saturated to int64's minimum (a plain
    cast of -inf is undefined behaviour, found by the graph fuzzer under UBSan); a non-empty
    int64 LogSumExp and L2 match numpy in float64."""

    def model(op: str, shape: list[int]) -> bytes:
        g = helper.make_graph(
            [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
            "r",
            [helper.make_tensor_value_info("x", TensorProto.INT64, shape)],
            [helper.make_tensor_value_info("y", TensorProto.INT64, [3])],
            initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        return m.SerializeToString()

    empty = np.zeros((3, 0), dtype=np.int64)
    got = xrt.InferenceSession(model("ReduceLogSumExp", [3, 0]), engine="native", device="cpu").run({"x": empty})
    np.testing.assert_array_equal(got["y"], np.full(3, np.iinfo(np.int64).min))
    x = np.random.default_rng().integers(-20, 20, size=(3, 4), dtype=np.int64)
    xd = x.astype(np.float64)
    wants = {  # computed in float64, truncated to int64 (onnx.reference refuses integer LogSumExp)
        "ReduceLogSumExp": np.log(np.sum(np.exp(xd), axis=1)).astype(np.int64),
        "ReduceL2": np.sqrt(np.sum(xd * xd, axis=1)).astype(np.int64),
    }
    for op, want in wants.items():
        m = model(op, [3, 4])
        got = xrt.InferenceSession(m, engine="native", device="cpu").run({"x": x})["y"]
        np.testing.assert_array_equal(got, want, err_msg=op)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_pow_is_exact_and_wraps_like_numpy(dtype) -> None:
    """Integer Pow by exact squaring, wrapping modulo 2**bits as numpy does: through a double
    an int8 5**5 = 3125 was cast back out of range (UB found by the graph fuzzer under UBSan)
    and int64 results above 2**53 rounded."""
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph(
        [helper.make_node("Pow", ["a", "b"], ["y"])],
        "p",
        [helper.make_tensor_value_info("a", tp, [16]), helper.make_tensor_value_info("b", tp, [16])],
        [helper.make_tensor_value_info("y", tp, [16])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    rng = np.random.default_rng()
    a = rng.integers(-9, 10, size=16).astype(dtype)
    b = rng.integers(0, 45, size=16).astype(dtype)
    got = xrt.InferenceSession(m.SerializeToString(), engine="native", device="cpu").run({"a": a, "b": b})["y"]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, np.power(a, b))
