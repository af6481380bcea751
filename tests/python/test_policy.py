"""KernelPolicy / ExecutionPolicy: the seed API, round trips (JSON and YAML),
validation errors with suggestions, schema versions."""

from __future__ import annotations

import json
import sys

import pytest
import xpuruntime as xrt
from xpuruntime import ExecutionPolicy, KernelPolicy, PolicyError


def _need_yaml():
    return pytest.importorskip("yaml", reason="PyYAML is not installed (pip install xpuruntime[yaml])")


# ---------------------------------------------------------------- KernelPolicy


def test_seed_keyword_api():
    p = KernelPolicy(matmul="cublasLt", attention="flash_v2")
    assert p.get("matmul") == "cublasLt"
    assert p.get("conv") is None
    assert p.preferences == {"attention": "flash_v2", "matmul": "cublasLt"}
    assert p.set("conv", "cudnn") is p  # chaining
    assert p.remove("attention") is p
    assert p.remove("attention") is p  # absent: no error
    assert p.preferences == {"conv": "cudnn", "matmul": "cublasLt"}
    assert repr(p) == "KernelPolicy(conv='cudnn', matmul='cublasLt')"
    assert p.mode == "prefer" and p.auto_strategy == "first_supported"
    assert xrt.KernelPolicy is KernelPolicy


def test_lists_mode_strategy_and_equality():
    p = KernelPolicy(
        attention=["flash_v2", "cudnn", "auto"], mode="require", auto_strategy="best_performance"
    )
    assert p.get("attention") == ["flash_v2", "cudnn", "auto"]
    assert repr(p) == (
        "KernelPolicy(attention=['flash_v2', 'cudnn', 'auto'], mode='require', auto_strategy='best_performance')"
    )
    q = KernelPolicy(mode="require", auto_strategy="best_performance")
    assert p != q
    q.set("attention", ("flash_v2", "cudnn", "auto"))
    assert p == q and p.fingerprint == q.fingerprint
    q.mode = "prefer"
    assert p != q and p.fingerprint != q.fingerprint
    with pytest.raises(TypeError):
        hash(p)
    c = p.copy()
    c.set("matmul", "cublas")
    assert p.get("matmul") is None  # copies are independent


def test_seed_core_object_api():
    # seed 004 §3.3 / 002 §4.1: _core.KernelPolicy(**kwargs) and Dispatcher.instance().set_policy(...)
    core = xrt._core.KernelPolicy(matmul="cublasLt", attention="flash_v2")
    assert core.preferences == {"attention": "flash_v2", "matmul": "cublasLt"}
    assert core.auto_strategy == xrt._core.AutoSelectStrategy.FirstSupported
    assert KernelPolicy(matmul="cublasLt", attention="flash_v2")._get_internal() == core
    d = xrt._core.Dispatcher.instance()
    saved = d.get_policy()
    try:
        d.set_policy(core)
        assert d.get_policy() == core
        d.set_policy(KernelPolicy(matmul="cublas"))  # the wrapper is accepted too
        assert d.get_policy().get("matmul") == "cublas"
    finally:
        d.set_policy(saved)


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_save_load_round_trip(tmp_path, suffix):
    if suffix != ".json":
        _need_yaml()
    p = KernelPolicy(
        matmul="cublasLt",
        attention=["flash_v2", "cudnn"],
        mode="require",
        auto_strategy="best_performance",
        pins={
            "matmul|cuda:sm90|float16[8,64],float16[64,32]->float16[8,32]|": {
                "kernel": "cublasLt",
                "algorithm": "a:7",
            }
        },
    )
    path = tmp_path / f"policy{suffix}"
    p.save(path)
    q = KernelPolicy.load(path)
    assert q == p
    assert q.fingerprint == p.fingerprint
    assert q.pins == p.pins
    assert q.schema_version == xrt._core.POLICY_SCHEMA_VERSION
    if suffix == ".json":
        doc = json.loads(path.read_text())
        assert doc["schema_version"] == 1 and doc["kind"] == "kernel_policy"
    else:
        import yaml

        doc = yaml.safe_load(path.read_text())
        assert doc["preferences"]["attention"] == ["flash_v2", "cudnn"]


def test_json_round_trip_and_canonical_form():
    p = KernelPolicy(matmul="cublas", conv="cudnn")
    assert KernelPolicy.from_json(p.to_json()) == p
    assert KernelPolicy.from_dict(p.to_dict()) == p
    assert p.canonical_json() == p.to_json(indent=None)
    assert p.canonical_json() == (
        '{"auto_strategy":"first_supported","kind":"kernel_policy","mode":"prefer","pins":{},'
        '"preferences":{"conv":"cudnn","matmul":"cublas"},"schema_version":1}'
    )


