"""lazax.executor: the tensor layer, the op library and the barrier.

Importing it registers the ``lazax`` device with torch (``DEVICE_NAME``: ``xla`` instead
under ``LAZAX_DEVICE_NAME=xla``, read at import, for the torch_xla compatibility
package). ``LazyTensor`` is the tensor type on ``lazax:N``; ``EXECUTOR`` holds the flags
the modes set (``eager``, ``allow_execution``, ``graph_name``; changed for a block with
``EXECUTOR.mode(...)``),
the sync entry points, the runtime and the computation cache; ``sync_tensors_graph`` /
``sync`` are the barrier; ``metrics`` the counters. ``Replay`` captures a function of
lazax tensors once and runs it by hash afterwards (``CaptureBroken`` when it cannot be;
``replay_signature`` is what a replay is specialised on; ``sync_inputs`` runs its
inputs' pending IR): the dynamo bridge's engine. ``Storage``, ``Layout``,
``new_tensor``, ``new_alias``, ``rebind``, ``lower_graph``, ``sharded_placement``,
``place_sharded_arguments`` and ``sharding_signature`` are for front-ends that build
graphs themselves, with ``CHECKS`` and ``checked_ops``. ``Mesh``, ``mark_sharding``,
``sharding_constraint``, ``clear_sharding``, ``get_sharding`` and ``shard_shapes``: SPMD;
``enable_manual_sharding``, ``disable_manual_sharding``, ``manual_mesh``, ``shard_map``
and the ``manual_*`` collectives: per-device code inside it. The package's folders are
its stages, in import order (see the README).
"""

# The device is renamed before anything makes a torch.device("lazax", i).
from .tensor.device import device, register

register()

from . import metrics  # noqa: E402
from ._version import __version__  # noqa: E402
from .barrier.agreement import GraphsDifferError  # noqa: E402
from .barrier.agreement import describe as describe_graph  # noqa: E402
from .barrier.checks import CHECKS  # noqa: E402
from .barrier.compile_limit import CompileLimitExceeded  # noqa: E402
from .barrier.debug import (  # noqa: E402
    GraphCountSession,
    GraphLimitExceeded,
    TracedOp,
    register_library_path,
)
from .barrier.executor import EXECUTOR, GraphExecutor  # noqa: E402
from .barrier.lower import lower as lower_graph  # noqa: E402
from .barrier.map_guard import MemoryMapsExhausted  # noqa: E402
from .barrier.placement import place_arguments as place_sharded_arguments  # noqa: E402
from .barrier.placement import placement as sharded_placement  # noqa: E402
from .barrier.placement import signature as sharding_signature  # noqa: E402
from .barrier.text import lowered_text, program_text  # noqa: E402
from .config import DEVICE_NAME  # noqa: E402
from .dispatch import handlers as _handlers  # noqa: E402,F401  (sets LazyTensor.__torch_dispatch__)
from .dispatch.kernels import register_kernels  # noqa: E402
from .dispatch.optimizer_state import register_optimizer_hooks  # noqa: E402
from .dispatch.run import apply_eager_sync  # noqa: E402
from .distributed.constraint import mark_sharding, sharding_constraint  # noqa: E402
from .distributed.functional_collectives import install as _install_functional_collectives  # noqa: E402
from .distributed.global_tensors import global_tensor, local_part  # noqa: E402
from .distributed.manual import (  # noqa: E402
    disable_manual_sharding,
    enable_manual_sharding,
    manual_mesh,
    shard_map,
)
from .distributed.manual_collectives import (  # noqa: E402
    manual_all_gather,
    manual_all_reduce,
    manual_permute,
    manual_reduce_scatter,
    manual_shift,
)
from .distributed.process_group import (  # noqa: E402
    LazaxProcessGroup,
    process_group_made,
    traced_backward_setting,
)
from .distributed.sharded_checkpoint import load as load_sharded  # noqa: E402
from .distributed.sharded_checkpoint import save as save_sharded  # noqa: E402
from .distributed.sharding import (  # noqa: E402
    Mesh,
    Shard,
    Sharding,
    clear_sharding,
    get_sharding,
    shard_shapes,
    shards,
)
from .hooks.aliasing import install as _install_aliasing  # noqa: E402
from .hooks.autocast import install as _install_autocast  # noqa: E402
from .hooks.autocast import missing_policies as autocast_missing_policies  # noqa: E402
from .hooks.checkpoint import install as _install_checkpoint  # noqa: E402
from .hooks.data_dependent import install as _install_data_dependent  # noqa: E402
from .hooks.dlpack import install as _install_dlpack  # noqa: E402
from .hooks.module_moves import install as _install_module_moves  # noqa: E402
from .hooks.pinned import install as _install_pinned  # noqa: E402
from .hooks.storages import install as _install_storages  # noqa: E402
from .interop import call_jax, from_jax, prepare_call_jax, register_lowering, to_jax  # noqa: E402
from .loops import (  # noqa: E402
    install_auto_loops,
    install_control_flow,
    install_into_dynamo,
    install_when_dynamo_loads,
    scan_layers,
    unknown_torch,
)
from .ops import (  # noqa: E402
    DuplicateLoweringError,
    checked_ops,
    get_lowering,
    lowering,
    registered_ops,
)
from .replay.capture import CaptureBroken, Replay, sync_inputs  # noqa: E402
from .replay.capture import signature as replay_signature  # noqa: E402
from .state.layout import Layout  # noqa: E402
from .state.rng import RNG  # noqa: E402
from .state.storage import Storage  # noqa: E402
from .state.values import ir_value  # noqa: E402
from .tensor.lazy import (  # noqa: E402
    LazyTensor,
    holds_device_data,
    new_alias,
    new_tensor,
    rebind,
    storage_of,
)
from .tensor.transfer import from_cpu, to_cpu  # noqa: E402

