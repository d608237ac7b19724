"""lazax.cache: where compiled computations are kept between syncs.

``ComputationCache`` is an LRU keyed by graph hash, sized by
``LAZAX_COMPILATION_CACHE_SIZE`` (default 2048), counting hits, misses and evictions and
calling eviction hooks. ``CacheKey`` is a key built from named parts (graph, inputs,
device, compile options, versions) that can say which part differs from another key's.
``persistent_cache_settings`` / ``prepare_directory``: where the persistent tier lives
(``LAZAX_PERSISTENT_CACHE_DIR``, ``LAZAX_PERSISTENT_CACHE_READ_ONLY``).
Pure Python: imports neither torch nor jax.
"""

from ._key import CacheKey, environment_part
from ._lru import CacheStats, ComputationCache, default_capacity
from ._persistent import persistent_cache_settings, prepare_directory
from ._version import __version__

__all__ = [
    "CacheKey",
    "CacheStats",
    "ComputationCache",
    "__version__",
    "default_capacity",
    "environment_part",
    "persistent_cache_settings",
    "prepare_directory",
]
