"""The XLA programs lazax and the pure-JAX twin hand the compiler, side by side.

``python -m benchmarks.programs --model cnn [--mode lazy|compile|dynamo|dynamo_step]``
builds the workload, lets lazax (the benchmark's step in that mode; inference runs
lazy or dynamo) compile its steady training step and its inference forward, compiles
the JAX twin of each, and prints, per phase:

- the programs' optimized-HLO op counts side by side (a mode that runs several
  programs a step, summed): the entry computation's instructions (each fusion,
  convolution, copy, custom call is a kernel, a launch on a GPU; parameters,
  constants, tuples and bitcasts are not) and every instruction of the other
  computations (inside fusions, and reducers, sort comparators, loop bodies); rows
  that differ are marked ``<``;
- how long each executable takes alone (median of calls on zero inputs of its argument
  shapes, nothing traced), so a gap in the benchmark splits into program and host;
- with ``--op NAME`` (repeatable), every instruction of that opcode in both programs
  (layouts, dimension numbers, window shapes), marked ``[entry]`` or ``[other]``.

Contract: ``op_counts(hlo_text) -> ProgramCounts`` parses XLA's optimized HLO text
(``Executable.as_text()``, ``jax.stages.Compiled.as_text()``); ``lazax_programs(work,
phase, mode)`` returns the executables one steady step compiles, largest first;
``jax_program(work, phase)`` the twin's compiled step. ``--out DIR`` writes every
program's text there for a diff.
"""

from __future__ import annotations

import argparse
import copy
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import torch

import lazax.executor as lx_exec
import lazax.modes as lx

from .training import _train_step, _whole_step
from .workloads import WORKLOADS, make_workload

__all__ = [
    "MODES",
    "ProgramCounts",
    "compare",
    "jax_program",
    "lazax_programs",
    "op_counts",
    "side_by_side",
]

PHASES = ("training", "inference")

# `%name = f32[2]{0} add(%a, %b), ...` (the type may be a tuple with spaces in it).
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = .*? ([a-z][\w\-]*)\(")
_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$")


@dataclass
class ProgramCounts:
    """Opcode counts of one optimized HLO module, and each instruction's text."""

    entry: Counter = field(default_factory=Counter)  # the entry computation's
    fused: Counter = field(default_factory=Counter)  # every other computation's
    # opcode -> its instructions, each as ("entry" or "other", text)
    lines: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def op_counts(hlo_text: str) -> ProgramCounts:
    counts = ProgramCounts()
    in_entry = None
    for line in hlo_text.splitlines():
        if not line.startswith(" "):
            header = _COMPUTATION.match(line)
            if header:
                in_entry = bool(header.group(1))
            continue
        match = _INSTRUCTION.match(line)
        if match is None or in_entry is None:
            continue
        opcode = match.group(1)
        (counts.entry if in_entry else counts.fused)[opcode] += 1
        where = "entry" if in_entry else "other"
        counts.lines.setdefault(opcode, []).append((where, line.strip()))
    return counts


def side_by_side(a: Counter, b: Counter, names: tuple[str, str]) -> list[str]:
    """One row per opcode, the busiest first; ``<`` marks a difference."""
    a, b = Counter(a), Counter(b)
    rows = [f"  {'opcode':26s} {names[0]:>8s} {names[1]:>8s}"]
    for op in sorted(set(a) | set(b), key=lambda k: (-(a[k] + b[k]), k)):
        mark = "" if a[op] == b[op] else "  <"
        rows.append(f"  {op:26s} {a[op]:8d} {b[op]:8d}{mark}")
    rows.append(f"  {'total':26s} {sum(a.values()):8d} {sum(b.values()):8d}")
    return rows


def _inputs(work, phase):
    return [batch if phase == "training" else batch[:1] for batch in work.batches]


MODES = {"training": ("lazy", "compile", "dynamo", "dynamo_step"), "inference": ("lazy", "dynamo")}


def _step(work, phase: str, mode: str, model):
    """The benchmark's step in ``mode`` (``benchmarks.training``, ``.inference``)."""
    if mode.startswith("dynamo"):
        torch._dynamo.reset()
    if phase == "inference":
        model.eval()
        return torch.compile(model, backend="lazax") if mode == "dynamo" else model
    opt = work.make_optimizer(model.parameters())
    if mode == "dynamo_step":
        return torch.compile(_whole_step(model, opt, work.loss), backend="lazax")
    loss = torch.compile(work.loss, backend="lazax") if mode == "dynamo" else work.loss
    step = _train_step(model, opt, loss)
    return lx.compile(step) if mode == "compile" else step


def lazax_programs(work, phase: str, mode: str = "lazy") -> list:
    """The executables of one steady step in ``mode`` (``training``: the benchmark's
    training step, synced; ``inference``: the forward in eval mode, no grad), largest
    first. Two steps warm up; the cache is then emptied, so the third step's compiles
    are exactly its programs (dynamo's graphs too: it replays them by hash)."""
    if mode not in MODES[phase]:
        raise ValueError(f"{phase} runs in {MODES[phase]}, not {mode!r}")
    dev = lx.device()
    model = copy.deepcopy(work.model).to(dev)
    data = [tuple(t.to(dev) for t in batch) for batch in _inputs(work, phase)]
    step = _step(work, phase, mode, model)
    with torch.set_grad_enabled(phase == "training"):
        for i in range(3):
            if i == 2:
                lx.sync(wait=True)
                lx_exec.EXECUTOR.reset_cache()
            out = step(*data[i % len(data)])
            lx.sync()
            lx.sync_tensors([out], wait=True)
    cache = lx_exec.EXECUTOR.cache
    programs = [cache.peek(key) for key in cache.keys()]
    return sorted(programs, key=lambda e: len(e.as_text()), reverse=True)


def _summed(counts: list[ProgramCounts]) -> ProgramCounts:
    total = ProgramCounts()
    for c in counts:
        total.entry.update(c.entry)
        total.fused.update(c.fused)
        for opcode, lines in c.lines.items():
            total.lines.setdefault(opcode, []).extend(lines)
    return total


def jax_program(work, phase: str):
    """The twin's step, compiled for the workload's first batch."""
    if phase == "training":
        step, state = work.jax_train_step()
    else:
        step, state = work.jax_forward()
    batch = [jnp.asarray(t.numpy()) for t in _inputs(work, phase)[0]]
    return step.lower(state, *batch).compile()


def run_alone_ms(programs, calls: int = 20) -> list[float]:
    """Median time of one call of each compiled program, on fresh zero inputs of its
    argument shapes (fresh: a donated input is consumed by each call). The programs
    take turns, so that a noisy machine slows them alike."""
    makers = []
    for compiled in programs:
        leaves, tree = jax.tree_util.tree_flatten(compiled.args_info[0])
        makers.append((leaves, tree))
    samples = [[] for _ in programs]
    for _ in range(calls + 2):
        for compiled, (leaves, tree), times in zip(programs, makers, samples):
            args = jax.tree_util.tree_unflatten(tree, [jnp.zeros(a.shape, a.dtype) for a in leaves])
            jax.block_until_ready(args)
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - start)
    return [1e3 * statistics.median(times[2:]) for times in samples]


