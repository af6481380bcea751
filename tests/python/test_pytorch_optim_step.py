"""The policy's mode comes off the stack while a torch.optim optimizer steps or zeroes
its gradients (issue 31, xpuruntime.pytorch._optim): no call of the step goes through the
mode, the step's results are torch's own, the mode is back afterwards (also when the step
raises), and every case where the step could call a routed function keeps the mode on.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import xpuruntime.pytorch as xrt_torch
from xpuruntime.pytorch import _optim
from xpuruntime.pytorch import policy as xrt_policy

pytestmark = pytest.mark.usefixtures("clean_kernel_policy")


def _stack() -> int:
    return torch._C._len_torch_function_stack()


@pytest.fixture
def mode_calls(monkeypatch):
    """Names of the torch functions that went through the policy's mode."""
    seen: list[str] = []
    original = xrt_policy._PolicyMode.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        seen.append(getattr(func, "__name__", str(func)))
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(xrt_policy._PolicyMode, "__torch_function__", counting)
    return seen


def _model_and_grads(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.nn.Parameter(torch.randn(8, 6, generator=g, dtype=torch.float64))
    b = torch.nn.Parameter(torch.randn(8, generator=g, dtype=torch.float64))
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    return w, b, x


def _step(opt_cls, policy: bool, **opt_kwargs):
    """(parameters after two steps, calls through the mode during the steps)."""
    w, b, x = _model_and_grads()
    opt = opt_cls([w, b], lr=0.1, **opt_kwargs)
    if policy:
        xrt_torch.set_kernel_policy(matmul="torch")
    try:
        for _ in range(2):
            opt.zero_grad()
            F.linear(x, w, b).square().sum().backward()
            before = _stack()
            opt.step()
            assert _stack() == before  # the mode is back
    finally:
        xrt_torch.clear_kernel_policy()
    return w.detach().clone(), b.detach().clone()


@pytest.mark.parametrize("opt_cls", [torch.optim.AdamW, torch.optim.SGD, torch.optim.Adam])
def test_a_quiet_optimizer_steps_without_the_mode_and_gives_torchs_results(opt_cls, mode_calls):
    plain = _step(opt_cls, policy=False)
    mode_calls.clear()
    w, b, x = _model_and_grads()
    opt = opt_cls([w, b], lr=0.1)
    xrt_torch.set_kernel_policy(matmul="torch")
    base = _stack()
    for _ in range(2):
        opt.zero_grad()
        F.linear(x, w, b).square().sum().backward()
        n = len(mode_calls)
        opt.step()
        # only the profiler range torch opens around the step hooks went through the mode
        assert [c for c in mode_calls[n:] if "record_function" not in c] == []
        assert len(mode_calls[n:]) <= 2
        assert _stack() == base
    assert "linear" in mode_calls  # the forward was routed
    assert xrt_torch.routing_counts()["matmul:torch"] == 2
    xrt_torch.clear_kernel_policy()
    assert torch.equal(w, plain[0]) and torch.equal(b, plain[1])


def _raising_step() -> torch.optim.Optimizer:
    w = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
    opt = torch.optim.AdamW([w])
    w.grad = torch.randn(4, 4, dtype=torch.float64).to_sparse()  # AdamW refuses sparse gradients
    return opt


def test_the_mode_is_back_when_the_raising_steps_frame_goes():
    opt = _raising_step()
    xrt_torch.set_kernel_policy(matmul="torch")
    base = _stack()
    try:
        opt.step()
    except RuntimeError as e:
        assert "sparse" in str(e)
    assert _stack() == base  # the handler ended, the step's frame is gone: the mode is back
    a = torch.randn(3, 4, dtype=torch.float64)
    torch.matmul(a, a.T)
    assert xrt_torch.routing_counts()["matmul:torch"] == 1
    xrt_torch.clear_kernel_policy()
    assert _stack() == base - 1


def test_a_kept_exception_lets_the_next_module_call_put_the_mode_back():
    opt = _raising_step()
    lin = torch.nn.Linear(4, 3).double()
    xrt_torch.set_kernel_policy(matmul="torch")
    base = _stack()
    with pytest.raises(RuntimeError, match="sparse") as kept:  # keeps the traceback, so the frame
        opt.step()
    assert kept.value is not None and _stack() == base - 1  # still suspended
    lin(torch.randn(2, 4, dtype=torch.float64))  # the module call resumes it before its forward
    assert _stack() == base
    assert xrt_torch.routing_counts()["matmul:torch"] == 1  # ... so its F.linear was routed
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the resume hook is gone


def test_a_kept_exception_lets_the_next_step_put_the_mode_back(mode_calls):
    opt = _raising_step()
    w, b, x = _model_and_grads()
    quiet = torch.optim.SGD([w, b], lr=0.1)
    xrt_torch.set_kernel_policy(matmul="torch")
    base = _stack()
    with pytest.raises(RuntimeError, match="sparse") as kept:
        opt.step()
    assert kept.value is not None and _stack() == base - 1
    F.linear(x, w, b).sum().backward()  # no module: still suspended, not routed
    assert "matmul:torch" not in xrt_torch.routing_counts()
    n = len(mode_calls)
    quiet.step()  # resumes the raised step's mode first, then suspends and resumes its own
    assert _stack() == base and [c for c in mode_calls[n:] if "record_function" not in c] == []
    F.linear(x, w, b)
    assert xrt_torch.routing_counts()["matmul:torch"] == 1


def test_clearing_while_suspended_leaves_the_stack_as_it_was():
    w = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
    opt = torch.optim.AdamW([w])
    w.grad = torch.randn(4, 4, dtype=torch.float64).to_sparse()
    before = _stack()
    xrt_torch.set_kernel_policy(matmul="torch")
    try:
        opt.step()
    except RuntimeError:
        xrt_torch.clear_kernel_policy()  # inside the handler: the step's frame is still alive
        assert _stack() == before
    assert _stack() == before
    assert not _optim._handles  # nothing stays registered


@pytest.mark.parametrize("case", ["closure", "own_hook", "subclass", "lbfgs"])
def test_steps_that_may_call_routed_functions_keep_the_mode(case, mode_calls):
    w, b, x = _model_and_grads()

    def closure():
        opt.zero_grad()
        loss = F.linear(x, w, b).square().sum()  # routed: runs inside the step
        loss.backward()
        return loss

    class MySGD(torch.optim.SGD):
        pass

    cls = {"subclass": MySGD, "lbfgs": torch.optim.LBFGS}.get(case, torch.optim.AdamW)
    opt = cls([w, b], lr=0.01)
    hooked: list[int] = []
    if case == "own_hook":
        opt.register_step_pre_hook(lambda o, a, k: hooked.append(len(mode_calls)))
    xrt_torch.set_kernel_policy(matmul="torch")
    closure()
    n = len(mode_calls)
    if case in ("closure", "lbfgs"):
        opt.step(closure)
        assert "linear" in mode_calls[n:]  # the closure's forward was routed
    else:
        opt.step()
        assert mode_calls[n:]  # the step ran through the mode, as without the suspension
    if case == "own_hook":
        assert hooked


def test_a_step_on_another_thread_leaves_the_policys_thread_alone(mode_calls):
    import threading

    w, b, x = _model_and_grads()
    opt = torch.optim.AdamW([w, b])
    F.linear(x, w, b).square().sum().backward()
    xrt_torch.set_kernel_policy(matmul="torch")
    base = _stack()
    errors: list[BaseException] = []

    def run():
        try:
            opt.step()  # this thread has no mode on its stack: nothing to take off
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not errors and _stack() == base and (_optim._current is None or _optim._current() is None)


def test_zero_grad_runs_without_the_mode_and_clearing_restores_torchs(mode_calls):
    original = torch.optim.Optimizer.zero_grad
    w, b, x = _model_and_grads()
    opt = torch.optim.AdamW([w, b])
    xrt_torch.set_kernel_policy(matmul="torch")
    assert torch.optim.Optimizer.zero_grad is not original  # the wrapper, while a policy is set
    base = _stack()
    for set_to_none in (True, False):
        F.linear(x, w, b).sum().backward()
        n = len(mode_calls)
        opt.zero_grad(set_to_none=set_to_none)
        assert mode_calls[n:] == [] and _stack() == base
        if set_to_none:
            assert w.grad is None and b.grad is None
        else:
            assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))
    xrt_torch.clear_kernel_policy()
    assert torch.optim.Optimizer.zero_grad is original


