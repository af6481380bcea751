"""The default ONNX exports of public architectures build and run on the native engine.

Issue 18 §1: the models people export — torchvision classification, segmentation and
detection-backbone networks, ``transformers`` encoders, a decoder and speech encoders
at their default settings (SDPA attention, which emits IsNaN/Where; Swin's window
shifts, which emit ScatterND) — exported by torch's TorchScript exporter at opsets 17
and 18 and by the dynamo exporter (opset 18+, GatherND in masked models), must build
on the native engine and match ONNX Runtime's CPU provider within 1e-4 relative
(max |native - ort| / max |ort|) on random inputs.

Every model is built with random weights from a small configuration (hidden 64, two
layers, small images) so one case takes seconds; the bigger torchvision networks and
the dynamo exports are marked ``slow``. A case skips, with the reason, where
torchvision, transformers or (for dynamo) onnxscript is not installed.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import xpuruntime as xrt

REL_TOL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions before other modules run (allocator statistics)."""
    yield
    gc.collect()


@dataclass(frozen=True)
class Family:
    """How to build, feed and export one architecture."""

    build: Callable[[], Any]  # -> torch.nn.Module in eval mode
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    needs: str  # "torchvision" or "transformers"
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    slow: bool = False


def _calibrate_bn(module: Any, size: int) -> Any:
    """Running statistics from random images, so a random deep CNN's outputs stay of
    order one (with mean 0 / var 1 they shrink towards 0 and every tolerance passes)."""
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    module.train()
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for _ in range(3):
            module(torch.randn(4, 3, size, size, generator=gen))
    return module.eval()


def _images(size: int, batch: int = 1) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"pixel_values": rng.standard_normal((batch, 3, size, size), dtype=np.float32)}

    return make


def _tokens(
    vocab: int, seq: int, mask: bool = True
) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        feeds = {"input_ids": rng.integers(0, vocab, size=(2, seq), dtype=np.int64)}
        if mask:
            m = np.ones((2, seq), dtype=np.int64)
            m[1, seq - 3 :] = 0  # one padded row: the mask path is exercised
            feeds["attention_mask"] = m
        return feeds

    return make


def _audio(shape: tuple[int, ...], name: str) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {name: rng.standard_normal(shape, dtype=np.float32)}

    return make


class _Outputs(torch.nn.Module):
    """Calls a model with keyword inputs and returns one tensor (exportable)."""

    def __init__(self, model: Any, names: tuple[str, ...], pick: Callable[[Any], Any]) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.pick = pick

    def forward(self, *args: Any) -> Any:
        return self.pick(self.model(**dict(zip(self.names, args))))


def _hf(model: Any, names: tuple[str, ...], key: str = "last_hidden_state") -> Any:
    return _Outputs(model.eval(), names, lambda out: out[key])


def _tv(name: str, size: int, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision

        return _calibrate_bn(getattr(torchvision.models, name)(weights=None, **kw), size)

    return build


def _tv_swin() -> Any:
    from torchvision.models.swin_transformer import SwinTransformer

    # swin_t's blocks (shifted windows: their masks are ScatterND), narrower and shallower
    return SwinTransformer(
        patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4], num_classes=10
    ).eval()


def _tv_seg() -> Any:
    import torchvision

    m = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=5, aux_loss=False
    )
    return _Outputs(_calibrate_bn(m, 64), ("x",), lambda out: out["out"])


def _tv_det_backbone() -> Any:
    from torchvision.models.detection.backbone_utils import mobilenet_backbone

    # The FPN feature extractor of fasterrcnn_mobilenet_v3_large_fpn.
    m = mobilenet_backbone(backbone_name="mobilenet_v3_large", weights=None, fpn=True, trainable_layers=6)
    return _Outputs(
        _calibrate_bn(m, 64), ("x",), lambda out: torch.cat([v.flatten(1) for v in out.values()], 1)
    )


def _bert() -> Any:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=500,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    return _hf(BertModel(cfg), ("input_ids", "attention_mask"))


