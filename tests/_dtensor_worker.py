"""One process of the DTensor / FSDP2 tests (``test_dtensor.py``): two processes of one
lazax device each, the torch way (one device per process, ``init_device_mesh``),
started with torchrun's variables and ``XLA_FLAGS`` giving each its one CPU device.
``python tests/_dtensor_worker.py``; prints one ``RESULT <json>`` line on success.

- ``dtensor``: ``distribute_tensor`` with ``Shard(0)``, ``to_local``, ``full_tensor``,
  ``DTensor.from_local``, ``redistribute`` Shard -> Replicate -> Shard.
- ``fsdp2``: ``fully_shard`` on each of four blocks of an MLP and on its root, AdamW,
  four steps on this process's half of each batch; torch on the CPU trains the same
  model on the whole batch in this process too (the oracle).
- ``mixed``: the same with ``MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)``, resharding after forward or not; the oracle is torch's own
  FSDP2 with the same policy on CPU tensors, over a gloo group of the same processes.
- ``checkpoint``: ``torch.distributed.checkpoint`` saves the FSDP2 model's and AdamW's
  state dict after two steps, loads it into a model of another seed, which trains two
  more: equal to four uninterrupted steps of the CPU model on the whole batch. Both
  models are built on the CPU: ``fully_shard`` moves them to lazax.
- ``from_rank0``: process 0 alone holds a whole model and AdamW state dict, loaded into
  the FSDP2 model with ``broadcast_from_rank0`` (``set_model_state_dict``,
  ``set_optimizer_state_dict``); two more steps equal the CPU's uninterrupted training.
- ``tensor_parallel``: ``parallelize_module`` with ``ColwiseParallel`` /
  ``RowwiseParallel`` on a two-layer MLP, AdamW, three steps on the whole batch, against
  the CPU model.
- ``memory``: the lazax memory FSDP2 holds between steps (``lx.memory_allocated()``
  after three steps and a ``sync(wait=True)``, less what was held before the model was
  built), resharding after forward or not, beside the bytes of the sharded parameters.
- ``held_elsewhere``: process 0 alone holds an AdamW moment's buffer (``lx.to_jax``)
  through steps that donate it in the other process.
- ``compiled``, ``meta_init`` and ``dynamo`` (``_dtensor_init.py``): the FSDP2 step
  under ``lx.compile``; the model built on the meta device, sharded, then initialized;
  each block compiled by dynamo.
- ``partial``: ``redistribute`` from ``Partial`` (sum, avg) to ``Replicate`` and
  ``Shard``, and round trips between shardings of both dimensions.
"""

import copy
import gc
import json
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from _dtensor_init import compiled, dynamo, meta_init  # beside this script
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import lazax.modes as lx


def fallbacks() -> dict:
    """Ops that ran on the CPU fallback so far (their counters are named ``ns::op``)."""
    return {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names() if "::" in n}


def placements(mesh, rank: int) -> dict:
    dev = lx.device()
    whole = torch.arange(24.0).reshape(6, 4)
    d = distribute_tensor(whole.to(dev), mesh, [Shard(0)])
    replicated = d.redistribute(mesh, [Replicate()])
    back = replicated.redistribute(mesh, [Shard(0)])
    mine = torch.full((2, 3), float(rank + 1), device=dev)
    joined = DTensor.from_local(mine, mesh, [Shard(0)])
    return {
        "local": d.to_local().cpu().tolist(),
        "local_device": str(d.to_local().device),
        "full": d.full_tensor().cpu().tolist(),
        "replicated_local": replicated.to_local().cpu().tolist(),
        "back_local": back.to_local().cpu().tolist(),
        "from_local_full": joined.full_tensor().cpu().tolist(),
        "from_local_shape": list(joined.shape),
        "sum": (d * 2).sum().full_tensor().item(),  # an op on DTensors: a Partial, reduced
    }


def mlp() -> torch.nn.Module:
    blocks = [torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()) for _ in range(4)]
    return torch.nn.Sequential(*blocks)


