"""lazax.pjrt: platform choice, transfers, compile, async execute, fault hook."""

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
