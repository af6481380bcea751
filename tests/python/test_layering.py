"""The layering DESIGN.md §2 and §11 promise, checked on the sources and the build.

* Nothing under ``cpp/src/{core,ops,graph,bindings}`` includes a ``backends/`` header:
  the core reaches devices only through the public headers (plugin.h, backend.h,
  kernel_registry.h, xpuruntime/provider.h, cuda_kernels_abi.h).
* No device plugin includes another plugin's headers. The plugins and their folders:
  one folder each (``backends/cpu``, ``backends/cuda`` with its kernels under
  ``kernels/<family>/``, ...). A folder under ``backends/`` that is in no plugin fails
  the test until it is added.
* The device plugins are the core's plugin table (``core/plugin.cpp``), one folder each.
* Each built plugin library exports exactly one symbol, ``xpuruntime_plugin_init``
  (``nm -D --defined-only``); skipped, with the reason, when it was not built.
* The ground floor (``cpp/src/core``, ``cpp/src/ops`` and the public headers beside
  them) includes nothing from ``graph/``: the IR (``xpuruntime/ir.h``) and the provider
  interface (``xpuruntime/provider.h``) live beside the other public headers.
* Names, not only includes: ``kCUDA``, ``is_cuda()`` and a ``"cuda"`` literal appear in
  ``cpp/src/{core,ops,graph,bindings}``, ``cpp/include`` and the device-neutral Python
  packages only where ``ALLOWED_VENDOR_NAMES`` lists the place and says why (comments,
  docstrings and docs are free to name devices).
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "cpp" / "src"
BACKENDS = SRC / "backends"
CORE_DIRS = ("core", "ops", "graph", "bindings")
PLUGIN_TABLE = SRC / "core" / "plugin.cpp"


def _plugin_table_names() -> list[str]:
    """The device kinds of the core's plugin table (kPluginSources in core/plugin.cpp)."""
    text = PLUGIN_TABLE.read_text(encoding="utf-8")
    table = re.search(r"kPluginSources\[\]\s*=\s*\{(.*?)\n\};", text, re.DOTALL)
    assert table, f"no kPluginSources table in {PLUGIN_TABLE}"
    return re.findall(r'^\s*\{"([a-z0-9_]+)",', table.group(1), re.MULTILINE)


# Each device plugin of the table is one folder of its name.
PLUGINS = {name: (name,) for name in _plugin_table_names()}
# The NCCL helper (xpuruntime.distributed): its own library with a C ABI, no device plugin.
PLUGINS["nccl"] = ("nccl",)
PLUGIN_ENTRY = "xpuruntime_plugin_init"
INCLUDE_DIR = ROOT / "cpp" / "include" / "xpuruntime"
PYTHON_PKG = ROOT / "python" / "xpuruntime"
# The device-neutral Python packages: they reach devices through ``_core`` (the kinds of
# the plugin table, the DeviceManager, the providers). Vendor engines (onnxruntime,
# tensorrt, openvino), the torch integration and the NCCL helper are about their vendor.
NEUTRAL_PYTHON = ("runtime", "engines/native", "inference", "dispatch")
# Where a vendor name may appear in device-neutral code, and why. Paths relative to the
# repository root; the count is how many occurrences the place may hold.
ALLOWED_VENDOR_NAMES: dict[str, tuple[int, str]] = {
    "cpp/src/core/plugin.cpp": (1, 'the plugin table: the one line that makes "cuda" a device kind'),
    "cpp/src/bindings/cuda_kernels_binding.cpp": (
        1,
        "the Python face of the CUDA plugin's own kernel entries (cuda_kernels_abi.h): it names its plugin",
    ),
    "cpp/src/core/policy/execution_policy.cpp": (
        3,
        (
            "ExecutionPolicy.target is the seed API's engine target ('auto', 'cpu', 'cuda', 'npu'), which "
            "picks engines (onnxruntime, tensorrt, openvino, native), not a device kind of this core"
        ),
    ),
    "python/xpuruntime/engines/native/onnx_backend.py": (
        1,
        "ONNX's backend API names its devices 'CPU' and 'CUDA' (onnx.backend.base.DeviceType)",
    ),
    "python/xpuruntime/engines/native/engine.py": (
        3,
        (
            "what only the CUDA provider offers today, named by the seed API: fp16/bf16 plans and "
            "ExecutionPolicy(cuda_graph=True)"
        ),
    ),
}
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.MULTILINE)


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)


