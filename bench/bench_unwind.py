"""How fast is a 10,000-frame walk with SFrame rows, against ``.eh_frame`` rows?

Makes two cores with gdb at ``stop_here`` of ``deep recurse N``: one of the
``.noeh`` binary (SFrame only) and one of its twin (both sections). Then
times whole-stack walks: SFrame rows on the ``.noeh`` core, and on the twin's
core SFrame rows and ``.eh_frame`` rows in the same process, so the last two
differ only in where the rows come from. "cold" includes opening the tables
(a fresh module table); "warm" walks again with them loaded.

    python -m bench.bench_unwind [--depth 10000] [--repeat 3] [--producer bu2.40-v1]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sframe_core.targets.corefile import CoreFile, open_core
from sframe_core.targets.modules import ModuleTable
from sframe_core.unwind.step import Frame, Stop, walk
from tests.helpers import X86


def make_core(program: Path, depth: int, core: Path) -> None:
    gdb = shutil.which("gdb")
    if gdb is None:
        raise SystemExit("bench: gdb is needed to make the cores")
    subprocess.run([gdb, "-nx", "-batch", "-ex", "break stop_here", "-ex", "run",
                    "-ex", f"gcore {core}", "-ex", "kill", "--args", str(program), "recurse",
                    str(depth)], check=True, capture_output=True, timeout=600)
    if not core.exists():
        raise SystemExit(f"bench: gdb made no core of {program}")


def one_walk(core: CoreFile, modules: ModuleTable) -> tuple[int, Stop]:
    thread = core.threads[0]
    frames = 0
    stop: Stop | None = None
    for item in walk(Frame(thread.pc, dict(thread.regs), interrupted=True), modules,
                     core.memory, core.arch):
        if isinstance(item, Stop):
            stop = item
        else:
            frames += 1
    assert stop is not None
    return frames, stop


def timed(core: CoreFile, sources: Sequence[str], repeat: int) -> tuple[int, Stop, float, float]:
    start = time.perf_counter()
    modules = ModuleTable.from_mappings(core.mappings, sources=sources)
    frames, stop = one_walk(core, modules)
    cold = time.perf_counter() - start
    warm = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        one_walk(core, modules)
        warm = min(warm, time.perf_counter() - start)
    return frames, stop, cold, warm


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--producer", default="bu2.40-v1",
                        help="fixture directory under tests/fixtures/x86_64")
    args = parser.parse_args(argv)
    fixtures = X86 / args.producer
    try:
        import sframe_core.dwarf.cfi  # noqa: F401
        have_cfi = True
    except ImportError:
        have_cfi = False
    with tempfile.TemporaryDirectory(prefix="sframe-bench-") as tmp:
        noeh_core, twin_core = Path(tmp) / "noeh.core", Path(tmp) / "twin.core"
        make_core(fixtures / "deep.noeh", args.depth, noeh_core)
        make_core(fixtures / "deep", args.depth, twin_core)
        runs = [("sframe   (.noeh core)", noeh_core, ("sframe",)),
                ("sframe   (twin core) ", twin_core, ("sframe",))]
        if have_cfi:
            runs.append(("eh_frame (twin core) ", twin_core, ("eh_frame",)))
        results = {}
        print(f"deep recurse {args.depth}, {args.producer}; times are the best of "
              f"{args.repeat} warm walks")
        for label, path, sources in runs:
            with open_core(str(path)) as core:
                frames, stop, cold, warm = timed(core, sources, args.repeat)
            results[label] = (frames, warm)
            print(f"{label}: {frames} frames, cold {cold * 1e3:8.1f} ms, warm {warm * 1e3:8.1f} ms"
                  f" = {warm / frames * 1e6:6.2f} us/frame; stopped: {stop}")
        if not have_cfi:
            print("eh_frame (twin core) : not measured: sframe_core/dwarf/cfi.py is not there yet")
            return 0
        sf = results["sframe   (twin core) "]
        eh = results["eh_frame (twin core) "]
        print(f"eh_frame / sframe (warm, same core): {eh[1] / sf[1]:.2f}x")
        if sf[0] != eh[0]:
            print(f"note: the walks differ in length ({sf[0]} vs {eh[0]} frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
