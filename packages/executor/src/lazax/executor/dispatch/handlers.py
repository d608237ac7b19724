"""``LazyTensor.__torch_dispatch__``: every aten op on a lazax tensor lands here.

Contract: the op's handler is built once per overload: a special rule (``special``:
copies, transfers, reads, and what the hooks register), an ``OpPlan`` run by
``run.run_plan`` when a lowering exists (in-place ops use their functional rule and
write back; ``out=`` overloads run it and copy into ``out``), else, for a composite op
that reached lazax below autograd (under ``torch.inference_mode``, or while a body is
traced), torch's own decomposition, else the CPU fallback. Elementwise ``_foreach_*``
ops run once per stacked storage where their lists cover one row by row
(``foreach_rows``).
Ops and syncs take ``EXECUTOR.sync_lock`` in turn (see ``dispatch``). While the per-op
metrics are on (``metrics.op_metrics``), ``dispatch_timed`` is installed instead: each
op's time in its handler is one sample of the ``LazyTracing`` metric (torch_xla's name).
"""

from __future__ import annotations

from time import perf_counter

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import metrics
from ..barrier.executor import EXECUTOR
from ..ops import get_lowering
from ..tensor.lazy import LazyTensor
from ..tensor.transfer import to_cpu
from .fallback import fallback
from .foreach_rows import over_rows, stacks_rows
from .optimizer_state import state_scalar_zero, state_zeros
from .out_checks import checked_out
from .plans import FUNCTIONAL, INPLACE, VIEW, OpPlan
from .run import run_in_place, run_plan, upload
from .special import SPECIAL, write_outs

__all__ = ["DISPATCHERS", "dispatch", "dispatch_timed", "forget_handlers", "make_handler"]

aten = torch.ops.aten

_HANDLERS: dict = {}


def _is_out(arg) -> bool:
    return arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write


def _signature(func, drop_out: bool) -> tuple:
    """Argument names and types, without alias annotations (and without out= args)."""
    return tuple(
        (a.name, str(a.type), a.kwarg_only)
        for a in func._schema.arguments
        if not (drop_out and _is_out(a))
    )


# In-place ops whose functional form has another name.
_FUNCTIONAL_NAMES = {"normal": ("normal_functional",)}


def _functional_counterpart(func, drop_out: bool = False):
    """The functional overload taking the same arguments: ``add_.Tensor`` ->
    ``add.Tensor``, ``pow_.Tensor`` -> ``pow.Tensor_Tensor``, ``add.out`` -> ``add.Tensor``.
    Matching by signature, not by overload name, so that a rule is never fed its
    arguments in another order (``pow_.Scalar`` is not ``pow.Scalar``)."""
    name = func._schema.name.split("::")[1]
    if name.startswith("__i") and not drop_out:  # x <<= y: __ilshift__ -> __lshift__
        name = "__" + name[3:] + "_"
    base = name if drop_out else (name[:-1] if name.endswith("_") else None)
    if base is None:
        return None
    wanted = _signature(func, drop_out)
    for packet_name in (base, *_FUNCTIONAL_NAMES.get(base, ())):
        packet = getattr(aten, packet_name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            candidate = getattr(packet, overload)
            if candidate is func or any(_is_out(a) for a in candidate._schema.arguments):
                continue
            if _signature(candidate, False) == wanted:
                return candidate
    return None


_FACTORY_OPTIONS = ("dtype", "layout", "device", "pin_memory")


def _factory_counterpart(func):
    """A factory's ``out=`` overload -> the factory taking the same arguments plus
    ``dtype``/``device`` (``arange.out`` -> ``arange.default``, ``linspace.out`` ->
    ``linspace.default``): torch's composites (``hann_window``) fill an ``out`` tensor."""
    wanted = _signature(func, drop_out=True)
    packet = getattr(aten, func._schema.name.split("::")[1], None)
    for overload in packet.overloads() if packet is not None else ():
        candidate = getattr(packet, overload)
        arguments = candidate._schema.arguments
        if any(_is_out(a) for a in arguments) or "dtype" not in {a.name for a in arguments}:
            continue
        if _signature(candidate, False) == wanted + tuple(
            (a.name, str(a.type), a.kwarg_only) for a in arguments if a.name in _FACTORY_OPTIONS
        ):
            return candidate
    return None


def _factory_out(factory):
    """Run the factory with ``out``'s dtype and device, then write ``out`` (resized)."""

    def run(args, kwargs):
        out = kwargs["out"]
        options = {k: v for k, v in kwargs.items() if k != "out"}
        result = factory(*args, **options, dtype=out.dtype, device=out.device)
        return write_outs([out], (result,))

    return run


def _run_out(func, plan: OpPlan, args: tuple, kwargs: dict):
    """An ``out=`` overload: the functional rule, then a copy into each out tensor."""
    out_names = [a.name for a in func._schema.arguments if _is_out(a)]
    outs = [kwargs[n] for n in out_names]
    result = run_plan(plan, args, {k: v for k, v in kwargs.items() if k not in out_names})
    return write_outs(outs, result if isinstance(result, (tuple, list)) else (result,))


# Ops that alias their input although their schema does not say so: torch's composite
# out= kernels (kron.out, ...) write through an _unsafe_view of the out tensor.
_UNDECLARED_VIEWS = {"aten::_unsafe_view"}


def _is_view(func) -> bool:
    if func._schema.name in _UNDECLARED_VIEWS:
        return True
    rule = get_lowering(func)
    if rule is not None and rule.copies:  # an alias lazax computes as a new tensor
        return False
    returns = func._schema.returns
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    )


