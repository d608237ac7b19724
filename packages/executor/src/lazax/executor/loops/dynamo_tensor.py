"""Teaching dynamo that a lazax tensor is a device tensor, as soon as dynamo exists.

Contract: ``install()`` (idempotent) makes dynamo treat ``LazyTensor`` as any tensor on a
device, keeps dynamo out of lazax's own Python code, has dynamo run ``call_jax``'s
preparation instead of tracing it, and lets torch's control-flow operators pass
AOTAutograd's custom-op check. ``install_when_dynamo_loads()`` does each part now if
the torch module it reaches into is loaded, and otherwise right after that module's
import, whoever imports it.

Why at dynamo's import and not at ``import lazax``: torch runs ``torch.cond``,
``while_loop``, ``scan`` and ``map`` through ``torch.compile`` even outside a compiled
function, so dynamo must know the lazax tensor before any of them meets one; importing
dynamo costs a process ~1.7 s, which a program that never compiles should not pay. The
moment torch imports dynamo is the earliest sound one and the cheapest: lazax then only
adds entries to tables that are already loaded. What is process-wide dynamo behaviour
(its config flags, the optimizer's capturable step) is not set here: it belongs to the
``"lazax"`` backend (``lazax.dynamo``) and is set when that is imported.

Why this needs torch internals: dynamo only models plain tensors and *traceable*
wrapper subclasses (ones that unflatten into inner tensors) as tensors. A lazax tensor is
neither: it is a whole device, like a CUDA or XLA tensor whose kernels happen to be in
Python. Dynamo's builder picks how to model a value by exact type, in a table
(``VariableBuilder._type_dispatch``); registering ``LazyTensor`` there beside
``torch.Tensor`` makes it a graph input faked as a ``FakeTensor(device="lazax:N")``.
Second, dynamo tries to compile every Python frame run while a compiled function runs
(graph breaks); lazax's dispatcher is such a frame, run per op, and must be skipped with
everything it calls. Each reach is checked, so a torch that moves one fails with a
message naming it, not later with a wrong graph.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading

import torch

from ..dispatch.handlers import DISPATCHERS
from ..interop.calls import prepare_call_jax
from ..tensor.lazy import LazyTensor
from .control_flow import OPERATORS

__all__ = ["install", "install_when_dynamo_loads", "unknown_torch"]

_DYNAMO = "torch._dynamo"
_installed = False
_lock = threading.Lock()


def unknown_torch(what: str) -> ImportError:
    """The error for a torch whose dynamo no longer has what lazax reaches into."""
    return ImportError(
        f"lazax does not know this torch's dynamo (torch {torch.__version__}): {what} is "
        f"gone. torch.compile(backend='lazax') and torch's control-flow operators need it "
        f"on lazax tensors; use a torch lazax supports (see lazax.executor's README)."
    )


def _register_tensor_type() -> None:
    from torch._dynamo import config
    from torch._dynamo.variables.builder import VariableBuilder

    impl = getattr(VariableBuilder, "_type_dispatch_impl", None)
    if impl is None or not hasattr(VariableBuilder, "wrap_tensor"):
        raise unknown_torch("VariableBuilder._type_dispatch_impl")
    for trace_numpy in (False, True):  # the table is cached per this flag
        table = impl(trace_numpy)
        table[LazyTensor] = table[torch.Tensor]
    # Read by dynamo's ``istensor`` (attribute access, guards on tensor methods).
    config.traceable_tensor_subclasses.add(LazyTensor)


def _model_as_plain_tensor() -> None:
    """Dynamo models a tensor subclass's Python attributes itself
    (``TensorWithTFOverrideVariable``) and refuses ``.grad``, ``.data`` and the other
    getters of the tensor base on it: the optimizer's ``p.grad`` and ``zero_grad`` break
    the graph. A lazax tensor has no Python-level behaviour of its own
    (``__torch_function__`` is disabled): its attributes are a plain tensor's, so it is
    modelled as one (``infer_subclass_type`` answers None, as for ``torch.Tensor``)."""
    from torch._dynamo.variables import builder

    infer = getattr(builder, "infer_subclass_type", None)
    if infer is None:
        raise unknown_torch("torch._dynamo.variables.builder.infer_subclass_type")
    if getattr(infer, "_lazax", False):
        return

    def infer_subclass_type(value):
        if type(value) is LazyTensor:
            return None
        return infer(value)

    infer_subclass_type._lazax = True
    builder.infer_subclass_type = infer_subclass_type


def _skip_lazax_frames() -> None:
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except ImportError:  # pragma: no cover - older torch: skip the frame only
        from torch._dynamo.eval_frame import skip_code

        for dispatcher in DISPATCHERS:
            skip_code(dispatcher.__code__)
        return
    skip_all = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    for dispatcher in DISPATCHERS:  # either may be installed (the per-op metrics)
        set_code_exec_strategy(dispatcher.__code__, skip_all)


def _run_call_jax_preparation_eagerly() -> None:
    """``lx.call_jax`` traces the JAX function with jax on a cache miss: dynamo cannot
    trace that, and must not break the graph on it. Run once while dynamo traces, its
    result (the node's code, the output's structure) is a constant of the graph."""
    sys.modules[_DYNAMO].assume_constant_result(prepare_call_jax)


def _control_flow_past_aot_checks() -> None:
    """On a compiled graph's first call, AOTAutograd runs it under a dispatch mode that
    checks custom ops for aliasing and answers NotImplemented for tensor types it does
    not know; for a higher-order operator (``torch.cond``, ``while_loop``, ``scan``,
    ``map``) torch returns that NotImplemented as the result instead of trying the lazax
    tensor's rule (torch 2.13). The operators are passed through that mode to lazax's
    rules (the check concerns custom ops, not these)."""
    from torch._functorch._aot_autograd import runtime_wrappers

    mode = getattr(runtime_wrappers, "_AnalyzeCustomOpInputOutputMode", None)
    if mode is None:  # a torch without the check: nothing to pass through
        return
    for op in OPERATORS:
        if mode not in op.python_key_table:
            op.py_impl(mode)(lambda _mode, *args, op=op, **kwargs: op(*args, **kwargs))


def _install_into_dynamo() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _run_call_jax_preparation_eagerly()
        _register_tensor_type()
        _model_as_plain_tensor()
        _skip_lazax_frames()
        _installed = True


# What to install once each of these modules is loaded. AOTAutograd's runtime wrappers
# are apart from dynamo: dynamo's import does not load them whole when the wrappers'
# own import is what brought dynamo in.
_AFTER_LOAD = {
    "torch._dynamo": _install_into_dynamo,
    "torch._functorch._aot_autograd.runtime_wrappers": _control_flow_past_aot_checks,
}


def install() -> None:
    """Everything, now (imports dynamo if it is not loaded)."""
    for name, then in _AFTER_LOAD.items():
        importlib.import_module(name)
        then()


class _InstallAfterLoad(importlib.abc.Loader):
    """Runs a module's own loader, then what lazax installs into it: Python has no
    post-import hook, so the finder below hands out this loader for the modules of
    ``_AFTER_LOAD`` alone."""

    def __init__(self, loader: importlib.abc.Loader, then):
        self._loader = loader
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        # The module is whole now; restoring the original loader keeps its
        # ``__loader__`` what importlib would have made it.
        module.__loader__ = module.__spec__.loader = self._loader
        self._then()


class _AfterLoadFinder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.waiting: dict[str, object] = {}

    def find_spec(self, fullname, path, target=None):
        then = self.waiting.pop(fullname, None)
        if then is None:
            return None
        if not self.waiting:
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):  # whichever finder would have found it
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _InstallAfterLoad(spec.loader, then)
        return spec


_FINDER = _AfterLoadFinder()


def install_when_dynamo_loads() -> None:
    for name, then in _AFTER_LOAD.items():
        if name in sys.modules:
            then()
        else:
            _FINDER.waiting[name] = then
    if _FINDER.waiting and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