def _backend_includes(path: Path) -> list[str]:
    """The ``backends/...`` headers a file includes (by include path)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [inc for inc in INCLUDE.findall(text) if inc.startswith("backends/") or "/backends/" in inc]


def _plugin_of_folder(folder: str) -> str | None:
    for plugin, folders in PLUGINS.items():
        if folder in folders:
            return plugin
    return None


def _plugin_of_include(include: str) -> str | None:
    rest = include.split("backends/", 1)[1]
    return _plugin_of_folder(rest.split("/", 1)[0])


def test_core_ops_graph_bindings_include_no_backend_header():
    offenders = [
        f"{path.relative_to(ROOT)} includes {inc}"
        for d in CORE_DIRS
        for path in _sources(SRC / d)
        for inc in _backend_includes(path)
    ]
    assert not offenders, (
        "the core layers must reach devices through public headers (xpuruntime/plugin.h, "
        "kernel_registry.h, xpuruntime/provider.h, cuda_kernels_abi.h), not backends/:\n"
        + "\n".join(offenders)
    )


def test_every_backend_folder_belongs_to_a_plugin():
    folders = sorted(p.name for p in BACKENDS.iterdir() if p.is_dir())
    unknown = [f for f in folders if _plugin_of_folder(f) is None]
    assert not unknown, (
        f"backends/{unknown} belong to no plugin: add them to PLUGINS in {Path(__file__).name} "
        "(a folder of an existing plugin, or a new plugin)"
    )


def test_no_plugin_includes_another_plugins_headers():
    offenders = []
    for folder in sorted(p for p in BACKENDS.iterdir() if p.is_dir()):
        own = _plugin_of_folder(folder.name)
        for path in _sources(folder):
            for inc in _backend_includes(path):
                other = _plugin_of_include(inc)
                if other != own:
                    offenders.append(f"{path.relative_to(ROOT)} ({own}) includes {inc} ({other})")
    assert not offenders, "a device plugin may include only its own folders:\n" + "\n".join(offenders)


def test_plugins_come_from_the_core_plugin_table():
    names = _plugin_table_names()
    assert "cpu" in names and len(names) == len(set(names)), names
    for name in names:
        assert (BACKENDS / name).is_dir(), (
            f"the plugin table names {name!r} but backends/{name}/ does not exist"
        )


def test_rules_catch_a_violation(tmp_path):
    """The include scanner sees what the rules need (so the tests above can fail)."""
    f = tmp_path / "x.cpp"
    f.write_text(
        '#include "backends/cpu/cpu_backend.h"\n  #  include <backends/cuda/cuda_check.h>\n#include "xpuruntime/plugin.h"\n'
    )
    incs = _backend_includes(f)
    assert incs == ["backends/cpu/cpu_backend.h", "backends/cuda/cuda_check.h"]
    assert [_plugin_of_include(i) for i in incs] == ["cpu", "cuda"]
    assert _plugin_of_include("backends/cuda/kernels/blas/cublaslt_gemm_impl.h") == "cuda"


def _plugin_path(name: str) -> tuple[Path | None, str]:
    lib_name = f"libxpuruntime_{name}.so"
    build = os.environ.get("XRT_BUILD_DIR")
    candidates = []
    if build:
        candidates.append(Path(build) / "lib" / lib_name)
    else:
        spec = importlib.util.find_spec("xpuruntime")
        for loc in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(Path(loc) / lib_name)
    for c in candidates:
        if c.is_file():
            return c, ""
    where = ", ".join(str(c) for c in candidates) or "no xpuruntime package found"
    return None, f"no {name} plugin built (looked at {where})"


def _exported_symbols(lib: Path) -> list[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True
    ).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


@pytest.mark.parametrize("name", [n for n in _plugin_table_names() if n != "cpu"])
def test_plugin_library_exports_exactly_its_entry(name: str):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    lib, why = _plugin_path(name)
    if lib is None:
        pytest.skip(why)
    symbols = _exported_symbols(lib)
    assert symbols == [PLUGIN_ENTRY], (
        f"{lib} must export exactly {PLUGIN_ENTRY} (its linker version script: "
        f"cpp/src/backends/plugin.map, cpp/src/backends/cuda/plugin.map); "
        f"it exports {len(symbols)}: {symbols[:20]}"
    )


# ---- the ground floor reaches no higher floor ----------------------------------------


def _ground_floor_files() -> list[Path]:
    files = _sources(SRC / "core") + _sources(SRC / "ops")
    files += sorted(p for p in INCLUDE_DIR.rglob("*.h") if "graph" not in p.relative_to(INCLUDE_DIR).parts)
    return files


def _graph_includes(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [inc for inc in INCLUDE.findall(text) if inc.startswith(("graph/", "xpuruntime/graph/"))]


def test_core_and_ops_include_nothing_from_graph():
    offenders = [
        f"{p.relative_to(ROOT)} includes {inc}" for p in _ground_floor_files() for inc in _graph_includes(p)
    ]
    assert not offenders, (
        "core/, ops/ and the public headers beside them must not reach up into graph/ (the IR is "
        "xpuruntime/ir.h, the provider interface xpuruntime/provider.h):\n" + "\n".join(offenders)
    )


# ---- names, not only includes --------------------------------------------------------

_CPP_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.DOTALL)
_CPP_VENDOR = re.compile(r'\bkCUDA\b|\bis_cuda\s*\(\s*\)|"cuda"')


def _cpp_code(text: str) -> str:
    """The text with comments blanked (string and character literals kept)."""
    return _CPP_TOKEN.sub(lambda m: "" if m.group(0).startswith("/") else m.group(0), text)


def _cpp_vendor_names(text: str) -> list[str]:
    return _CPP_VENDOR.findall(_cpp_code(text))


def _python_vendor_names(text: str) -> list[str]:
    """``"cuda"`` string literals (not docstrings), ``kCUDA`` and ``is_cuda()`` in Python code."""
    found = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, tok in enumerate(tokens):
        if (tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU") in ('"cuda"', "'cuda'")) or (
            tok.type == tokenize.NAME and tok.string == "kCUDA"
        ):
            found.append(tok.string)
        elif (
            tok.type == tokenize.NAME
            and tok.string == "is_cuda"
            and i + 2 < len(tokens)
            and tokens[i + 1].string == "("
            and tokens[i + 2].string == ")"
        ):
            found.append("is_cuda()")
    return found


def _vendor_name_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    cpp_files = [p for d in CORE_DIRS for p in _sources(SRC / d)] + _sources(ROOT / "cpp" / "include")
    for path in cpp_files:
        if n := len(_cpp_vendor_names(path.read_text(encoding="utf-8", errors="replace"))):
            counts[str(path.relative_to(ROOT))] = n
    for pkg in NEUTRAL_PYTHON:
        for path in sorted((PYTHON_PKG / pkg).rglob("*.py")):
            if n := len(_python_vendor_names(path.read_text(encoding="utf-8"))):
                counts[str(path.relative_to(ROOT))] = n
    return counts


def test_device_neutral_code_names_no_vendor():
    counts = _vendor_name_counts()
    allowed = {path: n for path, (n, _why) in ALLOWED_VENDOR_NAMES.items()}
    offenders = [
        f"{path}: {n} occurrence(s), {allowed.get(path, 0)} allowed"
        for path, n in sorted(counts.items())
        if n > allowed.get(path, 0)
    ]
    assert not offenders, (
        'device-neutral code names a vendor (kCUDA, is_cuda(), a "cuda" literal): ask the device\'s '
        "backend (DeviceManager, DeviceBackend::attribute, the plugin table's DeviceKind) instead, or "
        f"list the place in ALLOWED_VENDOR_NAMES ({Path(__file__).name}) with why:\n" + "\n".join(offenders)
    )
    stale = sorted(p for p in ALLOWED_VENDOR_NAMES if p not in counts)
    assert not stale, f"ALLOWED_VENDOR_NAMES lists places that no longer name a vendor (remove them): {stale}"


def test_vendor_name_scanner_sees_what_it_must():
    """The scanners find the names in code and skip comments and docstrings (so the test above can fail)."""
    cpp = (
        'if (d.is_cuda()) f(DeviceType::kCUDA, "cuda");  // "cuda" in a comment\n'
        '/* is_cuda() */ const char* s = "cuda:0"; char q = \'"\'; g("cuda");\n'
    )
    assert _cpp_vendor_names(cpp) == ["is_cuda()", "kCUDA", '"cuda"', '"cuda"']
    py = 'def f(d):\n    """On "cuda" only."""\n    return d == "cuda" or d.is_cuda() or x.kCUDA  # "cuda"\n'
    assert _python_vendor_names(py) == ['"cuda"', "is_cuda()", "kCUDA"]
    assert _python_vendor_names('s = f"cuda:{i}"\n') == []
