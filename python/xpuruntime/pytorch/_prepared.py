"""The hot path of a routed torch call: one case key, one prepared launcher (issue 17 §1).

A routed call's case is keyed by everything its decision and its launch depend on:
the torch function, the precision hint, the torch autocast state, which arguments
came as keywords, and every argument's value (a plain tensor by dtype, shape,
device, requires_grad and layout: ``True`` when contiguous, its strides otherwise; a
tensor subclass the same plus its type; a number, string or ``None`` by value; a
tuple or list element-wise). The key is one flat tuple built without a helper call
per argument for the forms routed calls take most (two or three positional tensors,
``F.layer_norm``'s own call of the mode), the same tuple a general pass builds. The
policy is not in the key: routing forgets its cases whenever the policy changes or
is cleared (:func:`.policy.set_kernel_policy`), so the cache never answers for
another policy.

On a miss, routing asks the Dispatcher (support checks, the decision, its record)
and :func:`prepare` builds the case's launcher, a callable with the torch
function's own parameters (``launch(*args, **kwargs)``: Python binds the call's
arguments, so no per-call repacking): for torch's own kernel the torch function
itself, for ours a function whose constants (scale, eps, normalized_shape,
dropout) and autocast casts were settled once.

A hit (:func:`lookup`) skips even the key for those common forms: their *site* (the
function, hint, autocast state, scalar arguments and which tensors are one object)
holds, for each case seen there, a C++ check of the tensors (dynamo's TensorGuards:
type, dtype, device, requires_grad, sizes and strides in one call); reading the
attributes a key needs costs three times as much. A hit then costs the site tuple,
a dictionary lookup, one check per case tried, a counter increment and the launch;
no ``Call`` object, no OpContext, no Python support check. Where this torch's
TensorGuards is missing or does not tell apart what the key does (checked once),
every call builds the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from . import _calls, _kernels, _log, _routing
from .ops.attention import attention_forward, draw_rng_state
from .ops.layernorm import layer_norm_forward
from .ops.linear import linear_forward
from .ops.matmul import CaseSlots, matmul_forward

__all__ = ["case_key", "lookup", "prepare", "prepare_torch"]

#: ``launch(*args, **kwargs)``: called like the routed torch function.
Launch = Callable[..., Any]

_Tensor = torch.Tensor
_SCALAR_TYPES = frozenset((int, float, bool, str, type(None)))
# nn.Parameter disables __torch_function__: it behaves as a plain tensor.
_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))
_PLAIN_OR_NONE = frozenset((torch.Tensor, torch.nn.Parameter, type(None)))
# True when some device has autocast on (then the key holds the call's device's state)
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None) or (lambda: True)
_LAYER_NORM = F.layer_norm
# How F.layer_norm calls the mode: handle_torch_function(layer_norm, ..., input,
# normalized_shape, weight=weight, bias=bias, eps=eps), whatever the user wrote.
_LN_KWARGS = ("weight", "bias", "eps")


class _Uncacheable(Exception):
    """An argument with no cheap, exact key (the call takes the general path)."""


def _arg_key(a: Any) -> Any:
    """A non-plain-tensor argument's part of the key (plain tensors are spelled out inline)."""
    tp = type(a)
    if tp in _SCALAR_TYPES:
        return a
    if tp in _PLAIN:  # inside a sequence
        return (a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride())
    if isinstance(a, _Tensor):  # a subclass runs its own __torch_function__: its type matters
        return (tp, a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride())
    if isinstance(a, (tuple, list)):  # torch.Size and normalized_shape lists included
        return tuple([_arg_key(x) for x in a])
    raise _Uncacheable


def _general_key(head: list, values: Any) -> tuple:
    """The key of any call form: ``head`` then each value's part, a plain tensor's flat."""
    key = head
    for a in values:
        if type(a) in _PLAIN:
            key += (a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride())
        else:
            key.append(_arg_key(a))
    return tuple(key)


