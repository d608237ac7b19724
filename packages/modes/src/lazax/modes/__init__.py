"""lazax.modes: the public front-end over the one lazy-tensor machine.

import lazax.modes as lx
dev = lx.device()                 # torch.device("lazax:0")
model = Model().to(dev)
...                               # ops are traced, not run
lx.sync()                         # one graph: compiled once, cached, run async
lx.metrics.counter_value("CachedCompile")

mesh = lx.Mesh(range(8), (2, 4), ("data", "model"))   # SPMD over 8 devices
lx.mark_sharding(weight, mesh, (None, "model"))       # XLA's partitioner splits it
h = lx.sharding_constraint(h, mesh, ("data", None))   # a torch op: traced graphs keep it
lx.shard_map(fn, mesh, in_specs, out_specs)(x)        # fn on each device's own piece
lx.max_memory_allocated()                             # device memory, as torch.cuda's
for x, y in lx.DeviceLoader(data_loader): ...         # batches moved while the step runs

y = lx.call_jax(jax_fn, x, w)      # a JAX function as one node of the graph (docs/jax.md)
a = lx.to_jax(t); t = lx.from_jax(a)                  # the same buffer, no copy
lx.holds_device_data(t)            # False while t is pending IR, True once synced
print(lx.program_text([loss]))     # the HLO the next sync would compile, run nothing
with lx.compile_limit(0): serve()   # after warm-up: a new program raises, naming why
"""

from lazax import executor as _executor
from lazax.executor import (
    CompileLimitExceeded,
    GraphLimitExceeded,
    MemoryMapsExhausted,
    Mesh,
    Shard,
    Sharding,
    TracedOp,
    call_jax,
    clear_sharding,
    disable_manual_sharding,
    enable_manual_sharding,
    from_jax,
    get_sharding,
    holds_device_data,
    manual_all_gather,
    manual_all_reduce,
    manual_mesh,
    manual_permute,
    manual_reduce_scatter,
    manual_shift,
    mark_sharding,
    program_text,
    register_library_path,
    register_lowering,
    scan_layers,
    shard_map,
    shard_shapes,
    sharding_constraint,
    shards,
    to_jax,
)

from . import distributed, metrics
from ._compile import CompiledRegion, compile
from ._eager import eager_mode, eager_mode_context, is_eager_mode
from ._loader import DeviceLoader
from ._memory import (
    max_memory_allocated,
    memory_allocated,
    memory_info,
    memory_stats,
    reset_peak_memory_stats,
)
from ._version import __version__

__all__ = [
    "CompileLimitExceeded",
    "CompiledRegion",
    "DeviceLoader",
    "GraphLimitExceeded",
    "MemoryMapsExhausted",
    "Mesh",
    "Sharding",
    "__version__",
    "call_jax",
    "clear_sharding",
    "compile",
    "compile_limit",
    "device",
    "device_count",
    "device_type",
    "disable_manual_sharding",
    "distributed",
    "dump_graphs",
    "eager_mode",
    "eager_mode_context",
    "enable_manual_sharding",
    "from_jax",
    "get_sharding",
    "global_device_count",
    "holds_device_data",
    "is_eager_mode",
    "manual_all_gather",
    "manual_all_reduce",
    "manual_mesh",
    "manual_permute",
    "manual_reduce_scatter",
    "manual_shift",
    "mark_sharding",
    "max_memory_allocated",
    "memory_allocated",
    "memory_info",
    "memory_stats",
    "metrics",
    "process_count",
    "process_index",
    "program_text",
    "register_library_path",
    "register_lowering",
    "reset_peak_memory_stats",
    "scan_layers",
    "set_persistent_cache_dir",
    "Shard",
    "shard_map",
    "shard_shapes",
    "sharding_constraint",
    "shards",
    "sync",
    "sync_tensors",
    "to_jax",
    "TracedOp",
    "wait_device_ops",
]


def device_type() -> str:
    """The name torch knows lazax's device by (``"lazax"``, or ``LAZAX_DEVICE_NAME``'s),
    without starting the runtime: a script may still join a job of several processes
    (``lx.distributed.initialize``) after asking."""
    return _executor.DEVICE_NAME


