"""torch_xla's environment variables: honoured, mapped to lazax's, or ignored.

Contract: ``apply(environ)`` runs once, when ``torch_xla`` is imported and before lazax
reads its own settings. For each variable a torch_xla user sets:
- ``HONOURED``: lazax (or XLA itself) reads the same variable with the same meaning.
- ``MAPPED``: the lazax variable is set from it, unless the user set that one too
  (the lazax one wins); ``PT_XLA_DEBUG_LEVEL`` (or ``PT_XLA_DEBUG``) non-zero turns on
  ``LAZAX_DEBUG_RECOMPILES``, lazax's explanation of each recompile.
- ``IGNORED``: set but without effect here; one ``UserWarning`` names each with why.
- The device is named ``xla`` (``LAZAX_DEVICE_NAME=xla``, lazax's switch, read when
  lazax is first imported), unless the user set ``LAZAX_DEVICE_NAME``;
  ``forget_device_name()``, once lazax is imported, removes the variable again so that
  it does not reach child processes. If lazax was imported before ``torch_xla`` under
  another name, one ``UserWarning`` says that the device keeps that name (torch cannot
  rename a backend twice).
docs/torch_xla.md's table is this module's tables.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["HONOURED", "IGNORED", "MAPPED", "apply", "forget_device_name"]

HONOURED = {
    "PJRT_DEVICE": "lazax picks its platform from it: CPU (default), CUDA or GPU, TPU",
    "XLA_FLAGS": "read by XLA itself (jaxlib's compiler)",
    "XLA_USE_SPMD": "read by torch_xla.runtime: `xr.is_spmd()` is True, `world_size()` 1",
}

# torch_xla's variable -> (lazax's variable, how the value maps)
MAPPED = {
    "PT_XLA_DEBUG_LEVEL": ("LAZAX_DEBUG_RECOMPILES", "non-zero: print why each graph recompiles"),
    "PT_XLA_DEBUG": ("LAZAX_DEBUG_RECOMPILES", "non-zero: print why each graph recompiles"),
    "XLA_USE_EAGER_DEBUG_MODE": ("LAZAX_USE_EAGER_MODE", "non-zero: every op runs at once"),
    "XLA_PERSISTENT_CACHE_PATH": ("LAZAX_PERSISTENT_CACHE_DIR", "the directory, unchanged"),
}

IGNORED = {
    "XLA_USE_BF16": "removed from torch_xla 2.6; cast the model (`model.to(torch.bfloat16)`)",
    "XLA_DOWNCAST_BF16": "removed from torch_xla 2.6; cast the model or use autocast",
    "XLA_USE_FP16": 'cast the model or use `torch.autocast("lazax")`',
    "XLA_USE_32BIT_LONG": "lazax keeps int64 as int64",
    "XLA_IR_DEBUG": "lazax names programs after your code; see `lx.dump_graphs`",
    "XLA_HLO_DEBUG": "use `LAZAX_DUMP_DIR` for the HLO of every compiled graph",
    "XLA_SAVE_TENSORS_FILE": "use `LAZAX_DUMP_DIR`",
    "XLA_SAVE_TENSORS_FMT": "use `LAZAX_DUMP_DIR`",
    "XLA_SAVE_HLO_FILE": "use `LAZAX_DUMP_DIR`",
    "XLA_DUMP_POST_OPTIMIZATIONS": "`LAZAX_DUMP_DIR` writes XLA's optimized HLO too",
    "XLA_METRICS_FILE": "print `met.metrics_report()` yourself",
    "XLA_SYNC_WAIT": "use `torch_xla.sync(wait=True)`",
    "XLA_NO_SPECIAL_SCALARS": "lazax lifts every scalar but 0, 1, -1",
    "XLA_TENSOR_ALLOCATOR_MAXSIZE": "PJRT's allocator is jaxlib's",
    "XLA_DYNAMO_DEBUG": "the lazax backend's counters are in `met`",
    "PT_XLA_DEBUG_FILE": "recompile explanations go to stderr",
    "TPU_NUM_DEVICES": "lazax uses every device of the platform",
    "GPU_NUM_DEVICES": "lazax uses every device of the platform",
}


def _on(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


# Whether ``apply`` set LAZAX_DEVICE_NAME itself (``forget_device_name`` takes it back).
_SET_DEVICE_NAME = [False]


def _name_device_xla(environ) -> None:
    executor = sys.modules.get("lazax.executor")
    if executor is None:
        if "LAZAX_DEVICE_NAME" not in environ:
            environ["LAZAX_DEVICE_NAME"] = "xla"
            _SET_DEVICE_NAME[0] = environ is os.environ
    elif executor.DEVICE_NAME != environ.get("LAZAX_DEVICE_NAME", "xla"):
        warnings.warn(
            f"torch_xla (lazax): lazax was imported before torch_xla, so its device is "
            f"{executor.DEVICE_NAME!r}, not 'xla'; import torch_xla first (or set "
            f"LAZAX_DEVICE_NAME=xla) for torch.device('xla') to be lazax's",
            UserWarning,
            stacklevel=4,
        )


def forget_device_name() -> None:
    """Once lazax has read it (at its import), take back the ``LAZAX_DEVICE_NAME`` that
    ``apply`` set, so that child processes which import lazax alone keep its own name
    (a child that imports torch_xla sets it again)."""
    if _SET_DEVICE_NAME[0]:
        os.environ.pop("LAZAX_DEVICE_NAME", None)
        _SET_DEVICE_NAME[0] = False


def apply(environ=os.environ) -> list[str]:
    """Map and warn as the module docstring says; returns the ignored names that are set."""
    _name_device_xla(environ)
    for name, (target, _) in MAPPED.items():
        if name not in environ or target in environ:
            continue
        value = environ[name]
        if target in ("LAZAX_DEBUG_RECOMPILES", "LAZAX_USE_EAGER_MODE"):
            value = "1" if _on(value) else "0"
        environ[target] = value
    ignored = [name for name in IGNORED if name in environ]
    for name in ignored:
        warnings.warn(
            f"torch_xla (lazax): {name} is set but has no effect on lazax: {IGNORED[name]}",
            UserWarning,
            stacklevel=3,
        )
    return ignored
