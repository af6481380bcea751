"""Tables of the command line: rich on a terminal, aligned plain text otherwise."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from typing import Any

WIDTH = 100  # plain-text output is laid out for a 100-column terminal


def tty() -> bool:
    """Whether stdout is a terminal (rich tables and progress bars)."""
    return sys.stdout.isatty()


def model_label(path: str) -> str:
    """How a model path is shown: the bundled demo by name, others relative to the working
    folder where that is shorter (an installed package's absolute path alone can fill a
    100-column line)."""
    import os
    from pathlib import Path

    from ..models import demo_model_path

    try:
        if Path(path).resolve() == Path(demo_model_path()).resolve():
            return "the bundled demo (demo.onnx)"
        rel = os.path.relpath(path)
    except (OSError, ValueError):
        return path
    return rel if len(rel) < len(path) else path


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis where it was cut."""
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table: rich on a terminal (fitted to its width), aligned plain text otherwise."""
    cells = [[str(c) for c in r] for r in rows]
    if tty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title)
        for c in columns:
            t.add_column(str(c))
        for r in cells:
            t.add_row(*r)
        Console().print(t)
        return
    widths = [max([len(str(c))] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    # Wider than WIDTH: the widest column is narrowed (its cells wrapped) until it fits.
    while sum(widths) + 2 * (len(widths) - 1) > WIDTH:
        k = max(range(len(widths)), key=lambda i: widths[i])
        excess = sum(widths) + 2 * (len(widths) - 1) - WIDTH
        narrower = max(widths[k] - excess, 12, len(str(columns[k])))
        if narrower >= widths[k]:
            break
        widths[k] = narrower
    print(title)
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in cells:
        wrapped = [textwrap.wrap(v, w, break_on_hyphens=False) or [""] for v, w in zip(r, widths)]
        for line in range(max(len(c) for c in wrapped)):
            parts = [(c[line] if line < len(c) else "").ljust(w) for c, w in zip(wrapped, widths)]
            print("  ".join(parts).rstrip())