def compare(
    work, phase: str, opcodes=(), out: Path | None = None, calls: int = 20, mode: str = "lazy"
) -> None:
    ours = lazax_programs(work, phase, mode)
    twin = jax_program(work, phase)
    a, b = _summed([op_counts(e.as_text()) for e in ours]), op_counts(twin.as_text())
    print(
        f"== {work.name} {phase} ({mode}): lazax's {len(ours)} program(s), summed, "
        "vs pure JAX's one"
    )
    print("entry computation (fusions, convolutions, copies... are kernels):")
    print("\n".join(side_by_side(a.entry, b.entry, ("lazax", "jax"))))
    print("other computations (inside fusions; reducers, loop bodies):")
    print("\n".join(side_by_side(a.fused, b.fused, ("lazax", "jax"))))
    *mine_ms, jax_ms = run_alone_ms([e.compiled for e in ours] + [twin], calls)
    each = " + ".join(f"{t:.2f}" for t in mine_ms)
    lazax_ms = sum(mine_ms)
    print(
        f"run alone: lazax {lazax_ms:.2f} ms ({each}), jax {jax_ms:.2f} ms "
        f"(lazax at {jax_ms / lazax_ms:.2f}x jax's speed)"
    )
    for opcode in opcodes:
        for name, counts in (("lazax", a), ("jax", b)):
            print(f"-- {opcode} in {name}:")
            for where, line in counts.lines.get(opcode, []):
                print(f"  [{where}] {line[:240]}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{work.name}-{phase}-{mode}"
        for i, program in enumerate(ours):
            (out / f"{stem}-lazax{i}.hlo").write_text(program.as_text())
        (out / f"{stem}-jax.hlo").write_text(twin.as_text())
        print(f"written: {out}/{stem}-{{lazax0..{len(ours) - 1},jax}}.hlo")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cnn", choices=sorted(WORKLOADS))
    parser.add_argument("--phase", default="both", choices=(*PHASES, "both"))
    parser.add_argument(
        "--mode", default="lazy", help="lazy, compile, dynamo, dynamo_step (training only)"
    )
    parser.add_argument("--op", action="append", default=[], help="print this opcode's lines")
    parser.add_argument("--calls", type=int, default=20, help="timed calls per program")
    parser.add_argument("--out", type=Path, help="write both programs' HLO text here")
    args = parser.parse_args(argv)
    phases = PHASES if args.phase == "both" else (args.phase,)
    for phase in phases:
        if args.mode in MODES[phase]:
            compare(make_workload(args.model), phase, args.op, args.out, args.calls, args.mode)
        else:
            print(f"== {args.model} {phase}: no {args.mode} mode ({MODES[phase]})")


if __name__ == "__main__":
    main()
