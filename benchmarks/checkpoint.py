"""Host memory and time of ``torch.save`` / ``torch.load`` of a model's state dict.

``python -m benchmarks.checkpoint`` saves and loads the state dict of 12 bias-free
2048x2048 linears (201 MB) in a process of its own per device (``cpu``: plain torch;
``lazax``), and prints, for each, the peak resident memory the save and the load added
above the process's footprint just before (the model already on its device), in MB and
as a multiple of the state, with the seconds each took. A save that streams holds one
tensor at a time on the host (~16.8 MB here); one that copies the whole state first adds
the state (1.0x). Resident memory is sampled every 0.5 ms during each call (the
process's lifetime peak would hide it: building the model peaks higher).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

WIDTH, LAYERS = 2048, 12


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_added_mb(call) -> tuple[float, float]:
    """(peak resident MB ``call()`` added above the footprint before it, seconds): the
    process's lifetime peak would hide it (building the model peaked higher)."""
    base = peak = _rss_mb()
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mb())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    return max(peak, _rss_mb()) - base, seconds


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
    save_mb, save_s = _peak_added_mb(lambda: torch.save(model.state_dict(), path))

    def load():
        model.load_state_dict(torch.load(path))
        if device_name == "lazax":
            lx.wait_device_ops()

    load_mb, load_s = _peak_added_mb(load)
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