def _mutates(func) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


# Ops whose index tensors may live on the CPU, as torch allows for cuda tensors
# (``x[torch.tensor([0, 2])] = y`` on the device): uploaded before the op runs.
_CPU_INDICES_OK = {
    "aten::index",
    "aten::index_put",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::_unsafe_index",
    "aten::_unsafe_index_put",
}


def _upload_indices(handler):
    def run(args, kwargs):
        indices = args[1]
        if any(type(i) is not LazyTensor and isinstance(i, torch.Tensor) for i in indices):
            moved = [
                upload(i) if isinstance(i, torch.Tensor) and type(i) is not LazyTensor else i
                for i in indices
            ]
            args = (args[0], moved, *args[2:])
        return handler(args, kwargs)

    return run


def forget_handlers() -> None:
    """Build every op's handler anew at its next call (after ``register_special``)."""
    _HANDLERS.clear()


def make_handler(func):
    handler = _make_handler(func)
    if func._schema.name in _CPU_INDICES_OK:
        return _upload_indices(handler)
    if func in (aten.lift_fresh.default, aten.lift_fresh_copy.default):
        return _fake_when_faking(handler, func is aten.lift_fresh.default)
    if func is aten.zeros_like.default:
        return state_zeros(handler)
    if func is aten.zero_.default:
        return state_scalar_zero(handler)
    if stacks_rows(func):
        return over_rows(func, handler)
    return handler


def _fake_when_faking(handler, lifts_itself: bool):
    """``torch.tensor(data, device="lazax")`` while dynamo or AOTAutograd trace a function
    that makes a constant tensor: torch builds the data below the tracing modes, so they
    meet a real lazax tensor in ``lift_fresh`` (``lift_fresh_copy`` under make_fx), refuse
    it (a tensor subclass they do not know) and hand it here, unrecorded. A CUDA tensor
    there would be lifted as a constant; this lifts the same values as a CPU constant
    and moves it to the device, through the modes, so the trace records both steps and
    its example value is a fake tensor on the lazax device."""

    def run(args, kwargs):
        if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
            if lifts_itself:  # torch's kernel returns the tensor itself: no new tensor
                return args[0]
            return handler(args, kwargs)
        t = args[0]
        with _disable_current_modes():
            host = to_cpu(t)
        return aten.lift_fresh_copy.default(host).to(t.device)

    return run


