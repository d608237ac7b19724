"""Named programs: each compiled graph's XLA module carries a name a user recognizes
(issue 34's first part), and the name is not part of the cache key."""

import pytest
import torch

import lazax.modes as lx
from lazax.executor import EXECUTOR

DEV = lx.device()


@pytest.fixture
def compiled(monkeypatch):
    """The executables compiled while the test runs, in order."""
    made = []
    original = EXECUTOR.compiler.compile_executable

    def record(*args, **kwargs):
        entry = original(*args, **kwargs)
        made.append(entry)
        return entry

    monkeypatch.setattr(EXECUTOR.compiler, "compile_executable", record)
    EXECUTOR.reset_cache()
    yield made
    EXECUTOR.reset_cache()


def _module_name(entry) -> str:
    first = entry.as_text().splitlines()[0]  # "HloModule jit_<name>, ..."
    return first.split()[1].rstrip(",")


def test_a_compiled_region_names_its_program(compiled):
    x = torch.randn(4, 4).to(DEV)
    lx.sync()

    @lx.compile(name="my_step")
    def step(t):
        return (t * 3.0 + 1.0).sum()

    step(x)
    names = [_module_name(e) for e in compiled]
    assert any("my_step" in n for n in names), names
    assert any(e.name == "my_step" for e in compiled)


def test_a_lazy_sync_is_named_after_the_users_line(compiled):
    _ = torch.randn(5, 3).to(DEV).relu() * 7.0
    lx.sync()
    (entry,) = [e for e in compiled if "test_program_names" in (e.name or "")]
    assert entry.name.endswith(":test_a_lazy_sync_is_named_after_the_users_line")
    assert "test_program_names.py" in _module_name(entry)


def test_a_library_over_lazax_is_skipped_for_its_users_line(compiled, tmp_path, monkeypatch):
    (tmp_path / "trainer_lib.py").write_text(
        "import lazax.modes as lx\n\ndef run_step(t):\n    t.mul_(3)\n    lx.sync()\n"
        "\n\ndef pick(t, i):\n    return t[i]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import trainer_lib

    t = torch.randn(6, 2).to(DEV)
    lx.sync()
    trainer_lib.run_step(t)  # not yet a library: the program is named after its line
    trainer_lib.pick(t, torch.tensor([0]).to(DEV)).cpu()
    lx.register_library_path(str(tmp_path))
    t.add_(1)
    trainer_lib.run_step(t)
    names = [e.name for e in compiled]
    assert names[0] == "trainer_lib.py:5:run_step"
    # a device-side check names the user's line too, though the file was seen before
    x = torch.arange(5.0).to(DEV)
    with pytest.raises(IndexError, match="test_program_names.py"):
        trainer_lib.pick(x, torch.tensor([7]).to(DEV)).cpu()
    assert names[1].startswith("test_program_names.py:")
    assert names[1].endswith(":test_a_library_over_lazax_is_skipped_for_its_users_line")


def test_an_eager_op_is_named_after_its_aten_op(compiled):
    x = torch.randn(6).to(DEV)
    lx.sync()
    with lx.eager_mode_context(True):
        torch.sigmoid(x)
    assert any(e.name == "aten::sigmoid" for e in compiled), [e.name for e in compiled]


def test_the_same_graph_under_two_names_is_one_executable(compiled):
    x = torch.randn(4, 4).to(DEV)
    lx.sync()

    def body(t):
        return (t * 5.0 - 2.0).exp()

    a = lx.compile(body, name="first")(x)
    before = len(compiled)
    b = lx.compile(body, name="second")(x)
    assert len(compiled) == before  # the name is not part of the key
    assert torch.equal(a.cpu(), b.cpu())


def test_dynamo_graphs_are_named_forward_and_backward(compiled):
    torch._dynamo.reset()
    model = torch.nn.Linear(4, 3).to(DEV)
    run = torch.compile(model, backend="lazax")
    run(torch.randn(2, 4).to(DEV)).sum().backward()
    lx.sync()
    names = [e.name or "" for e in compiled]
    assert any(n.startswith("dynamo_") and n.endswith("_forward") for n in names), names
    assert any(n.startswith("dynamo_") and n.endswith("_backward") for n in names), names
    torch._dynamo.reset()
