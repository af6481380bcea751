"""The layering DESIGN.md §2 and §11 promise, checked on the sources and the build.

* Nothing under ``cpp/src/{core,ops,graph,bindings}`` includes a ``backends/`` header:
  the core reaches devices only through the public headers (plugin.h, backend.h,
  kernel_registry.h, graph/provider.h, cuda_kernels_abi.h).
* No device plugin includes another plugin's headers. The plugins and their folders:
  one folder each (``backends/cpu``, ``backends/cuda`` with its kernels under
  ``kernels/<family>/``, ...). A folder under ``backends/`` that is in no plugin fails
  the test until it is added.
* The built CUDA plugin exports exactly one symbol, ``xpuruntime_plugin_init``
  (``nm -D --defined-only``); skipped, with the reason, when no plugin was built.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "cpp" / "src"
BACKENDS = SRC / "backends"
CORE_DIRS = ("core", "ops", "graph", "bindings")
PLUGINS = {
    "cpu": ("cpu",),
    "cuda": ("cuda",),
    # The NCCL helper (xpuruntime.distributed): its own library with a C ABI, no device plugin.
    "nccl": ("nccl",),
}
PLUGIN_ENTRY = "xpuruntime_plugin_init"
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
        "kernel_registry.h, graph/provider.h, cuda_kernels_abi.h), not backends/:\n" + "\n".join(offenders)
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


def _cuda_plugin_path() -> tuple[Path | None, str]:
    build = os.environ.get("XRT_BUILD_DIR")
    candidates = []
    if build:
        candidates.append(Path(build) / "lib" / "libxpuruntime_cuda.so")
    else:
        spec = importlib.util.find_spec("xpuruntime")
        for loc in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(Path(loc) / "libxpuruntime_cuda.so")
    for c in candidates:
        if c.is_file():
            return c, ""
    where = ", ".join(str(c) for c in candidates) or "no xpuruntime package found"
    return None, f"no CUDA plugin built (looked at {where})"


def _exported_symbols(lib: Path) -> list[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True
    ).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def test_cuda_plugin_exports_exactly_its_entry():
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    lib, why = _cuda_plugin_path()
    if lib is None:
        pytest.skip(why)
    symbols = _exported_symbols(lib)
    assert symbols == [PLUGIN_ENTRY], (
        f"{lib} must export exactly {PLUGIN_ENTRY} (cpp/src/backends/cuda/plugin.map); "
        f"it exports {len(symbols)}: {symbols[:20]}"
    )
