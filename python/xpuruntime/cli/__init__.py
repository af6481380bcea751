"""The ``xpuruntime`` command line (console entry point ``xpuruntime.cli:main``)."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
