"""The precision pass converts every float input of every op: each ONNX node test model
(the onnx package's backend test data) whose op has a CUDA kernel and whose inputs are
float32 compiles in fp16 and bf16 for CUDA (offline preview, no GPU needed) without a
dtype refusal: Clip bounds, Pad values, Where branches and the like follow x's dtype,
and the inputs ONNX keeps in float32 (Resize scales) stay so.

A model may still fail for another reason (an attribute a CUDA kernel does not take);
those are not this test's business. A dtype refusal is, and names the op and input.
"""

from __future__ import annotations

import warnings

import onnx
import pytest
import xpuruntime as xrt
from xpuruntime import _core

pytestmark = pytest.mark.skipif(
    "cuda" not in _core.graph.providers(), reason="this build has no CUDA execution provider"
)


def _cases() -> list[tuple[str, onnx.ModelProto]]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = load_model_tests(kind="node")
    out = []
    for t in tests:
        m = t.model
        if m is None or len(m.graph.node) != 1:
            continue
        types = [i.type.tensor_type.elem_type for i in m.graph.input]
        if not types or onnx.TensorProto.FLOAT not in types:
            continue
        out.append((t.name, m))
    return out


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_every_float_node_test_compiles_without_a_dtype_refusal(precision):
    from xpuruntime.engines.native.preview import preview_plan

    ep = xrt.ExecutionPolicy(precision=precision)
    cases = _cases()
    assert len(cases) > 300, len(cases)
    dtype_refusals, compiled = [], 0
    for name, model in cases:
        try:
            preview_plan(model, device="cuda", target="sm_90", exec_policy=ep)
            compiled += 1
        except xrt.XpuRuntimeError as exc:
            msg = str(exc)
            if "dtype_unsupported" in msg and "must have" in msg:
                dtype_refusals.append(f"{name}: {msg[:300]}")
    assert not dtype_refusals, "\n".join(dtype_refusals)
    assert compiled > 200, compiled
