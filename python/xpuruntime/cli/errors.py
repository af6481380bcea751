"""How the command line reports a failure: one line on stderr, a non-zero exit status.

A user mistake (a missing file, a bad flag value, a port in use, a model or policy the
runtime refuses) ends in one line saying what failed, where, and how to fix it, with
exit status 2. Anything else is a bug: one line too, exit status 3, and the hint to
rerun with ``--debug``, which shows the traceback instead.
"""

from __future__ import annotations

import argparse
import errno
import re
import sys
from typing import Any, NoReturn

EXIT_USER = 2
EXIT_INTERNAL = 3

# " [cpp/src/core/policy/policy_json.cpp:95]": where a C++ error was raised. Kept in
# logs and --debug output, not in the one line a user reads.
_SOURCE_LOCATION = re.compile(r"\s*\[(?:cpp|tests|fuzz|benchmarks)/[^\]\s]*:\d+\]")


class CliError(Exception):
    """A user mistake found by the command line; its message is the whole line to print."""


def strip_source_locations(message: str) -> str:
    """``message`` without the C++ source locations the core appends to its errors."""
    return _SOURCE_LOCATION.sub("", message)


def one_line(message: str) -> str:
    """``message`` on one line (newlines become '; '), source locations removed."""
    parts = [p.strip() for p in strip_source_locations(message).splitlines() if p.strip()]
    return "; ".join(parts)


def _user_error_types() -> tuple[type[BaseException], ...]:
    from .. import _core

    types: list[type[BaseException]] = [CliError, _core.XpuRuntimeError, OSError]
    try:
        from ..serving.protocol import ServingError
    except ImportError:  # the serve extra is not installed
        pass
    else:
        types.append(ServingError)
    return tuple(types)


def _describe_os_error(exc: OSError) -> str:
    where = f" {exc.filename!r}" if exc.filename else ""
    text = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        return f"{text}:{where}; check the path"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{text}:{where}; check the file's permissions"
    if exc.errno == errno.EISDIR:
        return f"{text}:{where}; pass a file, not a folder"
    if exc.errno == errno.EADDRINUSE:
        return f"{text}; pick another port or stop the process that holds it"
    return f"{type(exc).__name__}: {text}{(':' + where) if where else ''}"


def report(exc: BaseException, command: str) -> int:
    """Print ``exc`` as one line on stderr; returns the exit status."""
    prog = f"xpuruntime {command}".strip()
    if isinstance(exc, CliError):
        line, status = str(exc), EXIT_USER
    elif isinstance(exc, OSError) and type(exc).__module__ == "builtins":
        line, status = _describe_os_error(exc), EXIT_USER
    elif isinstance(exc, _user_error_types()):
        line, status = f"{type(exc).__name__}: {exc}", EXIT_USER
    elif isinstance(exc, ImportError):
        line = (
            f"{exc} (a dependency is missing; `xpuruntime devices` lists the engines and how to install them)"
        )
        status = EXIT_USER
    else:
        line = f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"
        status = EXIT_INTERNAL
    print(f"{prog}: error: {one_line(line)}", file=sys.stderr, flush=True)
    return status


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; every option's default shown once (unless None/False/empty)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text
            or default in (None, False, [], argparse.SUPPRESS)
            or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG: error: ...; see PROG --help``) and shown defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if kwargs.get("description"):  # docstrings double as descriptions: no reST markup in --help
            kwargs["description"] = kwargs["description"].replace("``", "")
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {one_line(message)}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(EXIT_USER)
