"""One process of the multi-process tests (``test_processes.py``), started with torchrun's
variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and
``XLA_FLAGS`` giving it its CPU devices. ``python tests/_process_worker.py SCENARIO``;
prints one ``RESULT <json>`` line on success.

Scenarios:
- ``train``: the decoder trained data-parallel (batch split over every process's
  devices, weights replicated), then FSDP-style (weights and AdamW state split over
  "data" too); losses, compile counts, and what each process holds.
- ``diverge``: process 0 reads the loss mid-step (``.item()``), which syncs a graph
  process 1 never builds.
- ``die``: process 1 exits after two steps; process 0 goes on.
"""

import json
import os
import sys
import time

import torch

import lazax.modes as lx

lx.distributed.initialize(timeout=60, heartbeat_timeout=int(os.environ.get("HEARTBEAT", "100")))

from benchmarks.models import Decoder, DecoderConfig, lm_loss, make_tokens  # noqa: E402

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
    return {
        "losses": [loss.item() for loss in losses],  # replicated: read whole everywhere
        "compiles": compiles,
        "batch_part": lx.distributed.local_part(x).tolist(),
        "batch_shards": sorted(set(lx.shard_shapes(x).values())),
        "weight_sharding": str(lx.get_sharding(weight)),
        "weight_shards": {str(k): v for k, v in lx.shard_shapes(weight).items()},
        "state_shards": sorted(set(lx.shard_shapes(opt.state[weight]["exp_avg"]).values())),
        "weight_sum": float(weight.sum().item()),
    }


def main() -> None:
    scenario = sys.argv[1]
    rank = lx.process_index()
    devices = lx.global_device_count()
    mesh = lx.Mesh(range(devices), (devices,), ("data",))
    result: dict = {"rank": rank, "local_devices": lx.device_count(), "devices": devices}
    if scenario == "train":
        result["dp"] = train(False, mesh)
        result["fsdp"] = train(True, mesh)
        try:
            x = lx.distributed.global_tensor(torch.ones(4, 3) * rank, mesh, ("data", None))
            x.cpu()
        except RuntimeError as err:
            result["read_split"] = str(err)
        result["replicated_read"] = x.sum().item()
    elif scenario == "diverge":

        def peek(step, loss):
            if rank == 0 and step == 1:
                print("process 0 reads", loss.item(), flush=True)

        try:
            train(False, mesh, peek)
        except lx.distributed.GraphsDifferError as err:
            result["error"] = str(err)
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
