"""cuDNN convolutions whose workspace exceeds their tensors run over batch chunks.

The case is wav2vec2's second feature convolution (1-D, 512 -> 512 channels, kernel 3,
stride 2, batch 8 x 3199 steps, fp16): cuDNN's first choice takes a 40.9 MB workspace
next to a 26.2 MB input and a 13.1 MB output, and that workspace set the model's peak
memory above torch eager's. The kernel runs the same algorithm over halves of the batch
instead (``conv_cudnn.cpp``, ``make_plan``). Each test checks that the prepared
workspace now fits within the input and output bytes, and compares the output with a
float64 reference on fresh random inputs: the plain convolution, the fused
bias + Relu + residual call across the chunks, and an asymmetric pad (the padded input
copy made per chunk).

Run: ``pytest -m gpu tests/gpu/test_conv_batch_chunks_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines.native import engine as native_engine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(bool(native_engine.unavailable_reason("cuda")), reason="no usable CUDA device"),
]

N, C, T = 8, 512, 3199
TOL = 1.5e-2  # fp16 storage, fp32 accumulation: relative to max |ref|


def _model(rng: np.random.Generator, fused: bool, pads: tuple[int, int]) -> tuple[bytes, dict]:
    w = (rng.standard_normal((C, C, 3)) / np.sqrt(3 * C)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    t_out = (T + sum(pads) - 3) // 2 + 1
    inits = [numpy_helper.from_array(w, "w")]
    conv_in = ["x", "w"]
    if fused:
        inits.append(numpy_helper.from_array(b, "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c" if fused else "y"], strides=[2], pads=list(pads))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, T])]
    if fused:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [N, C, t_out]))
        nodes += [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, C, t_out])], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), {"w": w, "b": b if fused else None, "t_out": t_out}


@pytest.mark.parametrize(
    "fused,pads",
    [(False, (1, 1)), (True, (1, 1)), (False, (1, 0))],
    ids=["plain", "bias_relu_residual", "asym_pad"],
)
def test_large_workspace_conv_runs_in_batch_chunks_and_matches_float64(fused, pads):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    model, p = _model(rng, fused, pads)
    sess = xrt.InferenceSession(
        model, device="cuda", engine="native", exec_policy=xrt.ExecutionPolicy(precision="fp16")
    )
    x = rng.standard_normal((N, C, T)).astype(np.float32)
    feeds = {"x": x}
    if fused:
        feeds["r"] = rng.standard_normal((N, C, p["t_out"])).astype(np.float32)
    (y,) = sess.run(feeds).values()

    convs = [s for s in sess.plan.steps if s["op_type"] in ("Conv", "NhwcConv")]
    assert len(convs) == 1 and convs[0]["kernel"] == "cudnn", sess.plan.steps
    if fused:  # bias, Add and Relu went into the cudnn call
        ops = {s["op_type"] for s in sess.plan.steps if not s["view"]}
        assert ops == {"Conv", "Cast"}, sess.plan.steps  # Casts: the fp32 edges
    tensor_bytes = 2 * N * C * (T + p["t_out"])
    assert 0 < convs[0]["prepared_workspace_bytes"] <= tensor_bytes, convs[0]

    # float64 reference on the device, from the fp16-rounded inputs the plan computes on.
    dev = torch.device("cuda")
    f16 = lambda a: torch.from_numpy(a).to(dev).half().double()
    xt = torch.nn.functional.pad(f16(x), pads)
    ref = torch.nn.functional.conv1d(xt, f16(p["w"]), f16(p["b"]) if fused else None, stride=2)
    if fused:
        ref = (ref + f16(feeds["r"])).relu()
    ref = ref.cpu().numpy()
    err = float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())
    assert err <= TOL, f"relative error {err:.3g} over {TOL}"
    # Every chunk was written: no sample of the output is left untouched.
    per_sample = np.abs(y.astype(np.float64) - ref).reshape(N, -1).max(axis=1) / np.abs(ref).max()
    assert (per_sample <= TOL).all(), per_sample
