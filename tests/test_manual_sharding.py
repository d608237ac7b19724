"""Manual sharding over 8 virtual CPU devices: between ``enable_manual_sharding`` and
``disable_manual_sharding`` a tensor holds one value per device (the device's piece),
ops run on each device's own value, and the result is put back together; equal to the
same computation done piece by piece on the CPU, in lazy mode, eager mode and
``lx.compile``, with autograd."""

import copy

import pytest
import torch

import lazax.modes as lx

from .test_sharding import DEV, counter, pytestmark  # noqa: F401 (the skip mark)


@pytest.fixture(scope="module")
def grid():
    return lx.Mesh(range(8), (2, 4), ("data", "model"))


def _runs() -> int:
    return counter("UncachedCompile") + counter("CachedCompile")


def _pieces(x: torch.Tensor, rows: int, cols: int):
    """``x`` cut into a rows x cols grid, as a list of lists of pieces."""
    return [list(r.chunk(cols, dim=1)) for r in x.chunk(rows, dim=0)]


def _whole(pieces) -> torch.Tensor:
    return torch.cat([torch.cat(r, dim=1) for r in pieces], dim=0)


def test_ops_run_on_each_devices_piece_and_the_pieces_come_back(grid):
    x = torch.randn(8, 12)
    xl = x.to(DEV)
    piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))
    assert piece.shape == (4, 3) and lx.manual_mesh(piece) == grid
    # a reduction on each device's own piece: its value differs per device
    y = piece - piece.mean(dim=1, keepdim=True) + torch.ones(4, 3, device=DEV)
    out = lx.disable_manual_sharding(y, grid, ("data", "model"), (8, 12))
    assert out.shape == (8, 12) and lx.manual_mesh(out) is None
    expected = _whole(
        [[p - p.mean(dim=1, keepdim=True) + 1 for p in row] for row in _pieces(x, 2, 4)]
    )
    torch.testing.assert_close(out.cpu(), expected)
    assert lx.get_sharding(out).mesh == grid


def test_a_replicated_spec_gives_every_device_the_whole_value(grid):
    x = torch.randn(5, 8)
    whole = lx.enable_manual_sharding(x.to(DEV), grid, (None, None))
    assert whole.shape == (5, 8)
    # Each of the 8 devices holds the same value: put back split over "model" on the
    # columns, device k of each row of the mesh gives its own copy's k-th quarter.
    out = lx.disable_manual_sharding(whole * 2, grid, (None, "model"), (5, 32))
    torch.testing.assert_close(out.cpu(), (x * 2).repeat(1, 4))


def test_a_value_per_device_stays_pending_and_cannot_be_read(grid):
    xl = torch.randn(8, 8).to(DEV)
    piece = lx.enable_manual_sharding(xl, grid, ("data", "model")) * 3
    lx.sync()  # leaves it pending
    assert not lx.holds_device_data(piece)
    for read in (lambda: piece.cpu(), lambda: piece.sum().item(), lambda: lx.to_jax(piece)):
        with pytest.raises(RuntimeError, match="disable_manual_sharding"):
            read()
    with pytest.raises(ValueError, match="value per device"):
        lx.mark_sharding(piece, grid, (None, None))
    out = lx.disable_manual_sharding(piece, grid, ("data", "model"), (8, 8))
    torch.testing.assert_close(out.cpu(), xl.cpu() * 3)


def test_the_region_compiles_once_with_its_disable_and_again_never(grid):
    x = torch.randn(16, 8)
    xl = x.to(DEV)
    lx.sync()

    def step():
        piece = lx.enable_manual_sharding(xl, grid, ("data", None))
        return lx.disable_manual_sharding(torch.tanh(piece) * 2, grid, ("data", None), (16, 8))

    compiles, runs = counter("UncachedCompile"), _runs()
    first = step().cpu()
    assert counter("UncachedCompile") - compiles == 1 and _runs() - runs == 1
    second = step().cpu()
    assert counter("UncachedCompile") - compiles == 1 and _runs() - runs == 2
    torch.testing.assert_close(first, torch.tanh(x) * 2)
    torch.testing.assert_close(second, first)


