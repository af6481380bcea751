"""ONNX's conformance node tests through an ``onnx.backend.base.Backend`` wrapper of the
native engine (xpuruntime.engines.native.onnx_backend.NativeBackend), on the CPU.

In scope: every node test whose model uses only ops the native engine registers
(``_core.graph.supported_ops()``). Every in-scope test must pass, except the ones in
EXCLUDED, each listed with its reason. ``test_node_test_counts`` prints the counts.
Tolerances are the ones each ONNX test case declares (rtol 1e-3, atol 1e-7 by default).
"""

from __future__ import annotations

import gc
import warnings

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnx.backend.test")
import onnx.backend.test  # noqa: F811 - a submodule of the module imported above
import xpuruntime as xrt
from onnx.backend.test.loader import load_model_tests
from xpuruntime.engines.native.onnx_backend import NativeBackend


@pytest.fixture(autouse=True, scope="module")
def _free_sessions_after_module():  # type: ignore[no-untyped-def]
    """Frees this module's sessions (and their arenas) before other modules run, so
    allocator-statistics tests elsewhere never see them released mid-test."""
    yield
    gc.collect()


_F8 = "element type {} is outside xpuruntime's dtypes"
_BF16 = "bfloat16 model inputs/outputs: numpy has no bfloat16 at the I/O boundary"
_TRAIN = "training-mode op (random or batch statistics); the engine is inference-only"