_AUTOCAST_OFF = (False, None)
_is_autocast_enabled = torch.is_autocast_enabled
_get_autocast_dtype = torch.get_autocast_dtype


def _autocast_key(args: tuple, kwargs: dict | None) -> tuple:
    """(enabled, dtype) of autocast on the device of the call's first tensor.

    On every routed call under autocast: the first argument is looked at before any
    generator, and the device kind is read from ``is_cuda``/``is_cpu`` (a flag each)
    rather than from a ``torch.device`` object (0.6 against 1.5 µs a call, this CPU)."""
    first = args[0] if args else None
    if not isinstance(first, _Tensor):
        first = next((a for a in args if isinstance(a, _Tensor)), None)
        if first is None and kwargs:
            first = next((a for a in kwargs.values() if isinstance(a, _Tensor)), None)
        if first is None:
            raise _Uncacheable
    if first.is_cuda:
        dev = "cuda"
    elif first.is_cpu:
        dev = "cpu"
    else:  # autocast of other device kinds is not part of a routed call's case
        return _AUTOCAST_OFF
    if not _is_autocast_enabled(dev):
        return _AUTOCAST_OFF
    return (True, _get_autocast_dtype(dev))


def case_key(func: Callable, args: tuple, kwargs: dict | None, hint: str) -> tuple | None:
    """The routed call's case key, or None when an argument has no exact cheap key.

    Layout: ``(func, hint, autocast, keyword names)``, then each positional and
    keyword value's part in order: a plain tensor's five fields flat (dtype, shape,
    device, requires_grad, ``True`` or its strides), anything else one element (a
    scalar itself; a sequence, a tensor subclass: a tuple). A dtype starts a
    tensor's fields and no other element is one, so the tuple names one call form.

    Written for host time (it runs on every routed call, and each tensor attribute
    read costs ~50 ns): the forms routed calls take most are spelled out (two or
    three positional tensors, with scalar keywords; ``F.layer_norm``'s own call of
    the mode), giving the tuple :func:`_general_key` gives for the same arguments.
    """
    try:
        ac = _autocast_key(args, kwargs) if _any_autocast() else None
        names = tuple(kwargs) if kwargs else None
        n = len(args)
        if n == 3:
            a, b, c = args
            if type(a) in _PLAIN and type(b) in _PLAIN and type(c) in _PLAIN_OR_NONE:
                if names is not None:
                    for v in kwargs.values():
                        if type(v) not in _SCALAR_TYPES:
                            return _general_key([func, hint, ac, names], args + tuple(kwargs.values()))
                    tail = tuple(kwargs.values())
                else:
                    tail = ()
                if c is None:
                    return (
                        func, hint, ac, names,
                        a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride(),
                        b.dtype, b.shape, b.device, b.requires_grad, b.is_contiguous() or b.stride(),
                        None, *tail,
                    )  # fmt: skip
                return (
                    func, hint, ac, names,
                    a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride(),
                    b.dtype, b.shape, b.device, b.requires_grad, b.is_contiguous() or b.stride(),
                    c.dtype, c.shape, c.device, c.requires_grad, c.is_contiguous() or c.stride(),
                    *tail,
                )  # fmt: skip
        elif n == 2:
            a, b = args
            if names is None and type(a) in _PLAIN and type(b) in _PLAIN:
                return (
                    func, hint, ac, None,
                    a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride(),
                    b.dtype, b.shape, b.device, b.requires_grad, b.is_contiguous() or b.stride(),
                )  # fmt: skip
            if func is _LAYER_NORM and names == _LN_KWARGS:
                w, bias, eps = kwargs["weight"], kwargs["bias"], kwargs["eps"]
                if type(a) in _PLAIN and type(w) in _PLAIN and type(bias) in _PLAIN and type(eps) is float:
                    return (
                        func, hint, ac, names,
                        a.dtype, a.shape, a.device, a.requires_grad, a.is_contiguous() or a.stride(),
                        b if type(b) is tuple and len(b) == 1 and type(b[0]) is int else _arg_key(b),
                        w.dtype, w.shape, w.device, w.requires_grad, w.is_contiguous() or w.stride(),
                        bias.dtype, bias.shape, bias.device, bias.requires_grad, bias.is_contiguous() or bias.stride(),
                        eps,
                    )  # fmt: skip
        if names is None:
            return _general_key([func, hint, ac, None], args)
        return _general_key([func, hint, ac, names], args + tuple(kwargs.values()))
    except _Uncacheable:
        return None


