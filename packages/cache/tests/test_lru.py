"""lazax.cache: LRU order, capacity from the environment, counters, eviction hook."""

import pytest

from lazax.cache import ComputationCache, default_capacity


def test_eviction_order_is_least_recently_used():
    cache = ComputationCache(capacity=3)
    evicted = []
    cache.on_evict(lambda key, entry: evicted.append((key, entry)))
    for k in "abc":
        cache.put(k, k.upper())
    assert cache.get("a") == "A"  # a is now most recent
    cache.put("d", "D")
    assert evicted == [("b", "B")]
    cache.put("e", "E")
    assert evicted == [("b", "B"), ("c", "C")]
    assert list(cache.keys()) == ["a", "d", "e"]


def test_counters():
    cache = ComputationCache(capacity=1)
    assert cache.get("x") is None
    cache.put("x", 1)
    assert cache.get("x") == 1
    cache.put("y", 2)
    assert (cache.stats.hits, cache.stats.misses, cache.stats.evictions) == (1, 1, 1)
    assert cache.peek("x") is None and "y" in cache and len(cache) == 1


def test_capacity_from_environment(monkeypatch):
    monkeypatch.delenv("LAZAX_COMPILATION_CACHE_SIZE", raising=False)
    assert default_capacity() == 2048
    assert ComputationCache().capacity == 2048
    monkeypatch.setenv("LAZAX_COMPILATION_CACHE_SIZE", "7")
    assert ComputationCache().capacity == 7
    monkeypatch.setenv("LAZAX_COMPILATION_CACHE_SIZE", "many")
    with pytest.raises(ValueError, match="must be a positive integer"):
        ComputationCache()
    monkeypatch.setenv("LAZAX_COMPILATION_CACHE_SIZE", "0")
    with pytest.raises(ValueError, match="at least 1"):
        ComputationCache()


def test_resize_evicts_and_hook_can_be_removed():
    cache = ComputationCache(capacity=4)
    seen = []
    remove = cache.on_evict(lambda key, entry: seen.append(key))
    for k in range(4):
        cache.put(k, k)
    cache.resize(2)
    assert seen == [0, 1] and cache.stats.evictions == 2
    remove()
    cache.put(9, 9)
    assert seen == [0, 1] and cache.stats.evictions == 3


def test_evict_oldest_keeps_the_capacity():
    cache = ComputationCache(capacity=8)
    seen = []
    cache.on_evict(lambda key, entry: seen.append(key))
    for i in range(6):
        cache.put(i, str(i))
    cache.get(0)  # now the most recently used
    cache.evict_oldest(3)
    assert seen == [1, 2, 3] and list(cache.keys()) == [4, 5, 0]
    assert cache.capacity == 8 and cache.stats.evictions == 3
    cache.evict_oldest(10)
    assert len(cache) == 0
