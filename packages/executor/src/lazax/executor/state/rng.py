"""The device RNG state: a (seed, counter) pair. Every random op takes the next counter
value, so results are new on each call and repeatable after ``torch.manual_seed``; while
a graph is captured for replay, the seeds it takes are recorded (``recorder``)."""

from __future__ import annotations

import torch

__all__ = ["RNG"]


class _RngState:
    __slots__ = ("seed", "counter", "recorder")

    def __init__(self) -> None:
        self.seed = 0
        self.counter = 0
        # While a graph is captured for replay (the dynamo bridge), the seed parameters
        # it takes are listed here, so each replay can feed fresh ones.
        self.recorder: list | None = None

    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
        self.counter = 0

    def next_key(self) -> int:
        """A 63-bit value that differs per call and depends on the seed."""
        self.counter += 1
        mixed = (self.seed * 0x9E3779B97F4A7C15 + self.counter * 0xBF58476D1CE4E5B9) & (
            (1 << 63) - 1
        )
        return mixed

    def get_state(self) -> torch.Tensor:
        """16 bytes, laid out as CUDA's philox state: the 64-bit seed, then the counter
        as int64 (``state[8:].view(torch.int64)``). torch's DTensor reads and moves that
        offset so that each shard of a random op draws its own part
        (``torch.distributed.tensor._random``); here the counter is what it moves."""
        # The seed as int64's two's complement: torch.manual_seed takes seeds up to
        # 2**64 - 1, which an int64 cannot hold as they are.
        seed = self.seed - (1 << 64) if self.seed >= 1 << 63 else self.seed
        return torch.tensor([seed, self.counter], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state: torch.Tensor) -> None:
        """``get_state()``'s 16 bytes, or the same pair as two int64s."""
        if state.dtype == torch.uint8:
            state = state.contiguous().view(torch.int64)
        seed, counter = (int(v) for v in state.tolist())
        self.seed, self.counter = seed & 0xFFFF_FFFF_FFFF_FFFF, counter


RNG = _RngState()