# Node tests in scope that do not run here, and why.
EXCLUDED: dict[str, str] = {
    "test_add_uint16": _F8.format("uint16"),
    "test_add_uint32": _F8.format("uint32"),
    "test_add_uint64": _F8.format("uint64"),
    "test_batchnorm_example_training_mode": _TRAIN,
    "test_batchnorm_epsilon_training_mode": _TRAIN,
    "test_cast_FLOAT_to_BFLOAT16": _BF16,
    "test_cast_BFLOAT16_to_FLOAT": _BF16,
    "test_cast_FLOAT_to_FLOAT8E4M3FN": _F8.format("float8e4m3fn"),
    "test_cast_FLOAT16_to_FLOAT8E4M3FN": _F8.format("float8e4m3fn"),
    "test_cast_FLOAT_to_FLOAT8E4M3FNUZ": _F8.format("float8e4m3fnuz"),
    "test_cast_FLOAT16_to_FLOAT8E4M3FNUZ": _F8.format("float8e4m3fnuz"),
    "test_cast_FLOAT8E4M3FN_to_FLOAT": _F8.format("float8e4m3fn"),
    "test_cast_FLOAT8E4M3FN_to_FLOAT16": _F8.format("float8e4m3fn"),
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT": _F8.format("float8e4m3fnuz"),
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT16": _F8.format("float8e4m3fnuz"),
    "test_cast_FLOAT_to_FLOAT8E5M2": _F8.format("float8e5m2"),
    "test_cast_FLOAT16_to_FLOAT8E5M2": _F8.format("float8e5m2"),
    "test_cast_FLOAT_to_FLOAT8E5M2FNUZ": _F8.format("float8e5m2fnuz"),
    "test_cast_FLOAT16_to_FLOAT8E5M2FNUZ": _F8.format("float8e5m2fnuz"),
    "test_cast_FLOAT8E5M2_to_FLOAT": _F8.format("float8e5m2"),
    "test_cast_FLOAT8E5M2_to_FLOAT16": _F8.format("float8e5m2"),
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT": _F8.format("float8e5m2fnuz"),
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT16": _F8.format("float8e5m2fnuz"),
    "test_cast_FLOAT_to_UINT4": _F8.format("uint4"),
    "test_cast_FLOAT16_to_UINT4": _F8.format("uint4"),
    "test_cast_FLOAT_to_INT4": _F8.format("int4"),
    "test_cast_FLOAT16_to_INT4": _F8.format("int4"),
    "test_cast_UINT4_to_FLOAT": _F8.format("uint4"),
    "test_cast_UINT4_to_FLOAT16": _F8.format("uint4"),
    "test_cast_UINT4_to_UINT8": _F8.format("uint4"),
    "test_cast_INT4_to_FLOAT": _F8.format("int4"),
    "test_cast_INT4_to_FLOAT16": _F8.format("int4"),
    "test_cast_INT4_to_INT8": _F8.format("int4"),
    "test_cast_FLOAT4E2M1_to_FLOAT": _F8.format("float4e2m1"),
    "test_cast_FLOAT4E2M1_to_FLOAT16": _F8.format("float4e2m1"),
    "test_cast_FLOAT_to_FLOAT4E2M1": _F8.format("float4e2m1"),
    "test_cast_FLOAT16_to_FLOAT4E2M1": _F8.format("float4e2m1"),
    "test_cast_FLOAT_to_UINT2": _F8.format("uint2"),
    "test_cast_FLOAT16_to_UINT2": _F8.format("uint2"),
    "test_cast_FLOAT_to_INT2": _F8.format("int2"),
    "test_cast_FLOAT16_to_INT2": _F8.format("int2"),
    "test_cast_UINT2_to_FLOAT": _F8.format("uint2"),
    "test_cast_UINT2_to_FLOAT16": _F8.format("uint2"),
    "test_cast_UINT2_to_UINT8": _F8.format("uint2"),
    "test_cast_INT2_to_FLOAT": _F8.format("int2"),
    "test_cast_INT2_to_FLOAT16": _F8.format("int2"),
    "test_cast_INT2_to_INT8": _F8.format("int2"),
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN": _F8.format("float8e4m3fn"),
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ": _F8.format("float8e4m3fnuz"),
    "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2": _F8.format("float8e5m2"),
    "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ": _F8.format("float8e5m2fnuz"),
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN": _F8.format("float8e4m3fn"),
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ": _F8.format("float8e4m3fnuz"),
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2": _F8.format("float8e5m2"),
    "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ": _F8.format("float8e5m2fnuz"),
    "test_cast_e8m0_FLOAT_to_FLOAT8E8M0": _F8.format("float8e8m0"),
    "test_cast_e8m0_FLOAT16_to_FLOAT8E8M0": _F8.format("float8e8m0"),
    "test_cast_e8m0_FLOAT8E8M0_to_FLOAT": _F8.format("float8e8m0"),
    "test_cast_e8m0_FLOAT8E8M0_to_FLOAT16": _F8.format("float8e8m0"),
    "test_castlike_FLOAT_to_BFLOAT16_expanded": _BF16,
    "test_castlike_BFLOAT16_to_FLOAT_expanded": _BF16,
    "test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded": _F8.format("float8e4m3fn"),
    "test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded": _F8.format("float8e4m3fn"),
    "test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded": _F8.format("float8e4m3fnuz"),
    "test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded": _F8.format("float8e4m3fnuz"),
    "test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded": _F8.format("float8e4m3fn"),
    "test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded": _F8.format("float8e4m3fn"),
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded": _F8.format("float8e4m3fnuz"),
    "test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded": _F8.format("float8e4m3fnuz"),
    "test_castlike_FLOAT_to_FLOAT8E5M2_expanded": _F8.format("float8e5m2"),
    "test_castlike_FLOAT16_to_FLOAT8E5M2_expanded": _F8.format("float8e5m2"),
    "test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded": _F8.format("float8e5m2fnuz"),
    "test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded": _F8.format("float8e5m2fnuz"),
    "test_castlike_FLOAT8E5M2_to_FLOAT_expanded": _F8.format("float8e5m2"),
    "test_castlike_FLOAT8E5M2_to_FLOAT16_expanded": _F8.format("float8e5m2"),
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded": _F8.format("float8e5m2fnuz"),
    "test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded": _F8.format("float8e5m2fnuz"),
    "test_castlike_FLOAT_to_UINT4_expanded": _F8.format("uint4"),
    "test_castlike_FLOAT16_to_UINT4_expanded": _F8.format("uint4"),
    "test_castlike_FLOAT_to_INT4_expanded": _F8.format("int4"),
    "test_castlike_FLOAT16_to_INT4_expanded": _F8.format("int4"),
    "test_castlike_UINT4_to_FLOAT_expanded": _F8.format("uint4"),
    "test_castlike_UINT4_to_FLOAT16_expanded": _F8.format("uint4"),
    "test_castlike_UINT4_to_UINT8_expanded": _F8.format("uint4"),
    "test_castlike_INT4_to_FLOAT_expanded": _F8.format("int4"),
    "test_castlike_INT4_to_FLOAT16_expanded": _F8.format("int4"),
    "test_castlike_INT4_to_INT8_expanded": _F8.format("int4"),
    "test_castlike_FLOAT4E2M1_to_FLOAT_expanded": _F8.format("float4e2m1"),
    "test_castlike_FLOAT4E2M1_to_FLOAT16_expanded": _F8.format("float4e2m1"),
    "test_castlike_FLOAT_to_FLOAT4E2M1_expanded": _F8.format("float4e2m1"),
    "test_castlike_FLOAT16_to_FLOAT4E2M1_expanded": _F8.format("float4e2m1"),
    "test_castlike_FLOAT_to_UINT2_expanded": _F8.format("uint2"),
    "test_castlike_FLOAT16_to_UINT2_expanded": _F8.format("uint2"),
    "test_castlike_FLOAT_to_INT2_expanded": _F8.format("int2"),
    "test_castlike_FLOAT16_to_INT2_expanded": _F8.format("int2"),
    "test_castlike_UINT2_to_FLOAT_expanded": _F8.format("uint2"),
    "test_castlike_UINT2_to_FLOAT16_expanded": _F8.format("uint2"),
    "test_castlike_UINT2_to_UINT8_expanded": _F8.format("uint2"),
    "test_castlike_INT2_to_FLOAT_expanded": _F8.format("int2"),
    "test_castlike_INT2_to_FLOAT16_expanded": _F8.format("int2"),
    "test_castlike_INT2_to_INT8_expanded": _F8.format("int2"),
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded": _F8.format("float8e4m3fn"),
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded": _F8.format("float8e4m3fnuz"),
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded": _F8.format("float8e5m2"),
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded": _F8.format("float8e5m2fnuz"),
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded": _F8.format("float8e4m3fn"),
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded": _F8.format("float8e4m3fnuz"),
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded": _F8.format("float8e5m2"),
    "test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded": _F8.format("float8e5m2fnuz"),
    "test_div_uint16": _F8.format("uint16"),
    "test_div_uint32": _F8.format("uint32"),
    "test_div_uint64": _F8.format("uint64"),
    "test_training_dropout_default": _TRAIN,
    "test_training_dropout_default_mask": _TRAIN,
    "test_training_dropout": _TRAIN,
    "test_training_dropout_mask": _TRAIN,
    "test_training_dropout_zero_ratio": _TRAIN,
    "test_training_dropout_zero_ratio_mask": _TRAIN,
    "test_equal_uint16": _F8.format("uint16"),
    "test_equal_uint32": _F8.format("uint32"),
    "test_equal_uint64": _F8.format("uint64"),
    "test_equal_string": _F8.format("string"),
    "test_equal_string_broadcast": _F8.format("string"),
    "test_greater_uint16": _F8.format("uint16"),
    "test_greater_uint32": _F8.format("uint32"),
    "test_greater_uint64": _F8.format("uint64"),
    "test_greater_equal_uint16": _F8.format("uint16"),
    "test_greater_equal_uint16_expanded": _F8.format("uint16"),
    "test_greater_equal_uint32": _F8.format("uint32"),
    "test_greater_equal_uint32_expanded": _F8.format("uint32"),
    "test_greater_equal_uint64": _F8.format("uint64"),
    "test_greater_equal_uint64_expanded": _F8.format("uint64"),
    "test_identity_sequence": "sequence/optional values are not supported",
    "test_identity_opt": "sequence/optional values are not supported",
    "test_less_uint16": _F8.format("uint16"),
    "test_less_uint32": _F8.format("uint32"),
    "test_less_uint64": _F8.format("uint64"),
    "test_less_equal_uint16": _F8.format("uint16"),
    "test_less_equal_uint16_expanded": _F8.format("uint16"),
    "test_less_equal_uint32": _F8.format("uint32"),
    "test_less_equal_uint32_expanded": _F8.format("uint32"),
    "test_less_equal_uint64": _F8.format("uint64"),
    "test_less_equal_uint64_expanded": _F8.format("uint64"),
    "test_max_uint16": _F8.format("uint16"),
    "test_max_uint32": _F8.format("uint32"),
    "test_max_uint64": _F8.format("uint64"),
    "test_min_uint16": _F8.format("uint16"),
    "test_min_uint32": _F8.format("uint32"),
    "test_min_uint64": _F8.format("uint64"),
    "test_mod_uint16": _F8.format("uint16"),
    "test_mod_uint32": _F8.format("uint32"),
    "test_mod_uint64": _F8.format("uint64"),
    "test_mul_uint16": _F8.format("uint16"),
    "test_mul_uint32": _F8.format("uint32"),
    "test_mul_uint64": _F8.format("uint64"),
    "test_pow_types_float32_uint64": _F8.format("uint64"),
    "test_pow_types_float32_uint32": _F8.format("uint32"),
    "test_range_bfloat16_type_positive_delta": _BF16,
    "test_einsum_batch_matmul_bfloat16": _BF16,
    "test_einsum_sum_bfloat16": _BF16,
    "test_einsum_transpose_bfloat16": _BF16,
    "test_sub_uint16": _F8.format("uint16"),
    "test_sub_uint32": _F8.format("uint32"),
    "test_sub_uint64": _F8.format("uint64"),
}


