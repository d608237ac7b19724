"""One process of the two-dimensional DeviceMesh tests (``test_device_mesh_2d.py``): four
processes of one lazax device each, ``init_device_mesh("lazax", (2, 2),
mesh_dim_names=("dp", "tp"))`` (rank = 2 * dp + tp), started with torchrun's variables.
``python tests/_mesh2d_worker.py``; prints one ``RESULT <json>`` line on success.

- ``collectives``: each dimension's group (``mesh.get_group``): ``all_reduce`` (sum,
  max, avg), ``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single``
  (torch's functional collectives), ``broadcast`` and ``barrier``, on values made from
  the rank; the test computes what each should give. Also the replica groups of the
  all-gathers in the sum's optimized program (``lx.dump_graphs``), and a sum over groups
  of unequal sizes (``new_group([0])``, ``new_group([1, 2, 3])``).
- ``fsdp_tp``: a two-block MLP, tensor parallel over ``tp`` (``ColwiseParallel`` /
  ``RowwiseParallel``), then ``fully_shard`` over ``dp``; AdamW, four steps, each ``dp``
  group on its half of the batch (the ``tp`` pair on the same half); torch on the CPU
  trains the same model on the whole batch in this process (the oracle). Also the
  programs each step ran and the collective cuts.
- ``hsdp``: ``fully_shard`` over the whole 2-D mesh (replicated over ``dp``, sharded
  over ``tp``: HSDP), four steps, each process on its quarter of the batch.
- ``fsdp_tp_compiled``: ``fsdp_tp`` with its step under ``lx.compile``;
  ``fsdp_tp_dynamo``: with each block compiled by dynamo (``block.compile``).
- ``xm_groups``: torch_xla's ``xm.all_reduce`` / ``all_gather`` / ``reduce_scatter``
  with replica groups ``[[0, 3], [1, 2]]`` (the compatibility package).
"""

import copy
import json
import pathlib
import re
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._dynamo.utils import counters
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import lazax.dynamo  # noqa: F401  (the "lazax" backend of torch.compile)
import lazax.modes as lx


def collectives(mesh, rank: int) -> dict:
    dev = lx.device()
    out = {}
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        ones = torch.ones(2, device=dev) * (rank + 1)
        with tempfile.TemporaryDirectory() as where, lx.dump_graphs(where):
            dist.all_reduce(ones, group=group)
            ones.cpu()
            hlo = [f.read_text() for f in pathlib.Path(where).rglob("*.hlo.txt")]
        pattern = r"all-gather\(.*?replica_groups=(\{[{},0-9]*\})"
        grouped = sorted(set(re.findall(pattern, "".join(hlo))))
        top = torch.tensor([rank], device=dev)
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        mean = torch.tensor([rank], device=dev)
        dist.all_reduce(mean, op=dist.ReduceOp.AVG, group=group)
        x = torch.arange(4.0, device=dev) + 10 * rank
        gathered = funcol.all_gather_tensor(x, 0, group)
        scattered = funcol.reduce_scatter_tensor(x, "sum", 0, group)
        exchanged = funcol.all_to_all_single(x, None, None, group)
        sent = torch.full((2,), float(rank), device=dev)
        dist.broadcast(sent, src=dist.get_global_rank(group, 1), group=group)
        dist.barrier(group=group)
        out[dim] = {
            "ranks": dist.get_process_group_ranks(group),
            "replica_groups": grouped,
            "sum": ones.cpu().tolist(),
            "max": top.cpu().tolist(),
            "avg": mean.cpu().tolist(),
            "all_gather": gathered.cpu().tolist(),
            "reduce_scatter": scattered.cpu().tolist(),
            "all_to_all": exchanged.cpu().tolist(),
            "broadcast": sent.cpu().tolist(),
        }
    # A group's barrier waits for its own processes only: 2 and 3 do not come.
    if rank in (0, 1):
        dist.barrier(group=mesh.get_group("tp"))
    out["own_barrier"] = True
    # Groups of unequal sizes: the job's all-gather, and each group's rows of it.
    alone, rest = dist.new_group([0]), dist.new_group([1, 2, 3])
    ones = torch.ones(2, device=dev) * (rank + 1)
    dist.all_reduce(ones, group=alone if rank == 0 else rest)
    out["uneven_sum"] = ones.cpu().tolist()
    return out


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(x)))


def blocks() -> torch.nn.Module:
    return torch.nn.Sequential(Block(), Block())