def test_eager_mode_runs_nothing_until_the_disable(grid):
    x = torch.randn(8, 8)
    with lx.eager_mode_context(True):
        xl = x.to(DEV)
        before = _runs()
        piece = lx.enable_manual_sharding(xl, grid, (None, "model"))
        piece = piece.exp()
        piece.add_(1)  # in place, on a value per device
        assert _runs() == before and not lx.holds_device_data(piece)
        out = lx.disable_manual_sharding(piece, grid, (None, "model"), (8, 8))
        assert _runs() == before + 1 and lx.holds_device_data(out)
    torch.testing.assert_close(out.cpu(), x.exp() + 1)


def test_shard_map_under_lx_compile_is_one_program(grid):
    x, w = torch.randn(16, 6), torch.randn(6, 6)
    xl, wl = x.to(DEV), w.to(DEV)

    def rows(a, b):  # each device: its rows times the whole weight
        return torch.relu(a @ b)

    fn = lx.shard_map(rows, grid, [(("data", "model"), None), None], (("data", "model"), None))
    step = lx.compile(lambda a, b: fn(a, b) + 1)
    compiles = counter("UncachedCompile")
    out = step(xl, wl)
    torch.testing.assert_close(out.cpu(), torch.relu(x @ w) + 1, rtol=1e-5, atol=1e-5)
    step(xl, wl)
    assert counter("UncachedCompile") - compiles == 1


def test_gradients_through_manual_sharding_equal_the_cpu(grid):
    x = torch.randn(8, 8)
    w = torch.randn(8, 4)

    # CPU: each of the 2 row blocks times the whole weight
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (torch.tanh(xc @ wc) ** 2).sum().backward()

    xl = x.to(DEV).requires_grad_()
    wl = w.to(DEV).requires_grad_()
    mapped = lx.shard_map(
        lambda a, b: torch.tanh(a @ b), grid, [("data", None), (None, None)], ("data", None)
    )
    (mapped(xl, wl) ** 2).sum().backward()
    # x's pieces' gradients are its own; w's, given whole to all 8 devices, add up
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wl.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)


def test_a_model_trains_through_shard_map_equal_to_the_cpu(grid):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    data = [(torch.randn(16, 6), torch.randn(16, 3)) for _ in range(3)]

    def train(m, dev, mapped):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        losses = []
        for x, y in data:
            x, y = x.to(dev), y.to(dev)
            hidden = m[1](m[0](x))
            if mapped:  # the last layer on each device's rows, its weight whole
                head = lx.shard_map(
                    lambda h, wt, b: h @ wt.t() + b,
                    grid,
                    [("data", None), (None, None), (None,)],
                    ("data", None),
                )
                out = head(hidden, m[2].weight, m[2].bias)
            else:
                out = m[2](hidden)
            loss = torch.nn.functional.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if mapped:
                lx.sync()
            losses.append(loss.item())
        return losses

    cpu_model = model
    lazax_model = copy.deepcopy(cpu_model).to(DEV)
    expected = train(cpu_model, "cpu", False)
    got = train(lazax_model, DEV, True)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-5, atol=1e-5)
    for p, q in zip(lazax_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)


def test_mistakes_raise_at_the_call(grid):
    xl = torch.randn(6, 8).to(DEV)
    with pytest.raises(ValueError, match="does not divide"):
        lx.enable_manual_sharding(xl, grid, ("model", None))  # 6 rows over 4
    piece = lx.enable_manual_sharding(xl, grid, (None, "model"))
    with pytest.raises(ValueError, match="already holds a value per device"):
        lx.enable_manual_sharding(piece, grid, (None, None))
    with pytest.raises(ValueError, match=r"make a tensor of shape \(6, 8\), not \(6, 6\)"):
        lx.disable_manual_sharding(piece, grid, (None, "model"), (6, 6))
    other = lx.Mesh(range(8), (8,), ("all",))
    elsewhere = lx.enable_manual_sharding(torch.randn(8, 2).to(DEV), other, ("all", None))
    with pytest.raises(ValueError, match="two meshes"):
        piece[:1, :2] + elsewhere
    with pytest.raises(ValueError, match="copy_: its operands differ per device over two"):
        piece[:1, :2].copy_(elsewhere[:1])
    with pytest.raises(ValueError, match="holds values per device over"):
        lx.disable_manual_sharding(piece, other, (None, "all"), (6, 16))
    with pytest.raises(TypeError, match="lazax tensor"):
        lx.enable_manual_sharding(torch.randn(2), grid, (None,))


