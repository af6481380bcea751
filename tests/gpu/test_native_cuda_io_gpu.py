"""Zero-copy I/O of the native engine on CUDA (issue 15): torch CUDA tensors in,
caller-provided torch buffers out, the caller's stream, and the copy counters.

- torch CUDA inputs with caller output buffers: no byte crosses the host (the run's
  copy counters are 0) and the buffers hold the numpy run's result;
- numpy in / numpy out: exactly the inputs' and outputs' bytes are copied, once each;
- a caller stream: the run is issued on it (ordered after the producer's kernels);
- a CUDA graph replay with device inputs copies only within the device.
Run: ``pytest -m gpu tests/gpu/test_native_cuda_io_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper
from xpuruntime.engines.native import engine as native_engine

torch = pytest.importorskip("torch", reason="torch tensors are the device inputs")


def _skip_reason() -> str:
    why = native_engine.unavailable_reason("cuda")
    return f"the native engine cannot run on CUDA here: {why}" if why else ""


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]


def _mlp_bytes() -> bytes:
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array((rng.standard_normal((32, 64)) * 0.2).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 8)) * 0.2).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
        helper.make_node("Softmax", ["y"], ["p"], axis=-1),
    ]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 8]),
            helper.make_tensor_value_info("p", TensorProto.FLOAT, [16, 8]),
        ],
        initializer=[w1, w2],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _session(**policy) -> xrt.InferenceSession:
    return xrt.InferenceSession(
        _mlp_bytes(),
        engine="native",
        device="cuda",
        exec_policy=xrt.ExecutionPolicy(allow_tf32=False, **policy),
    )


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((16, 32), dtype=np.float32)


def test_torch_in_caller_buffers_out_move_no_host_bytes() -> None:
    sess = _session()
    want = sess.run({"x": _x()})
    x = torch.from_numpy(_x()).cuda()
    y, p = torch.empty(16, 8, device="cuda"), torch.empty(16, 8, device="cuda")
    out = sess.run({"x": x}, outputs=[y, p])
    torch.cuda.synchronize()
    assert out["y"] is y and out["p"] is p
    stats = sess._engine.last_run_stats()
    assert stats["copies_to_device"] == 0 and stats["copies_to_host"] == 0 and stats["copy_bytes"] == 0, stats
    assert stats["copies_on_device"] == 0, stats  # written by the kernels themselves
    np.testing.assert_array_equal(y.cpu().numpy(), want["y"])
    np.testing.assert_array_equal(p.cpu().numpy(), want["p"])


def test_torch_in_without_buffers_gives_torch_cuda_outputs() -> None:
    sess = _session()
    out = sess.run({"x": torch.from_numpy(_x(1)).cuda()})
    assert isinstance(out["y"], torch.Tensor) and out["y"].is_cuda
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out["p"].cpu().numpy(), sess.run({"x": _x(1)})["p"])
    assert sess._engine.last_run_stats()["copy_bytes"] == 0


def test_numpy_in_out_copies_exactly_the_edge_bytes() -> None:
    sess = _session(cuda_graph=False)
    x = _x(2)
    sess.run({"x": x}, outputs=[np.empty((16, 8), np.float32), np.empty((16, 8), np.float32)])
    stats = sess._engine.last_run_stats()
    assert stats["copies_to_device"] == 1 and stats["copies_to_host"] == 2, stats
    assert stats["copy_bytes"] == x.nbytes + 2 * 16 * 8 * 4, stats


def test_the_callers_stream_orders_the_run_after_its_producer() -> None:
    sess = _session()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)  # the producer is still busy when run() is called
        x = torch.from_numpy(_x(3)).cuda(non_blocking=False) * 1.0
        y, p = torch.empty(16, 8, device="cuda"), torch.empty(16, 8, device="cuda")
        sess.run({"x": x}, outputs=[y, p], stream=s)
    s.synchronize()
    np.testing.assert_array_equal(p.cpu().numpy(), sess.run({"x": _x(3)})["p"])


def test_graph_replay_with_device_inputs_copies_within_the_device_only() -> None:
    sess = _session(cuda_graph=True)
    want = _session().run({"x": _x(4)})
    x = torch.from_numpy(_x(4)).cuda()
    y, p = torch.empty(16, 8, device="cuda"), torch.empty(16, 8, device="cuda")
    sess.run({"x": x}, outputs=[y, p])
    sess.run({"x": x}, outputs=[y, p])
    stats = sess._engine.last_run_stats()
    assert stats["graph_replayed"] and stats["copy_bytes"] == 0, stats
    assert stats["device_copy_bytes"] == x.numel() * 4 + 2 * 16 * 8 * 4, stats
    np.testing.assert_array_equal(p.cpu().numpy(), want["p"])


def test_a_tensor_on_another_device_kind_or_shape_is_a_typed_error() -> None:
    sess = _session()
    with pytest.raises(xrt.InvalidArgumentError, match="output buffer"):
        sess.run(
            {"x": torch.from_numpy(_x()).cuda()},
            outputs=[torch.empty(3, device="cuda"), torch.empty(3, device="cuda")],
        )
    with pytest.raises(xrt.InvalidArgumentError, match="contiguous"):
        sess.run({"x": torch.from_numpy(_x()).cuda().t().contiguous().t()})
