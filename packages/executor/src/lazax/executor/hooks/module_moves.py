"""Module moves that keep a shared parameter one parameter, as on cuda.

Contract: ``install()`` (done at import of ``lazax.executor``) wraps
``torch.nn.Module._apply`` (behind ``.to()``, ``.cpu()``, ``.half()``, ``.to_empty()``
...) and ``torch.nn.Module.load_state_dict``. A call that touches no lazax tensor is
torch's own, unchanged. One that does ends as the same call ends on cuda:

- Every ``Parameter`` object the modules held before a move is the object they hold
  after it: its content is exchanged with the moved one (``torch.utils.swap_tensors``),
  so a parameter shared by several modules (tied embeddings) stays one parameter, and a
  reference taken before the move (an optimizer built first) sees the moved values.
  torch moves a cuda parameter in place (``param.data = ...``); a lazax tensor is a
  different tensor type from a CPU one, so torch would otherwise wrap the result in a
  new ``Parameter`` per module and silently untie the weights.
- A tensor held by several slots (a tied parameter, a shared buffer) is converted once:
  one device copy, and the slots keep sharing it.
- Where the exchange is impossible (the old tensor is still referenced from C++, e.g.
  by a live autograd graph, or is weakly referenced), every slot still gets the same
  new ``Parameter``: the tie holds, only the old object is left behind.
- ``load_state_dict(..., assign=True)``: slots that shared one parameter before get one
  parameter again when the tensors assigned to them share a lazax storage and layout.
"""

from __future__ import annotations

import functools
import threading

import torch

from ..tensor.lazy import LazyTensor

__all__ = ["install"]

_installed = False
# Set while a wrapped call runs: children's ``_apply`` calls go straight to torch's.
_ACTIVE = threading.local()


def _parameter_slots(module: torch.nn.Module, recurse: bool) -> dict[int, tuple]:
    """``id(param) -> (param, [(owner, name), ...])`` for every parameter slot."""
    owners = module.modules() if recurse else (module,)
    groups: dict[int, tuple] = {}
    for owner in owners:
        for name, param in owner._parameters.items():
            if param is not None:
                groups.setdefault(id(param), (param, []))[1].append((owner, name))
    return groups


def _retie(groups: dict[int, tuple]) -> None:
    """After a move: each group of slots holds its original object again (or, where its
    content cannot be exchanged, one shared new object)."""
    for original, places in groups.values():
        now = [owner._parameters.get(name) for owner, name in places]
        moved = next((p for p in now if p is not original and p is not None), None)
        if moved is None:
            continue  # moved in place (``.data =``), or not moved
        keep = moved
        try:
            torch.utils.swap_tensors(original, moved)
            keep = original
        except RuntimeError:
            pass
        for owner, name in places:
            if owner._parameters.get(name) is not None:
                owner._parameters[name] = keep


def _wrap_apply(original_apply):
    @functools.wraps(original_apply)
    def _apply(self, fn, recurse=True):
        if getattr(_ACTIVE, "on", False):
            return original_apply(self, fn, recurse)
        groups = _parameter_slots(self, recurse)
        converted: dict[int, tuple] = {}
        touched = False

        def convert(t):
            nonlocal touched
            hit = converted.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
            out = fn(t)
            if type(t) is LazyTensor or type(out) is LazyTensor:
                touched = True
                converted[id(t)] = (t, out)
            return out

        _ACTIVE.on = True
        try:
            result = original_apply(self, convert, recurse)
        finally:
            _ACTIVE.on = False
        if touched:
            _retie(groups)
        return result

    return _apply


def _same_lazax_tensor(a, b) -> bool:
    return (
        type(a) is LazyTensor
        and type(b) is LazyTensor
        and a._lz_storage is b._lz_storage
        and a._lz_key == b._lz_key
    )


def _wrap_load_state_dict(original_load):
    @functools.wraps(original_load)
    def load_state_dict(self, state_dict, strict=True, assign=False):
        if not assign:
            return original_load(self, state_dict, strict=strict, assign=assign)
        groups = _parameter_slots(self, True)
        result = original_load(self, state_dict, strict=strict, assign=assign)
        for _, places in groups.values():
            if len(places) < 2:
                continue
            first = places[0][0]._parameters.get(places[0][1])
            for owner, name in places[1:]:
                now = owner._parameters.get(name)
                if now is not first and _same_lazax_tensor(now, first):
                    owner._parameters[name] = first
        return result

    return load_state_dict


def install() -> None:
    global _installed
    if _installed:
        return
    module = torch.nn.Module
    module._apply = _wrap_apply(module._apply)
    module.load_state_dict = _wrap_load_state_dict(module.load_state_dict)
    _installed = True
