"""The program a set of tensors would run, as text, without running or compiling it.

Contract: ``program_text(tensors, form="hlo")`` builds the graph whose outputs are
these tensors' values, pending or not (a tensor that holds device data is a program
that returns its input), lowers it as the barrier would (the same parameters, Python
numbers packed, SPMD input shardings and ``mark_sharding`` constraints) and returns
the text of that program: XLA's HLO before its optimizations (``"hlo"``: what torch_xla
prints for ``_get_xla_tensors_hlo``, with every sharding as XLA reads it) or jax's
StableHLO (``"stablehlo"``), or lazax's own IR of the graph before lowering
(``"lazax"``: one line per node, as ``lx.dump_graphs`` writes it). Which inputs the
sync would donate (an output written over its input's buffer) is decided at the sync
and not shown. Nothing executes, nothing compiles, no counter moves and the tensors
stay pending: the next sync runs them as if this was never asked (a view's value is
built for the look, not kept). All tensors must live on one ``lazax:N`` device (or
one mesh); a graph with collectives between a job's processes has no HLO of its own
here (``ValueError``). A tensor that holds a value per device (manual sharding) is
shown as the program carries it: its pieces stacked, ``(devices, *piece)``.
``lowered_text(graph, form="stablehlo")`` is the same for a
collected graph (tests and tools that hold one: ``lx.testing.last_program``).
"""

from __future__ import annotations

from lazax import ir

from ..state.values import peek_value
from .executor import EXECUTOR
from .lower import lower
from .placement import kept_layouts, placement, written_leaves

__all__ = ["lowered_text", "program_text"]

_FORMS = ("hlo", "stablehlo", "lazax")


def program_text(tensors, form: str = "hlo") -> str:
    """The text of the program of ``tensors`` (see the module's contract)."""
    if form not in _FORMS:
        raise ValueError(f"lazax: a program's text is one of {_FORMS}, not {form!r}")
    tensors = list(tensors)
    if not tensors:
        raise ValueError("lazax: program_text needs at least one lazax tensor")
    devices = set()
    for t in tensors:
        storage = getattr(t, "_lz_storage", None)
        if storage is None:
            found = f"a tensor on {t.device}" if hasattr(t, "device") else type(t).__name__
            raise TypeError(f"lazax: program_text takes lazax tensors; found {found}")
        devices.add(storage.device_index)
    if len(devices) > 1:
        raise ValueError(
            f"lazax: the tensors live on several devices ({sorted(devices)}), and each "
            "device runs a program of its own; ask for one device's tensors at a time"
        )
    (index,) = devices
    graph = ir.collect([peek_value(t) for t in tensors])
    if form == "lazax":
        return ir.dump(graph)
    # What each root would replace at a sync: a whole tensor's storage (a view's value
    # is a new one), so that an input held padded comes back padded, as it would.
    targets = [t._lz_storage if t._lz_view is None else None for t in tensors]
    layouts = kept_layouts(graph, written_leaves(targets))
    name = EXECUTOR.program_name(graph.roots, False)
    return lowered_text(graph, form, layouts, index, name)


def lowered_text(
    graph: ir.Graph, form: str = "stablehlo", layouts=None, device_index: int = 0, name=None
) -> str:
    """The text of ``graph``'s program as the sync would lower it for ``lazax:N``
    (``layouts``: ``lower``'s), without compiling it; the module is ``jit_<name>``
    (``jit_fn`` unnamed)."""
    runtime = EXECUTOR.compiler.runtime
    placed = placement(graph, runtime)
    fn, arg_specs = lower(graph, None, layouts, stacked=True)
    if fn.per_process:
        raise ValueError(
            "lazax: these tensors' program holds collectives between the job's processes, "
            "which every process runs together; dump it instead (lx.dump_graphs)"
        )
    shardings = None if placed is None else fn.packing.shardings(placed[1])
    return runtime.program_text(
        fn,
        arg_specs,
        device=runtime.devices[device_index] if device_index else None,
        arg_shardings=shardings,
        name=name,
        form=form,
    )