def device(index: int = 0):
    """The lazax device ``index`` as a ``torch.device`` (``lazax:<index>``)."""
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"lazax device index {index} is out of range: this process has {count} "
            f"device(s) on platform {_executor.EXECUTOR.runtime.platform!r}."
        )
    return _executor.device(index)


def device_count() -> int:
    """How many devices of the runtime's platform this process has (its own; under
    jax's distributed runtime, ``global_device_count()`` counts every process's)."""
    return len(_executor.EXECUTOR.runtime.devices)


def global_device_count() -> int:
    """How many devices every process of the job has together (a ``Mesh`` numbers
    them); ``device_count()`` in a single process."""
    return len(_executor.EXECUTOR.runtime.global_devices)


def process_index() -> int:
    """This process's index in the job (0 unless jax's distributed runtime joined
    several processes)."""
    return _executor.EXECUTOR.runtime.process_index


def process_count() -> int:
    """How many processes the job has (1 unless jax's distributed runtime joined
    several)."""
    return _executor.EXECUTOR.runtime.process_count


def compile_limit(limit: int = 0):
    """``with lx.compile_limit(0): serve(...)``: at most ``limit`` new programs compile
    inside the block, in any mode (lazy syncs, eager ops, ``lx.compile`` regions,
    ``torch.compile(backend="lazax")`` graphs); the next raises
    ``lx.CompileLimitExceeded`` at the call that would compile it, naming it and what
    changed since its site last compiled, before anything runs (every tensor keeps its
    value). Programs already cached (warm-up) run freely; one read from the persistent
    cache counts, as it was not in memory. Blocks nest: each counts its own."""
    return _executor.EXECUTOR.compile_limit(limit)


def sync(wait: bool = False) -> None:
    """Cut the trace: run every live tensor's pending work as one graph.

    The graph is compiled on first sight of its hash and taken from the cache after.
    Execution is asynchronous; ``wait=True`` waits for this graph's results only (an
    earlier ``sync()`` may still be running: ``wait_device_ops()`` waits for all).
    Reading a value (``.item()``, ``.cpu()``, ``print``) waits for it.

    Values an op rejects on the CPU (an index out of range, a class target past the
    classes) are checked on the device: the error is raised by the first ``sync()``
    after that graph finished, by ``sync(wait=True)``, or by the next read
    (``LAZAX_CHECKS=0`` turns the checks off; docs/reliability.md).
    """
    _executor.sync(wait=wait)


def dump_graphs(path):
    """``with lx.dump_graphs("dumps"): step()``: write every graph compiled in the block
    to ``path``: lazax's IR, the StableHLO jax lowered and XLA's optimized HLO, named
    after the program, with a line per compile in ``summary.jsonl`` saying why it
    compiled. ``LAZAX_DUMP_DIR`` does the same for a whole run (docs/profiling.md)."""
    return _executor.EXECUTOR.dump_graphs(path)


def wait_device_ops() -> None:
    """Block until every execution dispatched so far whose results a tensor holds has
    finished (as ``torch.cuda.synchronize()``; torch_xla's ``xm.wait_device_ops()``).
    Time a loop of ``sync()`` steps with it; pending work that was never synced is not
    run (call ``sync()`` first). Raises the first failed device-side check of what ran."""
    _executor.EXECUTOR.runtime.wait_all()
    _executor.EXECUTOR.read_checks()


def set_persistent_cache_dir(path, read_only: bool = False) -> bool:
    """Keep compiled graphs in ``path`` across processes (a restarted job compiles
    nothing it compiled before); ``read_only`` for a shared cache that others fill.
    Same as ``LAZAX_PERSISTENT_CACHE_DIR`` / ``LAZAX_PERSISTENT_CACHE_READ_ONLY``. Call it
    before anything runs on the device. Returns False, with a warning, when the directory
    cannot be used (the run goes on without it). A directory it creates is private to
    the user."""
    return _executor.EXECUTOR.set_persistent_cache_dir(path, read_only)


def sync_tensors(tensors, wait: bool = False) -> None:
    """Run only the pending work that ``tensors`` need."""
    _executor.sync_tensors_graph(list(tensors), wait=wait)
