"""Input checks shared by the policy wrappers: every failure is a typed ``PolicyError``.

Policies come from code, dicts, JSON and YAML files written by anyone, so a wrong type,
text that is not valid Unicode, or a value nested a thousand levels deep must give the
typed error with a bounded, valid-UTF-8 message — never ``TypeError`` from pybind11,
``UnicodeDecodeError`` or ``RecursionError``. Messages show input only through
:func:`describe`, the Python side of the C++ ``quote_input``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _core

__all__ = ["check_depth", "describe", "json_bytes", "text", "unknown_choice"]

#: Deepest nesting a policy document has ({"pins": {key: {"kernel": ...}}}) plus slack.
MAX_DEPTH = 8

_repr = reprlib.Repr()
_repr.maxlevel = 2  # nested containers past this show as [...] / {...}, never recursed
_repr.maxstring = 120
_repr.maxother = 120
_repr.maxlong = 40


def _utf8(value: str) -> bytes:
    # surrogatepass keeps lone surrogates as bytes that quote_input then escapes.
    return value.encode("utf-8", "surrogatepass")


def describe(value: Any) -> str:
    """``value`` as a message may show it: bounded, valid UTF-8, never a recursive dump."""
    if isinstance(value, str):
        return _core.policy_util.quote_input(_utf8(value))
    if isinstance(value, (bytes, bytearray)):
        return "bytes " + _core.policy_util.quote_input(bytes(value))
    try:
        shown = _repr.repr(value)
    except Exception:  # noqa: BLE001 -- a __repr__ that raises must not hide the real error
        shown = f"<{type(value).__name__} object>"
    # repr() may hold lone surrogates (from keys inside a container); quote_input escapes them.
    return _core.policy_util.quote_input(_utf8(shown)).strip("'") + f" ({type(value).__name__})"


def text(value: Any, what: str) -> str:
    """``value`` itself when it is a str with a UTF-8 form; PolicyError naming ``what`` otherwise."""
    if not isinstance(value, str):
        raise _core.PolicyError(f"{what} must be a string, got {describe(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _core.PolicyError(
            f"{what} {describe(value)} is not valid Unicode text (it holds a lone surrogate, as from "
            "bytes decoded with errors='surrogateescape'); pass the name as proper text"
        ) from None
    return value


def unknown_choice(what: str, word: Any, where: str, choices: Sequence[str]) -> str:
    """The C++ "unknown <what> 'word'; valid choices: ...; did you mean ...?" message."""
    raw = _utf8(word) if isinstance(word, str) else _utf8(describe(word))
    return _core.policy_util.unknown_choice_message(what, raw, where, list(choices))


def check_depth(value: Any, what: str, max_depth: int = MAX_DEPTH) -> None:
    """PolicyError when dicts/lists in ``value`` nest deeper than ``max_depth`` (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= max_depth:
            raise _core.PolicyError(
                f"{what} nests dicts/lists more than {max_depth} levels deep; a policy is a flat "
                "mapping of fields (see xpuruntime.KernelPolicy / ExecutionPolicy.to_dict())"
            )
        stack.extend((c, depth + 1) for c in children)


def json_bytes(text: Any, what: str) -> bytes:
    """Policy JSON as the bytes C++ parses; PolicyError for anything but str or bytes.

    bytes go as they are (C++ checks UTF-8); a str with lone surrogates keeps them as
    invalid bytes, so the parser's typed error names them.
    """
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    raise _core.PolicyError(f"{what} must be str or bytes, got {describe(text)}")