def fsdp2(mesh, rank: int) -> dict:
    torch.manual_seed(0)
    reference = mlp()
    model = copy.deepcopy(reference).to(lx.device())
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = fallbacks()
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    losses, ref_losses, seconds, programs, cuts = [], [], [], [], []
    for step in range(4):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        half = slice(4 * rank, 4 * rank + 4)
        start = time.monotonic()
        ran = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[half].to(lx.device())), y[half].to(lx.device()))
        loss.backward()
        opt.step()
        lx.sync()
        programs.append(lx.metrics.metric_data("ExecuteTime")[0] - ran)
        cuts.append(lx.metrics.counter_value("CollectiveGraphCuts") or 0)
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # halves of equal size: the batch's mean
        losses.append(mean.item())
        seconds.append(time.monotonic() - start)
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    params = dict(model.named_parameters())
    return {
        "losses": losses,
        "ref_losses": ref_losses,
        "param_errors": {
            name: (params[name].full_tensor().cpu() - p).abs().max().item()
            for name, p in reference.named_parameters()
        },
        "sharded": {n: [type(p).__name__, list(p.to_local().shape)] for n, p in params.items()},
        "seconds": seconds,
        "programs": programs,
        "cuts": [b - a for a, b in zip(cuts, cuts[1:])],
        "cpu_fallbacks": {
            n: count - before.get(n, 0)
            for n, count in fallbacks().items()
            if count != before.get(n, 0)
        },
    }


def batch(step: int, rows: int = 8) -> tuple:
    g = torch.Generator().manual_seed(step)
    return torch.randn(rows, 16, generator=g), torch.randn(rows, 16, generator=g)


def sharded(model, mesh, **options):
    for block in model:
        fully_shard(block, mesh=mesh, **options)
    return fully_shard(model, mesh=mesh, **options)


def half_step(model, opt, step: int, rank: int, device) -> tuple:
    """One step on this process's half of batch ``step``: the output's dtype, the loss."""
    x, y = batch(step)
    half = slice(4 * rank, 4 * rank + 4)
    opt.zero_grad()
    out = model(x[half].to(device))
    loss = torch.nn.functional.mse_loss(out.float(), y[half].to(device))
    loss.backward()
    opt.step()
    return out.dtype, loss


def max_error(model, reference) -> float:
    """The largest difference of any parameter's whole value (DTensors gathered)."""
    theirs = dict(reference.named_parameters())
    errors = []
    for name, p in model.named_parameters():
        other = theirs[name]
        other = other.full_tensor() if isinstance(other, DTensor) else other
        errors.append((p.full_tensor().cpu() - other.detach().cpu()).abs().max().item())
    return max(errors)


def mixed(mesh, cpu_mesh, rank: int) -> dict:
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    out = {}
    for reshard in (True, False):
        torch.manual_seed(0)
        reference = mlp()
        model = sharded(
            copy.deepcopy(reference).to(lx.device()),
            mesh,
            mp_policy=policy,
            reshard_after_forward=reshard,
        )
        sharded(reference, cpu_mesh, mp_policy=policy, reshard_after_forward=reshard)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
        losses, ref_losses = [], []
        for step in range(3):
            dtype, loss = half_step(model, opt, step, rank, lx.device())
            lx.sync()
            losses.append(loss.item())
            ref_losses.append(half_step(reference, ref_opt, step, rank, "cpu")[1].item())
        # What the policy and resharding do: a bfloat16 forward, float32 sharded
        # parameters and gradients; after a forward, the block's parameters are the
        # sharded DTensors again (resharded) or the gathered plain tensors.
        out[str(reshard)] = {
            "losses": losses,
            "ref_losses": ref_losses,
            "error": max_error(model, reference),
            "out_dtype": str(dtype),
            "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
            "grad_dtypes": sorted({str(p.grad.dtype) for p in model.parameters()}),
        }
        x, _ = batch(0)
        model(x[:4].to(lx.device()))
        out[str(reshard)]["after_forward"] = type(model[0][0].weight).__name__
        model.reshard()
    return out


