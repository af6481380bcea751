"""Zero-copy I/O of the native engine on CUDA (issue 15): torch CUDA tensors in,
caller-provided torch buffers out, the caller's stream, and the copy counters.

- torch CUDA inputs with caller output buffers: no byte crosses the host (the run's
  copy counters are 0) and the buffers hold the numpy run's result;
- numpy in / numpy out: exactly the inputs' and outputs' bytes are copied, once each;
- a caller stream: the run is issued on it (ordered after the producer's kernels);
- a CUDA graph captured on the caller's device buffers replays with no copy; new
  buffers every run replay a graph on the plan's own buffers, copied within the device.
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


def test_graph_on_the_callers_buffers_replays_with_no_copy_at_all() -> None:
    """A caller that passes the same device buffers run after run gets a graph captured
    on them: its replays copy nothing, not even within the device, and hold the plan's
    result."""
    sess = _session(cuda_graph=True)
    want = _session().run({"x": _x(4)})
    x = torch.from_numpy(_x(4)).cuda()
    y, p = torch.empty(16, 8, device="cuda"), torch.empty(16, 8, device="cuda")
    sess.run({"x": x}, outputs=[y, p])
    assert sess._engine.last_run_stats()["graph_captured"]
    p.zero_()
    sess.run({"x": x}, outputs=[y, p])
    stats = sess._engine.last_run_stats()
    assert stats["graph_replayed"], stats
    assert stats["copy_bytes"] == 0 and stats["device_copy_bytes"] == 0, stats
    np.testing.assert_array_equal(p.cpu().numpy(), want["p"])
    np.testing.assert_array_equal(y.cpu().numpy(), want["y"])


def test_new_buffers_every_run_replay_the_graph_on_its_own_buffers() -> None:
    """New input and output buffers every run (no two alike in a row): one graph on the
    plan's own edge buffers, replayed with copies within the device, every result the
    step-by-step one; then buffers kept twice in a row get a graph of their own."""
    sess = _session(cuda_graph=True)
    plain = _session()
    keep = []  # distinct live allocations: no buffer address comes back
    replays = 0
    for seed in range(6):
        x = torch.from_numpy(_x(10 + seed)).cuda()
        y, p = torch.empty(16, 8, device="cuda"), torch.empty(16, 8, device="cuda")
        keep += [x, y, p]
        sess.run({"x": x}, outputs=[y, p])
        stats = sess._engine.last_run_stats()
        replays += bool(stats["graph_replayed"])
        if stats["graph_replayed"]:
            assert stats["device_copy_bytes"] == x.numel() * 4 + 2 * 16 * 8 * 4, stats
        np.testing.assert_array_equal(p.cpu().numpy(), plain.run({"x": _x(10 + seed)})["p"])
    assert replays >= 4, "after the first two runs every run replays the staged graph"
    sess.run({"x": x}, outputs=[y, p])  # the last buffers again: captured on them
    assert sess._engine.last_run_stats()["graph_captured"]
    sess.run({"x": x}, outputs=[y, p])
    stats = sess._engine.last_run_stats()
    assert stats["graph_replayed"] and stats["device_copy_bytes"] == 0, stats


def test_an_output_buffer_over_the_input_is_not_written_while_read() -> None:
    """The caller's output buffer is the input's memory (in place): the graph writes
    the plan's own buffer and copies at the end, so the result is still right."""
    sess = _session(cuda_graph=True)
    want = _session().run({"x": _x(7)})
    for _ in range(3):
        x = torch.from_numpy(_x(7)).cuda()
        y = x.view(-1)[: 16 * 8].view(16, 8)  # over x's first bytes
        p = torch.empty(16, 8, device="cuda")
        sess.run({"x": x}, outputs=[y, p])
        np.testing.assert_array_equal(p.cpu().numpy(), want["p"])
        np.testing.assert_array_equal(y.cpu().numpy(), want["y"])


def test_a_tensor_on_another_device_kind_or_shape_is_a_typed_error() -> None:
    sess = _session()
    with pytest.raises(xrt.InvalidArgumentError, match="output buffer"):
        sess.run(
            {"x": torch.from_numpy(_x()).cuda()},
            outputs=[torch.empty(3, device="cuda"), torch.empty(3, device="cuda")],
        )
    with pytest.raises(xrt.InvalidArgumentError, match="contiguous"):
        sess.run({"x": torch.from_numpy(_x()).cuda().t().contiguous().t()})
