"""File I/O shared by the policy wrappers: JSON always, YAML when PyYAML is installed.

JSON text is the canonical form (the C++ structs parse it); YAML files are read into
the same mapping and handed over as JSON, so both formats mean exactly the same thing.

YAML is read by :func:`load_yaml`: PyYAML's safe loader without aliases. Anchors and
``*alias`` references are refused at the first alias, so a few hundred bytes cannot
expand into a document of billions of nodes (the "billion laughs" alias bomb); a policy
or a model config never needs them. Nesting is bounded too.
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


class YamlRefused(ValueError):
    """YAML text :func:`load_yaml` refuses: not valid YAML, an alias, or too deep."""


#: Largest policy file read (a policy with thousands of pins is well under a MiB).
MAX_POLICY_BYTES = 16 << 20

#: Deepest nesting of YAML collections accepted (a policy or config needs a few levels).
MAX_YAML_DEPTH = 64


def load_yaml(text: str) -> Any:
    """The document of YAML ``text``, safe-loaded with no aliases and bounded nesting.

    Raises:
        YamlRefused: with what is wrong and where (line and column).
        PolicyError: PyYAML is not installed.
    """
    yaml = _yaml()

    class _Loader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise YamlRefused(
                    f"YAML aliases (*{self.peek_event().anchor}) are not accepted (line {mark.line + 1}, "
                    f"column {mark.column + 1}); write the values out instead of anchors and aliases"
                )
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    mark = self.peek_event().start_mark
                    raise YamlRefused(
                        f"YAML nests more than {MAX_YAML_DEPTH} levels deep (line {mark.line + 1})"
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise YamlRefused(f"not valid YAML: {_checks.describe(str(e))}") from None
    except RecursionError:
        raise YamlRefused(f"YAML nests more than {MAX_YAML_DEPTH} levels deep") from None
    finally:
        loader.dispose()


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
        with p.open("rb") as f:  # bounded: a path to /dev/zero or a huge file is refused, not read
            data = f.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            raise _core.PolicyError(
                f"policy file {shown} holds more than {MAX_POLICY_BYTES >> 20} MiB; a policy is a few KiB "
                "of JSON or YAML (check the path)"
            )
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
    try:
        loaded = load_yaml(text)
    except YamlRefused as e:
        raise _core.PolicyError(f"cannot read YAML policy file {shown}: {e}") from None
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