def test_hand_written_yaml(tmp_path):
    _need_yaml()
    path = tmp_path / "hand.yaml"
    path.write_text("preferences:\n  matmul: cublasLt\n  attention: [flash_v2, cudnn]\nmode: require\n")
    p = KernelPolicy.load(path)
    assert p == KernelPolicy(matmul="cublasLt", attention=["flash_v2", "cudnn"], mode="require")


def test_yaml_without_pyyaml_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    with pytest.raises(PolicyError, match=r"pip install xpuruntime\[yaml\]"):
        KernelPolicy(matmul="cublas").save(tmp_path / "p.yaml")
    KernelPolicy(matmul="cublas").save(tmp_path / "p.json")  # JSON needs nothing


def test_unknown_suffix_and_missing_file(tmp_path):
    with pytest.raises(PolicyError, match=r"\.json, \.yaml or \.yml"):
        KernelPolicy().save(tmp_path / "p.toml")
    with pytest.raises(PolicyError, match="does not exist"):
        KernelPolicy.load(tmp_path / "absent.json")


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: KernelPolicy(matmull="cublasLt"), r"unknown op key 'matmull'.*did you mean 'matmul'\?"),
        (
            lambda: KernelPolicy(matmul="cublasLT2"),
            r"unknown kernel 'cublasLT2'.*valid choices: auto, .*cublasLt.*did you mean 'cublasLt'\?",
        ),
        (lambda: KernelPolicy(attention="flash"), r"did you mean 'flash_v2'\?"),
        (lambda: KernelPolicy(gemm="cublas"), r"canonical key 'matmul'; use 'matmul'"),
        (lambda: KernelPolicy(MatMul="cublas"), r"use 'matmul'"),
        (lambda: KernelPolicy(mode="requre"), r"unknown mode 'requre'.*did you mean 'require'\?"),
        (lambda: KernelPolicy(auto_strategy="fastest"), r"valid choices: best_performance, first_supported"),
        (lambda: KernelPolicy(matmul=3), r"must be a name or a list of names"),
        (lambda: KernelPolicy(matmul=["auto", "cublas"]), r"must be the last entry"),
        (lambda: KernelPolicy(matmul=[]), r"name at least one kernel"),
    ],
)
def test_kernel_policy_errors(make, pattern):
    with pytest.raises(PolicyError, match=pattern):
        make()


def test_failed_change_leaves_policy_intact():
    p = KernelPolicy(matmul="cublasLt")
    with pytest.raises(PolicyError):
        p.set("matmul", "cublasLT2")
    with pytest.raises(PolicyError):
        p.mode = "strict"
    assert p == KernelPolicy(matmul="cublasLt")
    assert isinstance(PolicyError("x"), ValueError)  # PolicyError is an InvalidArgumentError


def test_file_errors(tmp_path):
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema_version": 99, "preferences": {"matmul": "cublas"}}))
    with pytest.raises(PolicyError, match=r"newer xpuruntime \(schema_version 99.*upgrade xpuruntime"):
        KernelPolicy.load(newer)
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"preferences": {"matmul": "cublas"}, "mdoe": "require"}))
    with pytest.raises(PolicyError, match=r"unknown field 'mdoe'.*did you mean 'mode'\?"):
        KernelPolicy.load(typo)
    other = tmp_path / "exec.json"
    ExecutionPolicy(target="cpu").save(other)
    with pytest.raises(PolicyError, match="not a KernelPolicy"):
        KernelPolicy.load(other)
    bad_kernel = tmp_path / "bad_kernel.json"
    bad_kernel.write_text(json.dumps({"preferences": {"matmul": "cublasLT"}}))
    # cublasLT vs cublasLt: names are case-sensitive, the suggestion is not.
    with pytest.raises(PolicyError, match=r"did you mean 'cublasLt'\?"):
        KernelPolicy.load(bad_kernel)
    assert KernelPolicy.load(bad_kernel, validate=False).get("matmul") == "cublasLT"


def test_seed_format_file_loads(tmp_path):
    # seed 004 §6.3 wrote {"preferences", "auto_strategy": str(enum)} with no version.
    path = tmp_path / "seed.json"
    path.write_text(
        json.dumps(
            {"preferences": {"matmul": "cublasLt"}, "auto_strategy": "AutoSelectStrategy.FirstSupported"}
        )
    )
    assert KernelPolicy.load(path) == KernelPolicy(matmul="cublasLt")


