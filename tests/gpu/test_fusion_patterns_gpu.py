"""The compiler's pattern fusions on CUDA (graph/fusion_attention.cpp, fusion_layernorm.cpp).

BERT and GPT-2 with head_dim 64 (what flash_v2 has kernels for), random weights, exported
by torch at opset 17 inside the run:

- fp16 plans: both layers' attention subgraphs become FusedAttention nodes and run on
  flash_v2 (GPT-2's constant causal mask as is_causal; BERT's padding mask, lowered to
  fp16 by the precision pass, handed to the kernel as float32 through a Cast), outputs
  within 2e-2 relative of ONNX Runtime's fp32 CPU run;
- fp32 plans: no CUDA kernel runs fp32 attention, so the subgraph stays as it was and the
  fusion decision says why (flash_v2 rejects the dtype), outputs within 1e-4;
- a LayerNorm exported below opset 17 (decomposed) runs as one LayerNormalization on the
  fused LayerNorm kernel, within 1e-4;
- nn.GELU() and nn.GELU(approximate="tanh") as torch exports them below opset 20 (Erf or
  Tanh and their arithmetic) run as one Gelu node each, fp32 within 1e-4 and fp16 within
  2e-2 of ONNX Runtime.

Run: ``pytest -m gpu tests/gpu/test_fusion_patterns_gpu.py``.
"""

from __future__ import annotations

import functools
import io
import warnings
from typing import Any

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime.engines.native import engine as native_engine

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
torch = pytest.importorskip("torch", reason="the models are exported from torch")
pytest.importorskip("transformers", reason="BERT and GPT-2 come from transformers")


def _skip_reason() -> str:
    why = native_engine.unavailable_reason("cuda")
    return f"the native engine cannot run on CUDA here: {why}" if why else ""


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]

SEQ, BATCH = 64, 2


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    b64 = np.asarray(b, dtype=np.float64)
    return float(np.abs(np.asarray(a, dtype=np.float64) - b64).max() / max(np.abs(b64).max(), 1e-30))