def batch(step: int) -> tuple:
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def train(model, reference, rows, step_fn=None) -> dict:
    """Four AdamW steps of ``model`` on ``rows(step)`` of each batch (``step_fn``: what
    wraps the step, ``lx.compile``; None: lazy mode), beside the CPU ``reference`` on the
    whole batch; losses averaged over the job."""
    dev = lx.device()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)

    def one_step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if step_fn is not None:
        one_step = step_fn(one_step)
    losses, ref_losses, programs, cuts = [], [], [], []
    for step in range(4):
        x, y = batch(step)
        mine = rows()
        ran = (lx.metrics.metric_data("ExecuteTime") or (0,))[0]
        cut = lx.metrics.counter_value("CollectiveGraphCuts") or 0
        loss = one_step(x[mine].to(dev), y[mine].to(dev))
        lx.sync()
        programs.append(lx.metrics.metric_data("ExecuteTime")[0] - ran)
        cuts.append((lx.metrics.counter_value("CollectiveGraphCuts") or 0) - cut)
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # equal parts: the whole batch's mean
        losses.append(mean.item())
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    theirs = dict(reference.named_parameters())
    errors = {
        name: (p.full_tensor().cpu() - theirs[name]).abs().max().item()
        for name, p in model.named_parameters()
    }
    return {
        "losses": losses,
        "ref_losses": ref_losses,
        "param_errors": errors,
        "placements": {
            n: [str(list(p.placements)), list(p.to_local().shape)]
            for n, p in model.named_parameters()
        },
        "programs": programs,
        "cuts": cuts,
    }


def fsdp_tp(mesh, rank: int, step_fn=None, dynamo: bool = False) -> dict:
    torch.manual_seed(0)
    reference = blocks()
    model = copy.deepcopy(reference).to(lx.device())
    for block in model:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
        if dynamo:  # TorchTitan's way: each block compiled after it is sharded
            block.compile(backend="lazax")
    fully_shard(model, mesh=mesh["dp"])
    dp = mesh.get_local_rank("dp")
    out = train(model, reference, lambda: slice(4 * dp, 4 * dp + 4), step_fn)
    if dynamo:
        out["dynamo"] = {k: dict(counters[k]) for k in ("frames", "graph_break")}
    return out


def hsdp(mesh, rank: int) -> dict:
    torch.manual_seed(1)
    reference = blocks()
    model = copy.deepcopy(reference).to(lx.device())
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return train(model, reference, lambda: slice(2 * rank, 2 * rank + 2))


def xm_groups(mesh, rank: int) -> dict:
    """torch_xla's collectives with replica groups, through the compatibility package
    (imported here, after lazax: the device keeps its name "lazax" for the rest)."""
    import torch_xla.core.xla_model as xm

    dev = lx.device()
    groups = [[0, 3], [1, 2]]  # not a mesh dimension's
    x = torch.arange(4.0, device=dev) + 10 * rank
    summed = xm.all_reduce(xm.REDUCE_SUM, x, scale=0.5, groups=groups)
    gathered = xm.all_gather(x, dim=0, groups=groups)
    piece = xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 2, groups=groups)
    try:
        xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 1], [2]])
        refused = ""
    except ValueError as err:
        refused = str(err)
    return {
        "sum": summed.cpu().tolist(),
        "all_gather": gathered.cpu().tolist(),
        "reduce_scatter": piece.cpu().tolist(),
        "refused": refused,
    }


def main() -> None:
    dist.init_process_group("lazax")  # joins the job itself
    rank = dist.get_rank()
    mesh = init_device_mesh("lazax", (2, 2), mesh_dim_names=("dp", "tp"))
    result = {"rank": rank, "mesh": str(mesh), "seconds": {}}
    for name, scenario in {
        "collectives": collectives,
        "fsdp_tp": fsdp_tp,
        "hsdp": hsdp,
        "fsdp_tp_compiled": lambda mesh, rank: fsdp_tp(mesh, rank, lx.compile),
        "fsdp_tp_dynamo": lambda mesh, rank: fsdp_tp(mesh, rank, dynamo=True),
        "xm_groups": xm_groups,
    }.items():
        start = time.monotonic()
        result[name] = scenario(mesh, rank)
        result["seconds"][name] = round(time.monotonic() - start, 1)
    print("RESULT " + json.dumps(result), flush=True)


main()
