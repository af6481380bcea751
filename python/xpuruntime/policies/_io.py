"""File I/O shared by the policy wrappers: JSON always, YAML when PyYAML is installed.

JSON text is the canonical form (the C++ structs parse it); YAML files are read into
the same mapping and handed over as JSON, so both formats mean exactly the same thing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import _core
from . import _checks

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
        f = fmt.lower() if isinstance(fmt, str) else fmt
        if f in ("json", "yaml", "yml"):
            return "yaml" if f == "yml" else f
        raise _core.PolicyError(
            f"unknown policy file format {_checks.describe(fmt)}; valid choices: json, yaml"
        )
    suffix = path.suffix.lower()
    if suffix in _FORMATS:
        return _FORMATS[suffix]
    raise _core.PolicyError(
        f"cannot tell the format of policy file {_checks.describe(str(path))} from its suffix "
        f"{_checks.describe(suffix)}; "
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
    """Reads a policy file and returns its content as JSON text.

    Raises:
        PolicyError: the path is missing, a directory or unreadable, the file is not
            UTF-8, or its YAML does not parse to a mapping.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise _core.PolicyError(
            f"a policy file path must be a str or os.PathLike, got {_checks.describe(path)}"
        )
    p = Path(path)
    shown = _checks.describe(str(p))  # a file name may hold bytes that are not UTF-8
    if p.is_dir():
        raise _core.PolicyError(f"policy file {shown} is a directory; pass the path of a .json or .yaml file")
    kind = format_of(p, fmt)
    try:
        data = p.read_bytes()
    except FileNotFoundError as e:
        raise _core.PolicyError(f"policy file {shown} does not exist") from e
    except OSError as e:
        raise _core.PolicyError(f"cannot read policy file {shown}: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _core.PolicyError(
            f"policy file {shown} is not UTF-8 text (byte {e.start}: "
            f"{_checks.describe(data[e.start : e.start + 8])}); save it as UTF-8"
        ) from None
    if kind == "json":
        return text
    yaml = _yaml()
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _core.PolicyError(
            f"cannot parse YAML policy file {shown}: {_checks.describe(str(e))}"
        ) from None
    except RecursionError:
        raise _core.PolicyError(f"YAML policy file {shown} nests too deeply to be a policy") from None
    if not isinstance(loaded, dict):
        raise _core.PolicyError(f"policy file {shown} must hold a mapping, got {type(loaded).__name__}")
    return to_json(loaded, f"policy file {shown}")


def to_json(data: Mapping[str, Any], what: str) -> str:
    """JSON text of a policy mapping; PolicyError when it is too deep or not JSON data."""
    _checks.check_depth(data, what)
    try:
        return json.dumps(dict(data), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _core.PolicyError(
            f"{what} holds a value JSON cannot represent ({_checks.describe(str(e))}); policies hold "
            "strings, numbers, booleans, lists and mappings with string keys"
        ) from None
