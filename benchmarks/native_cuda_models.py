"""The public architectures ``bench_native_cuda.py`` measures on the GPU: torchvision,
timm and ``transformers`` models with random weights, at serving batch sizes (vision
32x3x224x224, text 8x128), exported by ``torch.onnx.export`` inside the run.

Families: residual, grouped, depthwise-separable and NAS convnets; a dense net; ViT,
Swin and a pyramid vision transformer; a MetaFormer; BERT-style encoders; decoders
with GQA + RoPE + RMSNorm (Llama, Qwen2) and a GPT-2; an encoder-decoder (T5); speech
encoders (Whisper, Wav2Vec2). A model whose library is missing is skipped with the
reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

VISION_BATCH = 32
TEXT_BATCH, SEQ = 8, 128


@dataclass(frozen=True)
class CudaModel:
    """One model: a builder returning (torch module in eval mode, example inputs)."""

    name: str
    family: str
    source: str  # torchvision | timm | transformers
    build: Callable[[], tuple[Any, dict[str, np.ndarray]]]


def _image() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((VISION_BATCH, 3, 224, 224), dtype=np.float32)}


def _tokens(vocab: int, mask: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, vocab, (TEXT_BATCH, SEQ), dtype=np.int64)}
    if mask:
        m = np.ones((TEXT_BATCH, SEQ), np.int64)
        m[1::2, SEQ - 16 :] = 0  # padded rows: the mask path runs
        feeds["attention_mask"] = m
    return feeds


def _calibrate_batchnorm(model: Any) -> Any:
    """Running statistics from one batch of the benchmark's images (train mode, then
    eval). With random weights and the default statistics (mean 0, var 1) activations
    shrink layer after layer: MobileNetV3's logits were ~1e-10 in fp32 and all zeros in
    fp16, so its fp16 outputs 'matched' at any error. Calibrated, every model's outputs
    are O(1) and the fp16 comparison means something."""
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return model
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: one batch sets the statistics
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((8, 3, 224, 224), dtype=np.float32))
    model.train()
    with torch.no_grad():
        model(x)
    return model.eval()


def _tv(arch: str) -> Callable[[], tuple[Any, dict[str, np.ndarray]]]:
    def build() -> tuple[Any, dict[str, np.ndarray]]:
        import torchvision

        return _calibrate_batchnorm(torchvision.models.get_model(arch, weights=None)), _image()

    return build


def _timm(arch: str) -> Callable[[], tuple[Any, dict[str, np.ndarray]]]:
    def build() -> tuple[Any, dict[str, np.ndarray]]:
        import timm

        return _calibrate_batchnorm(timm.create_model(arch, pretrained=False)), _image()

    return build


def _wrap(model: Any, attr: str, names: tuple[str, ...]) -> Any:
    """One tensor output (``attr`` of the model's output), inputs by position."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, *args: Any) -> Any:
            return getattr(self.m(**dict(zip(names, args))), attr)

    return Wrapped()


def _hf(kind: str, head: str, attr: str, mask: bool = True, **cfg: Any) -> Callable[[], tuple[Any, dict]]:
    def build() -> tuple[Any, dict[str, np.ndarray]]:
        import transformers

        config = getattr(transformers, f"{kind}Config")(**cfg)
        model = getattr(transformers, f"{kind}{head}")(config)
        feeds = _tokens(config.vocab_size, mask)
        return _wrap(model, attr, tuple(feeds)), feeds

    return build


def _t5() -> tuple[Any, dict[str, np.ndarray]]:
    import transformers

    cfg = transformers.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128)
    model = transformers.T5Model(cfg)
    feeds = _tokens(cfg.vocab_size, mask=True)
    rng = np.random.default_rng(1)
    feeds["decoder_input_ids"] = rng.integers(0, cfg.vocab_size, (TEXT_BATCH, 32), dtype=np.int64)
    return _wrap(model, "last_hidden_state", tuple(feeds)), feeds