# ---- the site cache: a C++ check of the tensors instead of reading their attributes ----------
try:  # dynamo's guard of a tensor's metadata (private: checked before use, see _guards_work)
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - a torch without dynamo's C++ guards
    _TensorGuards = None

#: Cases one site keeps checks for (F.linear in a transformer: a handful of weight shapes).
SITE_CASES = 8
_guards_ok: bool | None = None  # decided on first use


def _tensor_check(tensors: tuple) -> Callable[..., bool] | None:
    """``check(*ts)``: True only for tensors of these ones' exact type, dtype, device,
    requires_grad, sizes and strides (and dispatch keys); None where unavailable."""
    try:
        g = _TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.shape) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
            tensor_check_names=[f"t{i}" for i in range(len(tensors))],
        )
    except (TypeError, ValueError, RuntimeError, SystemError):  # private to torch: may change
        return None
    return g.check


def _guards_work() -> bool:
    """Whether this torch's TensorGuards tells apart everything the case key does."""
    if _TensorGuards is None:
        return False
    try:
        return _guards_tell_apart()
    except (TypeError, ValueError, RuntimeError, SystemError):  # private to torch: may change
        return False


def _guards_tell_apart() -> bool:
    a = torch.zeros(2, 3)
    check = _tensor_check((a,))
    if check is None or not check(a) or not check(torch.ones(2, 3)):
        return False
    others = (
        torch.zeros(3, 2),
        torch.zeros(2, 4),
        torch.zeros(2, 3, dtype=torch.float64),
        torch.zeros(2, 3, requires_grad=True),
        torch.zeros(3, 2).t(),
        torch.zeros(2, 3, device="meta"),
        torch.zeros(2, 3).as_subclass(_Uncheckable),
    )
    if any(check(t) for t in others):
        return False
    with torch.no_grad():  # requires_grad stays part of the case without grad mode
        return not check(torch.zeros(2, 3, requires_grad=True))


class _Uncheckable(torch.Tensor):
    """A tensor subclass for _guards_work (a subclass must fail a plain tensor's check)."""


