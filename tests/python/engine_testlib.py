"""Helpers shared by the engine tests (policies, tolerances, tiny models)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# fp32 tolerance for a whole network against PyTorch: different kernels, different
# summation orders. Relative to the output's magnitude.
FP32_RTOL = 2e-4
FP32_ATOL_FRACTION = 2e-4


def exec_policy(**fields: Any) -> Any:
    """An ExecutionPolicy: the real class when the policy module is built, else a plain
    object with the same fields and defaults (the engines read fields by name)."""
    try:
        from xpuruntime.policies import ExecutionPolicy
    except ImportError:
        ExecutionPolicy = None
    if ExecutionPolicy is not None:
        return ExecutionPolicy(**fields)
    base = {
        "target": "auto",
        "precision": "fp32",
        "static_shape": False,
        "allow_fallback": None,
        "deterministic": False,
        "cuda_graph": False,
        "workspace_limit_bytes": 0,
        "engine": None,
        "allow_tf32": False,
        "threads": 0,
        "strict": [],
    }
    unknown = set(fields) - set(base)
    if unknown:
        raise TypeError(f"unknown ExecutionPolicy fields {sorted(unknown)}")
    base.update(fields)
    return SimpleNamespace(**base)


def assert_close_to(
    out: np.ndarray,
    ref: np.ndarray,
    what: str,
    rtol: float = FP32_RTOL,
    atol_fraction: float = FP32_ATOL_FRACTION,
) -> None:
    """|out − ref| ≤ atol + rtol·|ref| with atol a fraction of max|ref|; ref must not be trivial."""
    out64, ref64 = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert out64.shape == ref64.shape, f"{what}: shape {out64.shape} != {ref64.shape}"
    scale = np.abs(ref64).max()
    assert scale > 1e-3, f"{what}: reference output is ~0 (max {scale}); the comparison would be vacuous"
    err = np.abs(out64 - ref64)
    bound = atol_fraction * scale + rtol * np.abs(ref64)
    worst = int(np.argmax(err - bound))
    assert (err <= bound).all(), (
        f"{what}: max abs err {err.max():.3e} (scale {scale:.3e}); worst element {worst}: "
        f"{out64.ravel()[worst]} vs {ref64.ravel()[worst]}"
    )


def tiny_mlp(batch: int | str = "n", seed: int = 0) -> onnx.ModelProto:
    """x[n,16] → MatMul → Add → Relu → MatMul → y[n,8]: the smallest model with real work."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="add1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
        helper.make_node("MatMul", ["h2", "w2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [w1, b1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def tiny_mlp_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """float64 NumPy reference of :func:`tiny_mlp`."""
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0.0)
    return h @ w["w2"]


def quantize_qdq(
    model: onnx.ModelProto, input_name: str, shape: tuple[int, ...], directory: Any, seed: int = 0
) -> onnx.ModelProto:
    """Static QDQ int8 quantization of ``model`` calibrated on random inputs."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(seed)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter([{input_name: rng.standard_normal(shape).astype(np.float32)} for _ in range(16)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    src, dst = directory / "float.onnx", directory / "qdq.onnx"
    onnx.save(model, src)
    quantize_static(
        src,
        dst,
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QUInt8,
    )
    return onnx.load(dst)


def build(engine: str, model: Any, device: str = "cpu", policy: Any = None, **extra: Any) -> Any:
    """Select through the registry (so its checks run) and build the engine."""
    from xpuruntime.engines import registry
    from xpuruntime.engines.base import EngineOptions

    cls, dev, _ = registry.select_engine(engine, device, policy)
    return cls(model, EngineOptions(device=dev, exec_policy=policy, extra=extra))
