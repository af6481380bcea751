"""The kernels a routed torch call can run, as registered kernels (DESIGN.md §2, §8).

The C++ Dispatcher chooses for routed torch calls as it does for inference nodes,
among kernels of the one KernelRegistry. This module registers the torch side:

* torch's own kernels: ``torch`` (matmul, attention, layernorm) and the SDPA
  backends ``cudnn``, ``torch_flash``, ``efficient``, ``math``, with ``supports``
  in Python where only torch can answer (``torch.backends.cuda.can_use_*``);
* our kernels (``flash_v2``, ``fused``, ``cublasLt``, ``cublas``) are the CUDA
  plugin's C++ KernelDefs: their ``supports`` is the only statement of what they
  run, for routed calls as for inference nodes. This module adds, for ``flash_v2``
  and ``fused``, a CPU definition whose run is the float reference implementation in
  :mod:`.ops` (checked only for the call making sense); the registry keeps the two as
  one kernel split by device, so a routed call on CPU tensors runs the reference
  with or without the plugin. Where the plugin is not loaded, a CUDA case finds no
  CUDA kernel under those names and the decision says so.

All of them are ``requested_only``: only a selection that names them as runnable
(routing does) or a policy that names them lists them, so the native engine's auto
choices never see them. Their ``supports`` read the call being routed on this thread
(:func:`checking`): the OpContext describes the case, torch's own checks need the
tensors; outside a routed call only the kernels that take every case (``torch``,
``math``) accept one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .. import _core
from .ops.attention import flash_attention_support
from .ops.layernorm import layernorm_support

R = _core.reason

#: Why a kernel cannot run a call: (reason_code, detail), or None when it can.
Verdict = tuple[str, str] | None

_current = threading.local()


@contextlib.contextmanager
def checking(call: Any) -> Iterator[None]:
    """Makes ``call`` the one this thread's torch-side ``supports`` answer about."""
    previous = getattr(_current, "call", None)
    _current.call = call
    try:
        yield
    finally:
        _current.call = previous


# ---- supports: why a kernel cannot run a call -------------------------------------------
def _always(call: Any) -> Verdict:
    return None


def _flash(call: Any) -> Verdict:
    f = call.fields
    q, k = f["query"], f["key"]
    if q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1] and not f["enable_gqa"]:
        return R.SHAPE_UNSUPPORTED, "query and key head counts differ and enable_gqa=False"
    if f["is_causal"] and f["attn_mask"] is not None:
        return R.ATTRIBUTE_UNSUPPORTED, "attn_mask together with is_causal"
    return flash_attention_support(q, k, f["value"], f["attn_mask"], float(f["dropout_p"]))


def _layernorm(call: Any) -> Verdict:
    f = call.fields
    ns = f["normalized_shape"]
    ns = [ns] if isinstance(ns, int) else list(ns)
    return layernorm_support(f["input"], ns, f["weight"], f["bias"])


_SDPA_CHECKS = {
    "torch_flash": "can_use_flash_attention",
    "efficient": "can_use_efficient_attention",
    "cudnn": "can_use_cudnn_attention",
}


def _sdpa_backend(kernel: str) -> Callable[[Any], Verdict]:
    def check(call: Any) -> Verdict:
        f = call.fields
        q, k, v, m = f["query"], f["key"], f["value"], f["attn_mask"]
        if q.device.type != "cuda":
            return R.DEVICE_MISMATCH, f"torch's {kernel} SDPA backend runs CUDA tensors only"
        name = _SDPA_CHECKS[kernel]
        fn = getattr(torch.backends.cuda, name, None)
        params_cls = getattr(torch.backends.cuda, "SDPAParams", None)
        if fn is None or params_cls is None:
            return R.BACKEND_UNAVAILABLE, f"this torch has no {name}"
        p, causal, gqa = float(f["dropout_p"]), bool(f["is_causal"]), bool(f["enable_gqa"])
        try:
            params = params_cls(q, k, v, m, p, causal, gqa)
        except TypeError:
            params = params_cls(q, k, v, m, p, causal)
        if not fn(params, False):
            return R.SHAPE_UNSUPPORTED, f"torch reports {kernel} cannot run this case ({name} is False)"
        return None

    return check


# ---- the kernels --------------------------------------------------------------------------
@dataclass(frozen=True)
class TorchSideKernel:
    """One kernel a routed torch call can run, as registered."""

    op: str
    name: str
    devices: tuple[str, ...]  # device kinds it runs on (the first is KernelDef.device)
    priority: int  # auto order among an op's kernels (higher first)
    supports: Callable[[Any], Verdict]
    description: str
    ours: bool = False  # our CUDA kernel: a C++ KernelDef of the plugin takes precedence
    deterministic: bool = True