def lookup(func: Callable, args: tuple, kwargs: dict | None, hint: str) -> Any:
    """The call's case: its :class:`._log.Entry` when routing has one, else its case key
    (None when it has no cheap key), which the miss stores the new case under.

    The common forms (those :func:`case_key` spells out) first try their site: the
    function, hint, autocast state and scalar arguments, with a C++ check of the
    tensors for each case seen there (dynamo's TensorGuards: type, dtype, device,
    requires_grad, sizes, strides in one call, ~0.1 µs a tensor against ~0.3 µs for
    reading the attributes a key needs). A site finds only cases already in the
    decision cache under their full key: the key stays the one truth, so each case is
    still decided once; the sites only shorten the way to it.
    """
    global _guards_ok
    ts = site = None
    try:
        ac = _autocast_key(args, kwargs) if _any_autocast() else None
    except _Uncacheable:
        return None
    n = len(args)
    if not kwargs:
        if n == 3:
            a, b, c = args
            if type(a) in _PLAIN and type(b) in _PLAIN:
                if c is None:
                    ts, site, alias = (a, b), (func, hint, ac, None, True), a is b
                elif type(c) in _PLAIN:
                    ts, site, alias = args, (func, hint, ac, None, False), a is b or c is a or c is b
        elif n == 2:
            a, b = args
            if type(a) in _PLAIN and type(b) in _PLAIN:
                ts, site, alias = args, (func, hint, ac, None), a is b
    elif n == 3:
        a, b, c = args
        if type(a) in _PLAIN and type(b) in _PLAIN and (c is None or type(c) in _PLAIN):
            for v in kwargs.values():
                if type(v) not in _SCALAR_TYPES:
                    break
            else:
                site = (func, hint, ac, tuple(kwargs), c is None, *kwargs.values())
                if c is None:
                    ts, alias = (a, b), a is b
                else:
                    ts, alias = args, a is b or c is a or c is b
    elif n == 2 and func is _LAYER_NORM and len(kwargs) == 3:
        # F.layer_norm's own call (weight=, bias=, eps=): the names are its, in its order
        x, ns = args
        try:
            w, b, eps = kwargs["weight"], kwargs["bias"], kwargs["eps"]
        except KeyError:  # not F.layer_norm's own call: the general way
            w = b = eps = None
        plain = type(x) in _PLAIN and type(w) in _PLAIN and type(b) in _PLAIN
        if plain and type(eps) is float and type(ns) is tuple and len(ns) == 1 and type(ns[0]) is int:
            ts, site, alias = (x, w, b), (func, hint, ac, _LN_KWARGS, ns, eps), x is w or b is x or b is w
    if site is not None:
        if alias:  # F.sdpa(q, q, q): the check takes each tensor once
            pattern, ts = _unaliased(ts)
            site = (*site, pattern)
        cands = _sites.get(site)
        if cands is not None:
            for check, entry in cands:
                if check(*ts):
                    return entry
    key = case_key(func, args, kwargs, hint)
    entry = _cases.get(key)
    if entry is None:
        return key
    if site is None:
        return entry
    if _guards_ok is None:
        _guards_ok = _guards_work()
    if _guards_ok:
        cands = _sites.setdefault(site, [])
        if len(cands) < SITE_CASES:
            check = _tensor_check(ts)
            if check is not None and check(*ts):
                cands.append((check, entry))
            else:  # a check that refuses its own tensors: no site cache in this process
                _guards_ok = False
    return entry


def _unaliased(ts: tuple) -> tuple[tuple[int, ...], tuple]:
    """(which distinct tensor each position is, the distinct tensors in order), for
    two or three tensors of which some are one object."""
    if len(ts) == 2:
        return (0, 0), ts[:1]
    a, b, c = ts
    if a is b:
        return ((0, 0, 0), (a,)) if a is c else ((0, 0, 1), (a, c))
    return ((0, 1, 0), (a, b)) if a is c else ((0, 1, 1), (a, b))


_cases = _log.cases
_sites = _log.sites


def _cast(t: Any, dtype: torch.dtype) -> Any:
    return t.to(dtype) if isinstance(t, _Tensor) and t.is_floating_point() and t.dtype != dtype else t


