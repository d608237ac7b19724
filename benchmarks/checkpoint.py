"""Host memory and time of ``torch.save`` / ``torch.load`` of a model's state dict.

``python -m benchmarks.checkpoint`` saves and loads the state dict of 12 bias-free
2048x2048 linears (201 MB) in a process of its own per device (``cpu``: plain torch;
``lazax``), and prints, for each, the peak resident memory the save and the load added
above the process's footprint just before (the model already on its device), in MB and
as a multiple of the state, with the seconds each took. A save that streams holds one
tensor at a time on the host (~16.8 MB here); one that copies the whole state first adds
the state (1.0x).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

WIDTH, LAYERS = 2048, 12


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(device_name: str, path: str) -> dict:
    import torch

    if device_name == "lazax":
        import lazax.modes as lx

        device = lx.device()
    else:
        device = torch.device("cpu")
    model = torch.nn.Sequential(
        *[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)]
    ).to(device)
    state_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    if device_name == "lazax":
        lx.wait_device_ops()
    base = _peak_mb()
    start = time.perf_counter()
    torch.save(model.state_dict(), path)
    save_s = time.perf_counter() - start
    save_mb = _peak_mb() - base
    base = _peak_mb()
    start = time.perf_counter()
    model.load_state_dict(torch.load(path))
    if device_name == "lazax":
        lx.wait_device_ops()
    load_s = time.perf_counter() - start
    load_mb = _peak_mb() - base
    return {
        "device": device_name,
        "state_mb": state_mb,
        "save_mb": save_mb,
        "save_s": save_s,
        "load_mb": load_mb,
        "load_s": load_s,
    }


def run(device_name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.pt")
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.checkpoint", "--worker", device_name, path],
            check=True,
            capture_output=True,
            text=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = [
        "| device | state MB | save: peak added MB (x state) | save s | "
        "load: peak added MB (x state) | load s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['device']} | {r['state_mb']:.0f} | {r['save_mb']:.0f} "
            f"({r['save_mb'] / r['state_mb']:.2f}x) | {r['save_s']:.2f} | {r['load_mb']:.0f} "
            f"({r['load_mb'] / r['state_mb']:.2f}x) | {r['load_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("DEVICE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--devices", default="cpu,lazax")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    print(table([run(d) for d in args.devices.split(",")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