def _distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(
        vocab_size=500, dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=64
    )
    return _hf(DistilBertModel(cfg), ("input_ids", "attention_mask"))


def _roberta() -> Any:
    from transformers import RobertaConfig, RobertaModel

    cfg = RobertaConfig(
        vocab_size=500,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=72,
    )
    return _hf(RobertaModel(cfg), ("input_ids", "attention_mask"))


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=500,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        use_cache=False,
    )
    return _Outputs(LlamaForCausalLM(cfg).eval(), ("input_ids", "attention_mask"), lambda out: out["logits"])


def _vit() -> Any:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    return _hf(ViTModel(cfg), ("pixel_values",))


def _deit() -> Any:
    from transformers import DeiTConfig, DeiTModel

    cfg = DeiTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )
    return _hf(DeiTModel(cfg), ("pixel_values",))


def _swin() -> Any:
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(
        image_size=64,
        patch_size=4,
        embed_dim=32,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
    )
    return _hf(SwinModel(cfg), ("pixel_values",))


def _convnext() -> Any:
    from transformers import ConvNextConfig, ConvNextModel

    cfg = ConvNextConfig(hidden_sizes=[32, 64], depths=[1, 1], num_stages=2, image_size=64)
    return _hf(ConvNextModel(cfg), ("pixel_values",))


def _whisper_encoder() -> Any:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(
        num_mel_bins=16,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=2,
        encoder_ffn_dim=128,
        max_source_positions=50,
    )
    return _hf(WhisperEncoder(cfg), ("input_features",))


def _wav2vec2() -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        do_stable_layer_norm=False,
    )
    return _hf(Wav2Vec2Model(cfg), ("input_values",))


_TOKEN_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}

FAMILIES: dict[str, Family] = {
    # torchvision: classification, segmentation, a detection backbone
    "resnet50": Family(_tv("resnet50", 64, num_classes=10), _images(64), "torchvision", slow=True),
    "mobilenet_v3_large": Family(_tv("mobilenet_v3_large", 64, num_classes=10), _images(64), "torchvision"),
    "efficientnet_b0": Family(_tv("efficientnet_b0", 64, num_classes=10), _images(64), "torchvision"),
    "densenet121": Family(_tv("densenet121", 64, num_classes=10), _images(64), "torchvision", slow=True),
    "regnet_y_400mf": Family(_tv("regnet_y_400mf", 64, num_classes=10), _images(64), "torchvision"),
    "swin_tv": Family(_tv_swin, _images(64), "torchvision"),
    "convnext_tiny_tv": Family(
        _tv("convnext_tiny", 64, num_classes=10), _images(64), "torchvision", slow=True
    ),
    "deeplabv3_mobilenet": Family(_tv_seg, _images(64), "torchvision", slow=True),
    "fpn_mobilenet_backbone": Family(_tv_det_backbone, _images(64), "torchvision", slow=True),
    # transformers: encoders, a decoder, vision transformers, speech encoders
    "bert": Family(_bert, _tokens(500, 16), "transformers", _TOKEN_AXES),
    "distilbert": Family(_distilbert, _tokens(500, 16), "transformers", _TOKEN_AXES),
    "roberta": Family(_roberta, _tokens(500, 16), "transformers", _TOKEN_AXES),
    "llama": Family(_llama, _tokens(500, 16), "transformers", _TOKEN_AXES),
    "vit": Family(_vit, _images(32, 2), "transformers"),
    "deit": Family(_deit, _images(32, 2), "transformers"),
    "swin": Family(_swin, _images(64), "transformers"),
    "convnext": Family(_convnext, _images(64), "transformers"),
    "whisper_encoder": Family(_whisper_encoder, _audio((1, 16, 100), "input_features"), "transformers"),
    "wav2vec2": Family(_wav2vec2, _audio((1, 1600), "input_values"), "transformers"),
}

EXPORTERS = ("torchscript17", "torchscript18", "dynamo")