def _matmul_launch(kernel: str, func: Callable, low: torch.dtype | None) -> Launch:
    kind = _calls._FUNCS[func]
    # The case's tensors are checked by the lookup (dtype, shape, layout), so the ops
    # keep what they prepared for it here: a hit's GEMM is then one allocation and one
    # launch, its backward's likewise (ops.matmul.CaseSlots).
    slots = CaseSlots()
    if low is None:

        def run(a: Any, b: Any, bias: Any) -> Any:
            return matmul_forward(a, b, bias, kernel, slots)

    else:

        def run(a: Any, b: Any, bias: Any) -> Any:
            return matmul_forward(_cast(a, low), _cast(b, low), _cast(bias, low), kernel, slots)

    # Our kernels run the plain forms only (parse_call's "plain"; other forms decide
    # torch's kernel): the parameters are the torch function's, so Python binds them.
    if kind == "linear":
        # the weight as it is: no weight.t() view per call, no transpose node in autograd
        if low is None:

            def launch_linear(input: Any, weight: Any, bias: Any = None) -> Any:
                return linear_forward(input, weight, bias, kernel, slots)

        else:

            def launch_linear(input: Any, weight: Any, bias: Any = None) -> Any:
                return linear_forward(_cast(input, low), _cast(weight, low), _cast(bias, low), kernel, slots)

        return launch_linear
    if kind == "addmm":  # beta == alpha == 1 (the key holds their values)

        def launch_addmm(input: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
            return run(mat1, mat2, input)

        return launch_addmm
    if kind == "rmatmul":  # Tensor.__rmatmul__(self, other) is other @ self

        def launch_rmatmul(self: Any, other: Any) -> Any:
            return run(other, self, None)

        return launch_rmatmul

    def launch_matmul(a: Any, b: Any) -> Any:
        return run(a, b, None)

    return launch_matmul


def _attention_launch(call: _routing.Call, low: torch.dtype | None) -> Launch:
    f = call.fields
    p, causal = float(f["dropout_p"]), bool(f["is_causal"])
    case_scale = float(f["scale"]) if f["scale"] is not None else f["query"].shape[-1] ** -0.5

    def launch_sdpa(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: Any = 0.0,
        is_causal: Any = False,
        scale: Any = None,
        enable_gqa: Any = False,
    ) -> Any:
        # dropout_p, is_causal and scale are the case's (in the key): parsed once
        if low is not None:
            query, key, value = _cast(query, low), _cast(key, low), _cast(value, low)
        rng = draw_rng_state(query.device) if p > 0.0 else None
        return attention_forward(query, key, value, attn_mask, p, causal, case_scale, rng)

    return launch_sdpa


def _layernorm_launch(call: _routing.Call, cast: bool) -> Launch:
    f = call.fields
    ns = f["normalized_shape"]
    ns = [int(ns)] if isinstance(ns, int) else [int(s) for s in ns]
    case_eps = float(f["eps"])

    def launch_layer_norm(
        input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: Any = 1e-5
    ) -> Any:
        # normalized_shape and eps are the case's (in the key): parsed once
        if cast:  # autocast runs layer_norm in float32; so do we
            input, weight, bias = (
                _cast(input, torch.float32),
                _cast(weight, torch.float32),
                _cast(bias, torch.float32),
            )
        return layer_norm_forward(input, ns, weight, bias, case_eps)

    return launch_layer_norm


def prepare_torch(func: Callable, args: tuple = (), kwargs: dict | None = None) -> Launch:
    """The launcher of torch's own kernel: the torch function itself.

    ``F.layer_norm`` is the one routed function with a Python wrapper: its body is
    ``torch.layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enabled)``
    after a torch-function check, which a routed call has already passed. When this
    case's tensors are plain (the key tells plain tensors from subclasses, so every
    hit's are too) its calls go straight to that builtin, no Python frame between:
    its ``cudnn_enable`` argument is unused by ATen (deprecated), so its default
    stands in for ``torch.backends.cudnn.enabled``. A subclass keeps the wrapper.
    """
    if func is _LAYER_NORM and kwargs is not None:
        call = _routing.parse_call(func, args, kwargs)
        if call is not None and all(type(t) in _PLAIN for t in call.tensors):
            return torch.layer_norm
    return func


def prepare(
    kernel: str, call: _routing.Call, func: Callable, args: tuple, kwargs: dict, autocast: tuple
) -> Launch:
    """The launcher of ``kernel`` for calls of this case: ``launch(*args, **kwargs)``.

    It gives the bits :func:`._routing.run` gives for the same call (same kernel,
    same casts, same paths in the ops modules); only the parsing is done once.
    """
    if kernel == _kernels.FALLBACK:
        return prepare_torch(func, args, kwargs)
    if call.op == "attention" and kernel != "flash_v2":

        def run_backend(*a: Any, **k: Any) -> Any:
            return _routing._run_sdpa_backend(kernel, func, a, k)

        return run_backend
    low = autocast[1] if autocast[0] else None
    if call.op == "matmul":
        return _matmul_launch(kernel, func, low)
    if call.op == "attention":
        return _attention_launch(call, low)
    if call.op == "layernorm":
        return _layernorm_launch(call, autocast[0])
    raise AssertionError(call.op)
