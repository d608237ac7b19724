"""NullRuntime: compiles nothing, computes nothing, records what it was asked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lazax import pjrt


def test_compile_records_the_program_and_execute_returns_zeros_of_its_outputs(monkeypatch):
    def no_xla(*args, **kwargs):
        raise AssertionError("NullRuntime reached XLA's compiler")

    monkeypatch.setattr(jax.stages.Lowered, "compile", no_xla)
    rt = pjrt.NullRuntime()
    assert isinstance(rt, pjrt.Runtime)

    def fn(a, b):
        return (a @ b, jnp.sum(a).astype(jnp.int64))

    exe = rt.compile(fn, [((2, 3), "float32"), ((3, 4), "float32")], donate=(0,), name="mm")
    (program,) = rt.programs
    assert program.name == "mm" and exe.name == "mm" and program.donate == (0,)
    assert program.out_specs == (((2, 4), np.dtype("float32")), ((), np.dtype("int64")))
    a = rt.to_device(np.ones((2, 3), np.float32))
    b = rt.to_device(np.ones((3, 4), np.float32))
    out, total = rt.execute(exe, [a, b])
    assert rt.executions == 1
    np.testing.assert_array_equal(rt.to_host(out), np.zeros((2, 4), np.float32))
    assert rt.to_host(total).dtype == np.int64 and not a.is_deleted()  # nothing consumed


def test_faults_are_injected_as_on_the_real_runtime():
    rt = pjrt.NullRuntime()
    rt.fail_next("compile")
    with pytest.raises(RuntimeError, match="injected compile failure"):
        rt.compile(lambda a: (a,), [((1,), "float32")])
    assert rt.programs == []
