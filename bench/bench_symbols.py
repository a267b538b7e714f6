#!/usr/bin/env python3
"""How long naming frames takes in an executable with very many function symbols.

Builds a gcc + gas program with N one-instruction filler functions around
``main`` (tests/backtrace_helpers.build_many_symbols), makes a core at
``stop_here`` with gdb, then times, in this one run:

* indexing the symbol table (``SymbolTable.from_file``: one ``struct`` pass,
  sorted once) against reading the same symbols with pyelftools'
  ``iter_symbols`` (what the symbolizer did before);
* lookups per frame (bisection) on the built index;
* the whole ``sframe backtrace --core CORE --exe EXE`` command.

    python -m bench.bench_symbols [--symbols 87000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sframe_core.targets.symbols import SymbolTable
from tests.helpers import ROOT
from tests.helpers.oracle import build_many_symbols, gdb_path


def pyelftools_symbols(path: Path) -> int:
    from elftools.elf.elffile import ELFFile

    count = 0
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        for name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(name)
            if section is None:
                continue
            for sym in section.iter_symbols():
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"]:
                    count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--symbols", type=int, default=87_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        program = build_many_symbols(Path(tmp), args.symbols)
        print(f"build:    {args.symbols} filler functions in {time.perf_counter() - t0:.2f} s")
        core = Path(tmp) / "core"
        subprocess.run([gdb_path(), "-nx", "-batch", "-ex", "break stop_here", "-ex", "run",
                        "-ex", f"gcore {core}", "-ex", "kill", str(program)],
                       check=True, capture_output=True, timeout=600)

        t0 = time.perf_counter()
        table = SymbolTable.from_file(str(program))
        t_index = time.perf_counter() - t0
        t0 = time.perf_counter()
        old = pyelftools_symbols(program)
        t_old = time.perf_counter() - t0
        print(f"index:    SymbolTable.from_file {t_index * 1e3:8.1f} ms ({len(table.symbols)} "
              f"symbols)   pyelftools iter_symbols {t_old * 1e3:8.1f} ms ({old})   "
              f"ratio {t_old / t_index:5.1f}x")
        starts = [s.start + s.size // 2 for s in table.symbols]
        t0 = time.perf_counter()
        for address in starts:
            table.lookup(address)
        t_lookup = (time.perf_counter() - t0) / len(starts)
        print(f"lookup:   {t_lookup * 1e6:6.2f} us per address (bisection)")
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "sframe_core", "backtrace", "--core",
                              str(core), "--exe", str(program)], capture_output=True, text=True,
                             check=True, cwd=ROOT)
        t_cli = time.perf_counter() - t0
        frames = sum(1 for line in out.stdout.splitlines() if line.startswith("#"))
        print(f"command:  sframe backtrace --core --exe {t_cli:6.2f} s ({frames} frames, "
              "Python start-up included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
