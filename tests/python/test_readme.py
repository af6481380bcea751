"""The README's Python blocks run as pasted (in a fresh folder, one namespace per block).

GPU-only lines are comments in the README, so nothing here needs a GPU; a block whose
optional dependency is missing (the training block needs torch) is skipped with that
reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
OPTIONAL = {"xpuruntime.pytorch": "torch"}


def test_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 2
    assert "demo_model_path()" in BLOCKS[0] and '"image"' in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = BLOCKS[index]
    for module, dependency in OPTIONAL.items():
        if f"import {module}" in code:
            pytest.importorskip(dependency, reason=f"README block {index} needs {dependency}")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"readme_block_{index}"}
    exec(compile(code, f"README.md python block {index}", "exec"), namespace)  # noqa: S102 (the README's own code)
    if index == 0:  # the tour: the demo model's output and the files it writes
        assert namespace["out"]["logits"].shape == (1, 10)  # type: ignore[index]
        assert (tmp_path / "policy.json").is_file() and (tmp_path / "trace.json").is_file()
