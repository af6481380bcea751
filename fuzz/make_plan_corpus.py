"""Writes the seed corpus of the plan-loader fuzzer (fuzz/corpus/plan_loader/): small
saved CPU plans of tiny models that cover the plan's features (arena buffers, views,
fused epilogues, run-time shapes, several outputs, integer constants). Run it again
after a change of the plan format:

    PYTHONPATH=python XRT_BUILD_DIR=build/<dir> python3 fuzz/make_plan_corpus.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent / "corpus" / "plan_loader"


def _model(nodes: list, inputs: list, outputs: list, inits: dict[str, np.ndarray]) -> ModelProto:
    graph = helper.make_graph(
        nodes,
        "seed",
        inputs,
        outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def seeds() -> dict[str, ModelProto]:
    """Name -> tiny model."""
    rng = np.random.default_rng(0)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    fl = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    return {
        # MatMul + bias + Relu: one fused step, a static arena.
        "mlp": _model(
            [
                helper.make_node("MatMul", ["x", "w"], ["h"]),
                helper.make_node("Add", ["h", "b"], ["a"]),
                helper.make_node("Relu", ["a"], ["y"]),
            ],
            [vi("x", fl, [2, 4])],
            [vi("y", fl, [2, 3])],
            {"w": f32(4, 3), "b": f32(3)},
        ),
        # Conv -> Relu -> MaxPool -> Flatten (a view) -> Gemm -> Softmax.
        "conv": _model(
            [
                helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                helper.make_node("Relu", ["c"], ["r"]),
                helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                helper.make_node("Flatten", ["p"], ["f"]),
                helper.make_node("Gemm", ["f", "fc"], ["g"]),
                helper.make_node("Softmax", ["g"], ["y"], axis=-1),
            ],
            [vi("x", fl, [1, 2, 4, 4])],
            [vi("y", fl, [1, 3])],
            {"w": f32(3, 2, 3, 3), "fc": f32(12, 3)},
        ),
        # A symbolic batch: every intermediate is shaped at run time; a Reshape view
        # (compiled without fusion, so that the intermediates stay).
        "dynamic": _model(
            [
                helper.make_node("Mul", ["x", "w"], ["h"]),
                helper.make_node("Tanh", ["h"], ["t"]),
                helper.make_node("Reshape", ["t", "shape"], ["r"]),
                helper.make_node("Softmax", ["r"], ["s"], axis=-1),
                helper.make_node("Mul", ["s", "s"], ["y"]),
            ],
            [vi("x", fl, ["N", 4])],
            [vi("y", fl, ["N", 2, 2])],
            {"w": f32(4), "shape": np.array([-1, 2, 2], dtype=np.int64)},
        ),
        # Several outputs (Split), a Transpose and a Concat, LayerNormalization.
        "split": _model(
            [
                helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
                helper.make_node("Transpose", ["b"], ["bt"], perm=[1, 0]),
                helper.make_node("Transpose", ["bt"], ["bb"], perm=[1, 0]),
                helper.make_node("Concat", ["bb", "a"], ["c"], axis=1),
                helper.make_node("LayerNormalization", ["c", "g", "beta"], ["y"], axis=-1),
            ],
            [vi("x", fl, [3, 6])],
            [vi("y", fl, [3, 6]), vi("a", fl, [3, 2])],
            {
                "sizes": np.array([2, 4], dtype=np.int64),
                "g": f32(6),
                "beta": f32(6),
            },
        ),
    }


def main() -> None:
    from xpuruntime import _core
    from xpuruntime.engines.native import frontend

    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.xrtplan"):
        old.unlink()
    for name, model in seeds().items():
        loaded = frontend.load(model.SerializeToString())
        # Compiled directly (no specialization): symbolic dims stay run-time shapes.
        plan = _core.graph.compile(
            frontend.describe(loaded),
            _core.KernelPolicy(),
            _core.ExecutionPolicy(),
            model_hash=loaded.model_hash,
            input_shapes={},
            fuse=name != "dynamic",
            device="cpu",
        )
        path = OUT / f"{name}.xrtplan"
        path.write_bytes(bytes(plan.serialize()))
        print(f"{path}: {path.stat().st_size} bytes, {len(plan.steps)} steps")


if __name__ == "__main__":
    main()
