"""Teaching dynamo that a lazax tensor is a device tensor.

Contract: ``install()`` (idempotent; done when ``lazax.dynamo`` is imported, which
``torch.compile(backend="lazax")`` does through the entry point before it traces) makes
dynamo treat ``LazyTensor`` as it treats any tensor on a device, keeps dynamo out of
lazax's own Python code, and has dynamo run ``call_jax``'s preparation instead of
tracing it.

Why this needs torch internals: dynamo only models plain tensors and *traceable*
wrapper subclasses (ones that unflatten into inner tensors) as tensors. A lazax tensor is
neither: it is a whole device, like a CUDA or XLA tensor whose kernels happen to be in
Python. Dynamo's builder picks how to model a value by exact type, in a table
(``VariableBuilder._type_dispatch``); registering ``LazyTensor`` there beside
``torch.Tensor`` makes it a graph input faked as a ``FakeTensor(device="lazax:N")``.
Second, dynamo tries to compile every Python frame run while a compiled function runs
(graph breaks); lazax's dispatcher is such a frame, run per op, and must be skipped with
everything it calls. Both reaches are checked here, so a torch that moves them fails at
import with a message, not later with a wrong graph.
"""

from __future__ import annotations

import torch

from lazax.executor import LazyTensor, prepare_call_jax, traced_backward_setting

__all__ = ["install", "refuse_traced_backward_past_hooks"]

_installed = False


def _unknown_torch(what: str) -> ImportError:
    """The error for a torch whose dynamo no longer has what lazax reaches into."""
    return ImportError(
        f"lazax.dynamo does not know this torch's dynamo (torch {torch.__version__}): "
        f"{what} is gone. Use lazax's lazy or compile mode, or a torch lazax.dynamo "
        f"supports."
    )


def _register_tensor_type() -> None:
    from torch._dynamo import config
    from torch._dynamo.variables.builder import VariableBuilder

    impl = getattr(VariableBuilder, "_type_dispatch_impl", None)
    if impl is None or not hasattr(VariableBuilder, "wrap_tensor"):
        raise _unknown_torch("VariableBuilder._type_dispatch_impl")
    for trace_numpy in (False, True):  # the table is cached per this flag
        table = impl(trace_numpy)
        table[LazyTensor] = table[torch.Tensor]
    # Read by dynamo's ``istensor`` (attribute access, guards on tensor methods).
    config.traceable_tensor_subclasses.add(LazyTensor)
    # Data-dependent output shapes (masked_select, x[mask], where(cond)): left to break
    # the graph, dynamo breaks inside its model of the tensor subclass, and the resume
    # code it generates names a global it has already removed (NameError, torch 2.13,
    # any backend). Captured instead, they reach lazax's graph as ops like any other,
    # and lazax computes their shapes itself. Process-wide, as every dynamo setting.
    config.capture_dynamic_output_shape_ops = True
    # ``loss.backward()`` inside a compiled function: traced (as ``autograd.grad`` whose
    # results are written to ``.grad``) instead of breaking the graph, so that forward
    # and backward are one graph and a whole training step replays as few graphs as the
    # optimizer allows. Where tracing it would be unsafe (a returned tensor still needs
    # the consumed graph) dynamo breaks the graph at the call, as before. Not while a
    # lazax process group lives: a traced backward bypasses DDP's and FSDP2's hooks.
    config.trace_autograd_ops = traced_backward_setting(True)


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
        raise _unknown_torch("torch._dynamo.variables.builder.infer_subclass_type")
    if getattr(infer, "_lazax", False):
        return

    def infer_subclass_type(value):
        if type(value) is LazyTensor:
            return None
        return infer(value)

    infer_subclass_type._lazax = True
    builder.infer_subclass_type = infer_subclass_type


