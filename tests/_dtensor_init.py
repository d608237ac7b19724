"""Two scenarios of the DTensor / FSDP2 worker (``_dtensor_worker.py`` imports them; it
runs as a script, so this module sits beside it on ``sys.path``), on the worker's model:
four blocks of ``Linear(16, 16)`` + ``Tanh``, ``fully_shard`` on each block and the root,
AdamW, this process's half of each batch; torch on the CPU trains the whole batch in
this process too (the oracle).

- ``compiled``: four steps with the step wrapped in ``lx.compile``; losses, parameters
  and the programs compiled (``UncachedCompile``) and run (``ExecuteTime``) per call.
- ``dynamo``: the same four steps with each block compiled by dynamo
  (``block.compile(backend="lazax")``), FSDP2's hooks outside the compiled frames.
- ``meta_init``: the model built under ``torch.device("meta")``, ``fully_shard``-ed,
  ``to_empty(device=lx.device())``, then initialized either by ``reset_parameters()``
  on the sharded DTensor parameters (DTensor's RNG tracker over lazax's generator), or
  by copying a CPU reference's values in (each process its own rows); then trained.
"""

import copy
import functools

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor

import lazax.modes as lx

__all__ = ["compiled", "dynamo", "meta_init"]


def _mlp() -> torch.nn.Module:
    blocks = [torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()) for _ in range(4)]
    return torch.nn.Sequential(*blocks)


def _batch(step: int) -> tuple:
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def _sharded(model, mesh):
    for block in model:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def _executed() -> int:
    return (lx.metrics.metric_data("ExecuteTime") or (0,))[0]


def _mean(loss) -> float:
    """The mean of both processes' losses (halves of equal size: the batch's loss)."""
    mean = loss.detach().clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG)
    return mean.item()


def _train(model, reference, rank: int, steps: int, step_fn=None, fixed_batch=False) -> dict:
    """``steps`` steps of ``model`` on this process's half of each batch (through
    ``step_fn``, the step or its compiled wrapper) and, when ``reference`` is given, of
    the CPU model on the whole batch; what each call compiled and ran."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = None if reference is None else torch.optim.AdamW(reference.parameters(), lr=1e-2)

    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = step if step_fn is None else step_fn(step)
    lx.sync()  # what building the model left pending: not part of the first step
    out = {"losses": [], "ref_losses": [], "compiles": [], "programs": []}
    for i in range(steps):
        x, y = _batch(0 if fixed_batch else i)
        half = slice(4 * rank, 4 * rank + 4)
        compiles, programs = _counter("UncachedCompile"), _executed()
        loss = run(x[half].to(lx.device()), y[half].to(lx.device()))
        lx.sync()
        out["compiles"].append(_counter("UncachedCompile") - compiles)
        out["programs"].append(_executed() - programs)
        out["losses"].append(_mean(loss))
        if reference is not None:
            ref_opt.zero_grad()
            ref_loss = torch.nn.functional.mse_loss(reference(x), y)
            ref_loss.backward()
            ref_opt.step()
            out["ref_losses"].append(ref_loss.item())
    if reference is not None:
        params = dict(model.named_parameters())
        out["error"] = max(
            (params[name].full_tensor().cpu() - p).abs().max().item()
            for name, p in reference.named_parameters()
        )
    return out


def compiled(mesh, rank: int) -> dict:
    torch.manual_seed(0)
    reference = _mlp()
    model = _sharded(copy.deepcopy(reference).to(lx.device()), mesh)
    cuts = _counter("CollectiveGraphCuts")
    out = _train(model, reference, rank, 4, step_fn=lx.compile)
    out["cuts"] = _counter("CollectiveGraphCuts") - cuts
    return out


def dynamo(mesh, rank: int) -> dict:
    """Each block compiled by dynamo after ``fully_shard`` (TorchTitan's way): dynamo
    skips FSDP2's hooks, which run as in lazy mode around each block's compiled
    forward (its backward through AOT autograd)."""
    torch.manual_seed(0)
    reference = _mlp()
    model = _sharded(copy.deepcopy(reference).to(lx.device()), mesh)
    for block in model:
        block.compile(backend="lazax")
    out = _train(model, reference, rank, 4)
    out["dynamo"] = {k: dict(v) for k, v in counters.items() if k in ("frames", "graph_break")}
    # The whole step under torch.compile, as a user writes it: backward traced into the
    # step's graph (dynamo's trace_autograd_ops, which lazax.dynamo turns on) gives
    # FSDP2 wrong gradients, in torch's own FSDP2 on CPU tensors too, so the lazax
    # process group turned it off (lazax.executor.process_group_made).
    out["traced_backward"] = torch._dynamo.config.trace_autograd_ops
    torch.manual_seed(0)
    reference = _mlp()
    model = _sharded(copy.deepcopy(reference).to(lx.device()), mesh)
    compile_step = functools.partial(torch.compile, backend="lazax")
    out["whole_step"] = _train(model, reference, rank, 4, step_fn=compile_step)
    return out


def _on_meta(mesh):
    with torch.device("meta"):
        model = _mlp()
    _sharded(model, mesh)
    return model.to_empty(device=lx.device())


def meta_init(mesh, rank: int) -> dict:
    # Initialized by reset_parameters() on the sharded parameters: lazax's RNG, through
    # DTensor's tracker, which moves the generator's offset so each shard draws its own
    # part of the whole tensor's numbers.
    model = _on_meta(mesh)
    torch.manual_seed(0)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.reset_parameters()
    weight = model[0][0].weight
    whole = weight.full_tensor().cpu()
    reset = {
        "kind": type(weight).__name__,
        "local_shape": list(weight.to_local().shape),
        "local_device": str(weight.to_local().device),
        # kaiming_uniform_(a=sqrt(5)) on 16 inputs: U(-1/4, 1/4)
        "bound": whole.abs().max().item(),
        "halves_differ": not torch.equal(whole[:8], whole[8:]),
        **_train(model, None, rank, 4, fixed_batch=True),
    }
    # Initialized from a CPU reference built with the same seed: then trained, equal to
    # the CPU's training.
    model = _on_meta(mesh)
    torch.manual_seed(0)
    reference = _mlp()
    with torch.no_grad():
        for p, q in zip(model.parameters(), reference.parameters()):
            p.copy_(distribute_tensor(q.to(lx.device()), mesh, p.placements))
    return {"reset": reset, "copied": _train(model, reference, rank, 4)}
