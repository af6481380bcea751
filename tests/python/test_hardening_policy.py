"""Issue 19 §5: policy integers are range-checked, dicts and files are validated the
same way as keyword arguments, and every failure on the Python side is a typed
``PolicyError`` (DESIGN.md §10) — never ``TypeError`` from pybind11,
``IsADirectoryError``, ``UnicodeDecodeError`` or ``RecursionError``."""

from __future__ import annotations

import json

import pytest
import xpuruntime as xrt
from xpuruntime import ExecutionPolicy, KernelPolicy, PolicyError
from xpuruntime.policies import coerce


@pytest.mark.parametrize("cls", [KernelPolicy, ExecutionPolicy])
@pytest.mark.parametrize("version", [2**32 + 1, 2**31, 2**63, 2**64 - 1, -(2**32) + 1, 0])
def test_schema_version_is_never_truncated(cls, version) -> None:
    # 2**32+1 read into an int is 1: it loaded as a current file.
    with pytest.raises(PolicyError, match="schema_version"):
        cls.from_json(json.dumps({"schema_version": version}))


@pytest.mark.parametrize(
    "field, value",
    [
        ("threads", 2**32 + 1),
        ("threads", 2**31),
        ("threads", -1),
        ("workspace_limit_bytes", 2**63),
        ("workspace_limit_bytes", 2**64),
        ("workspace_limit_bytes", -1),
        ("threads", 1.5),
        ("threads", True),
    ],
)
def test_execution_policy_integers_are_range_checked(field, value) -> None:
    with pytest.raises(PolicyError, match=field):
        ExecutionPolicy.from_json(json.dumps({field: value}))
    with pytest.raises(PolicyError, match=field):
        ExecutionPolicy(**{field: value})
    with pytest.raises(PolicyError, match=field):
        coerce.core_exec_policy({field: value})


def test_largest_valid_integers_round_trip() -> None:
    p = ExecutionPolicy(threads=2**31 - 1, workspace_limit_bytes=2**63 - 1)
    q = ExecutionPolicy.from_json(p.to_json())
    assert q.threads == 2**31 - 1 and q.workspace_limit_bytes == 2**63 - 1
    assert q == p


def test_a_kernel_policy_dict_is_validated_like_keywords() -> None:
    good = coerce.core_kernel_policy({"matmul": "cpu_blas", "mode": "require"})
    assert good == KernelPolicy(matmul="cpu_blas", mode="require")._get_internal()
    assert good.mode == "require"  # an option, not an op key named "mode"
    doc = KernelPolicy(matmul="cpu_blas", mode="require").to_dict()
    assert coerce.core_kernel_policy(doc) == good  # the JSON document form
    for bad, pattern in [
        ({"matmul": "no_such_kernel"}, "unknown kernel"),
        ({"matmull": "auto"}, "did you mean 'matmul'"),
        ({"matmul": 3}, "matmul"),
        ({"mode": "sometimes"}, "unknown mode"),
        ({"validate": False, "matmul": "no_such_kernel"}, "validate"),
        ({"pins": {"matmul|x": {"kernel": 3}}}, "pin"),
        ({1: "auto"}, "op key must be a string"),
    ]:
        with pytest.raises(PolicyError, match=pattern):
            coerce.core_kernel_policy(bad)
        if not any(k in bad for k in ("mode", "pins", "validate", 1)):
            with pytest.raises(PolicyError, match=pattern):
                KernelPolicy(**bad)


def test_an_execution_policy_dict_is_validated() -> None:
    assert coerce.core_exec_policy({"precision": "float16"}).precision == "fp16"
    assert ExecutionPolicy.from_mapping({"engine": "onnxrt"}).engine == "onnxruntime"  # as keywords
    for bad, pattern in [
        ({"precision": "fp12"}, "unknown precision"),
        ({"static_shape": "yes"}, "static_shape"),
        ({"strict": 5}, "strict"),
        ({"tagret": "cpu"}, "did you mean 'target'"),
        ({"target": "cpu", "allow_fallback": "cpu"}, "equals the target"),
    ]:
        with pytest.raises(PolicyError, match=pattern):
            coerce.core_exec_policy(bad)
        with pytest.raises(PolicyError, match=pattern):
            ExecutionPolicy.from_mapping(bad)
        with pytest.raises(PolicyError, match=pattern):
            ExecutionPolicy(**bad)
    with pytest.raises(PolicyError, match="unknown engine"):
        ExecutionPolicy.from_mapping({"engine": "no_such_engine"})


