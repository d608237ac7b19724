"""Out of device memory, told as torch tells it: ``torch.OutOfMemoryError``.

Contract: ``out_of_memory(err, what, graph, runtime)`` turns the runtime's
``DeviceOutOfMemory`` into a ``torch.OutOfMemoryError`` whose message says what did not
fit (the graph's name or the user's line, its inputs', outputs' and scratch bytes, its
largest inputs), what the device holds and can hold, that every tensor kept its value
(a failed execution consumes nothing, donated inputs included), and what to try.
"""

from __future__ import annotations

import torch

from lazax import ir

__all__ = ["out_of_memory"]


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} bytes"  # pragma: no cover


def out_of_memory(
    err, what: str, graph: ir.Graph | None, runtime, inputs: list | None = None
) -> torch.OutOfMemoryError:
    """``inputs``: the graph's parameters behind the program's first arguments, in order
    (its Python numbers travel packed after them); default: every parameter."""
    device = runtime.default_device
    stats = runtime.memory_stats(device)
    held = f"{_size(stats['bytes_in_use'])} in use"
    if "bytes_limit" in stats:
        held += f" of {_size(stats['bytes_limit'])}"
    parts = [f"lazax: out of memory on {runtime.platform}:{device.id} running {what}"]
    if graph is not None:
        sizes = err.args_nbytes
        if inputs is None:
            inputs = graph.parameters
        largest = sorted(
            ((n, p.specs[0]) for n, p in zip(sizes, inputs) if n), key=lambda t: -t[0]
        )[:3]
        parts.append(
            f"it reads {len(graph.parameters)} inputs ({_size(sum(sizes))}), writes "
            f"{len(graph.roots)} outputs ({_size(err.output_bytes - err.alias_bytes)} new, "
            f"{_size(err.alias_bytes)} over donated inputs) and needs "
            f"{_size(err.temp_bytes)} of scratch"
        )
        if largest:
            parts.append(
                "largest inputs: " + ", ".join(f"{spec} ({_size(n)})" for n, spec in largest)
            )
    parts.append(f"the device holds {held}")
    parts.append(
        "every tensor keeps its value; free tensors you no longer need, sync more often "
        "(a smaller graph), or use a smaller batch"
    )
    message = "; ".join(parts) + f". ({err})"
    return torch.OutOfMemoryError(message)
