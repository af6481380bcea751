"""Our custom operators for PyTorch (seed 002 §5), registered in the ``xpuruntime``
torch.library namespace with CUDA kernels, CPU reference implementations, fake
implementations and autograd formulas."""

from .attention import flash_attention_support, fused_attention
from .layernorm import fused_layernorm, layernorm_support

__all__ = [
    "flash_attention_support",
    "fused_attention",
    "fused_layernorm",
    "layernorm_support",
]
