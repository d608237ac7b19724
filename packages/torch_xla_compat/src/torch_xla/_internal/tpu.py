"""``torch_xla._internal.tpu``: the TPU generation this process runs on.

Contract: ``version()``: the generation as an int (4 for "TPU v4", 5 for "TPU v5 lite"),
read from jax's device kind; on another platform it raises ``EnvironmentError``, as
torch_xla's does where no TPU is found.
"""

from __future__ import annotations

import re

import jax

__all__ = ["version"]


def version() -> int:
    kind = jax.devices()[0].device_kind if jax.devices() else ""
    match = re.search(r"TPU\s*v?(\d+)", kind, re.IGNORECASE)
    if match is None:
        raise OSError(f"no TPU here: the device is {kind!r}")
    return int(match.group(1))
