"""lazax.cache: where compiled computations are kept between syncs.

``ComputationCache`` is an LRU keyed by graph hash, sized by
``LAZAX_COMPILATION_CACHE_SIZE`` (default 2048), counting hits, misses and evictions and
calling eviction hooks. Pure Python: imports neither torch nor jax.
"""

from ._lru import CacheStats, ComputationCache, default_capacity
from ._version import __version__

__all__ = ["CacheStats", "ComputationCache", "__version__", "default_capacity"]
