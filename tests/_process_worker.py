"""One process of the multi-process tests (``test_processes.py``), started with torchrun's
variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and
``XLA_FLAGS`` giving it its CPU devices. ``python tests/_process_worker.py SCENARIO``;
prints one ``RESULT <json>`` line on success.

Scenarios:
- ``own``: joined with explicit arguments; each process trains its own model on its
  own first device.
- ``train``: the decoder trained data-parallel (batch split over every process's
  devices, weights replicated), then FSDP-style (weights and AdamW state split over
  "data" too); losses, compile counts, and what each process holds.
- ``diverge``: process 0 reads the loss mid-step (``.item()``), which syncs a graph
  process 1 never builds.
- ``die``: process 1 exits after two steps; process 0 goes on.
- ``exit_beating``: the heartbeat beats without pause (it is nearly always inside jax's
  client), then both processes leave after one small program.
- ``fail_alone``: process 1 raises an error of its own; process 0 goes on.
- ``loader``: ``lx.DeviceLoader`` with a sharding over every process's devices: each
  process's loader gives its own rows, the loop gets global batches.
- ``collectives``: torch.distributed's calls on lazax tensors (the "lazax" backend, which
  ``init_process_group`` joins itself), then DistributedDataParallel training, then
  ``torch.compile(backend="lazax")`` over a batch split across processes.
"""

import copy
import json
import os
import sys
import time

import torch

import lazax.modes as lx
from benchmarks.models import Decoder, DecoderConfig, lm_loss, make_tokens

CFG = DecoderConfig(vocab=64, d_model=32, n_heads=2, n_layers=1, seq=16, batch=8)
STEPS = 10


def counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def train(fsdp: bool, mesh, on_step=None) -> dict:
    rank, count = lx.process_index(), lx.process_count()
    torch.manual_seed(0)
    model = Decoder(CFG).to(lx.device())
    if fsdp:  # every weight whose rows divide over the mesh is split by rows
        for p in model.parameters():
            if p.shape[0] % mesh.size("data") == 0:
                lx.mark_sharding(p, mesh, ("data",) + (None,) * (p.dim() - 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rows = CFG.batch // count
    losses, compiles = [], []
    for step in range(STEPS):
        tokens = make_tokens(CFG, step)[rank * rows : (rank + 1) * rows]  # this process's
        x = lx.distributed.global_tensor(tokens, mesh, ("data", None))
        before = counter("UncachedCompile")
        opt.zero_grad()
        loss = lm_loss(model(x), x)
        loss.backward()
        if on_step is not None:
            on_step(step, loss)
        opt.step()
        lx.sync()
        compiles.append(counter("UncachedCompile") - before)
        losses.append(loss)
    weight = model.blocks[0].mlp[0].weight
    if os.environ.get("CHECKPOINTS"):
        kind = "fsdp" if fsdp else "dp"
        saved = checkpoint(os.path.join(os.environ["CHECKPOINTS"], kind), model, opt, fsdp, mesh)
    else:
        saved = None
    return {
        "checkpoint": saved,
        "losses": [loss.item() for loss in losses],  # replicated: read whole everywhere
        "compiles": compiles,
        "batch_part": lx.distributed.local_part(x).tolist(),
        "batch_shards": sorted(set(lx.shard_shapes(x).values())),
        "weight_sharding": str(lx.get_sharding(weight)),
        "weight_shards": {str(k): v for k, v in lx.shard_shapes(weight).items()},
        "state_shards": sorted(set(lx.shard_shapes(opt.state[weight]["exp_avg"]).values())),
        "weight_sum": float(weight.sum().item()),
    }


def own_model(rank: int) -> dict:
    """Each process trains a model of its own seed on its own first device."""
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    lazy = copy.deepcopy(model).to(lx.device())
    losses = {}
    for name, net, data in (("cpu", model, (x, y)), ("lazax", lazy, (x, y))):
        if name == "lazax":
            data = tuple(t.to(lx.device()) for t in data)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(data[0]), data[1])
            loss.backward()
            opt.step()
            lx.sync()
        losses[name] = loss.item()
    weight = lazy[0].weight
    (device,) = lx.shard_shapes(weight)  # its global number: process 1's first is 2
    return {
        "process_count": lx.process_count(),
        "device": f"{weight.device} = global device {device}",
        "loss": losses["lazax"],
        "error": abs(losses["cpu"] - losses["lazax"]),
    }


def checkpoint(path: str, model, opt, fsdp: bool, mesh) -> dict:
    """Save model and AdamW state, load them into a model built from another seed (laid
    out alike), and compare."""
    lx.distributed.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    rank = lx.process_index()
    mine = torch.load(os.path.join(path, f"pieces-{rank}.pt"), weights_only=True)
    written = sum(t.numel() for pieces in mine.values() for _, t in pieces)
    torch.manual_seed(1)
    fresh = Decoder(CFG).to(lx.device())
    if fsdp:
        for p in fresh.parameters():
            if p.shape[0] % mesh.size("data") == 0:
                lx.mark_sharding(p, mesh, ("data",) + (None,) * (p.dim() - 1))
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    x = lx.distributed.global_tensor(make_tokens(CFG, 0)[:4], mesh, ("data", None))
    lm_loss(fresh(x), x).backward()
    fresh_opt.step()  # AdamW's state exists from its first step
    lx.sync()
    state = {"model": fresh.state_dict(), "opt": fresh_opt.state_dict()}
    lx.distributed.load(state, path)
    fresh_opt.load_state_dict(state["opt"])
    pairs = list(zip(model.parameters(), fresh.parameters()))
    pairs += [
        (opt.state[a][k], fresh_opt.state[b][k])
        for a, b in zip(model.parameters(), fresh.parameters())
        for k in ("exp_avg", "exp_avg_sq")
    ]
    error = max((a - b).abs().max() for a, b in pairs).item()
    same_layout = all(lx.get_sharding(a) == lx.get_sharding(b) for a, b in pairs)
    return {"written": written, "error": error, "same_layout": same_layout}


def collectives() -> dict:
    """torch.distributed's calls on lazax tensors, through the "lazax" backend."""
    import torch.distributed as dist

    rank, dev = dist.get_rank(), lx.device()
    out: dict = {"backend": dist.get_backend()}
    t = torch.tensor([1.0, 2.0, 3.0]) * (rank + 1)
    for name, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
        x = t.to(dev)
        dist.all_reduce(x, op=op)
        out[name] = x.tolist()
    x = (t.to(dev) * 2)[1:]  # pending work, and a view: written in place
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    out["avg_view"] = x.tolist()
    parts = [torch.zeros(3, device=dev) for _ in range(2)]
    dist.all_gather(parts, t.to(dev))
    out["all_gather"] = [p.tolist() for p in parts]
    whole = torch.zeros(6, device=dev)
    dist.all_gather_into_tensor(whole, t.to(dev))
    out["all_gather_into_tensor"] = whole.tolist()
    x = t.to(dev)
    dist.broadcast(x, src=1)
    out["broadcast"] = x.tolist()
    mine = torch.zeros(3, device=dev)
    dist.reduce_scatter(mine, [t.to(dev), t.to(dev) * 10])
    out["reduce_scatter"] = mine.tolist()
    # Collectives run inside the graph that reads them, which every process compiles
    # alike: what differs between processes comes as data, not as Python numbers traced
    # into the graph (a 1 or 0 is traced as a constant, another number as a parameter).
    mine = torch.zeros(2, device=dev)
    dist.reduce_scatter_tensor(mine, (torch.arange(4.0) * (rank + 1)).to(dev))
    out["reduce_scatter_tensor"] = mine.tolist()
    ints = torch.tensor([6 + rank, 3 + rank], dtype=torch.int64, device=dev)
    dist.all_reduce(ints, op=dist.ReduceOp.BAND)
    out["band"] = ints.tolist()
    # ... and a graph that differs by process (``* 1`` is traced as a constant, ``* 2``
    # as a parameter) runs cut at its collective, with the same result.
    cuts = counter("CollectiveGraphCuts")
    differs = torch.ones(2, device=dev) * (rank + 1)
    dist.all_reduce(differs)
    out["differs"] = (differs.tolist(), counter("CollectiveGraphCuts") - cuts)
    dist.barrier()
    # CPU tensors: copied to the device, the result read back (torch's object
    # collectives, and DCP's planning, send these to the default group).
    host = torch.ones(2) * (rank + 1)
    dist.all_reduce(host, op=dist.ReduceOp.SUM)
    out["cpu_all_reduce"] = host.tolist()
    objects = [None, None]
    dist.all_gather_object(objects, {"rank": rank})
    out["all_gather_object"] = objects
    sent = [f"from {rank}"]
    dist.broadcast_object_list(sent, src=1)
    out["broadcast_object_list"] = sent
    gathered = [None, None] if rank == 0 else None
    dist.gather_object(rank * 10, gathered, dst=0)
    out["gather_object"] = gathered
    return out


def functional_collectives() -> dict:
    """torch's functional collectives (what DTensor and FSDP2 call) traced into the
    step's program, in lazy mode, lx.compile, eager mode and torch.compile."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import lazax.dynamo  # noqa: F401  (registers the backend)

    rank, dev = dist.get_rank(), lx.device()
    group = dist.group.WORLD

    def step(x):
        total = funcol.all_reduce(x * 2, "sum", group)
        gathered = funcol.all_gather_tensor(x + 1, 0, group)
        mine = funcol.reduce_scatter_tensor(gathered, "max", 0, group)
        return total.sum() + mine.sum()

    x = (torch.arange(4.0) + 10 * rank).to(dev)
    out: dict = {}
    runs = {
        "lazy": step,
        "compile": lx.compile(step, name="funcol_step"),
        "dynamo": torch.compile(step, backend="lazax", fullgraph=True),
    }
    for mode, fn in runs.items():
        values, programs = [], []
        for _ in range(3):
            ran = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
            values.append(fn(x).item())
            programs.append(lx.metrics.metric_data("ExecuteTime")[0] - ran)
        out[f"funcol_{mode}"] = (values, programs)
    with lx.eager_mode_context(True):
        out["funcol_eager"] = step(x).item()
    return out


def ddp() -> dict:
    """DistributedDataParallel around a lazax model, over the "lazax" backend."""
    rank = lx.process_index()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference = copy.deepcopy(model)
    data = [torch.randn(3, 4, generator=torch.Generator().manual_seed(k)) for k in range(2)]
    # Buckets of at most ~100 bytes: several all-reduces per step (torch keeps its
    # first bucket larger).
    net = torch.nn.parallel.DistributedDataParallel(model.to(lx.device()), bucket_cap_mb=1e-4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    compiles, programs = [], []
    for _ in range(6):
        before = counter("UncachedCompile")
        ran = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
        opt.zero_grad()
        net(data[rank].to(lx.device())).square().sum().backward()
        opt.step()
        lx.sync()
        compiles.append(counter("UncachedCompile") - before)
        programs.append(lx.metrics.metric_data("ExecuteTime")[0] - ran)
        # What DDP computes: the mean over processes of each one's gradient.
        ref_opt.zero_grad()
        (sum(reference(d).square().sum() for d in data) / 2).backward()
        ref_opt.step()
    error = max(
        (a.cpu() - b).abs().max().item() for a, b in zip(model.parameters(), reference.parameters())
    )
    buckets = len(net.reducer._get_zeros_like_grad_buckets())
    return {
        "ddp_error": error,
        "ddp_compiles": compiles,
        "ddp_programs": programs,
        "ddp_buckets": buckets,
        "ddp_whole_step_error": _ddp_whole_step(data, rank),
    }


def _ddp_whole_step(data: list, rank: int) -> float:
    """The whole DDP step under torch.compile(backend="lazax"), as a user writes it; the
    largest parameter difference from the CPU after 3 AdamW steps. (A backward traced
    into the step's graph would bypass DDP's gradient hooks: each process would train
    on its own gradients, 0.04 off.)"""
    import lazax.dynamo  # noqa: F401  (registers the backend)

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    reference = copy.deepcopy(model)
    net = torch.nn.parallel.DistributedDataParallel(model.to(lx.device()))
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01)

    def step(x):
        opt.zero_grad()
        net(x).square().sum().backward()
        opt.step()

    compiled = torch.compile(step, backend="lazax")
    for _ in range(3):
        compiled(data[rank].to(lx.device()))
        ref_opt.zero_grad()
        (sum(reference(d).square().sum() for d in data) / 2).backward()
        ref_opt.step()
    return max(
        (a.cpu() - b).abs().max().item() for a, b in zip(model.parameters(), reference.parameters())
    )


def dynamo() -> dict:
    """torch.compile(backend="lazax") of the loss, its input split over every process's
    devices."""
    import lazax.dynamo  # noqa: F401  (registers the backend)

    rank, devices = lx.process_index(), lx.global_device_count()
    mesh = lx.Mesh(range(devices), (devices,), ("data",))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model = model.to(lx.device())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_of = torch.compile(lambda x: model(x).square().mean(), backend="lazax")
    losses = []
    for step in range(4):
        batch = torch.randn(8, 8, generator=torch.Generator().manual_seed(step))
        x = lx.distributed.global_tensor(batch[rank * 4 : (rank + 1) * 4], mesh, ("data", None))
        opt.zero_grad()
        loss = loss_of(x)
        loss.backward()
        opt.step()
        lx.sync()
        losses.append(loss)
    return {"dynamo_losses": [loss.item() for loss in losses]}


def device_loader(rank: int, mesh) -> dict:
    parts = [torch.arange(8.0).reshape(4, 2) + 100 * rank + 10 * i for i in range(3)]
    sums, shapes, local = [], [], []
    for x in lx.DeviceLoader(parts, sharding=lx.Sharding(mesh, ("data",))):
        sums.append((x * 1).sum().item())  # the global batch's sum: a replicated value
        shapes.append(list(x.shape))
        local.append(lx.distributed.local_part(x).tolist())
    return {"loader_sums": sums, "loader_shapes": shapes, "loader_local": local}


def main() -> None:
    scenario = sys.argv[1]
    if scenario == "collectives":
        import torch.distributed as dist

        dist.init_process_group("lazax")  # joins the job itself
    elif scenario == "own":  # explicit arguments, no rendezvous through torch's store
        rank = int(os.environ["RANK"])
        lx.distributed.initialize(os.environ["COORDINATOR"], 2, rank, timeout=60)
    else:
        if scenario == "exit_beating":
            # Only a private default makes the race certain: a heartbeat thread caught
            # inside jax's client as the interpreter finalizes aborts the process.
            from lazax.pjrt import _processes

            _processes._start_heartbeat.__defaults__ = (0.0,)
        heartbeat = int(os.environ.get("HEARTBEAT", "100"))
        lx.distributed.initialize(timeout=60, heartbeat_timeout=heartbeat)
    rank = lx.process_index()
    devices = lx.global_device_count()
    mesh = lx.Mesh(range(devices), (devices,), ("data",))
    result: dict = {"rank": rank, "local_devices": lx.device_count(), "devices": devices}
    if scenario == "own":
        result.update(own_model(rank))
    elif scenario == "train":
        result["dp"] = train(False, mesh)
        result["fsdp"] = train(True, mesh)
        try:
            x = lx.distributed.global_tensor(torch.ones(4, 3) * rank, mesh, ("data", None))
            x.cpu()
        except RuntimeError as err:
            result["read_split"] = str(err)
        result["replicated_read"] = x.sum().item()
    elif scenario == "loader":
        result.update(device_loader(rank, mesh))
    elif scenario == "collectives":
        result.update(collectives())
        result.update(functional_collectives())
        result.update(ddp())
        result.update(dynamo())
    elif scenario == "exit_beating":
        result["sum"] = (torch.ones(4, device=lx.device()) * 2).sum().item()
    elif scenario == "diverge":

        def peek(step, loss):
            # In the first step, which both processes compile (a later step compiles
            # nothing in process 1, and process 0 would wait for it until the timeout).
            if rank == 0 and step == 0:
                print("process 0 reads", loss.item(), flush=True)

        try:
            train(False, mesh, peek)
        except lx.distributed.GraphsDifferError as err:
            result["error"] = str(err)
    elif scenario == "fail_alone":
        start = time.monotonic()
        x = lx.distributed.global_tensor(torch.ones(2, 3), mesh, ("data", None))
        if rank == 1:
            raise ValueError("a bug in process 1 only")
        try:
            (x * 2).sum().item()  # process 0 meets nobody before compiling this
        except Exception as err:  # noqa: BLE001  (what it raises is the test)
            result["error"] = f"{type(err).__name__}: {err}"
            result["seconds"] = time.monotonic() - start
            print("RESULT " + json.dumps(result), flush=True)
            raise
    elif scenario == "die":
        start = time.monotonic()

        def die(step, loss):
            if rank == 1 and step == 2:
                os._exit(3)

        try:
            train(False, mesh, die)
        except Exception as err:  # noqa: BLE001  (what the survivor raises is the test)
            result["error"] = f"{type(err).__name__}: {err}"
            result["seconds"] = time.monotonic() - start
            print("RESULT " + json.dumps(result), flush=True)
            raise
    print("RESULT " + json.dumps(result), flush=True)


main()
