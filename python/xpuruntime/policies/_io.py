"""File I/O shared by the policy wrappers: JSON always, YAML when PyYAML is installed.

JSON text is the canonical form (the C++ structs parse it); YAML files are read into
the same mapping and handed over as JSON, so both formats mean exactly the same thing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import _core

_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as e:
        raise _core.PolicyError(
            "YAML policy files need PyYAML: pip install xpuruntime[yaml] (or pyyaml); JSON files need nothing"
        ) from e
    return yaml


def format_of(path: Path, fmt: str | None) -> str:
    """'json' or 'yaml' from an explicit format or the file suffix."""
    if fmt is not None:
        f = fmt.lower()
        if f in ("json", "yaml", "yml"):
            return "yaml" if f == "yml" else f
        raise _core.PolicyError(f"unknown policy file format {fmt!r}; valid choices: json, yaml")
    suffix = path.suffix.lower()
    if suffix in _FORMATS:
        return _FORMATS[suffix]
    raise _core.PolicyError(
        f"cannot tell the format of policy file '{path}' from its suffix {suffix!r}; "
        "use .json, .yaml or .yml (or pass format='json' / 'yaml')"
    )


def write(path: str | Path, json_text: str, fmt: str | None) -> None:
    """Writes the policy (given as pretty JSON) to ``path`` in the chosen format."""
    p = Path(path)
    kind = format_of(p, fmt)
    if kind == "json":
        p.write_text(json_text + "\n", encoding="utf-8")
        return
    yaml = _yaml()
    data = json.loads(json_text)
    p.write_text(yaml.safe_dump(data, sort_keys=True, default_flow_style=False), encoding="utf-8")


def read(path: str | Path, fmt: str | None) -> str:
    """Reads a policy file and returns its content as JSON text."""
    p = Path(path)
    kind = format_of(p, fmt)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise _core.PolicyError(f"policy file '{p}' does not exist") from e
    if kind == "json":
        return text
    yaml = _yaml()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _core.PolicyError(f"cannot parse YAML policy file '{p}': {e}") from e
    if not isinstance(data, dict):
        raise _core.PolicyError(f"policy file '{p}' must hold a mapping, got {type(data).__name__}")
    return json.dumps(data)
