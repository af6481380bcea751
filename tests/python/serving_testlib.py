"""Models and repositories for the serving tests (made with onnx.helper in the test)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import xpuruntime as xrt
from onnx import TensorProto, helper, numpy_helper


def mlp_model(seed: int, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> onnx.ModelProto:
    """y = relu(x W1 + b1) W2 + b2 and p = softmax(y), batch dimension 'batch'."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((d_in, d_hidden)).astype(np.float32) / 4
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    w2 = rng.standard_normal((d_hidden, d_out)).astype(np.float32) / 4
    b2 = rng.standard_normal(d_out).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["y"]),
        helper.make_node("Softmax", ["y"], ["p"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d_in])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d_out]),
            helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", d_out]),
        ],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def add_int_model() -> onnx.ModelProto:
    """c = a + b over INT32 [2, 3] (static shapes, no batch dimension)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "add_int",
        [
            helper.make_tensor_value_info("a", TensorProto.INT32, [2, 3]),
            helper.make_tensor_value_info("b", TensorProto.INT32, [2, 3]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.INT32, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_model(
    folder: Path, model: onnx.ModelProto, config: dict | None = None, version: int | None = None
) -> Path:
    """Save ``model`` (under a version folder when given) and its config; returns the model file."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    place = folder / str(version) if version is not None else folder
    place.mkdir(parents=True, exist_ok=True)
    path = place / "model.onnx"
    onnx.save(model, str(path))
    return path


def kernel_policy_of(model_file: Path) -> xrt.KernelPolicy | None:
    """The KernelPolicy the repository's config names for ``model_file`` (None: default)."""
    for folder in (model_file.parent, model_file.parent.parent):
        cfg = folder / "config.json"
        if cfg.is_file():
            name = json.loads(cfg.read_text()).get("kernel_policy")
            return xrt.KernelPolicy.load(folder / name) if name else None
    return None


def make_repository(root: Path) -> dict[str, Path]:
    """The test repository; returns the model file of each served model version."""
    files = {}
    # OpenBLAS takes a GEMV path for one row, which rounds differently from its GEMM
    # for several: a batched request would then differ in the last bit from running
    # alone. The blocked kernel is batch-invariant, so the policy pins it.
    batching = {
        "max_batch_size": 8,
        "dynamic_batching": {"preferred_batch_sizes": [1, 2, 4, 8], "max_queue_delay_us": 2000},
        "kernel_policy": "kernel_policy.json",
        "instances": 2,
    }
    (root / "mlp").mkdir(parents=True)
    (root / "mlp" / "kernel_policy.json").write_text(xrt.KernelPolicy(matmul="cpu_blocked").to_json())
    files["mlp/1"] = write_model(root / "mlp", mlp_model(1), batching, version=1)
    files["mlp/2"] = write_model(root / "mlp", mlp_model(2), batching, version=2)
    files["mlp_direct"] = write_model(root / "mlp_direct", mlp_model(3), {"max_batch_size": 8})
    files["add_int"] = write_model(root / "add_int", add_int_model(), {"engine": "native"})
    slow = {
        "max_batch_size": 8,
        "dynamic_batching": {
            "preferred_batch_sizes": [8],
            "max_queue_delay_us": 1_500_000,
            "max_queue_size": 1,
        },
    }
    files["mlp_tinyqueue"] = write_model(root / "mlp_tinyqueue", mlp_model(4), slow)
    broken = root / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"this is not an onnx model")
    bad_cfg = root / "bad_config"
    write_model(
        bad_cfg, mlp_model(5), {"max_batch_size": 4, "dynamic_batching": {"preferred_batch_sizes": [16]}}
    )
    return files


def wait_until(predicate, timeout: float = 20.0, what: str = "the condition") -> None:
    """Poll ``predicate`` until true (a loaded CI machine may take a while), else fail naming ``what``."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
