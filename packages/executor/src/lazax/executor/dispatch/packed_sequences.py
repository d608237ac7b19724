"""``nn.utils.rnn.pack_padded_sequence`` on lazax tensors: ``_pack_padded_sequence``.

Contract: ``PACKED_HANDLERS`` maps ``aten._pack_padded_sequence`` to a handler that
packs on the device: the rows of time step ``t`` of every sequence still running at
``t``, one time step after the other, gathered with one index (the lengths are a CPU
tensor, as torch requires, so the index is known when the op is traced). The batch
sizes come back as a CPU int64 tensor, as torch's ``PackedSequence`` demands (the CPU
fallback would have put them on the device). torch's errors for unsorted or
non-positive lengths are raised. Unpacking (``_pad_packed_sequence``) and the packing's
backward are composites of ops lazax lowers; an LSTM or GRU over packed data runs the
fused cells per time step on the batch still running.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

__all__ = ["PACKED_HANDLERS"]

_UNSORTED = (
    "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
    "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
    "sidestep this requirement if you do not need ONNX exportability."
)
_NOT_POSITIVE = (
    "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
)


def _pack_padded_sequence(args, kwargs):
    x, lengths, batch_first = args
    if x.dim() < 2:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-x.dim()}, "
            f"{x.dim() - 1}], but got 1)"
        )
    counts = lengths.cpu().tolist()  # a CPU tensor already (pack_padded_sequence's)
    if batch_first:
        x = x.transpose(0, 1)
    steps, batch = x.shape[0], x.shape[1]
    if len(counts) != batch:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(counts)} "
            f"(batch_size={batch})"
        )
    if any(n <= 0 for n in counts):
        raise RuntimeError(_NOT_POSITIVE)
    if any(a < b for a, b in zip(counts, counts[1:])):
        raise RuntimeError(_UNSORTED)
    if counts[0] > steps:  # torch's kernel reads past the input there
        raise RuntimeError(
            f"pack_padded_sequence: a sequence is {counts[0]} steps long, but the input "
            f"holds {steps}"
        )
    sizes = [sum(1 for n in counts if n > t) for t in range(counts[0])]
    rows = [t * batch + b for t, size in enumerate(sizes) for b in range(size)]
    flat = x.reshape(steps * batch, *x.shape[2:])
    index = torch.tensor(rows, dtype=torch.int64, device=x.device)
    return aten.index_select.default(flat, 0, index), torch.tensor(sizes, dtype=torch.int64)


PACKED_HANDLERS = {aten._pack_padded_sequence.default: _pack_padded_sequence}