def _make_handler(func):
    special = SPECIAL.get(func)
    if special is not None:
        return special
    if _mutates(func):
        arguments = func._schema.arguments
        first = arguments[0]
        if any(_is_out(a) for a in arguments):
            functional = _functional_counterpart(func, drop_out=True)
            factory = _factory_counterpart(func) if functional is None else None
            if factory is not None and get_lowering(factory) is not None:
                return checked_out(func, _factory_out(factory))
            rule = get_lowering(functional) if functional is not None else None
            if rule is None or _is_view(functional):
                return checked_out(func, lambda args, kwargs: fallback(func, args, kwargs))
            plan = OpPlan(functional, functional.name(), FUNCTIONAL, rule.random)
            return checked_out(func, lambda args, kwargs: _run_out(func, plan, args, kwargs), plan)
        inplace_self = first.alias_info is not None and first.alias_info.is_write
        functional = _functional_counterpart(func) if inplace_self else None
        rule = get_lowering(functional) if functional is not None else None
        if rule is None:
            return lambda args, kwargs: fallback(func, args, kwargs)
        if torch.Tag.inplace_view in func.tags:
            return _inplace_view_handler(func, _make_handler(functional))
        plan = OpPlan(func, functional.name(), INPLACE, rule.random)
        return lambda args, kwargs: run_in_place(plan, args, kwargs)
    rule = get_lowering(func)
    if rule is None:
        view = _view_of_copy(func)
        if view is not None:  # unsqueeze_copy: the view, copied out (functionalized code)
            return _copied(_make_handler(view))
        if func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
            # Reached below autograd, where torch did not decompose it: under
            # torch.inference_mode (which skips the autograd keys: linear, layer_norm,
            # .cpu()'s aten::to all arrive here), or while a loop or branch body is
            # traced. torch's own decomposition, as the autograd key would have run it,
            # into ops lazax lowers: the CPU fallback would run the whole op on the
            # host, and bring .cpu()'s result back to the device.
            return lambda args, kwargs: func.decompose(*args, **kwargs)
        return lambda args, kwargs: fallback(func, args, kwargs)
    plan = OpPlan(func, func.name(), VIEW if _is_view(func) else FUNCTIONAL, rule.random)
    return lambda args, kwargs: run_plan(plan, args, kwargs)


def _copied(view_handler):
    def run(args, kwargs):
        out = view_handler(args, kwargs)
        if isinstance(out, (list, tuple)):  # unbind_copy, split_with_sizes_copy
            return type(out)(o.clone(memory_format=torch.contiguous_format) for o in out)
        return out.clone(memory_format=torch.contiguous_format)

    return run


def _view_of_copy(func):
    """``aten::<view>_copy.<overload>`` -> ``aten::<view>.<overload>`` when lazax lowers
    that view op (functionalization writes views as these copies)."""
    namespace, _, name = func._schema.name.partition("::")
    if namespace != "aten" or not name.endswith("_copy"):
        return None
    packet = getattr(aten, name[: -len("_copy")], None)
    view = getattr(packet, func._overloadname, None) if packet is not None else None
    if view is None or get_lowering(view) is None or not _is_view(view):
        return None
    return view


def _inplace_view_handler(func, view_handler):
    """``t_``, ``transpose_``, ``squeeze_``, ``unsqueeze_``, ``as_strided_``: change
    ``self``'s shape and strides, never its data. The view op gives the lazax view;
    the op itself, below the Python dispatch key, gives the torch metadata (torch's
    own composite kernel, so torch's checks and errors)."""

    def run(args, kwargs):
        self = args[0]
        view = view_handler(args, kwargs)
        with torch._C._DisableTorchDispatch():
            func(*args, **kwargs)
        was_view = self._lz_view is not None
        self._lz_view = view._lz_view
        self._lz_value = view._lz_value
        self._lz_seen = view._lz_seen
        self._lz_key = view._lz_key
        if self._lz_view is not None and not was_view:
            self._lz_storage.add_view(self)
        return self

    return run


# An op reads storages' IR; a sync decides from who holds that IR what it may donate.
# Ops and syncs of several threads (the autograd engine runs backward on a thread of
# its own) take turns, so that no op reads IR between a decision and its hand-back.
_acquire = EXECUTOR.sync_lock.acquire

_release = EXECUTOR.sync_lock.release

_record = metrics.record

_clock = perf_counter


def dispatch(cls, func, types, args=(), kwargs=None):
    # Keyed by id: OpOverload.__hash__ is Python code, and overloads live forever.
    handler = _HANDLERS.get(id(func))
    if handler is None:
        handler = _HANDLERS[id(func)] = make_handler(func)
    _acquire()
    try:
        return handler(args, kwargs or {})
    finally:
        _release()


def dispatch_timed(cls, func, types, args=(), kwargs=None):
    """``dispatch``, each op's time a sample of ``LazyTracing`` (torch_xla's name for
    the time an op spends being traced; an eager op's run and an op that the handler
    dispatches in turn are included: nested samples). Installed only while the per-op
    metrics are on."""
    handler = _HANDLERS.get(id(func))
    if handler is None:
        handler = _HANDLERS[id(func)] = make_handler(func)
    _acquire()
    start = _clock()
    try:
        return handler(args, kwargs or {})
    finally:
        _record("LazyTracing", _clock() - start)
        _release()


# Both, for tools that must know lazax's dispatcher frames (dynamo skips them).
DISPATCHERS = (dispatch, dispatch_timed)


def _install(timed: bool) -> None:
    LazyTensor.__torch_dispatch__ = classmethod(dispatch_timed if timed else dispatch)


metrics.on_op_metrics(_install)