@pytest.mark.parametrize("cls", [KernelPolicy, ExecutionPolicy])
def test_load_of_a_directory_or_non_utf8_file_is_a_policy_error(cls, tmp_path) -> None:
    (tmp_path / "dir.json").mkdir()
    for target in (tmp_path, tmp_path / "dir.json"):
        with pytest.raises(PolicyError, match="is a directory"):
            cls.load(target)
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"mode": "\xe9t\xe9"}')
    with pytest.raises(PolicyError, match="not UTF-8"):
        cls.load(bad)
    with pytest.raises(PolicyError, match="not UTF-8"):
        coerce.core_kernel_policy(bad) if cls is KernelPolicy else coerce.core_exec_policy(bad)
    with pytest.raises(PolicyError, match="str or os.PathLike"):
        cls.load(3)


def test_deeply_nested_dicts_are_policy_errors() -> None:
    deep: dict = {}
    cur = deep
    for _ in range(5000):
        cur["a"] = {}
        cur = cur["a"]
    for make in (
        lambda: KernelPolicy(deep),
        lambda: KernelPolicy(pins=deep),
        lambda: KernelPolicy.from_dict(deep),
        lambda: KernelPolicy.from_dict({"preferences": deep}),
        lambda: ExecutionPolicy.from_dict(deep),
        lambda: coerce.core_kernel_policy(deep),
        lambda: coerce.core_exec_policy({"strict": deep}),
    ):
        with pytest.raises(PolicyError) as info:
            make()
        assert len(str(info.value)) < 1000


def test_wrong_argument_types_never_reach_pybind11_as_type_errors() -> None:
    k = KernelPolicy()
    cases = [
        lambda: k.set(1, "auto"),
        lambda: k.set("matmul", 1),
        lambda: k.set("matmul", b"cpu_blas"),
        lambda: k.get(None),
        lambda: k.remove(["matmul"]),
        lambda: k.set_pin(1, "cpu_blas"),
        lambda: k.set_pin("matmul|x", None),
        lambda: KernelPolicy(preferences=["matmul"]),
        lambda: KernelPolicy(pins=["x"]),
        lambda: KernelPolicy(pins={"matmul|x": 5}),
        lambda: KernelPolicy(mode=None),
        lambda: KernelPolicy(validate="no"),
        lambda: KernelPolicy.from_json(None),
        lambda: KernelPolicy.from_dict([("matmul", "auto")]),
        lambda: ExecutionPolicy(target=3),
        lambda: ExecutionPolicy(precision=None),
        lambda: ExecutionPolicy(allow_fallback=1),
        lambda: ExecutionPolicy(threads="4"),
        lambda: ExecutionPolicy(threads=2**40),
        lambda: ExecutionPolicy(workspace_limit_bytes=2**64),
        lambda: ExecutionPolicy(strict=None),
        lambda: ExecutionPolicy(strict=[1]),
        lambda: ExecutionPolicy(engine=4),
        lambda: ExecutionPolicy.from_json(12),
        lambda: ExecutionPolicy.from_dict("x"),
        lambda: setattr(ExecutionPolicy(), "threads", 2**40),
        lambda: KernelPolicy.load("p.json", format=3),
        lambda: xrt._core.KernelPolicy().set(1, "auto"),
        lambda: setattr(xrt._core.ExecutionPolicy(), "target", 3),
        lambda: setattr(xrt._core.KernelPolicy(), "mode", 3),
        lambda: setattr(xrt._core.KernelPolicy(), "pins", {"k|x": {"kernel": 1}}),
    ]
    for i, make in enumerate(cases):
        with pytest.raises(PolicyError):
            make()
        # and the policy a rejected change was made on is intact
    assert k == KernelPolicy()


def test_policy_error_is_still_a_value_error() -> None:
    # Callers that caught ValueError for bad policy values keep working.
    with pytest.raises(ValueError):
        ExecutionPolicy(threads=2**40)


@pytest.mark.parametrize("cls", [KernelPolicy, ExecutionPolicy])
@pytest.mark.parametrize("number", ["1.5e320", "-1e999"])
def test_numbers_past_double_range_are_policy_errors(cls, number) -> None:
    # Found by fuzz/policy_json_fuzzer.cpp: an untyped RuntimeError before.
    with pytest.raises(PolicyError):
        cls.from_json('{"threads": ' + number + ', "mode": ' + number + "}")


def test_strict_assertions_from_json_equal_their_round_trip() -> None:
    # Found by the fuzzer's to_json -> from_json check on the C++ struct.
    core = xrt._core.ExecutionPolicy.from_json('{"strict": ["pinned_only", "no_fallback", "pinned_only"]}')
    assert core.strict == ["no_fallback", "pinned_only"]
    assert xrt._core.ExecutionPolicy.from_json(core.to_json()) == core