def test_zero_grad_that_raises_puts_the_mode_back_and_others_keep_the_mode(mode_calls):
    w, b, x = _model_and_grads()
    opt = torch.optim.AdamW([w, b])
    opt.param_groups[0]["params"].append(object())  # zero_grad reads .grad of it: AttributeError
    xrt_torch.set_kernel_policy(matmul="torch")
    base = _stack()
    with pytest.raises(AttributeError):
        opt.zero_grad()
    assert _stack() == base  # the try/finally put it back

    class MyAdamW(torch.optim.AdamW):
        pass

    mine = MyAdamW([w, b])
    F.linear(x, w, b).sum().backward()
    n = len(mode_calls)
    mine.zero_grad()  # not a QUIET class: its calls go through the mode as before
    assert mode_calls[n:]


def test_a_zero_grad_wrapped_over_ours_stays_and_passes_through():
    original = torch.optim.Optimizer.zero_grad
    xrt_torch.set_kernel_policy(matmul="torch")
    ours = torch.optim.Optimizer.zero_grad
    calls: list[int] = []

    def theirs(self, set_to_none=True):
        calls.append(1)
        return ours(self, set_to_none)

    torch.optim.Optimizer.zero_grad = theirs
    try:
        xrt_torch.clear_kernel_policy()
        assert torch.optim.Optimizer.zero_grad is theirs  # left to them
        xrt_torch.set_kernel_policy(matmul="torch")  # ours again, over theirs, no recursion
        w, b, x = _model_and_grads()
        opt = torch.optim.SGD([w, b], lr=0.1)
        F.linear(x, w, b).sum().backward()
        opt.zero_grad()
        assert w.grad is None and calls == [1]
        xrt_torch.clear_kernel_policy()
        assert torch.optim.Optimizer.zero_grad is theirs
    finally:
        torch.optim.Optimizer.zero_grad = original
