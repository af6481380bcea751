"""Test models shared by the engine tests: small, randomly initialized versions of
ResNet-18, MobileNetV3-Small, a ViT, BERT and GPT-2, exported to ONNX by torch.

No weights are downloaded: every model is built from its architecture with a fixed
seed, so the exported file is the same on every machine with the same torch. The
exports are cached (atomically written) under ``$XRT_TEST_MODEL_DIR`` or
``~/.cache/xpuruntime/test_models/zoo-v<ZOO_VERSION>-torch-<version>/``.

Usage::

    path = model_zoo.export("resnet18")             # Path to the .onnx file
    feeds = model_zoo.sample_inputs("resnet18", np.random.default_rng(0))
    ref = model_zoo.torch_reference("resnet18", feeds)  # PyTorch outputs, float64-free
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODELS = ("resnet18", "mobilenet_v3_small", "vit_tiny", "bert_tiny", "gpt2_tiny")
OPSET = 17
#: Bump when a model definition or the export changes: the on-disk cache is keyed on it.
ZOO_VERSION = 2


@dataclass(frozen=True)
class ZooModel:
    """How to build, feed and export one model."""

    name: str
    build: Callable[[], Any]  # -> torch.nn.Module in eval mode
    inputs: Callable[[np.random.Generator, int], dict[str, np.ndarray]]  # rng, batch
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic_axes: dict[str, dict[int, str]]


def _image_inputs(size: int) -> Callable[[np.random.Generator, int], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator, batch: int = 1) -> dict[str, np.ndarray]:
        return {"input": rng.standard_normal((batch, 3, size, size), dtype=np.float32)}

    return make


def _token_inputs(
    vocab: int, seq: int, with_mask: bool
) -> Callable[[np.random.Generator, int], dict[str, np.ndarray]]:
    def make(rng: np.random.Generator, batch: int = 1) -> dict[str, np.ndarray]:
        feeds = {"input_ids": rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)}
        if with_mask:
            mask = np.ones((batch, seq), dtype=np.int64)
            mask[:, seq - 2 :] = 0  # padded tail: exercises the mask path
            feeds["attention_mask"] = mask
        return feeds

    return make


def _calibrate_bn(module: Any, size: int) -> Any:
    """Give BatchNorm layers running statistics from random images, as training would.

    With the initial statistics (mean 0, var 1) a randomly initialized deep CNN shrinks
    its activations to ~1e-10 at the output, which would make every tolerance check
    vacuous; calibrated statistics keep the outputs of order one.
    """
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batches
    module.train()
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for _ in range(4):
            module(torch.randn(8, 3, size, size, generator=gen))
    return module.eval()


def _resnet18() -> Any:
    import torchvision

    return _calibrate_bn(torchvision.models.resnet18(weights=None, num_classes=100), 64)


def _mobilenet() -> Any:
    import torchvision

    return _calibrate_bn(torchvision.models.mobilenet_v3_small(weights=None, num_classes=100), 64)


def _vit() -> Any:
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    vit = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10
    )
    torch.nn.init.normal_(vit.heads.head.weight, std=0.2)  # torchvision zero-initializes the head
    return vit


class _TensorsOnly:
    """Wraps a transformers model so forward returns a plain tensor (exportable)."""

    @staticmethod
    def wrap(model: Any, key: str, token_types: bool = False) -> Any:
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                names = ("input_ids", "attention_mask")
                kwargs = dict(zip(names, args))
                # An explicit all-ones mask keeps transformers off its packed-sequence
                # detection (torch.diff), which has no ONNX export.
                kwargs.setdefault("attention_mask", torch.ones_like(kwargs["input_ids"]))
                if token_types:
                    # explicit segment ids: BERT otherwise gathers them from a buffer
                    # (GatherElements), an op with no role in the model itself
                    kwargs["token_type_ids"] = torch.zeros_like(kwargs["input_ids"])
                return self.model(**kwargs, return_dict=True)[key]

        return Wrapper()


def _bert() -> Any:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return _TensorsOnly.wrap(BertModel(cfg), "last_hidden_state", token_types=True)


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=1000,
        n_embd=64,
        n_layer=2,
        n_head=2,
        n_positions=64,
        use_cache=False,
        attn_implementation="eager",
    )
    return _TensorsOnly.wrap(GPT2LMHeadModel(cfg), "logits")


ZOO: dict[str, ZooModel] = {
    "resnet18": ZooModel(
        "resnet18",
        _resnet18,
        _image_inputs(64),
        ("input",),
        ("logits",),
        {"input": {0: "batch"}, "logits": {0: "batch"}},
    ),
    "mobilenet_v3_small": ZooModel(
        "mobilenet_v3_small",
        _mobilenet,
        _image_inputs(64),
        ("input",),
        ("logits",),
        {"input": {0: "batch"}, "logits": {0: "batch"}},
    ),
    "vit_tiny": ZooModel(
        "vit_tiny",
        _vit,
        _image_inputs(32),
        ("input",),
        ("logits",),
        {"input": {0: "batch"}, "logits": {0: "batch"}},
    ),
    "bert_tiny": ZooModel(
        "bert_tiny",
        _bert,
        _token_inputs(1000, 16, True),
        ("input_ids", "attention_mask"),
        ("last_hidden_state",),
        {
            "input_ids": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"},
        },
    ),
    "gpt2_tiny": ZooModel(
        "gpt2_tiny",
        _gpt2,
        _token_inputs(1000, 16, False),
        ("input_ids",),
        ("logits",),
        {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
    ),
}


def cache_dir() -> Path:
    """Where exported models are kept (per torch version)."""
    import torch

    base = os.environ.get("XRT_TEST_MODEL_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "xpuruntime" / "test_models"
    return root / f"zoo-v{ZOO_VERSION}-torch-{torch.__version__.split('+')[0]}"


@functools.cache
def torch_module(name: str) -> Any:
    """The model as a torch module, randomly initialized with a fixed seed, in eval mode."""
    import torch

    torch.manual_seed(1234)
    return ZOO[name].build().eval()


def export(name: str) -> Path:
    """Export ``name`` to ONNX once (cached on disk) and return the path."""
    import warnings

    import torch

    spec = ZOO[name]
    path = cache_dir() / f"{name}.onnx"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    module = torch_module(name)
    example = spec.inputs(np.random.default_rng(0), 1)
    args = tuple(torch.from_numpy(example[n]) for n in spec.input_names)
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        fastpath = torch.backends.mha.get_fastpath_enabled()
        # nn.MultiheadAttention's fused inference fast path has no ONNX export.
        torch.backends.mha.set_fastpath_enabled(False)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                args,
                tmp,
                dynamo=False,
                opset_version=OPSET,
                input_names=list(spec.input_names),
                output_names=list(spec.output_names),
                dynamic_axes=spec.dynamic_axes,
                do_constant_folding=True,
            )
        os.replace(tmp, path)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def sample_inputs(name: str, rng: np.random.Generator, batch: int = 1) -> dict[str, np.ndarray]:
    """Fresh random inputs for ``name``."""
    return ZOO[name].inputs(rng, batch)


def torch_reference(name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The PyTorch module's outputs for ``feeds`` (the independent reference)."""
    import torch

    spec = ZOO[name]
    with torch.no_grad():
        out = torch_module(name)(*(torch.from_numpy(feeds[n]) for n in spec.input_names))
    return {spec.output_names[0]: out.numpy()}