def export(name: str, exporter: str, path: Path) -> dict[str, np.ndarray]:
    """Exports FAMILIES[name] with `exporter` to `path`; returns sample feeds."""
    fam = FAMILIES[name]
    pytest.importorskip(fam.needs)
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch's dynamo ONNX exporter needs onnxscript")
    torch.manual_seed(0)
    module = fam.build()
    feeds = fam.inputs(np.random.default_rng(0))
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dyn = None
            if fam.dynamic_axes:
                # forward(*args): one spec per positional input, inside the *args tuple
                dyn = (tuple({k: torch.export.Dim.AUTO for k in axes} for axes in fam.dynamic_axes.values()),)
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=True,
                input_names=list(feeds),
                dynamic_shapes=dyn,
                verbose=False,
                report=False,
            )
        else:
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=False,
                opset_version=int(exporter[-2:]),
                input_names=list(feeds),
                output_names=["out"],
                dynamic_axes=fam.dynamic_axes or None,
            )
    return feeds


def _cases() -> list[Any]:
    out = []
    for name, fam in FAMILIES.items():
        for exporter in EXPORTERS:
            # The quick run: every fast family through one exporter, and the dynamo
            # exporter's masked-attention path (GatherND) once.
            quick = not fam.slow and (exporter == "torchscript17" or (name, exporter) == ("bert", "dynamo"))
            marks = [] if quick else [pytest.mark.slow]
            out.append(pytest.param(name, exporter, marks=marks, id=f"{name}-{exporter}"))
    return out


@pytest.mark.parametrize(("name", "exporter"), _cases())
def test_export_runs_and_matches_onnxruntime(name: str, exporter: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}_{exporter}.onnx"
    feeds = export(name, exporter, path)
    sess = xrt.InferenceSession(str(path), device="cpu", engine="native")
    ref_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = ref_sess.run(None, feeds)
    ours = sess.run(feeds)
    for info, b in zip(ref_sess.get_outputs(), ref):
        a = ours[info.name]
        assert a.shape == b.shape and a.dtype == b.dtype, (info.name, a.shape, b.shape, a.dtype, b.dtype)
        if b.dtype.kind == "f":
            rel = float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))
            assert rel <= REL_TOL, f"{name} ({exporter}) output {info.name}: relative error {rel:.3g}"
        else:
            np.testing.assert_array_equal(a, b)


# ---- the ops these exports need, on random inputs against onnx.reference ----------


def _one_node(
    op: str,
    inputs: dict[str, np.ndarray],
    consts: dict[str, np.ndarray],
    n_out: int = 1,
    order: tuple[str, ...] | None = None,
    **attrs: Any,
) -> Any:
    """A one-node opset-18 model: `inputs` are graph inputs, `consts` initializers, the
    node's inputs in `order` (default: inputs then consts)."""
    from onnx import TensorProto, helper, numpy_helper

    def vi(name: str, arr: np.ndarray | None) -> Any:
        if arr is None:
            return helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)

    names = list(order or (*inputs, *consts))
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [vi(k, v) for k, v in inputs.items()],
        [vi(f"y{i}", None) for i in range(n_out)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model)


def _check_vs_reference(model: Any, feeds: dict[str, np.ndarray], tol: float = 1e-5) -> None:
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model).run(None, feeds)
    ours = xrt.InferenceSession(model.SerializeToString(), device="cpu", engine="native").run(feeds)
    for i, b in enumerate(ref):
        a = ours[f"y{i}"]
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if b.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max(initial=0))))
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_isnan_isinf_random(dtype: type) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 37)).astype(dtype)
    x.flat[rng.choice(x.size, 20, replace=False)] = np.array([np.nan, np.inf, -np.inf, 0.0] * 5, dtype)
    _check_vs_reference(_one_node("IsNaN", {"x": x}, {}), {"x": x})
    for neg, pos in ((1, 1), (0, 1), (1, 0)):
        m = _one_node("IsInf", {"x": x}, {}, detect_negative=neg, detect_positive=pos)
        _check_vs_reference(m, {"x": x})


