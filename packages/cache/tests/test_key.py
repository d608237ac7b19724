"""CacheKey: named parts, equality by every part, the first differing part named."""

import subprocess
import sys

from lazax.cache import CacheKey, environment_part

BASE = {"graph": 11, "inputs": 22, "device": 33, "options": 44, "versions": 55}


def test_equal_keys_are_one_dict_entry():
    a, b = CacheKey(BASE), CacheKey(dict(BASE))
    assert a == b and hash(a) == hash(b) and a.digest == b.digest
    assert {a: 1}[b] == 1
    assert a.first_difference(b) is None


def test_every_part_changes_the_key_and_is_named():
    for name in BASE:
        changed = CacheKey({**BASE, name: BASE[name] + 1})
        assert changed != CacheKey(BASE)
        assert changed.first_difference(CacheKey(BASE)) == name


def test_a_missing_part_is_a_difference():
    fewer = {k: v for k, v in BASE.items() if k != "options"}
    assert CacheKey(fewer).first_difference(CacheKey(BASE)) == "options"


def test_environment_part_is_stable_across_processes_and_order():
    values = {"jax": "0.10.2", "torch": "2.13.0", "x64": True}
    here = environment_part(values)
    assert environment_part(dict(reversed(list(values.items())))) == here
    assert environment_part({**values, "jax": "0.10.3"}) != here
    code = (
        "from lazax.cache import environment_part;"
        "print(environment_part({'jax': '0.10.2', 'torch': '2.13.0', 'x64': True}))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert int(other.stdout) == here
