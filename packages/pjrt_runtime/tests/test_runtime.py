"""lazax.pjrt: platform choice, transfers, compile, async execute, fault hook."""

import os
import subprocess
import sys

import numpy as np
import pytest

from lazax import pjrt


def test_default_platform_is_cpu(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert pjrt.platform_from_env() == "cpu"
    monkeypatch.setenv("PJRT_DEVICE", "cuda")
    assert pjrt.platform_from_env() == "cuda"


def test_unknown_platform_is_refused(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "ABACUS")
    with pytest.raises(pjrt.PlatformUnavailableError, match="expected one of"):
        pjrt.platform_from_env()


def _devices_in_child(code: str, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", **env}
    full.pop("PJRT_DEVICE", None)
    return subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120
    )


def test_cpu_num_devices_sets_the_cpu_device_count_over_xla_flags():
    code = "from lazax import pjrt; print(len(pjrt.runtime().devices))"
    done = _devices_in_child(code, CPU_NUM_DEVICES="3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3"]


def test_cpu_num_devices_after_jax_started_warns_and_keeps_the_count():
    code = (
        "import warnings, jax; jax.devices(); import os; os.environ['CPU_NUM_DEVICES'] = '3'\n"
        "from lazax import pjrt\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always'); n = len(pjrt.runtime().devices)\n"
        "print(n, [str(w.message) for w in seen])"
    )
    done = _devices_in_child(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("8 ")
    assert "CPU_NUM_DEVICES=3 is ignored: jax's CPU client had already started with 8" in (
        done.stdout
    )


def test_cpu_num_devices_that_is_not_a_count_is_refused():
    done = _devices_in_child("from lazax import pjrt; pjrt.runtime()", CPU_NUM_DEVICES="four")
    assert done.returncode != 0
    assert "CPU_NUM_DEVICES='four': expected a whole number of devices" in done.stderr


def test_missing_plugin_names_the_extra():
    import jax

    try:
        jax.devices("tpu")
        pytest.skip("a TPU plugin is installed here")
    except RuntimeError:
        pass
    with pytest.raises(pjrt.PlatformUnavailableError, match=r"lazax-pjrt\[tpu\]"):
        pjrt.PjrtRuntime("tpu")


def test_roundtrip_compile_execute_keeps_dtypes():
    rt = pjrt.runtime()
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    buf = rt.to_device(x)
    exe = rt.compile(lambda a, s: (a * s, a.sum()), [((2, 3), "int64"), ((), "int64")])
    out, total = rt.execute(exe, [buf, np.int64(3)])
    rt.wait([out, total])
    assert rt.to_host(out).dtype == np.int64
    np.testing.assert_array_equal(rt.to_host(out), x * 3)
    assert int(rt.to_host(total)) == 15
    bf = rt.to_device(np.ones(3, dtype=pjrt.numpy_dtype("bfloat16")))
    assert str(rt.to_host(bf).dtype) == "bfloat16"


def test_fail_next_raises_once():
    rt = pjrt.runtime()
    rt.fail_next("execute", ValueError("boom"))
    exe = rt.compile(lambda a: (a + 1,), [((1,), "float32")])
    with pytest.raises(ValueError, match="boom"):
        rt.execute(exe, [np.zeros(1, np.float32)])
    (out,) = rt.execute(exe, [np.zeros(1, np.float32)])
    assert rt.to_host(out)[0] == 1
    with pytest.raises(ValueError, match="stage must be one of"):
        rt.fail_next("teleport")


def test_an_uneven_split_is_held_padded():
    rt = pjrt.runtime()
    if len(rt.devices) < 8:
        pytest.skip("needs 8 devices (the root conftest.py gives the CPU 8)")
    mesh = rt.mesh(range(8), (2, 4), ("a", "b"))
    split = rt.named_sharding(mesh, ("b", ("a",)))
    assert pjrt.padded_shape((10, 3), split) == (12, 4)  # 10 over 4, 3 over 2
    assert pjrt.padded_shape((8, 2), split) == (8, 2)
    assert pjrt.padded_shape((5,), rt.single_device()) == (5,)
    value = np.arange(30, dtype=np.float32).reshape(10, 3)
    held = rt.place(value, split, value.shape)  # host data: padded on the host
    assert held.shape == (12, 4) and {s.data.shape for s in held.addressable_shards} == {(3, 2)}
    np.testing.assert_array_equal(np.asarray(pjrt.trim(held, (10, 3))), value)
    assert not np.asarray(held)[10:].any() and not np.asarray(held)[:, 3:].any()  # zeros
    # re-laid out from a padded buffer: the value, padded anew for the new split
    rows = rt.place(held, rt.named_sharding(mesh, (None, "a")), (10, 3))
    assert rows.shape == (10, 4)
    np.testing.assert_array_equal(np.asarray(pjrt.trim(rows, (10, 3))), value)
    single = rt.place(rows, rt.single_device(), (10, 3))
    assert single.shape == (10, 3)
    np.testing.assert_array_equal(np.asarray(single), value)
    assert pjrt.padded(np.ones((3, 3)), split).shape == (4, 4)


def test_stack_makes_one_buffer_of_rows_on_their_device():
    rt = pjrt.runtime()
    rows = [rt.to_device(np.full((2, 3), k, np.float32)) for k in range(4)]
    stacked = rt.stack(rows)
    assert stacked.shape == (4, 2, 3) and stacked.dtype == np.float32
    assert stacked.sharding.device_set == rows[0].sharding.device_set
    np.testing.assert_array_equal(rt.to_host(stacked)[:, 0, 0], [0, 1, 2, 3])
