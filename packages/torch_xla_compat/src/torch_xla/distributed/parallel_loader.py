"""``torch_xla.distributed.parallel_loader`` (``pl``) over ``lx.DeviceLoader``.

Contract:
- ``MpDeviceLoader(loader, device, **kwargs)``: iterating it gives ``loader``'s batches
  with every tensor on ``device``, the next ones moved in a background thread; before
  each batch (and at the end) the step is marked (``xm.mark_step``: the previous step's
  graph runs, and step closures run), as torch_xla's. ``len()`` is ``len(loader)``.
- ``ParallelLoader(loader, devices, ...)``: ``per_device_loader(device)`` gives that
  iterator for one device; ``per_device_samples()`` is ``len(loader)``.
- ``device_prefetch_size`` is the number of batches kept ready (default 2, lazax's);
  ``loader_prefetch_size``, ``batches_per_execution``, ``host_to_device_transfer_threads``
  are accepted. ``input_sharding``: an ``lx.Sharding`` or a function of a tensor
  (``lx.DeviceLoader``'s ``sharding``), such as torch_xla's ``xs.ShardingSpec``.
- Several devices in one ``ParallelLoader``: not supported (lazax drives several
  devices by sharding one batch: ``input_sharding``).
"""

from __future__ import annotations

import lazax.modes as lx

from .. import _api

__all__ = ["MpDeviceLoader", "ParallelLoader", "PerDeviceLoader"]


class PerDeviceLoader:
    """One device's batches; ``len()`` is the source loader's."""

    def __init__(self, loader, device, prefetch: int, sharding=None) -> None:
        self._source = loader
        self._loader = lx.DeviceLoader(
            loader, device=device, prefetch=prefetch, sharding=sharding, sync=False
        )
        self._iter = None

    def __iter__(self):
        self._close()
        self._iter = iter(self._loader)
        return self

    def __next__(self):
        if self._iter is None:
            iter(self)
        _api.sync()  # torch_xla's loader marks the step before each batch
        try:
            return next(self._iter)
        except StopIteration:
            self._iter = None
            raise

    def __len__(self) -> int:
        return len(self._source)

    def _close(self) -> None:
        if self._iter is not None and hasattr(self._iter, "close"):
            self._iter.close()
        self._iter = None

    close = _close


def _prefetch(kwargs) -> int:
    return int(kwargs.pop("device_prefetch_size", 2) or 2)


class ParallelLoader:
    """torch_xla's ``ParallelLoader`` over one device."""

    def __init__(self, loader, devices, batchdim: int = 0, **kwargs) -> None:
        devices = list(devices)
        if len(devices) != 1:
            raise ValueError(
                f"ParallelLoader over {len(devices)} devices: lazax loads one batch per "
                f"process and shards it (input_sharding=lx.Sharding(mesh, ('data',)))"
            )
        self._loader = loader
        self._device = devices[0]
        self._prefetch = _prefetch(kwargs)
        self._sharding = kwargs.pop("input_sharding", None)

    def per_device_loader(self, device) -> PerDeviceLoader:
        return PerDeviceLoader(self._loader, device, self._prefetch, self._sharding)

    def per_device_samples(self) -> int:
        return len(self._loader)

    def close(self) -> None:
        """Nothing to stop: each iterator's thread ends with its loop."""


class MpDeviceLoader:
    """``for x, y in pl.MpDeviceLoader(loader, device):`` batches on ``device``."""

    def __init__(self, loader, device, **kwargs) -> None:
        self._loader = loader
        self._device = device
        self._prefetch = _prefetch(kwargs)
        self._sharding = kwargs.pop("input_sharding", None)

    def __iter__(self):
        return iter(PerDeviceLoader(self._loader, self._device, self._prefetch, self._sharding))

    def __len__(self) -> int:
        return len(self._loader)
