"""``sframe backtrace --core`` of a small core: wall time against ``eu-stack``, and where it goes.

    .venv/bin/python -m bench.bench_core_start [--depth 5] [--runs 5]

Makes a core of ``deep.noeh recurse DEPTH`` stopped at ``stop_here`` (gdb's
``gcore``) and its twin's, then times, median of ``--runs`` each, taking
turns: ``python -m sframe_core backtrace --core`` on the ``.noeh`` core, and
``eu-stack --core`` on the twin's (elfutils with ``.eh_frame``). Then the
parts of the former: an empty interpreter (``python -c pass``), importing
what the command imports, and, in one process, reading the DWARF CFI
(libc's ``.eh_frame``, whole: ``cfi.CFITable._read``) and the rest of the
walk. The target (issue 17): under 0.5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_unwind import make_core
from tests.helpers import X86

ROOT = Path(__file__).resolve().parent.parent


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def in_process(core: Path, exe: Path) -> tuple[float, float]:
    """(whole command, of which reading DWARF CFI), in this process (imports done)."""
    from sframe_core import cfi
    from sframe_core.cli import main

    original = cfi.CFITable._read
    spent = [0.0]

    def read(self: cfi.CFITable, elf: object) -> object:
        start = time.perf_counter()
        try:
            return original(self, elf)
        finally:
            spent[0] += time.perf_counter() - start

    cfi.CFITable._read = read  # type: ignore[method-assign, assignment]
    try:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            main(["backtrace", "--core", str(core), "--exe", str(exe)])
        return time.perf_counter() - start, spent[0]
    finally:
        cfi.CFITable._read = original  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--producer", default="busid-v3")
    args = parser.parse_args()
    eu_stack = shutil.which("eu-stack")
    base = X86 / args.producer
    noeh, twin = base / "deep.noeh", base / "deep"
    with tempfile.TemporaryDirectory() as tmp:
        core, twin_core = Path(tmp) / "noeh.core", Path(tmp) / "twin.core"
        make_core(noeh, args.depth, core)
        make_core(twin, args.depth, twin_core)
        ours_cmd = [sys.executable, "-m", "sframe_core", "backtrace", "--core", str(core), "--exe",
                    str(noeh)]
        eu_cmd = [eu_stack, "--core", str(twin_core), "-e", str(twin)] if eu_stack else None
        ours, theirs, empty, imports = [], [], [], []
        for _ in range(args.runs):
            ours.append(timed(ours_cmd))
            if eu_cmd:
                try:
                    theirs.append(timed(eu_cmd))
                except subprocess.CalledProcessError:  # eu-stack exits 1 at an unwind error
                    theirs.append(float("nan"))
            empty.append(timed([sys.executable, "-c", "pass"]))
            imports.append(timed([sys.executable, "-c", "import sframe_core.cli, sframe_core.corefile"]))
        whole, cfi_read = in_process(core, noeh)
    median = statistics.median
    print(f"small core (deep.noeh recurse {args.depth}), median of {args.runs} runs")
    print(f"  sframe backtrace --core        {median(ours):6.3f} s")
    if theirs:
        print(f"  eu-stack --core (twin)         {median(theirs):6.3f} s   "
              f"ratio {median(ours) / median(theirs):.0f}x")
    print(f"  of which: interpreter start    {median(empty):6.3f} s")
    print(f"            imports (+ start)    {median(imports):6.3f} s")
    print(f"            in-process command   {whole:6.3f} s, of which DWARF CFI read {cfi_read:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