def memory(mesh, rank: int) -> dict:
    out = {}
    for reshard in (True, False):
        gc.collect()
        before = lx.memory_allocated()
        torch.manual_seed(0)
        model = sharded(mlp().to(lx.device()), mesh, reshard_after_forward=reshard)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        moments = []  # AdamW's exp_avg buffers after steps 1 and 2
        for step in range(3):
            dtype, loss = half_step(model, opt, step, rank, lx.device())
            lx.sync(wait=True)
            if step:
                moments.append(
                    [
                        lx.to_jax(s["exp_avg"].to_local()).unsafe_buffer_pointer()
                        for s in opt.state.values()
                    ]
                )
        del loss
        gc.collect()
        out[str(reshard)] = {
            "moments_in_place": sum(a == b for a, b in zip(*moments)),
            "moments": len(moments[0]),
            "held": lx.memory_allocated() - before,
            "sharded_param_bytes": sum(
                p.to_local().numel() * p.element_size() for p in model.parameters()
            ),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "steps": sorted({str(s["step"].device) for s in opt.state.values()}),
        }
        del model, opt
    return out


def held_elsewhere(mesh, rank: int) -> dict:
    """Process 0 alone holds a moment's buffer (``lx.to_jax``) through a step that
    donates it in the other process: it keeps its value, and training stays equal."""
    torch.manual_seed(0)
    reference = mlp()
    model = sharded(copy.deepcopy(reference).to(lx.device()), mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    kept = None
    for step in range(4):
        if step == 2 and rank == 0:
            moment = next(iter(opt.state.values()))["exp_avg"].to_local()
            kept = lx.to_jax(moment)
            kept_value = moment.cpu().clone()
        half_step(model, opt, step, rank, lx.device())
        lx.sync()
        x, y = batch(step)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    out = {
        "error": max_error(model, reference),
        "copies": lx.metrics.counter_value("DonationCopies"),
    }
    if kept is not None:
        out["kept_changed"] = (torch.from_numpy(kept.__array__()) - kept_value).abs().max().item()
    return out


def checkpoint(mesh, rank: int) -> dict:
    def build(seed: int):
        torch.manual_seed(seed)
        model = sharded(mlp(), mesh)  # built on the CPU: fully_shard moves it to lazax
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    torch.manual_seed(0)
    whole = mlp()  # four uninterrupted steps on the whole batch, on the CPU
    whole_opt = torch.optim.AdamW(whole.parameters(), lr=1e-2)
    for step in range(4):
        x, y = batch(step)
        whole_opt.zero_grad()
        torch.nn.functional.mse_loss(whole(x), y).backward()
        whole_opt.step()
    first, first_opt = build(0)
    for step in range(2):
        half_step(first, first_opt, step, rank, lx.device())
    lx.sync()
    # Every process must write to the same directory: process 0's, broadcast.
    where = [tempfile.mkdtemp(prefix="lazax_dcp_") if rank == 0 else None]
    dist.broadcast_object_list(where)  # on the "lazax" group: CPU tensors, copied
    model_state, optim_state = get_state_dict(first, first_opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.save(state, checkpoint_id=where[0])
    second, second_opt = build(1)
    before = max_error(second, first)
    model_state, optim_state = get_state_dict(second, second_opt)  # AdamW's state made
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=where[0])
    set_state_dict(
        second, second_opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    loaded = max_error(second, first)
    for step in range(2, 4):
        half_step(second, second_opt, step, rank, lx.device())
    lx.sync()
    return {
        "before_load": before,
        "loaded": loaded,
        "resumed": max_error(second, whole),
        "local_devices": sorted({str(p.to_local().device) for p in second.parameters()}),
        "state_steps": sorted({float(s["step"]) for s in second_opt.state.values()}),
    }


def from_rank0(mesh, rank: int) -> dict:
    """Process 0 alone holds a whole state dict (a CPU model and AdamW after 2 steps),
    loaded into the sharded model with ``broadcast_from_rank0``, which trains 2 more."""
    torch.manual_seed(0)
    whole = mlp()
    whole_opt = torch.optim.AdamW(whole.parameters(), lr=1e-2)
    for step in range(4):
        if step == 2:
            full = StateDictOptions(full_state_dict=True)
            model_state, optim_state = copy.deepcopy(get_state_dict(whole, whole_opt, options=full))
        x, y = batch(step)
        whole_opt.zero_grad()
        torch.nn.functional.mse_loss(whole(x), y).backward()
        whole_opt.step()
    torch.manual_seed(1)
    model = sharded(mlp(), mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = max_error(model, whole)
    # Each half on its own: torch's set_state_dict skips the model where it is given an
    # empty one (every process but 0 here), on any device.
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, model_state if rank == 0 else {}, options=options)
    set_optimizer_state_dict(model, opt, optim_state if rank == 0 else {}, options=options)
    for step in range(2, 4):
        half_step(model, opt, step, rank, lx.device())
    lx.sync()
    return {
        "before_load": before,
        "resumed": max_error(model, whole),
        "state_steps": sorted({float(s["step"]) for s in opt.state.values()}),
    }


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Linear(16, 32)
        self.w2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def tensor_parallel(mesh) -> dict:
    torch.manual_seed(0)
    reference = TwoLayers()
    model = copy.deepcopy(reference).to(lx.device())
    parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    losses, ref_losses = [], []
    for step in range(3):
        x, y = batch(step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(lx.device())), y.to(lx.device()))
        loss.backward()
        opt.step()
        lx.sync()
        losses.append(loss.item())
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    return {
        "losses": losses,
        "ref_losses": ref_losses,
        "error": max_error(model, reference),
        "placements": {
            n: [str(p.placements[0]), list(p.to_local().shape)] for n, p in model.named_parameters()
        },
    }


def partial(mesh, rank: int) -> dict:
    whole = torch.arange(12.0).reshape(3, 4)
    mine = whole.to(lx.device()) * (rank + 1)  # the sum over processes: 3 * whole
    summed = DTensor.from_local(mine, mesh, [Partial()])
    averaged = DTensor.from_local(mine, mesh, [Partial("avg")])
    rows = distribute_tensor(whole.to(lx.device()), mesh, [Shard(0)])
    columns = rows.redistribute(mesh, [Shard(1)])
    return {
        "sum_replicate": summed.redistribute(mesh, [Replicate()]).to_local().cpu().tolist(),
        "sum_shard0": summed.redistribute(mesh, [Shard(0)]).to_local().cpu().tolist(),
        "sum_shard1": summed.redistribute(mesh, [Shard(1)]).to_local().cpu().tolist(),
        "avg_replicate": averaged.redistribute(mesh, [Replicate()]).to_local().cpu().tolist(),
        "sum_full": summed.full_tensor().cpu().tolist(),
        "shard1_local": columns.to_local().cpu().tolist(),
        "shard1_back": columns.redistribute(mesh, [Shard(0)]).to_local().cpu().tolist(),
        "shard1_replicate_shard1": columns.redistribute(mesh, [Replicate()])
        .redistribute(mesh, [Shard(1)])
        .to_local()
        .cpu()
        .tolist(),
    }


def main() -> None:
    dist.init_process_group("lazax")  # joins the job itself
    rank = dist.get_rank()
    mesh = init_device_mesh("lazax", (2,))
    result = {"rank": rank, "mesh": str(mesh), "local_devices": lx.device_count()}
    # torch's own FSDP2 on CPU tensors, over gloo: the oracle for mixed precision.
    gloo = dist.new_group(backend="gloo")
    scenarios = {
        "dtensor": lambda: placements(mesh, rank),
        "fsdp2": lambda: fsdp2(mesh, rank),
        "compiled": lambda: compiled(mesh, rank),
        "meta_init": lambda: meta_init(mesh, rank),
        "dynamo": lambda: dynamo(mesh, rank),
        "memory": lambda: memory(mesh, rank),
        "held_elsewhere": lambda: held_elsewhere(mesh, rank),
        "mixed": lambda: mixed(mesh, DeviceMesh.from_group(gloo, "cpu"), rank),
        "checkpoint": lambda: checkpoint(mesh, rank),
        "from_rank0": lambda: from_rank0(mesh, rank),
        "tensor_parallel": lambda: tensor_parallel(mesh),
        "partial": lambda: partial(mesh, rank),
    }
    result["seconds"], result["fallbacks"] = {}, {}
    for name, scenario in scenarios.items():
        start, before = time.monotonic(), fallbacks()
        result[name] = scenario()
        result["seconds"][name] = round(time.monotonic() - start, 1)
        result["fallbacks"][name] = {
            n: count - before.get(n, 0)
            for n, count in fallbacks().items()
            if count != before.get(n, 0)
        }
    print("RESULT " + json.dumps(result), flush=True)


main()
