"""Activation checkpointing whose recomputation XLA keeps.

Contract: ``install()`` (idempotent, at import of ``lazax.executor``) makes the inputs of
every recomputation that ``torch.utils.checkpoint`` runs in a backward pass go through
an optimization barrier (``lazax::optimization_barrier``, jax's
``lax.optimization_barrier``) when they are lazax tensors, with both ``use_reentrant``
settings. Calls that touch no lazax tensor are torch's own.

Why: a lazy step traces the forward and the backward into one graph. The recomputed
forward is then the same computation on the same values as the forward it replaces,
and XLA's common-subexpression elimination merges the two back into one: the
activations are kept after all and no memory is saved (8 checkpointed Linear+GELU
blocks: 55 dot ops before XLA's optimizations, 47 after, as without checkpointing).
Behind a barrier the recomputation's inputs are values XLA cannot see through, so it
stays a computation of its own, which is what ``jax.checkpoint`` does too
(``prevent_cse``). The barrier is not differentiated through: it stands where torch
itself detaches the saved inputs before it recomputes.

Where torch is reached (private names, checked at install; a torch without them keeps
its own checkpoint, and a warning says recomputation may be merged):
- non-reentrant (``use_reentrant=False``): ``_CheckpointFrame.get_inputs``, which the
  saved-tensor unpack hook calls for the inputs of ``recompute_fn``;
- reentrant: the module's ``detach_variable``, which ``CheckpointFunction.backward``
  calls on the saved inputs before it runs the function again.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.utils.checkpoint as torch_checkpoint

from ..ops.pseudo import optimization_barrier
from ..state.layout import Layout
from ..state.values import ir_value
from ..tensor.lazy import LazyTensor, new_tensor

__all__ = ["install", "behind_barrier"]

_installed = False


def behind_barrier(t: torch.Tensor) -> torch.Tensor:
    """A lazax tensor's value behind an optimization barrier, as a new tensor with no
    autograd history (``requires_grad`` as ``t``'s); anything else as it is."""
    if type(t) is not LazyTensor:
        return t
    value = optimization_barrier(ir_value(t))
    out = new_tensor(value, Layout(tuple(t.shape), t.dtype), t._lz_storage.device_index)
    out.requires_grad_(t.requires_grad)
    return out


def _wrap_get_inputs(original):
    @functools.wraps(original)
    def get_inputs(self):
        inputs = original(self)
        return [behind_barrier(a) if type(a) is LazyTensor else a for a in inputs]

    return get_inputs


def _wrap_detach_variable(original):
    @functools.wraps(original)
    def detach_variable(inputs):
        if isinstance(inputs, tuple) and any(type(a) is LazyTensor for a in inputs):
            inputs = tuple(behind_barrier(a) if type(a) is LazyTensor else a for a in inputs)
        return original(inputs)

    return detach_variable


def install() -> None:
    global _installed
    if _installed:
        return
    frame = getattr(torch_checkpoint, "_CheckpointFrame", None)
    if (
        frame is None
        or not hasattr(frame, "get_inputs")
        or not hasattr(torch_checkpoint, "detach_variable")
    ):
        warnings.warn(
            "lazax: this torch's torch.utils.checkpoint has no _CheckpointFrame.get_inputs "
            "or detach_variable; lazax cannot keep XLA from merging a checkpoint's "
            "recomputation with the forward (the results stay right, the memory is not "
            "saved)",
            RuntimeWarning,
            stacklevel=2,
        )
    else:
        frame.get_inputs = _wrap_get_inputs(frame.get_inputs)
        torch_checkpoint.detach_variable = _wrap_detach_variable(torch_checkpoint.detach_variable)
    _installed = True
