"""Models shipped with the package: the demo model (see build_demo.py)."""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL = Path(__file__).with_name("demo.onnx")


def demo_model_path() -> Path:
    """Path of the bundled demo model (``image`` [batch, 3, 32, 32] -> ``logits`` [batch, 10])."""
    return DEMO_MODEL
