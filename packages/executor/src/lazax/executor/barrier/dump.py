"""Graph dumps: every compiled program as files a user can read.

Contract: while ``GraphDumps.directory`` is set (``LAZAX_DUMP_DIR`` at start, or
``lazax.modes.dump_graphs(dir)`` for a block), each compile writes, under a stem
``<seq>-<program name>`` (``0003-train.py_42_step``):
- ``<stem>.lazax.txt``: lazax's IR of the graph (``lazax.ir.dump``); a dynamo graph
  captured before dumping was turned on has none kept, and says so there;
- ``<stem>.stablehlo.mlir``: the program jax lowered, as XLA received it;
- ``<stem>.hlo.txt``: XLA's optimized HLO (what runs);
and appends one JSON line to ``summary.jsonl``: ``seq``, ``name``, ``files``, the cache
key's named parts (hex), ``why`` (``"first compile of <site>"``, or the recompile report),
the compile's seconds and the persistent tier's outcome (``hit``/``miss``/null). With
several processes each writes below ``process_<index>/``. Numbering continues after what
``summary.jsonl`` already lists, so two runs into one directory do not overwrite each
other. Writing is best effort: an unwritable directory warns once and dumping stops.
"""

from __future__ import annotations

import json
import os
import re
import warnings

__all__ = ["GraphDumps"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_U64 = 0xFFFFFFFFFFFFFFFF
_NOT_KEPT = "(lazax's IR was not kept: the graph was captured before dumping began)\n"


class GraphDumps:
    """See the module docstring."""

    def __init__(self, directory: str | None = None) -> None:
        self._directory: str | None = None
        self._next = 0
        self.directory = directory

    @property
    def directory(self) -> str | None:
        return self._directory

    @directory.setter
    def directory(self, path) -> None:
        self._directory = os.fspath(path) if path else None
        self._next = 0
        self._where: str | None = None

    def _folder(self, runtime) -> str:
        if self._where is None:
            where = self._directory
            if runtime.process_count > 1:
                where = os.path.join(where, f"process_{runtime.process_index}")
            os.makedirs(where, exist_ok=True)
            summary = os.path.join(where, "summary.jsonl")
            if os.path.exists(summary):
                with open(summary, encoding="utf-8") as lines:
                    self._next = sum(1 for _ in lines)
            self._where = where
        return self._where

    def write(self, runtime, name: str, entry, facts, key, why: str | None, seconds: float):
        """Dump one compiled program (see the module docstring)."""
        try:
            self._write(runtime, name, entry, facts, key, why, seconds)
        except OSError as err:
            warnings.warn(
                f"lazax: cannot write graph dumps to {self._directory!r} ({err}); "
                f"dumping is now off",
                RuntimeWarning,
                stacklevel=4,
            )
            self.directory = None

    def _write(self, runtime, name, entry, facts, key, why, seconds) -> None:
        where = self._folder(runtime)
        seq = self._next
        self._next += 1
        stem = f"{seq:04d}-{_UNSAFE.sub('_', name)[:96]}"
        ir_text = facts.text if facts is not None and facts.text is not None else None
        files = {
            "lazax": (
                f"{stem}.lazax.txt",
                ir_text
                or "(lazax's IR was not kept: the graph was captured before dumping began)\n",
            ),
            "stablehlo": (f"{stem}.stablehlo.mlir", entry.source or ""),
            "hlo": (f"{stem}.hlo.txt", entry.as_text()),
        }
        for file_name, text in files.values():
            with open(os.path.join(where, file_name), "w", encoding="utf-8") as out:
                out.write(text)
        parts = (
            {}
            if key is None
            else {k: f"{v & 0xFFFFFFFFFFFFFFFF:016x}" for k, v in key.parts.items()}
        )
        record = {
            "seq": seq,
            "name": name,
            "files": {kind: file_name for kind, (file_name, _) in files.items()},
            "key": parts,
            "why": why,
            "seconds": round(seconds, 6),
            "persistent": entry.persistent,
        }
        with open(os.path.join(where, "summary.jsonl"), "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