def _capturable_optimizers() -> None:
    """An optimizer traced by dynamo keeps its step count on the device when its
    parameters are on CUDA or XPU (``capturable``), so that the compiled step reads no
    host value and writes no CPU tensor; dynamo decides that from ``is_cuda`` and
    ``is_xpu``. lazax parameters get the same: without it the step count is a CPU tensor
    the graph increments, which a replay cannot express, and the step is interpreted."""
    from torch._dynamo.variables.optimizer import OptimizerVariable

    original = getattr(OptimizerVariable, "_set_capturable", None)
    if original is None:
        raise _unknown_torch("OptimizerVariable._set_capturable")
    if getattr(original, "_lazax", False):
        return

    def _set_capturable(self, tx):
        for group in self.value.param_groups:
            params = group.get("params", [])
            if (
                "capturable" in group
                and params
                and all(type(p) is LazyTensor and p not in self.value.state for p in params)
            ):
                group["capturable"] = True
        return original(self, tx)

    _set_capturable._lazax = True
    OptimizerVariable._set_capturable = _set_capturable


def _skip_lazax_frames() -> None:
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except ImportError:  # pragma: no cover - older torch: skip the frame only
        from torch._dynamo.eval_frame import skip_code

        skip_code(LazyTensor.__torch_dispatch__.__func__.__code__)
        return
    skip_all = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    set_code_exec_strategy(LazyTensor.__torch_dispatch__.__func__.__code__, skip_all)


def _run_call_jax_preparation_eagerly() -> None:
    """``lx.call_jax`` traces the JAX function with jax on a cache miss: dynamo cannot
    trace that, and must not break the graph on it. Run once while dynamo traces, its
    result (the node's code, the output's structure) is a constant of the graph."""
    torch._dynamo.assume_constant_result(prepare_call_jax)


def _control_flow_past_aot_checks() -> None:
    """On a compiled graph's first call, AOTAutograd runs it under a dispatch mode that
    checks custom ops for aliasing and answers NotImplemented for tensor types it does
    not know; for a higher-order operator (``torch.cond``, ``while_loop``, ``scan``)
    torch returns that NotImplemented as the result instead of trying the lazax tensor's
    rule (torch 2.13). The operators are passed through that mode to lazax's rules (the
    check concerns custom ops, not these)."""
    from torch._functorch._aot_autograd import runtime_wrappers
    from torch._higher_order_ops.cond import cond_op
    from torch._higher_order_ops.scan import scan_op
    from torch._higher_order_ops.while_loop import while_loop_op

    mode = getattr(runtime_wrappers, "_AnalyzeCustomOpInputOutputMode", None)
    if mode is None:  # a torch without the check: nothing to pass through
        return
    for op in (cond_op, while_loop_op, scan_op):
        if mode not in op.python_key_table:
            op.py_impl(mode)(lambda _mode, *args, op=op, **kwargs: op(*args, **kwargs))


def install() -> None:
    global _installed
    if _installed:
        return
    _run_call_jax_preparation_eagerly()
    _control_flow_past_aot_checks()
    _register_tensor_type()
    _model_as_plain_tensor()
    _capturable_optimizers()
    _skip_lazax_frames()
    _installed = True


def _hooked(t) -> bool:
    """Whether ``t`` has gradient hooks a traced backward would not run."""
    return bool(getattr(t, "_backward_hooks", None)) or bool(
        getattr(t, "_post_accumulate_grad_hooks", None)
    )


def refuse_traced_backward_past_hooks(gm: torch.fx.GraphModule, example_inputs) -> None:
    """Raise if the graph traced a ``backward()`` (``trace_autograd_ops``, turned on
    above) over tensors with gradient hooks (``register_hook``,
    ``register_post_accumulate_grad_hook``): the traced backward does not run them
    (torch 2.13, any backend), so the step would train on unhooked gradients, silently.
    The hooks of DDP and FSDP2 are covered by turning the flag off once a lazax process
    group is made."""
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.autograd.grad:
            continue
        inputs = node.args[1] if len(node.args) > 1 else node.kwargs.get("inputs", ())
        for n in inputs if isinstance(inputs, (list, tuple)) else (inputs,):
            i = placeholders.get(n)
            if i is not None and i < len(example_inputs) and _hooked(example_inputs[i]):
                raise RuntimeError(
                    "lazax: this compiled function calls backward() on tensors with "
                    "gradient hooks (register_hook / register_post_accumulate_grad_hook), "
                    "and lazax.dynamo traces backward() into the graph "
                    "(torch._dynamo.config.trace_autograd_ops), which does not run such "
                    "hooks. Set torch._dynamo.config.trace_autograd_ops = False (the "
                    "graph then breaks at backward() and the hooks run), or compile the "
                    "model rather than the whole step."
                )
