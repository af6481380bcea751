"""The Python package's layering (issue 14): no import circles among its modules (lazy
imports inside functions count too), the engines never reach up into ``inference``,
one loader and one dtype table for ONNX models, one function that unwraps policies.
"""

from __future__ import annotations

import ast
import json
import pathlib

import numpy as np
import pytest
import xpuruntime as xrt
from xpuruntime import _core
from xpuruntime.policies import coerce

PKG = pathlib.Path(xrt.__file__).parent


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports (anywhere in the file)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for alias in node.names:
                    if alias.name == "_core" or mod.endswith("._core"):
                        continue  # the compiled extension: no Python module behind it
                    sub = f"{mod}.{alias.name}"
                    targets.append(sub if sub in mods else mod)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[m] |= {t for t in targets if t in mods and t != m}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_detector_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_import_circles_in_the_package():
    assert _cycles(import_graph()) == []


def test_engines_do_not_import_inference():
    edges = import_graph()
    up = {m: sorted(t for t in ts if t.startswith("xpuruntime.inference")) for m, ts in edges.items()}
    assert not {m: t for m, t in up.items() if m.startswith("xpuruntime.engines") and t}


# ---- one ONNX loader, one dtype table -----------------------------------------------------------
def _model_bytes() -> bytes:
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_one_loader_serves_the_native_front_end_and_the_adapters(tmp_path):
    import hashlib

    from xpuruntime.engines import onnx_model
    from xpuruntime.engines.native import frontend

    data = _model_bytes()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    for given, origin in ((data, "bytes"), (path, f"path:{path}")):
        src = onnx_model.load_model(given)
        assert src.origin == origin and src.sha256 == hashlib.sha256(data).hexdigest()
        loaded = frontend.load(given)
        assert loaded.model_hash == src.sha256 and loaded.source == origin
    ins, outs = onnx_model.onnx_io(onnx_model.load_model(data).proto)
    assert (ins[0].name, ins[0].shape, ins[0].dtype) == ("x", ("n", 3), "float32")
    assert [o.name for o in outs] == ["y"]
    with pytest.raises(xrt.InvalidModelError, match="does not exist"):
        onnx_model.load_model(tmp_path / "missing.onnx")
    with pytest.raises(xrt.InvalidModelError, match="not a valid ONNX model"):
        onnx_model.load_model(b"\x08\x01garbage")
    with pytest.raises(xrt.InvalidModelError, match="must be a path, bytes"):
        onnx_model.load_model(3.5)


def test_the_native_dtypes_are_a_subset_of_the_one_table():
    from onnx import TensorProto, helper
    from xpuruntime.engines.native import frontend
    from xpuruntime.engines.onnx_model import ONNX_DTYPES

    assert frontend.NATIVE_ONNX_TYPES <= set(ONNX_DTYPES)
    for code, name in ONNX_DTYPES.items():  # the table agrees with onnx's own names
        np_type = helper.tensor_dtype_to_np_dtype(code)
        assert name == ("bfloat16" if code == TensorProto.BFLOAT16 else str(np.dtype(np_type)))
    vi = helper.make_tensor_value_info("u", TensorProto.UINT16, [2])
    with pytest.raises(xrt.UnsupportedOperationError, match="element type 4.*supported: .*float32"):
        frontend._dtype(vi, "input")


# ---- one way to unwrap a policy ----------------------------------------------------------------
def test_every_policy_form_becomes_the_core_object(tmp_path):
    kp = xrt.KernelPolicy(matmul="cpu_blas")
    ep = xrt.ExecutionPolicy(precision="fp32")
    path = tmp_path / "p.json"
    kp.save(path)
    for form in (kp, kp._get_internal(), {"matmul": "cpu_blas"}, path, str(path)):
        core = coerce.core_kernel_policy(form)
        assert isinstance(core, _core.KernelPolicy) and core.get("matmul") in ("cpu_blas", ["cpu_blas"])
    epath = tmp_path / "e.json"
    epath.write_text(json.dumps({"precision": "fp32"}))
    for form in (ep, ep._get_internal(), {"precision": "fp32"}, epath):
        assert isinstance(coerce.core_exec_policy(form), _core.ExecutionPolicy)
    assert coerce.core_kernel_policy(None) is None
    assert coerce.policy_kind(kp) == "kernel" and coerce.policy_kind(ep) == "execution"
    assert coerce.policy_kind(42) is None
    with pytest.raises(xrt.InvalidArgumentError, match="expected a KernelPolicy.*got int"):
        coerce.core_kernel_policy(42)
    with pytest.raises(xrt.PolicyError):
        coerce.core_kernel_policy({"matmul": "no_such_kernel"})


def test_a_session_takes_a_policy_file(tmp_path):
    path = tmp_path / "k.json"
    xrt.KernelPolicy(matmul="cpu_blas").save(path)
    sess = xrt.InferenceSession(_model_bytes(), device="cpu", engine="native", kernel_policy=str(path))
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    np.testing.assert_array_equal(sess.run({"x": x})["y"], np.maximum(x, 0))


def test_auto_engine_order_ranks_native_only_where_it_has_a_provider():
    from xpuruntime.engines import native, registry

    for kind, names in registry.AUTO_ORDER.items():
        assert ("native" in names) == (kind in native.devices()), kind
    assert (
        native.NativeEngine.supports("cuda:0", None)[0] == "device_unavailable" or "cuda" in native.devices()
    )
