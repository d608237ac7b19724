"""What the ``"lazax"`` backend sets in dynamo, process-wide.

Contract: ``install()`` (idempotent; done when ``lazax.dynamo`` is imported, which
``torch.compile(backend="lazax")`` does through the entry point before it traces) makes
sure dynamo knows the lazax tensor (``lazax.executor.install_into_dynamo``: the executor
teaches it as soon as dynamo is imported, since torch's control-flow operators need it
outside ``torch.compile`` too), then sets what only the backend wants: data-dependent
output shapes captured, ``backward()`` traced inside a compiled function, and the
optimizer's step count kept on the device for lazax parameters (``capturable``).
``refuse_traced_backward_past_hooks`` refuses a traced backward that would skip gradient
hooks. Each reach into dynamo is checked, so a torch that moves one fails at import with
a message, not later with a wrong graph.
"""

from __future__ import annotations

import torch

from lazax.executor import LazyTensor, install_into_dynamo, traced_backward_setting, unknown_torch

__all__ = ["install", "refuse_traced_backward_past_hooks"]

_installed = False


def _set_dynamo_config() -> None:
    from torch._dynamo import config

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


def _capturable_optimizers() -> None:
    """An optimizer traced by dynamo keeps its step count on the device when its
    parameters are on CUDA or XPU (``capturable``), so that the compiled step reads no
    host value and writes no CPU tensor; dynamo decides that from ``is_cuda`` and
    ``is_xpu``. lazax parameters get the same: without it the step count is a CPU tensor
    the graph increments, which a replay cannot express, and the step is interpreted."""
    from torch._dynamo.variables.optimizer import OptimizerVariable

    original = getattr(OptimizerVariable, "_set_capturable", None)
    if original is None:
        raise unknown_torch("OptimizerVariable._set_capturable")
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


def install() -> None:
    global _installed
    if _installed:
        return
    install_into_dynamo()
    _set_dynamo_config()
    _capturable_optimizers()
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
