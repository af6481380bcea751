"""GPU suites: torch (where installed) is imported before xpuruntime loads its CUDA
plugin, so every process of a test - and the child processes some tests start - loads
torch's cuDNN, not the system's. A plan records the cuDNN it was built with
(ExecutionProvider::environment) and refuses to load under another one; two processes
that imported in different orders would disagree (../shared/GPU.md)."""

try:
    import torch  # noqa: F401
except ImportError:  # the suites skip with their reason without torch or a GPU
    pass
