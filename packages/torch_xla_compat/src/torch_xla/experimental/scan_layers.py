"""``torch_xla.experimental.scan_layers``: identical layers run as one XLA loop.

Contract (torch_xla 2.9's documented behaviour):
- ``scan_layers(layers, input_data, partition_fn=default_partition, is_layer_pure=False)``
  equals ``nn.Sequential(*layers)(input_data)``: each layer's output is the next one's
  input. The layers must be structurally identical (same parameter shapes, same
  computation); gradients reach each layer's own parameters.
- A tensor ``input_data`` runs as ``lx.scan_layers`` (one ``lax.scan`` over the layers'
  stacked parameters and buffers; a layer list that is not identical raises, naming the
  layer). ``partition_fn=functorch.compile.min_cut_rematerialization_partition``, torch_xla's
  activation checkpointing, is ``checkpoint=True`` (each layer's forward recomputed in the
  backward loop); ``default_partition`` stores activations. Another partitioner (host
  offloading, ...) cannot be honoured: one ``UserWarning`` says so, and activations are
  stored.
- A pytree ``input_data`` (a tuple the layers take apart and return) runs the layers one
  after the other, with the same values; one ``UserWarning`` says that this one does not
  compile as a loop (``lx.scan_layers`` carries a tensor).
- ``is_layer_pure`` is accepted (torch_xla caches its trace with it; lazax compares each
  layer's trace itself).
"""

from __future__ import annotations

import warnings

import torch
from functorch.compile import default_partition, min_cut_rematerialization_partition

import lazax.modes as lx

__all__ = ["scan_layers"]

_WARNED: set = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def scan_layers(layers, input_data, partition_fn=default_partition, is_layer_pure=False):
    """``nn.Sequential(*layers)(input_data)`` as one loop (see the module docstring)."""
    del is_layer_pure
    layers = list(layers)
    if not layers:
        raise ValueError("scan_layers: `layers` is empty")
    checkpoint = partition_fn is min_cut_rematerialization_partition
    if not checkpoint and partition_fn is not default_partition:
        _warn_once(
            "partition",
            f"torch_xla (lazax): scan_layers cannot honour partition_fn={partition_fn!r}: "
            f"lazax stores each layer's activations (default_partition), or recomputes them "
            f"with min_cut_rematerialization_partition; values are the same",
        )
    if isinstance(input_data, torch.Tensor):
        return lx.scan_layers(layers, input_data, checkpoint=checkpoint)
    _warn_once(
        "pytree",
        "torch_xla (lazax): scan_layers over a pytree input runs the layers one after the "
        "other (same values, no loop): lazax's layer loop carries one tensor",
    )
    carry = input_data
    for layer in layers:
        carry = layer(*carry) if isinstance(carry, tuple) else layer(carry)
    return carry