@pytest.mark.parametrize(
    ("data_shape", "idx_shape", "batch_dims", "dtype"),
    [
        ((5, 7, 3), (4, 2), 0, np.float32),
        ((2, 6, 4), (2, 3, 1), 1, np.int64),
        ((3, 4), (3, 2), 0, np.bool_),
        ((2, 3, 4, 5), (2, 3, 2, 1), 2, np.float64),
    ],
)
def test_gathernd_random(
    data_shape: tuple[int, ...], idx_shape: tuple[int, ...], batch_dims: int, dtype: type
) -> None:
    rng = np.random.default_rng(2)
    data = (rng.standard_normal(data_shape) * 10).astype(dtype)
    last = idx_shape[-1]
    dims = np.array(data_shape[batch_dims : batch_dims + last])
    idx = rng.integers(-dims, dims, size=idx_shape).astype(np.int64)  # negative indices too
    m = _one_node("GatherND", {"data": data}, {"idx": idx}, batch_dims=batch_dims)
    _check_vs_reference(m, {"data": data})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatternd_random(reduction: str) -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6, 5, 4)).astype(np.float32)
    # distinct index tuples: with duplicates and reduction none the result is unspecified
    flat = rng.choice(30, size=7, replace=False)
    idx = np.stack([flat // 5, flat % 5], axis=1).astype(np.int64)
    idx[0, 0] -= 6  # a negative index
    upd = rng.standard_normal((7, 4)).astype(np.float32)
    order = ("data", "idx", "upd")
    m = _one_node("ScatterND", {"data": data, "upd": upd}, {"idx": idx}, order=order, reduction=reduction)
    from onnx.reference import ReferenceEvaluator

    # the reference takes no negative indices: it gets them wrapped
    ref_model = _one_node(
        "ScatterND", {"data": data, "upd": upd}, {"idx": idx % [6, 5]}, order=order, reduction=reduction
    )
    ref = ReferenceEvaluator(ref_model).run(None, {"data": data, "upd": upd})[0]
    ours = xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native").run(
        {"data": data, "upd": upd}
    )["y0"]
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("axis", "reduction"), [(0, "none"), (1, "add"), (-1, "mul"), (2, "max"), (1, "min")]
)
def test_scatter_elements_random(axis: int, reduction: str) -> None:
    rng = np.random.default_rng(4)
    data = rng.standard_normal((4, 5, 6)).astype(np.float32)
    shape = (3, 4, 5)
    ax = axis % 3
    if reduction == "none":  # unique targets along the axis
        idx = np.argsort(rng.random((*shape[:ax], data.shape[ax], *shape[ax + 1 :])), axis=ax)
        idx = np.take(idx, range(shape[ax]), axis=ax)
    else:
        idx = rng.integers(0, data.shape[ax], size=shape)
    idx = idx.astype(np.int64)
    upd = rng.standard_normal(shape).astype(np.float32)
    m = _one_node(
        "ScatterElements",
        {"data": data, "upd": upd},
        {"idx": idx},
        order=("data", "idx", "upd"),
        axis=axis,
        reduction=reduction,
    )
    _check_vs_reference(m, {"data": data, "upd": upd})


@pytest.mark.parametrize("shape", [(2, 3, 17), (1, 4, 9, 11), (3, 2, 2, 3, 5)])
def test_instance_norm_random(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 3 + 2).astype(np.float32)
    scale = rng.standard_normal(shape[1]).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    m = _one_node("InstanceNormalization", {"x": x}, {"s": scale, "b": bias}, epsilon=1e-4)
    _check_vs_reference(m, {"x": x}, tol=1e-5)


