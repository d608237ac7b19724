"""One process of test_xla_backend's job: torch_xla's DDP recipe, unchanged, over the
"xla" backend and xla:// (launched with torchrun's variables). Prints one RESULT line."""

import json

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers "xla" and xla://)

dist.init_process_group("xla", init_method="xla://")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch_xla.device()

summed = torch.full((3,), float(rank + 1), device=device)
dist.all_reduce(summed)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
ddp = torch.nn.parallel.DistributedDataParallel(model.to(device), gradient_as_bucket_view=True)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
torch.manual_seed(1)
data, target = torch.randn(4, 4), torch.randn(4, 1)  # the whole batch; each takes its half
losses = []
for _ in range(3):
    opt.zero_grad()
    half = slice(2 * rank, 2 * rank + 2)
    loss = torch.nn.functional.mse_loss(ddp(data[half].to(device)), target[half].to(device))
    loss.backward()
    xm.optimizer_step(opt)
    xm.mark_step()
    losses.append(xm.all_reduce(xm.REDUCE_SUM, loss.detach()).item() / world)
result = {
    "rank": rank,
    "world": world,
    "backend": dist.get_backend(),
    "summed": summed.cpu().tolist(),
    "losses": losses,
    "weight": model[0].weight.detach().cpu().flatten().tolist(),
}
print("RESULT " + json.dumps(result), flush=True)
dist.destroy_process_group()
