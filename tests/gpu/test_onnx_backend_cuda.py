"""ONNX's conformance node tests through the native engine on CUDA (issue 15's bar): every
node test whose ops all have a CUDA kernel (``_core.graph.supported_ops("cuda")``) runs
on ``device="CUDA"`` in float32 with TF32 off (the engine's default), with the
tolerances each ONNX test case declares. The CPU run's exclusions
(tests/python/test_onnx_backend.py, each with its reason) apply here too.
``test_cuda_node_test_counts`` prints the counts next to the CPU run's.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnx.backend.test")
import onnx.backend.test  # noqa: F811 - a submodule of the module imported above
import xpuruntime as xrt
from onnx.backend.test.loader import load_model_tests
from xpuruntime.engines.native import engine as native_engine
from xpuruntime.engines.native.onnx_backend import NativeBackend

_WHY_NOT = native_engine.unavailable_reason("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_WHY_NOT), reason=f"native CUDA: {_WHY_NOT}")]


def _cpu_module():
    path = Path(__file__).resolve().parents[1] / "python" / "test_onnx_backend.py"
    spec = importlib.util.spec_from_file_location("_onnx_backend_cpu", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _scope() -> tuple[list[str], list[str], dict[str, str]]:
    if _WHY_NOT:
        return [], [], {}
    cpu = _cpu_module()
    supported = {row[0] for row in xrt._core.graph.supported_ops("cuda")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    inside = [
        tc.name
        for tc in cases
        if all(n.op_type in supported and n.domain in ("", "ai.onnx") for n in tc.model.graph.node)
    ]
    cpu_run = set(cpu.RUN)
    # In scope on CUDA: tests the CPU run also runs (the CPU exclusions hold here too).
    run = sorted(t for t in inside if t in cpu_run)
    return run, sorted(cpu.RUN), dict(cpu.EXCLUDED)


RUN, CPU_RUN, EXCLUDED = _scope()

_REFUSED = "the CUDA kernel refuses this case at plan build with a typed error ({}); it runs on the CPU"
#: Tests whose op has a CUDA kernel that refuses the case (found on an H100, 2026-11-25):
#: typed build-time errors naming node, op and reason, not wrong results.
CUDA_EXCLUDED: dict[str, str] = {
    "test_clip_default_int8_inbounds": _REFUSED.format("Clip on int8: dtype_unsupported"),
    "test_clip_default_int8_max": _REFUSED.format("Clip on int8: dtype_unsupported"),
    "test_maxpool_with_argmax_2d_precomputed_pads": _REFUSED.format(
        "MaxPool Indices output: attribute_unsupported"
    ),
    "test_maxpool_with_argmax_2d_precomputed_strides": _REFUSED.format(
        "MaxPool Indices output: attribute_unsupported"
    ),
    "test_pow_types_float32_int32": _REFUSED.format("Pow with mixed dtypes: dtype_unsupported"),
    "test_pow_types_float32_int64": _REFUSED.format("Pow with mixed dtypes: dtype_unsupported"),
    "test_pow_types_int32_float32": _REFUSED.format("Pow with mixed dtypes: dtype_unsupported"),
    "test_pow_types_int64_float32": _REFUSED.format("Pow with mixed dtypes: dtype_unsupported"),
    "test_reduce_max_bool_inputs": _REFUSED.format("ReduceMax on bool: dtype_unsupported"),
    "test_reduce_max_empty_set_bool": _REFUSED.format("ReduceMax on bool: dtype_unsupported"),
    "test_reduce_min_bool_inputs": _REFUSED.format("ReduceMin on bool: dtype_unsupported"),
}
# Resize on CUDA takes nearest and linear; cubic and antialiased linear downsampling
# are refused by its supports() (cpp/src/backends/cuda/kernels/resize/).
for _t in (
    "test_resize_downsample_scales_cubic",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_downsample_scales_cubic_align_corners",
    "test_resize_downsample_scales_cubic_antialias",
    "test_resize_downsample_sizes_cubic",
    "test_resize_downsample_sizes_cubic_antialias",
    "test_resize_upsample_scales_cubic",
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_upsample_scales_cubic_align_corners",
    "test_resize_upsample_scales_cubic_asymmetric",
    "test_resize_upsample_sizes_cubic",
):
    CUDA_EXCLUDED[_t] = _REFUSED.format("cubic Resize: attribute_unsupported")
for _t in ("test_resize_downsample_scales_linear_antialias", "test_resize_downsample_sizes_linear_antialias"):
    CUDA_EXCLUDED[_t] = _REFUSED.format("antialiased linear downsampling Resize: attribute_unsupported")
RUN = [t for t in RUN if t not in CUDA_EXCLUDED]

_backend_test = onnx.backend.test.BackendTest(NativeBackend, __name__)
if RUN:
    _backend_test.include("^(" + "|".join(RUN) + ")_cuda$")
    globals().update(_backend_test.test_cases)


def test_cuda_node_test_counts() -> None:
    """The counts next to the CPU run's; every CPU-passing test left out on CUDA is listed
    with its reason (no CUDA kernel for one of its ops)."""
    supported = {row[0] for row in xrt._core.graph.supported_ops("cuda")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = {
            tc.name: sorted({n.op_type for n in tc.model.graph.node}) for tc in load_model_tests(kind="node")
        }
    left_out = {
        t: [o for o in ops[t] if o not in supported]
        for t in CPU_RUN
        if t not in set(RUN) and t not in CUDA_EXCLUDED
    }
    print(
        f"\nONNX node tests on CUDA: {len(RUN)} run, {len(CUDA_EXCLUDED)} excluded; "
        f"on the CPU: {len(CPU_RUN)} run"
    )
    for t, why in sorted(CUDA_EXCLUDED.items()):
        print(f"  excluded on CUDA {t}: {why}")
    for t, missing in sorted(left_out.items()):
        print(f"  CPU only {t}: no CUDA kernel for {', '.join(missing)}")
    assert RUN
