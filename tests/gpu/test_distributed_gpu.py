"""xpuruntime.distributed on GPUs (issue 21's one-GPU and multi-GPU bars).

One GPU: a world-size-1 communicator runs every collective, results exact against
NumPy for every dtype and op; a collective on a torch stream is ordered after the
work queued before it; a collective captured in a CUDA graph replays with new
inputs; work handles, split, recording and destroyed communicators.

Two or more GPUs (one process per GPU, torch.multiprocessing): every collective
against torch.distributed's NCCL on the same ranks for fp32/fp16/bf16 (integer-valued
data, so every reduction order gives the same exact result), and a killed rank turns
into a typed error on the survivor within the timeout.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xpuruntime as xrt
import xpuruntime.distributed as xd
from xpuruntime.dispatch import log as dlog


def _skip_reason() -> str:
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return xd.unavailable_reason()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "ok")]

DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8"]
FLOATS = ["float32", "float16", "bfloat16"]


@pytest.fixture(scope="module")
def comm() -> xd.Communicator:
    torch.cuda.set_device(0)
    c = xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=0, timeout=60)
    yield c
    c.destroy()


def _rand(dtype: str, n: int, seed: int = 0) -> torch.Tensor:
    g = np.random.default_rng(seed)
    lo, hi = (0, 100) if dtype == "uint8" else (-50, 50)
    return torch.from_numpy(g.integers(lo, hi, size=n)).to(getattr(torch, dtype)).cuda()


def _np(t: torch.Tensor) -> np.ndarray:
    return t.float().cpu().numpy() if t.dtype == torch.bfloat16 else t.cpu().numpy()


# ---- world size 1: every collective, exact ---------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "avg"])
def test_all_reduce_world1_exact(comm: xd.Communicator, dtype: str, op: str) -> None:
    x = _rand(dtype, 1031)
    ref = _np(x).copy()
    out = torch.empty_like(x)
    comm.all_reduce(x, op=op, out=out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(_np(out), ref)
    comm.all_reduce(x, op=op)  # in place
    torch.cuda.synchronize()
    np.testing.assert_array_equal(_np(x), ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_other_collectives_world1_exact(comm: xd.Communicator, dtype: str) -> None:
    x = _rand(dtype, 855, seed=1)
    ref = _np(x).copy()
    gathered = torch.empty(1, 855, dtype=x.dtype, device="cuda")
    comm.all_gather(gathered, x)
    scattered = torch.empty_like(x)
    comm.reduce_scatter(scattered, x, op="sum")
    reduced = torch.empty_like(x)
    comm.reduce(x, root=0, op="max", out=reduced)
    comm.broadcast(x, root=0)
    received = torch.empty_like(x)
    with xd.group():  # a send to oneself needs its recv in the same group
        comm.send(x, peer=0)
        comm.recv(received, peer=0)
    torch.cuda.synchronize()
    for got in (gathered.reshape(-1), scattered, reduced, x, received):
        np.testing.assert_array_equal(_np(got), ref)


def test_xpuruntime_tensors_work_too(comm: xd.Communicator) -> None:
    host = np.arange(64, dtype=np.float32)
    t = xrt.Tensor.from_numpy(host).to("cuda:0")
    out = xrt.Tensor.empty([2, 64], "float32", "cuda:0")
    with pytest.raises(xrt.InvalidArgumentError, match="world x input = 1 x 64"):
        comm.all_gather(out, t)
    out = xrt.Tensor.empty([64], "float32", "cuda:0")
    comm.all_reduce(t, out=out)  # on xpuruntime's current stream
    xrt.synchronize()
    np.testing.assert_array_equal(out.numpy(), host)


# ---- streams, work handles, graphs -----------------------------------------------------
def test_collective_is_ordered_on_a_torch_stream(comm: xd.Communicator) -> None:
    s = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    out = torch.empty_like(x)
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~tens of ms of device time before the fill
        x.fill_(3.0)
        comm.all_reduce(x, out=out)  # torch's current stream: s
        out.mul_(2.0)
    s.synchronize()
    assert torch.equal(out, torch.full_like(x, 6.0))


def test_work_handle_waits_and_orders_streams(comm: xd.Communicator) -> None:
    s, other = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.ones(1 << 22, device="cuda")
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)
        work = comm.all_reduce(x, stream=s, async_op=True)
    assert isinstance(work, xd.Work)
    work.wait_stream(other)
    with torch.cuda.stream(other):
        y = x * 2
    work.wait(timeout=30)
    assert work.is_completed() and work.elapsed_ms() >= 0.0
    other.synchronize()
    assert torch.equal(y, torch.full_like(x, 2.0))


def test_capture_in_a_cuda_graph_and_replay(comm: xd.Communicator) -> None:
    x = torch.zeros(4096, device="cuda")
    out = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside capture (NCCL connects lazily)
        comm.all_reduce(x, out=out)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        work = comm.all_reduce(x, out=out, async_op=True)
    assert work is not None and work.is_completed()  # captured work belongs to the graph
    for value in (1.0, -2.5, 7.0):
        x.fill_(value)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, torch.full_like(x, value))


# ---- recording, split, lifetime --------------------------------------------------------
def test_each_case_is_recorded_once_with_hits(comm: xd.Communicator) -> None:
    dlog.clear()
    x = torch.ones(333, device="cuda", dtype=torch.float16)
    for _ in range(3):
        comm.all_reduce(x)
    found = [d for d in dlog.decisions() if d.op == "nccl.all_reduce" and d.shapes == [[333]]]
    assert len(found) == 1 and found[0].hits == 3 and found[0].dtypes == ["float16"]
    assert (
        f"NCCL {'.'.join(map(str, xd.nccl_version()))}" in found[0].detail and "666 bytes" in found[0].detail
    )
    with xrt.profile() as prof:
        comm.all_reduce(x, async_op=True).wait()
    names = [e["name"] for e in prof.events()]
    assert "nccl.all_reduce" in names and "nccl.all_reduce.device" in names


def test_split_and_destroyed_communicators(comm: xd.Communicator) -> None:
    child = comm.split(color=0)
    assert child is not None and (child.rank, child.world, child.device) == (0, 1, 0)
    x = torch.arange(10, device="cuda", dtype=torch.int32)
    child.all_reduce(x)
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(10, device="cuda", dtype=torch.int32))
    assert comm.split(color=-1) is None
    child.destroy()
    with pytest.raises(xrt.InvalidArgumentError, match="is destroyed"):
        child.all_reduce(x)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_tensor_on_another_device_is_refused(comm: xd.Communicator) -> None:
    x = torch.ones(4, device="cuda:1")
    with pytest.raises(xrt.InvalidArgumentError, match="is on cuda:1 but the communicator uses cuda:0"):
        comm.all_reduce(x)


def test_deterministic_policy_records_how(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    code = (
        "import torch, xpuruntime as x, xpuruntime.distributed as xd\n"
        "c = xd.Communicator.init(0, 1, xd.UniqueId.generate(), device=0, "
        "policy=x.ExecutionPolicy(deterministic=True))\n"
        "t = torch.ones(8, device='cuda'); c.all_reduce(t); torch.cuda.synchronize()\n"
        "from xpuruntime.dispatch import log\n"
        "print([d.detail for d in log.decisions() if d.op == 'nccl.all_reduce'][0])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NCCL_ALGO", "NCCL_PROTO")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "NCCL_ALGO=Ring; NCCL_PROTO=Simple" in out.stdout and "a ring reduces in rank order" in out.stdout


# ---- two or more GPUs: against torch.distributed ---------------------------------------
def _worker(rank: int, world: int, init_file: str, q: object, mode: str) -> None:
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        device_id=torch.device("cuda", rank),
    )
    try:
        comm = xd.Communicator.from_torch_process_group(timeout=20)
        if mode == "kill":
            if rank == 1:
                os._exit(0)  # dies without joining the collective
            x = torch.ones(1 << 20, device="cuda")
            start = time.monotonic()
            try:
                comm.all_reduce(x, async_op=True).wait(timeout=15)
                verdict = "no error"
            except xd.DistributedError as exc:
                verdict = f"{type(exc).__name__} after {time.monotonic() - start:.1f}s"
            q.put((rank, verdict))  # type: ignore[attr-defined]
            q.close()  # type: ignore[attr-defined]
            q.join_thread()  # type: ignore[attr-defined]  # flushed before the hard exit
            os._exit(0)  # the torch group cannot shut down cleanly without its peer
        failures = []
        for dtype in FLOATS:
            dt = getattr(torch, dtype)
            g = torch.Generator(device="cpu").manual_seed(1234 + rank)
            x = torch.randint(-8, 8, (4099,), generator=g).to(dt).cuda()
            for op, top in (
                ("sum", dist.ReduceOp.SUM),
                ("max", dist.ReduceOp.MAX),
                ("min", dist.ReduceOp.MIN),
                ("prod", dist.ReduceOp.PRODUCT),
            ):
                # prod on -1/0/1 only: its result stays exact in fp16/bf16 whatever the order.
                src = x.clamp(-1, 1) if op == "prod" else x
                ours, theirs = src.clone(), src.clone()
                comm.all_reduce(ours, op=op)
                dist.all_reduce(theirs, op=top)
                if not torch.equal(ours, theirs):
                    failures.append(f"all_reduce {op} {dtype}")
            ag_ours = torch.empty(world * x.numel(), dtype=dt, device="cuda")
            ag_theirs = torch.empty_like(ag_ours)
            comm.all_gather(ag_ours, x)
            dist.all_gather_into_tensor(ag_theirs, x)
            rs_in = torch.randint(-8, 8, (world * 1001,), generator=g).to(dt).cuda()
            rs_ours, rs_theirs = (
                torch.empty(1001, dtype=dt, device="cuda"),
                torch.empty(1001, dtype=dt, device="cuda"),
            )
            comm.reduce_scatter(rs_ours, rs_in)
            dist.reduce_scatter_tensor(rs_theirs, rs_in)
            b_ours, b_theirs = x.clone(), x.clone()
            comm.broadcast(b_ours, root=world - 1)
            dist.broadcast(b_theirs, src=world - 1)
            r_ours, r_theirs = x.clone(), x.clone()
            comm.reduce(r_ours, root=0)
            dist.reduce(r_theirs, dst=0)
            recv = torch.empty_like(x)
            with xd.group():  # a ring of send/recv
                comm.send(x, peer=(rank + 1) % world)
                comm.recv(recv, peer=(rank - 1) % world)
            expect_recv = torch.empty_like(x)
            ops = [
                dist.P2POp(dist.isend, x, (rank + 1) % world),
                dist.P2POp(dist.irecv, expect_recv, (rank - 1) % world),
            ]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            torch.cuda.synchronize()
            pairs = {
                "all_gather": (ag_ours, ag_theirs),
                "reduce_scatter": (rs_ours, rs_theirs),
                "broadcast": (b_ours, b_theirs),
                "send/recv": (recv, expect_recv),
            }
            if rank == 0:
                pairs["reduce"] = (r_ours, r_theirs)
            failures += [f"{name} {dtype}" for name, (a, b) in pairs.items() if not torch.equal(a, b)]
        comm.destroy()
        q.put((rank, failures))  # type: ignore[attr-defined]
    finally:
        if mode != "kill":
            dist.destroy_process_group()


def _spawn(world: int, tmp_path: object, mode: str, expect: int) -> list:
    mp = torch.multiprocessing.get_context("spawn")
    q = mp.Queue()
    procs = [
        mp.Process(target=_worker, args=(r, world, f"{tmp_path}/pg_{mode}", q, mode)) for r in range(world)
    ]
    for p in procs:
        p.start()
    results = [q.get(timeout=300) for _ in range(expect)]
    for p in procs:
        p.join(120)
    return sorted(results, key=lambda r: r[0])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2+ GPUs (one process per GPU)")
def test_every_collective_matches_torch_distributed(tmp_path: object) -> None:
    world = min(torch.cuda.device_count(), 8)
    results = _spawn(world, tmp_path, "compare", world)
    assert [r for r, _ in results] == list(range(world))
    assert all(f == [] for _, f in results), results


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2+ GPUs (one process per GPU)")
def test_a_killed_rank_is_a_typed_error_within_the_timeout(tmp_path: object) -> None:
    ((rank, verdict),) = _spawn(2, tmp_path, "kill", 1)
    assert rank == 0
    assert verdict.startswith(("CollectiveTimeoutError", "CommunicatorAbortedError")), verdict
    assert float(verdict.split(" after ")[1].rstrip("s")) < 15 + 10