def _whisper() -> tuple[Any, dict[str, np.ndarray]]:
    import transformers

    cfg = transformers.WhisperConfig(
        d_model=512, encoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8
    )
    enc = transformers.WhisperModel(cfg).get_encoder()
    mel = np.random.default_rng(0).standard_normal((TEXT_BATCH, 80, 3000), dtype=np.float32)
    return _wrap(enc, "last_hidden_state", ("input_features",)), {"input_features": mel}


def _wav2vec2() -> tuple[Any, dict[str, np.ndarray]]:
    import transformers

    model = transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(num_hidden_layers=6))
    audio = np.random.default_rng(0).standard_normal((TEXT_BATCH, 16000), dtype=np.float32)
    return _wrap(model, "last_hidden_state", ("input_values",)), {"input_values": audio}


_DECODER = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "use_cache": False,
}

MODELS: tuple[CudaModel, ...] = (
    # Most diverse first: a time-boxed torch.compile column then covers every family.
    CudaModel("resnet50", "residual conv (bottleneck)", "torchvision", _tv("resnet50")),
    CudaModel("bert_base", "encoder (BERT)", "transformers", _hf("Bert", "Model", "last_hidden_state")),
    CudaModel(
        "llama_gqa",
        "decoder (RMSNorm, RoPE, GQA, SiLU)",
        "transformers",
        _hf("Llama", "ForCausalLM", "logits", **_DECODER),
    ),
    CudaModel(
        "mobilenet_v3_large", "depthwise-separable + SE, hardswish", "torchvision", _tv("mobilenet_v3_large")
    ),
    CudaModel("vit_b_16", "ViT", "torchvision", _tv("vit_b_16")),
    CudaModel(
        "gpt2_small",
        "decoder (GPT-2)",
        "transformers",
        _hf("GPT2", "LMHeadModel", "logits", mask=False, use_cache=False),
    ),
    CudaModel("convnext_tiny", "large-kernel depthwise + LayerNorm", "torchvision", _tv("convnext_tiny")),
    CudaModel("whisper_encoder", "speech encoder (conv front end)", "transformers", _whisper),
    CudaModel(
        "efficientnet_b0", "depthwise-separable + SE, SiLU (NAS)", "torchvision", _tv("efficientnet_b0")
    ),
    CudaModel("swin_t", "windowed attention (Swin)", "torchvision", _tv("swin_t")),
    CudaModel("t5_small", "encoder-decoder (relative position bias)", "transformers", _t5),
    CudaModel("resnext50_32x4d", "grouped conv", "torchvision", _tv("resnext50_32x4d")),
    CudaModel(
        "qwen2_gqa",
        "decoder (RMSNorm, RoPE, GQA, qkv bias)",
        "transformers",
        _hf("Qwen2", "ForCausalLM", "logits", **_DECODER),
    ),
    CudaModel("regnet_y_800mf", "grouped conv + SE (NAS design space)", "torchvision", _tv("regnet_y_800mf")),
    CudaModel("densenet121", "dense / concat", "torchvision", _tv("densenet121")),
    CudaModel(
        "pvt_v2_b0", "pyramid vision transformer (spatial-reduction attention)", "timm", _timm("pvt_v2_b0")
    ),
    CudaModel("poolformer_s12", "MetaFormer (pooling mixer, GroupNorm)", "timm", _timm("poolformer_s12")),
    CudaModel("ghostnet_100", "ghost modules (cheap convs + concat)", "timm", _timm("ghostnet_100")),
    CudaModel(
        "distilroberta",
        "encoder (RoBERTa, 6 layers)",
        "transformers",
        _hf("Roberta", "Model", "last_hidden_state", num_hidden_layers=6),
    ),
    CudaModel(
        "electra_small",
        "encoder (ELECTRA discriminator)",
        "transformers",
        _hf("Electra", "Model", "last_hidden_state"),
    ),
    CudaModel("wav2vec2", "speech encoder (conv feature extractor)", "transformers", _wav2vec2),
)