def test_torch_compile_runs_shard_map_outside_its_graphs(grid):
    import lazax.dynamo  # noqa: F401  (the backend)

    x = torch.randn(8, 8)
    mapped = lx.shard_map(lambda t: torch.tanh(t) * 2, grid, [("data", None)], ("data", None))
    fn = torch.compile(lambda t: mapped(t + 1) - 1, backend="lazax")
    for _ in range(2):
        torch.testing.assert_close(fn(x.to(DEV)).cpu(), torch.tanh(x + 1) * 2 - 1)

    def bare(t):  # dynamo leaves this frame to lazy tracing (it cannot trace the enable)
        piece = lx.enable_manual_sharding(t, grid, ("data", None))
        return lx.disable_manual_sharding(piece * 2, grid, ("data", None), (8, 8))

    torch.testing.assert_close(torch.compile(bare, backend="lazax")(x.to(DEV)).cpu(), x * 2)
    # A compiled graph cannot take a value per device as an input.
    piece = lx.enable_manual_sharding(x.to(DEV), grid, ("data", None))
    with pytest.raises(RuntimeError, match="shard_map"):
        torch.compile(lambda p: p * 2, backend="lazax")(piece)


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_an_all_reduce_across_devices_equals_the_cpu_with_gradients(grid, op):
    x = torch.randn(8, 8)
    weights = torch.randn(2, 4)
    local = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax}[op]

    xc = x.clone().requires_grad_()
    blocks = xc.reshape(2, 4, 8)  # the 4 rows of each "data" row of the mesh, all columns
    cpu = local(blocks, (1, 2))
    (cpu.unsqueeze(1).expand(2, 4) * weights).sum().backward()

    xl = x.to(DEV).requires_grad_()
    piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))  # (4, 2) each
    # over "model": the 4 devices of each mesh row, which hold that row's 4 pieces
    row = lx.manual_all_reduce(local(piece).reshape(1, 1), "model", op=op)
    out = lx.disable_manual_sharding(row, grid, ("data", "model"), (2, 4))
    torch.testing.assert_close(out.cpu(), cpu.detach().unsqueeze(1).expand(2, 4))
    (out * weights.to(DEV)).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)


def test_an_all_reduce_needs_values_per_device_and_known_axes(grid):
    xl = torch.randn(8, 8).to(DEV)
    with pytest.raises(ValueError, match="holds one value"):
        lx.manual_all_reduce(xl)
    piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))
    with pytest.raises(ValueError, match="must name distinct axes"):
        lx.manual_all_reduce(piece, "rows")
    with pytest.raises(ValueError, match="op is"):
        lx.manual_all_reduce(piece, op="prod")
    # every axis by default: each device gets the sum of all 8 pieces
    total = lx.manual_all_reduce(piece.sum().reshape(1, 1))
    out = lx.disable_manual_sharding(total, grid, ("data", "model"), (2, 4))
    torch.testing.assert_close(out.cpu(), xl.cpu().sum().expand(2, 4))


def test_dropout_draws_one_mask_on_every_device_and_its_gradient_follows_it(grid):
    x = torch.ones(8, 16)

    def draw():
        torch.manual_seed(7)
        xl = x.to(DEV).requires_grad_()
        piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))
        dropped = torch.nn.functional.dropout(piece, 0.5, training=True)
        out = lx.disable_manual_sharding(dropped, grid, ("data", "model"), (8, 16))
        out.sum().backward()
        return out.detach().cpu(), xl.grad.cpu()

    out, grad = draw()
    assert set(out.unique().tolist()) == {0.0, 2.0}  # kept values scaled by 1 / (1 - p)
    # One key on every device, as DDP ranks seeded alike: the 8 pieces share a mask.
    masks = {tuple(b.flatten().tolist()) for r in (out == 0).chunk(2, 0) for b in r.chunk(4, 1)}
    assert len(masks) == 1
    torch.testing.assert_close(grad, out)  # d(sum)/dx is the mask, scaled, as the forward
    again, _ = draw()
    torch.testing.assert_close(again, out)  # the same seed draws the same mask