class _Bert(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        cfg = BertConfig(
            vocab_size=1000,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=256,
            max_position_embeddings=128,
            attn_implementation="eager",
        )
        self.m = BertModel(cfg, add_pooling_layer=False)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        return self.m(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
        ).last_hidden_state


class _Gpt2(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(
            vocab_size=1000,
            n_embd=128,
            n_layer=2,
            n_head=2,
            n_positions=128,
            use_cache=False,
            attn_implementation="eager",
        )
        self.m = GPT2LMHeadModel(cfg)

    def forward(self, input_ids: Any) -> Any:
        return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits


def _feeds(name: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {"input_ids": rng.integers(0, 1000, size=(BATCH, SEQ), dtype=np.int64)}
    if name == "bert":
        mask = np.ones((BATCH, SEQ), dtype=np.int64)
        mask[:, SEQ - 5 :] = 0  # padded tail
        feeds["attention_mask"] = mask
    return feeds


@functools.cache
def _export(name: str) -> bytes:
    torch.manual_seed(3)
    module = (_Bert if name == "bert" else _Gpt2)().eval()
    example = _feeds(name, np.random.default_rng(0))
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(torch.from_numpy(v) for v in example.values()),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=list(example),
            output_names=["out"],
        )
    return buf.getvalue()


def _session(model: bytes, precision: str) -> Any:
    try:
        policy = xrt.ExecutionPolicy(allow_tf32=False, precision=precision)
        return xrt.InferenceSession(model, engine="native", device="cuda", exec_policy=policy)
    except Exception as e:
        if precision != "fp32" and "precision" in str(e):
            pytest.skip(f"the native engine does not accept precision={precision!r} here: {e}")
        raise


def _reference(model: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_fp16_attention_runs_on_flash_v2(name: str) -> None:
    model = _export(name)
    feeds = _feeds(name, np.random.default_rng(1))
    sess = _session(model, "fp16")
    decisions = list(sess.explain())
    # The attention fusions (the head-transpose folds are FusedAttention decisions too).
    fusions = [
        d
        for d in decisions
        if d.op == "fusion" and d.chosen == "FusedAttention" and d.detail.startswith("attention")
    ]
    assert len(fusions) == 2, [d.detail for d in decisions if d.op == "fusion"]
    assert all(f"is_causal={int(name == 'gpt2')}" in d.key for d in fusions)
    if name == "bert":  # the padding mask rides along (as float32 or the plan's dtype)
        assert all("additive mask" in d.detail for d in fusions)
    attention = [d for d in decisions if d.op == "attention"]
    assert len(attention) == 2 and all(d.chosen == "flash_v2" for d in attention), [
        (d.chosen, d.candidates) for d in attention
    ]
    steps = sess._engine.plan.steps
    assert [s["kernel"] for s in steps if s["op_type"] == "FusedAttention"] == ["flash_v2"] * 2
    assert not any(s["op_type"] == "Softmax" for s in steps)
    got = sess.run(feeds)["out"]
    assert np.isfinite(got).all()
    assert rel_err(got, _reference(model, feeds)) <= 2e-2


def test_fp32_attention_stays_unfused_on_cuda() -> None:
    model = _export("bert")
    feeds = _feeds("bert", np.random.default_rng(2))
    sess = _session(model, "fp32")
    fusions = [d for d in sess.explain() if d.op == "fusion" and d.detail.startswith("attention")]
    assert len(fusions) == 2
    for d in fusions:
        assert d.chosen == "" and d.rule == "none" and "left unfused" in d.detail
        flash = [c for c in d.candidates if c.kernel == "flash_v2"]
        assert (
            flash
            and flash[0].verdict == "rejected"
            and flash[0].reason_code == xrt._core.reason.DTYPE_UNSUPPORTED
        )
    assert not any(s["op_type"] == "FusedAttention" for s in sess._engine.plan.steps)
    assert rel_err(sess.run(feeds)["out"], _reference(model, feeds)) <= 1e-4


def test_decomposed_layernorm_runs_on_the_fused_kernel() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(48, 256), torch.nn.LayerNorm(256), torch.nn.ReLU())
    with torch.no_grad():
        net[1].weight.normal_(1.0, 0.3)
        net[1].bias.normal_()
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net.eval(),
            (torch.randn(4, 9, 48),),
            buf,
            dynamo=False,
            opset_version=14,
            input_names=["x"],
            output_names=["out"],
        )
    model = buf.getvalue()
    feeds = {"x": np.random.default_rng(5).standard_normal((4, 9, 48)).astype(np.float32)}
    sess = _session(model, "fp32")
    (d,) = [d for d in sess.explain() if d.op == "fusion"]
    assert d.chosen == "LayerNormalization"
    ln = [s for s in sess._engine.plan.steps if s["op_type"] == "LayerNormalization"]
    assert len(ln) == 1 and ln[0]["kernel"] == "fused"
    assert rel_err(sess.run(feeds)["out"], _reference(model, feeds)) <= 1e-4


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-4), ("fp16", 2e-2)])
def test_decomposed_gelu_runs_as_one_gelu_node(precision: str, tol: float) -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(48, 256), torch.nn.GELU(), torch.nn.Linear(256, 64), torch.nn.GELU(approximate="tanh")
    )
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net.eval(),
            (torch.randn(4, 9, 48),),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=["x"],
            output_names=["out"],
        )
    model = buf.getvalue()
    feeds = {"x": (np.random.default_rng(6).standard_normal((4, 9, 48)) * 2).astype(np.float32)}
    sess = _session(model, precision)
    assert [d.chosen for d in sess.explain() if d.op == "fusion"] == ["Gelu", "Gelu"]
    ops = [s["op_type"] for s in sess._engine.plan.steps]
    assert "Erf" not in ops and "Tanh" not in ops
    assert rel_err(sess.run(feeds)["out"], _reference(model, feeds)) <= tol
