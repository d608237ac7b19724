"""A torch_xla training script, written as torch_xla's documentation writes them, that
runs unchanged on lazax with the lazax-torch-xla package (docs/torch_xla.md).

    python examples/torch_xla_script.py [--epochs 2] [--ckpt /tmp/mnist.pt]

A small MNIST-shaped CNN on synthetic data (no download): MpDeviceLoader feeds the
device, xm.optimizer_step steps the optimizer (the loader marks each step), a step
closure logs the loss without stalling the device, xm.save writes a CPU checkpoint,
and met's report says what compiled.
"""

import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr


class MNIST(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def _synthetic_mnist(samples=256):
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(samples, 1, 28, 28, generator=gen)
    labels = (images[:, 0, 10:18, 10:18].sum(dim=(1, 2)) > 0).long() * 3  # learnable
    return torch.utils.data.TensorDataset(images, labels)


def _log(epoch, step, loss):
    xm.master_print(f"epoch {epoch} step {step:3d} loss {loss.item():.4f}")


def train(flags):
    torch.manual_seed(1)
    device = torch_xla.device()
    model = MNIST().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=flags.lr, momentum=0.5)
    loader = torch.utils.data.DataLoader(
        _synthetic_mnist(), batch_size=flags.batch_size, shuffle=True, drop_last=True
    )
    train_loader = pl.MpDeviceLoader(loader, device)
    losses = []
    for epoch in range(flags.epochs):
        model.train()
        for step, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            xm.optimizer_step(optimizer)
            losses.append(loss.detach())
            if step % 4 == 0:
                xm.add_step_closure(_log, args=(epoch, step, loss))
    xm.mark_step()
    first, last = losses[0].item(), losses[-1].item()
    xm.master_print(f"epochs {flags.epochs} first loss {first:.4f} last loss {last:.4f}")
    xm.save(model.state_dict(), flags.ckpt)
    xm.master_print(met.short_metrics_report(counter_names=["UncachedCompile", "CachedCompile"]))
    return first, last


def _mp_fn(index, flags):
    xm.master_print(f"replica {index} of {xr.world_size()} on {xr.device_type()}")
    train(flags)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--ckpt", default=os.path.join(tempfile.gettempdir(), "mnist_xla.pt"))
    torch_xla.launch(_mp_fn, args=(parser.parse_args(),))
