"""Locate the compiled core module ``xpuruntime._core``.

An installed package holds ``_core`` next to this file. A developer build may
instead point ``XRT_BUILD_DIR`` at a CMake build folder (its ``lib/`` holds
``_core*.so`` and the core libraries), so tests can run without reinstalling.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import sys
from types import ModuleType


def load_core() -> ModuleType:
    """Import and return ``xpuruntime._core``."""
    build_dir = os.environ.get("XRT_BUILD_DIR")
    if build_dir:
        candidates = sorted(glob.glob(os.path.join(build_dir, "lib", "_core*.so")))
        if not candidates:
            raise ImportError(
                f"XRT_BUILD_DIR={build_dir!r} holds no lib/_core*.so: build the target _core there "
                "(cmake --build <dir> --target _core) or unset XRT_BUILD_DIR to use the installed package"
            )
        spec = importlib.util.spec_from_file_location("xpuruntime._core", candidates[0])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["xpuruntime._core"] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module("xpuruntime._core")
    except ImportError as exc:  # pragma: no cover - only on broken installs
        raise ImportError(
            "xpuruntime's compiled core (_core) is missing: install the package with "
            "`pip install .` from a clone, or set XRT_BUILD_DIR to a CMake build folder. "
            f"Original error: {exc}"
        ) from exc
