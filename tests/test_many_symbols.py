"""Naming frames in an executable with ~90,000 function symbols.

The symbol table is read once per file, unpacked in one pass and searched by
bisection: a core of such a program is named right (checked against ``nm``
and against gdb's frames), and the time it takes is in
``bench/bench_symbols.py``, not asserted here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.oracle import build_many_symbols, gdb_run, sframe_json

from sframe_core.targets.symbols import SymbolTable

COUNT = 90_000


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_many_symbols(tmp_path_factory.mktemp("many"), COUNT)


def _nm(program: Path) -> dict[str, tuple[int, int]]:
    out = subprocess.run(["nm", "-S", "--defined-only", str(program)], check=True,
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "Tt":
            found[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return found


def test_every_symbol_is_found(many: Path) -> None:
    table = SymbolTable.from_file(str(many))
    nm = _nm(many)
    fillers = {name: span for name, span in nm.items() if name.startswith("fill_")}
    assert len(fillers) == COUNT
    for name, (start, size) in nm.items():
        assert table.lookup(start) == (name, 0), name
        assert table.lookup(start + size - 1) == (name, size - 1), name
    # Past the last byte of a function and before the next: no name, not a neighbour's.
    start, size = nm["main"]
    following = min(s for s, _ in nm.values() if s > start)
    if following > start + size:
        assert table.lookup(start + size) is None


@pytest.mark.gdb
def test_core_of_a_program_with_many_symbols(many: Path, tmp_path: Path) -> None:
    core = tmp_path / "many.core"
    gdb = gdb_run(many, [], tmp_path, core=core)
    data = sframe_json("backtrace", "--core", str(core), "--exe", str(many))
    frames = data["threads"][0]["frames"]
    assert [f["pc"] for f in frames] == next(iter(gdb.values()))
    assert [f["function"] for f in frames][:4] == ["stop_here", "c2", "c1", "main"]
    # Each offset is from that function's own start: one load bias for all four.
    nm = _nm(many)
    biases = {f["pc"] - f["offset"] - nm[f["function"]][0] for f in frames[:4]}
    assert len(biases) == 1
