"""Policies as code (DESIGN.md §3): KernelPolicy (kernels per op) and ExecutionPolicy
(target, precision, shapes, fallback). Both serialize to JSON (YAML with PyYAML) with
a schema version and a fingerprint."""

from .execution_policy import ExecutionPolicy
from .kernel_policy import KernelNames, KernelPolicy

__all__ = ["ExecutionPolicy", "KernelNames", "KernelPolicy"]