_BOTH = ("cpu", "cuda")
# Priorities keep torch's own kernel last: it is what the fallback rule takes.
KERNELS: tuple[TorchSideKernel, ...] = (
    TorchSideKernel("matmul", "torch", _BOTH, -100, _always, "torch's own matmul/linear/addmm"),
    TorchSideKernel(
        "attention",
        "flash_v2",
        ("cpu",),
        100,
        _flash,
        "our FlashAttention-2: its float reference on the CPU (CUDA: the plugin's KernelDef)",
        ours=True,
    ),
    TorchSideKernel("attention", "cudnn", ("cuda",), 40, _sdpa_backend("cudnn"), "torch SDPA, cuDNN backend"),
    TorchSideKernel(
        "attention",
        "torch_flash",
        ("cuda",),
        30,
        _sdpa_backend("torch_flash"),
        "torch SDPA, FlashAttention backend",
    ),
    TorchSideKernel(
        "attention",
        "efficient",
        ("cuda",),
        20,
        _sdpa_backend("efficient"),
        "torch SDPA, memory-efficient backend (atomics in its backward)",
        deterministic=False,
    ),
    TorchSideKernel("attention", "math", _BOTH, 10, _always, "torch SDPA, math backend"),
    TorchSideKernel("attention", "torch", _BOTH, -100, _always, "torch SDPA, torch's own backend choice"),
    TorchSideKernel(
        "layernorm",
        "fused",
        ("cpu",),
        100,
        _layernorm,
        "our fused LayerNorm: its float reference on the CPU (CUDA: the plugin's KernelDef)",
        ours=True,
    ),
    TorchSideKernel("layernorm", "torch", _BOTH, -100, _always, "torch's own layer_norm"),
)

#: Our kernels that exist only as the CUDA plugin's C++ KernelDefs (no torch-side
#: definition: where the plugin is not loaded they are listed, rejected with the reason).
NATIVE_ONLY: tuple[tuple[str, str], ...] = (("matmul", "cublasLt"), ("matmul", "cublas"))

#: op -> the kernel names routing can run (what SelectOptions.runnable says).
RUNNABLE: dict[str, list[str]] = {}
for _op, _name in NATIVE_ONLY:
    RUNNABLE.setdefault(_op, []).append(_name)
for _k in KERNELS:
    RUNNABLE.setdefault(_k.op, []).append(_k.name)

#: The kernel the fallback rule takes for a routed call: torch's own.
FALLBACK = "torch"


def _supports(k: TorchSideKernel) -> Callable[[Any], Any]:
    def supports(ctx: Any) -> Any:
        call = getattr(_current, "call", None)
        if call is None or call.op != k.op:
            if k.supports is _always:  # torch's own kernel takes any case a dispatch hands it
                return True
            return (False, R.BACKEND_UNAVAILABLE, f"'{k.name}' decides on the tensors of a routed torch call")
        why = k.supports(call)
        return True if why is None else (False, why[0], why[1])

    return supports


_registered = False
_lock = threading.Lock()


def register(runner: Callable[[str, str, tuple, dict], Any]) -> None:
    """Registers the torch-side kernels once per process.

    ``runner(op, kernel, tensors, attrs)`` runs a kernel on torch tensors given as a
    dispatch would (inputs in OpContext order, attributes as the context carries them).
    """
    global _registered
    with _lock:
        if _registered:
            return
        # Counting devices loads the device plugins, whose KernelDefs register at load:
        # they are the kernels where they exist, so they must be there before we look.
        _core.DeviceManager.instance().get_device_count()
        reg = _core.KernelRegistry.instance()
        covered: dict[tuple[str, str], set[str]] = {}  # native kernels' devices
        bridged: set[tuple[str, str]] = set()  # names a requested_only kernel holds
        for d in reg.list():
            key = (d["op"], d["name"])
            covered.setdefault(key, set())
            if d["requested_only"]:
                bridged.add(key)
            else:
                covered[key].update(d["devices"])
        for k in KERNELS:
            # The CUDA plugin's KernelDef (or a user's kernel) is the kernel on the devices
            # it runs on; the bridge's definition of our kernels joins it on the rest (the
            # CPU reference of flash_v2 and fused), which the registry keeps as one kernel
            # split by device. A user's kernel under a torch-side name is the kernel.
            present = covered.get((k.op, k.name))
            if present is not None and (not k.ours or (k.op, k.name) in bridged):
                continue
            devices = tuple(dev for dev in k.devices if present is None or dev not in present)
            if not devices:
                continue

            def fn(*tensors: Any, _k: TorchSideKernel = k, **attrs: Any) -> Any:
                return runner(_k.op, _k.name, tuple(torch.from_dlpack(t) for t in tensors), attrs)

            reg.register_python_kernel(
                k.op,
                k.name,
                fn,
                _supports(k),
                device=devices[0],
                more_devices=list(devices[1:]),
                priority=k.priority,
                description=k.description,
                deterministic=k.deterministic,
                numpy_io=False,
                requested_only=True,
            )
        _registered = True