def test_declared_names_validate():
    # Another subsystem declares a routing target; then policies may name it.
    with pytest.raises(PolicyError, match="unknown kernel 'triton_sm'"):
        KernelPolicy(softmax="triton_sm")
    xrt.kernels.declare("softmax", "triton_sm")
    assert KernelPolicy(softmax="triton_sm").get("softmax") == "triton_sm"
    assert "triton_sm" in xrt.kernels.known_kernel_names("softmax")
    # PyTorch routing targets are declared by the project.
    KernelPolicy(matmul="torch", attention="torch_flash", layernorm="torch")


# ---------------------------------------------------------------- ExecutionPolicy


def test_execution_policy_seed_example():
    p = ExecutionPolicy(target="npu", precision="int8", static_shape=True, allow_fallback="cpu")
    assert (p.target, p.precision, p.static_shape, p.allow_fallback) == ("npu", "int8", True, "cpu")
    assert (
        repr(p) == "ExecutionPolicy(target='npu', precision='int8', static_shape=True, allow_fallback='cpu')"
    )
    q = ExecutionPolicy(precision="int8", static_shape=True)
    assert q.target == "auto" and q.allow_fallback is None
    assert xrt.ExecutionPolicy is ExecutionPolicy


def test_execution_policy_fields_and_equality():
    p = ExecutionPolicy(
        target="cuda",
        precision="float16",  # alias, stored canonically
        deterministic=True,
        cuda_graph=True,
        workspace_limit_bytes=1 << 20,
        engine="ort",  # engine alias
        allow_tf32=True,
        threads=2,
        strict=["pinned_only", "no_cpu_fallback"],
    )
    assert p.precision == "fp16" and p.engine == "onnxruntime"
    assert p.strict == ["no_cpu_fallback", "pinned_only"]
    assert p.has_strict("pinned_only") and not p.has_strict("no_fallback")
    q = ExecutionPolicy(
        target="cuda",
        precision="fp16",
        deterministic=True,
        cuda_graph=True,
        workspace_limit_bytes=1 << 20,
        engine="onnxruntime",
        allow_tf32=True,
        threads=2,
        strict=["no_cpu_fallback", "pinned_only"],
    )
    assert p == q and p.fingerprint == q.fingerprint
    q.precision = "bf16"
    assert p != q
    r = p.replace(target="cpu", engine=None)
    assert r.target == "cpu" and r.engine is None and p.target == "cuda"


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_execution_policy_round_trip(tmp_path, suffix):
    if suffix == ".yaml":
        _need_yaml()
    p = ExecutionPolicy(
        target="npu",
        precision="int8",
        static_shape=True,
        allow_fallback="cpu",
        engine="openvino",
        strict=["pinned_only"],
    )
    path = tmp_path / f"exec{suffix}"
    p.save(path)
    q = ExecutionPolicy.load(path)
    assert q == p and q.fingerprint == p.fingerprint
    assert ExecutionPolicy.from_json(p.to_json()) == p
    assert ExecutionPolicy.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: ExecutionPolicy(precison="int8"), r"unknown field 'precison'.*did you mean 'precision'\?"),
        (lambda: ExecutionPolicy(precision="int4"), r"valid choices: bf16, fp16, fp32, int8"),
        (lambda: ExecutionPolicy(target="npuu"), r"did you mean 'npu'\?"),
        (
            lambda: ExecutionPolicy(engine="onnxrunitme"),
            r"unknown engine 'onnxrunitme'.*did you mean 'onnxruntime'\?",
        ),
        (lambda: ExecutionPolicy(strict=["no_fallbak"]), r"did you mean 'no_fallback'\?"),
        (lambda: ExecutionPolicy(static_shape="yes"), r"must be True or False"),
        (lambda: ExecutionPolicy(threads=-1), r"integer >= 0"),
        (lambda: ExecutionPolicy(allow_fallback="cpu", strict=["no_fallback"]), r"drop one of them"),
        (lambda: ExecutionPolicy(target="cpu", allow_fallback="cpu"), r"equals the target"),
        (lambda: ExecutionPolicy(allow_fallback="auto"), r"must name a target"),
    ],
)
def test_execution_policy_errors(make, pattern):
    with pytest.raises(PolicyError, match=pattern):
        make()


def test_execution_policy_attribute_typo_and_file_errors(tmp_path):
    p = ExecutionPolicy()
    with pytest.raises(AttributeError, match=r"did you mean 'precision'\?"):
        _ = p.precison
    with pytest.raises(PolicyError, match=r"did you mean 'precision'\?"):
        p.precison = "fp16"
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"kind": "execution_policy", "schema_version": 2}))
    with pytest.raises(PolicyError, match="newer"):
        ExecutionPolicy.load(newer)