def test_copies_of_one_piece_agree_and_their_gradient_is_shared(grid):
    # Every device holds the whole x (no axis splits it); dropout draws the same mask on
    # each, so the copy the disable keeps is every device's, and the gradient is that
    # mask's, not an average of 8.
    x = torch.ones(4, 4)
    xl = x.to(DEV).requires_grad_()
    whole = lx.enable_manual_sharding(xl, grid, (None, None))
    out = lx.disable_manual_sharding(
        torch.nn.functional.dropout(whole, 0.5, training=True), grid, (None, None), (4, 4)
    )
    out.sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), out.detach().cpu())


def test_gradients_of_tensors_that_hold_one_value_are_summed_over_devices(grid):
    x, w = torch.randn(8, 8), torch.randn(8, 4)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    full_c = xc * 2
    ((torch.tanh(xc @ wc) + full_c[:, :4]) ** 2).sum().backward()

    xl, wl = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    # w is passed whole (spec None): shard_map enters it, so its gradient adds up the
    # devices'. full is a disabled result used on every device again.
    piece = lx.enable_manual_sharding(xl, grid, ("data", None))
    full = lx.disable_manual_sharding(piece * 2, grid, ("data", None), (8, 8))
    mapped = lx.shard_map(
        lambda a, b, f: torch.tanh(a @ b) + f,
        grid,
        [("data", None), None, ("data", None)],
        ("data", None),
    )
    (mapped(xl, wl, full[:, :4].contiguous()) ** 2).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wl.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)

    # A value that holds one value, put back as every device's piece: its gradient is
    # the sum of the pieces' gradients.
    vc = torch.randn(4, 2, requires_grad=True)
    (vc.repeat(2, 4) * torch.arange(64.0).reshape(8, 8)).sum().backward()
    vl = vc.detach().to(DEV).requires_grad_()
    tiled = lx.disable_manual_sharding(vl * 1, grid, ("data", "model"), (8, 8))
    (tiled * torch.arange(64.0).reshape(8, 8).to(DEV)).sum().backward()
    torch.testing.assert_close(vl.grad.cpu(), vc.grad)


def test_a_parameter_closed_over_inside_warns_that_its_gradient_is_per_device(grid):
    xl = torch.randn(8, 8).to(DEV)
    wl = torch.randn(8, 4).to(DEV).requires_grad_()
    mapped = lx.shard_map(lambda a: a @ wl, grid, [("data", None)], ("data", None))
    with pytest.warns(UserWarning, match="enable_manual_sharding"):
        mapped(xl).sum().backward()
    assert lx.manual_mesh(wl.grad) == grid


def test_all_gather_puts_a_rows_pieces_together_and_its_gradient_scatters(grid):
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    for eager in (False, True):
        with lx.eager_mode_context(eager):
            xl = x.to(DEV).requires_grad_()
            piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))  # (4, 2)
            rows = lx.manual_all_gather(piece, dim=1, axes="model")  # (4, 8): x's rows
            assert rows.shape == (4, 8)
            # the 4 devices of a mesh row now hold the same rows: put back once
            out = lx.disable_manual_sharding(rows, grid, ("data", None), (8, 8))
            torch.testing.assert_close(out.cpu(), x)
            (out * w.to(DEV)).sum().backward()
            torch.testing.assert_close(xl.grad.cpu(), w)


