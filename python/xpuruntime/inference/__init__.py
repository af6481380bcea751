"""Inference: InferenceSession over the native engine or an external one."""

from .session import InferenceSession

__all__ = ["InferenceSession"]