def _in_scope() -> tuple[list[str], list[str]]:
    """(node tests whose ops are all supported, node tests using other ops)."""
    supported = {row[0] for row in xrt._core.graph.supported_ops()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    inside, outside = [], []
    for tc in cases:
        nodes = tc.model.graph.node
        ok = all(n.op_type in supported and n.domain in ("", "ai.onnx") for n in nodes)
        (inside if ok else outside).append(tc.name)
    return inside, outside


IN_SCOPE, OUT_OF_SCOPE = _in_scope()
RUN = sorted(set(IN_SCOPE) - set(EXCLUDED))

_backend_test = onnx.backend.test.BackendTest(NativeBackend, __name__)
_backend_test.include("^(" + "|".join(RUN) + ")_cpu$")
globals().update(_backend_test.test_cases)


def test_node_test_counts() -> None:
    """Prints how many node tests run, are excluded (with reasons) and are out of scope."""
    stale = sorted(set(EXCLUDED) - set(IN_SCOPE))
    assert not stale, f"EXCLUDED lists tests that are not in scope any more: {stale}"
    print(
        f"\nONNX node tests: {len(RUN)} run (all must pass), {len(EXCLUDED)} excluded, "
        f"{len(OUT_OF_SCOPE)} out of scope (ops the native engine does not implement)"
    )
    for name, reason in sorted(EXCLUDED.items()):
        print(f"  excluded {name}: {reason}")
    assert len(RUN) >= 650