def test_reduce_scatter_keeps_each_devices_part_of_its_rows_sum(grid):
    x, w = torch.randn(8, 8), torch.randn(2, 8)
    xc = x.clone().requires_grad_()
    # per mesh row i: the sum of its 4 (4, 2) pieces, row k of it on device (i, k)
    cpu = xc.reshape(2, 4, 4, 2).sum(2).reshape(2, 8)
    (cpu * w).sum().backward()
    xl = x.to(DEV).requires_grad_()
    piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))
    part = lx.manual_reduce_scatter(piece, dim=0, axes="model")
    assert part.shape == (1, 2)
    out = lx.disable_manual_sharding(part, grid, ("data", "model"), (2, 8))
    torch.testing.assert_close(out.cpu(), cpu.detach())
    (out * w.to(DEV)).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad)
    with pytest.raises(ValueError, match="does not divide"):
        lx.manual_reduce_scatter(piece, dim=1, axes="model")  # 2 columns over 4


def test_a_shift_around_the_ring_and_a_partial_permute(grid):
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    xc = x.clone().requires_grad_()
    (torch.roll(xc, shifts=2, dims=1) * w).sum().backward()  # each (4, 2) piece one step on
    xl = x.to(DEV).requires_grad_()
    piece = lx.enable_manual_sharding(xl, grid, ("data", "model"))
    out = lx.disable_manual_sharding(
        lx.manual_shift(piece, "model"), grid, ("data", "model"), (8, 8)
    )
    torch.testing.assert_close(out.cpu(), torch.roll(x, shifts=2, dims=1))
    (out * w.to(DEV)).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), xc.grad)
    # only position 0 sends, to position 3: the others receive zeros
    sent = lx.manual_permute(
        lx.enable_manual_sharding(x.to(DEV), grid, (None, "model")), 1, [(0, 3)]
    )
    got = lx.disable_manual_sharding(sent, grid, (None, "model"), (8, 8)).cpu()
    expected = torch.zeros(8, 8)
    expected[:, 6:] = x[:, :2]
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="each a source once"):
        lx.manual_permute(piece, "model", [(0, 1), (2, 1)])


def test_a_computed_value_used_on_each_device_must_enter_first(grid):
    spec = ("data", "model")
    xl = torch.randn(8, 8).to(DEV).requires_grad_()
    full = lx.disable_manual_sharding(
        lx.enable_manual_sharding(xl, grid, spec) * 1, grid, spec, (8, 8)
    )
    zeros = lx.enable_manual_sharding(torch.zeros(8, 8).to(DEV), grid, spec)
    # Its per-device gradient would be added to full.sum()'s, past telling apart.
    with pytest.raises(ValueError, match="enable_manual_sharding"):
        zeros + full[:4, :2]
    whole = lx.enable_manual_sharding(full, grid, (None, None))  # enters: gradient summed
    inside = lx.disable_manual_sharding(zeros + whole[:4, :2], grid, spec, (8, 8))
    (inside.sum() + full.sum()).backward()
    expected = torch.ones(8, 8)
    expected[:4, :2] += 8  # every one of the 8 devices used full[:4, :2]
    torch.testing.assert_close(xl.grad.cpu(), expected)


def test_collective_axes_are_taken_in_mesh_order(grid):
    ids = torch.arange(8.0).reshape(2, 4)  # device (i, j) holds i * 4 + j
    piece = lx.enable_manual_sharding(ids.to(DEV), grid, ("data", "model"))
    for axes in (("model", "data"), ("data", "model"), None, (-1, 0)):
        gathered = lx.manual_all_gather(piece, 1, axes)
        out = lx.disable_manual_sharding(gathered, grid, (None, None), (1, 8))
        torch.testing.assert_close(out.cpu(), torch.arange(8.0).reshape(1, 8))
    with pytest.raises(RuntimeError, match="floating point"):
        lx.manual_all_reduce(piece.long(), op="mean")


def test_the_program_text_of_a_value_per_device_shows_its_stacked_pieces(grid):
    piece = lx.enable_manual_sharding(torch.randn(8, 8).to(DEV), grid, ("data", "model")) + 1
    text = lx.program_text([piece])
    assert "f32[8,4,2]" in text and "manual" in text  # 8 devices' (4, 2) pieces
    assert not lx.holds_device_data(piece)  # nothing ran
    assert "lazax::manual_enter" in lx.program_text([piece], form="lazax")
