"""torch_xla's public API over lazax: torch_xla scripts, unchanged, on the torch you have.

``pip install lazax-torch-xla`` provides ``import torch_xla`` for users who choose it
instead of torch_xla; importing it beside a real torch_xla raises ``ImportError``.

    import torch_xla
    import torch_xla.core.xla_model as xm
    device = torch_xla.device()          # torch.device("xla:0"), lazax's device
    ...
    xm.optimizer_step(optimizer)
    torch_xla.sync()                     # xm.mark_step()

Contract: the top-level functions are ``_api``'s (device, devices, device_count, sync,
compile, step, manual_seed, launch); the submodules ``core.xla_model`` (xm),
``runtime`` (xr), ``debug.metrics`` (met), ``debug.profiler`` (xp),
``distributed.spmd`` (xs), ``distributed.parallel_loader`` (pl),
``distributed.xla_multiprocessing`` (xmp), ``experimental`` (eager mode), ``utils`` are imported
with it. torch_xla's environment variables are applied (``_env``) before lazax reads
its own. Of torch_xla's internals (``torch_xla._XLAC``) only the functions lazax can
answer exist (``_XLAC``'s docstring). What maps to what and
what differs: docs/torch_xla.md. The package's folder is a library's to lazax
(``lx.register_library_path``): a program synced by ``xm.mark_step()`` is named after
the user's line that called it, as one synced by ``lx.sync()``.
"""

from . import _guard

_guard.check()

from . import _env  # noqa: E402

_env.apply()

from . import _XLAC, core, debug, distributed, experimental, runtime, utils  # noqa: E402

_env.forget_device_name()  # lazax, imported just above, has read it
import lazax.modes as _lx  # noqa: E402

from ._api import (  # noqa: E402
    compile,
    device,
    device_count,
    devices,
    launch,
    manual_seed,
    real_devices,
    step,
    sync,
)
from ._version import __version__  # noqa: E402

# Programs and errors name the user's script, not this package's frame that synced.
_lx.register_library_path(__path__[0])

__all__ = [
    "_XLAC",
    "__version__",
    "compile",
    "core",
    "debug",
    "device",
    "device_count",
    "devices",
    "distributed",
    "experimental",
    "launch",
    "manual_seed",
    "real_devices",
    "runtime",
    "step",
    "sync",
    "utils",
]
