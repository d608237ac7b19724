"""torch dtype <-> dtype name (the names lazax.ir and lazax.pjrt use).

Contract: ``dtype_name(torch.float32) == "float32"`` and ``torch_dtype("float32")`` is
its inverse, for every dtype the runtime can hold. Names are numpy/jax spellings.
"""

from __future__ import annotations

import torch

__all__ = ["TORCH_DTYPES", "dtype_name", "torch_dtype"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TypeError(f"lazax tensors cannot hold dtype {dtype}") from None


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]