@pytest.mark.parametrize(
    ("mode", "coord", "scales", "sizes", "extra"),
    [
        ("nearest", "asymmetric", [1, 1, 2, 2], None, {"nearest_mode": "floor"}),  # torch nearest
        ("linear", "pytorch_half_pixel", [1, 1, 2.5, 1.5], None, {}),  # torch bilinear
        ("linear", "align_corners", None, [2, 3, 13, 7], {}),
        ("linear", "half_pixel", [1, 1, 0.6, 0.4], None, {"antialias": 1}),
        ("cubic", "half_pixel", [1, 1, 1.7, 0.8], None, {"exclude_outside": 1}),
        ("nearest", "half_pixel", None, [2, 3, 4, 19], {"nearest_mode": "round_prefer_ceil"}),
        ("linear", "tf_crop_and_resize", None, [2, 3, 5, 6], {"extrapolation_value": 3.0}),
    ],
)
def test_resize_random(
    mode: str, coord: str, scales: list[float] | None, sizes: list[int] | None, extra: dict[str, Any]
) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    roi = (
        np.array([0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3], np.float32)
        if coord == "tf_crop_and_resize"
        else np.zeros(0, np.float32)
    )
    consts = {"roi": roi, "scales": np.array(scales or [], np.float32)}
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
    m = _one_node("Resize", {"x": x}, consts, mode=mode, coordinate_transformation_mode=coord, **extra)
    _check_vs_reference(m, {"x": x}, tol=1e-5)


def test_out_of_range_index_is_a_typed_error() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = _one_node("GatherND", {"data": data}, {"idx": np.array([[3, 0]], np.int64)})
    sess = xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native")
    with pytest.raises(xrt.InvalidArgumentError, match="index 3 is out of range for axis 0 of size 3"):
        sess.run({"data": data})


# ---- what the engine cannot run is reported at build time, all of it at once ------


def _unsupported_model(batch: int | str) -> Any:
    """x -> Det -> ... with ops the engine lacks: Det (twice), Hardmax, a custom-domain op."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="ok_relu"),
        helper.make_node("Det", ["r"], ["d1"], name="det_a"),
        helper.make_node("Det", ["r"], ["d2"], name="det_b"),
        helper.make_node("Hardmax", ["r"], ["h"], name="hard"),
        helper.make_node("Frob", ["h"], ["f"], name="frob", domain="mystery"),
        helper.make_node("Add", ["d1", "d2"], ["y"], name="ok_add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 3])
    outs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch]),
        helper.make_tensor_value_info("f", TensorProto.FLOAT, [batch, 3, 3]),
    ]
    graph = helper.make_graph(nodes, "unsupported", [x], outs)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("mystery", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


@pytest.mark.parametrize("batch", [2, "batch"], ids=["static", "dynamic"])
def test_unsupported_ops_all_reported_at_build(batch: int | str) -> None:
    # dynamic: the session compiles at the first run, yet it refuses at build time
    with pytest.raises(xrt.UnsupportedOperationError) as err:
        xrt.InferenceSession(_unsupported_model(batch), device="cpu", engine="native")
    msg = str(err.value)
    assert "node 'det_a' (Det): op 'Det' is not supported by the native engine on device 'cpu'" in msg
    assert "All 3 unsupported ops of the model (4 nodes)" in msg
    assert "Det (2 nodes: 'det_a', 'det_b')" in msg
    assert "Hardmax (1 node: 'hard')" in msg
    assert "mystery.Frob (1 node: 'frob')" in msg
    assert "engine='onnxruntime'" in msg and "Relu" in msg  # how to proceed; what it runs


def test_unsupported_op_list_is_capped_per_op() -> None:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Det", ["x"], [f"d{i}"], name=f"det{i}") for i in range(8)]
    nodes.append(helper.make_node("Sum", [f"d{i}" for i in range(8)], ["y"], name="sum"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    m = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)]
    )
    with pytest.raises(xrt.UnsupportedOperationError, match=r"Det \(8 nodes: 'det0', .*'det4' and 3 more\)"):
        xrt.InferenceSession(m.SerializeToString(), device="cpu", engine="native")
