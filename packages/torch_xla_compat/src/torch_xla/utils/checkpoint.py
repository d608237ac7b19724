"""``torch_xla.utils.checkpoint``: activation checkpointing, torch's own.

torch_xla ships a copy of ``torch.utils.checkpoint`` that adds optimization barriers, so
that XLA cannot merge the backward's recomputation back into the forward, and that
replays the XLA device's RNG in the recomputation. lazax does both for
``torch.utils.checkpoint`` itself (docs/deep_models.md, "Recomputation XLA keeps"; the
lazax device module reports ``_initialized`` as CUDA's does, so torch saves and restores
its RNG), so this module is torch's.

Contract: ``checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn,
determinism_check="default", debug=False, preserve_rng_state=True, **kwargs)`` and
``checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs)`` are
``torch.utils.checkpoint``'s, with torch's behaviour (``use_reentrant`` should be given:
torch warns when it is not); also torch's ``CheckpointFunction``, ``noop_context_fn``,
``detach_variable``, ``check_backward_validity``, ``get_device_states``,
``set_device_states``, as torch_xla's module has them.
"""

from torch.utils.checkpoint import (
    CheckpointFunction,
    check_backward_validity,
    checkpoint,
    checkpoint_sequential,
    detach_variable,
    get_device_states,
    noop_context_fn,
    set_device_states,
)

__all__ = [
    "CheckpointFunction",
    "check_backward_validity",
    "checkpoint",
    "checkpoint_sequential",
    "detach_variable",
    "get_device_states",
    "noop_context_fn",
    "set_device_states",
]