register_kernels()
register_optimizer_hooks()
_install_module_moves()
_install_storages()
_install_autocast()
_install_checkpoint()
_install_dlpack()
_install_pinned()
_install_aliasing()
_install_data_dependent()
_install_functional_collectives()
install_auto_loops()
install_control_flow()
install_when_dynamo_loads()


def _let_optimizers_use_foreach() -> None:
    # torch.optim picks its foreach (multi-tensor) path only for parameter types in this
    # private list; without LazyTensor in it every optimizer takes the per-tensor loop:
    # the same math, but several times the ops to trace per step.
    try:
        from torch.optim import optimizer
    except ImportError:  # pragma: no cover
        return
    supported = getattr(optimizer, "_foreach_supported_types", None)
    if isinstance(supported, list) and LazyTensor not in supported:
        supported.append(LazyTensor)


_let_optimizers_use_foreach()


def sync_tensors_graph(tensors, wait: bool = False, sync_ltc_data: bool = True) -> None:
    """Run the pending IR of ``tensors`` as one graph (see ``barrier.executor``)."""
    EXECUTOR.sync_tensors_graph(list(tensors), wait=wait, sync_ltc_data=sync_ltc_data)


def sync(wait: bool = False) -> None:
    """Run every live tensor's pending IR as one graph."""
    EXECUTOR.sync(wait=wait)


__all__ = [
    "CHECKS",
    "DEVICE_NAME",
    "CaptureBroken",
    "CompileLimitExceeded",
    "EXECUTOR",
    "RNG",
    "Replay",
    "DuplicateLoweringError",
    "GraphCountSession",
    "GraphLimitExceeded",
    "GraphsDifferError",
    "GraphExecutor",
    "Layout",
    "LazaxProcessGroup",
    "process_group_made",
    "traced_backward_setting",
    "LazyTensor",
    "MemoryMapsExhausted",
    "Mesh",
    "Sharding",
    "Storage",
    "TracedOp",
    "__version__",
    "apply_eager_sync",
    "call_jax",
    "autocast_missing_policies",
    "checked_ops",
    "clear_sharding",
    "describe_graph",
    "device",
    "disable_manual_sharding",
    "enable_manual_sharding",
    "from_cpu",
    "from_jax",
    "get_lowering",
    "get_sharding",
    "global_tensor",
    "ir_value",
    "local_part",
    "lower_graph",
    "lowered_text",
    "load_sharded",
    "lowering",
    "install_into_dynamo",
    "unknown_torch",
    "mark_sharding",
    "manual_all_gather",
    "manual_all_reduce",
    "manual_mesh",
    "manual_permute",
    "manual_reduce_scatter",
    "manual_shift",
    "metrics",
    "new_alias",
    "new_tensor",
    "place_sharded_arguments",
    "prepare_call_jax",
    "program_text",
    "rebind",
    "scan_layers",
    "register_library_path",
    "register_lowering",
    "save_sharded",
    "registered_ops",
    "replay_signature",
    "Shard",
    "shard_shapes",
    "sharding_constraint",
    "shard_map",
    "shards",
    "storage_of",
    "holds_device_data",
    "sharded_placement",
    "sharding_signature",
    "sync",
    "sync_inputs",
    "sync_tensors_graph",
    "to_jax",
    "to_cpu",
]
