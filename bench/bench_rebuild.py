"""A rebuilt program's symbol file with the analysis results kept from the build before.

    .venv/bin/python -m bench.bench_rebuild [--sizes 1000,10000] [--runs 1] [--keep DIR]

Each size is a program of ``bench_scale.gen_program`` (the same generator),
built twice at -O2 -g with SFrame: build A, and build B with one function in
the middle edited (three more calls: every function after it moves, every
call across it changes). Build A's symbol file is made at a path first
(``symfile.symbol_file_for``, which leaves its analysis results beside the
symbol files, ``analysis_store.py``); then build B is put at that path (a new
build-id: a symbol-file cache miss) and its symbol file is made in a fresh
process, as the debugger adapters' worker makes it:

- ``off``: ``SFRAME_ANALYSIS_CACHE=0``, nothing kept (the time before the store);
- ``empty``: a cache without A's results (a first build);
- ``reuse``: a cache holding A's results;
- and for reference ``none``: no callee-saved register analysis at all
  (``SFRAME_SAVED_REGISTERS=0``: rows, encoding, copying; what no store can save),
  and ``native``: the amd64 analysis in C (``sframe_core/analysis/native``),
  which keeps no results (it costs less than a kept one).

The store keeps what the Python analysis makes, so ``off``, ``empty`` and
``reuse`` run it alone (``SFRAME_NATIVE=0``): where the C analysis serves
a function, nothing is kept or reused for it.

Each with ``--jobs 1`` (CPU seconds of the process) and with the default
(wall seconds, worker processes included on the machine's cores). The
three symbol files of B must be the same bytes (exit status 1 otherwise);
the ratios printed together were measured in the same run, variants
alternating.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_scale import ROOT, build, gen_program

_MAKE = """
import sys, time
from sframe_core.symfiles.symfile import symbol_file_for
from sframe_core.format.elf import read_elf
fdes = read_elf(sys.argv[1]).open().num_fdes
wall, cpu = time.perf_counter(), time.process_time()
made = symbol_file_for(sys.argv[1], cache=sys.argv[2], jobs=int(sys.argv[3]))
print(time.perf_counter() - wall, time.process_time() - cpu, fdes, made.cached, made.path)
"""
VARIANTS = ("off", "empty", "reuse", "none", "native")


def make(module: Path, cache: Path, jobs: int, *, off: bool = False,
         saved: bool = True, native: bool = False) -> tuple[float, float, int, Path]:
    """(wall, CPU seconds, FDEs, symbol file) of ``symbol_file_for`` in a fresh process."""
    env = {**os.environ, "SFRAME_ANALYSIS_CACHE": "0" if off else "1",
           "SFRAME_NATIVE": "1" if native else "0", "SFRAME_SAVED_REGISTERS": "1" if saved else "0"}
    out = subprocess.run([sys.executable, "-c", _MAKE, str(module), str(cache), str(jobs)],
                         cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout
    wall, cpu, fdes, cached, path = out.split()
    assert cached == "False", out
    return float(wall), float(cpu), int(fdes), Path(path)


def programs(size: int, base: Path, keep: bool) -> tuple[Path, Path]:
    """Build A and build B of ``size`` functions (the ``.noeh`` copies)."""
    out = []
    for name, edited in (("a", None), ("b", size // 2)):
        directory = base / f"rebuild{size}" / name
        noeh = directory / "prog.noeh"
        if not (keep and noeh.exists()):
            start = time.perf_counter()
            build(gen_program(size, directory / "src", edited=edited), directory / "prog")
            print(f"  build {name.upper()} of {size} functions: {time.perf_counter() - start:.0f} s",
                  flush=True)
        out.append(noeh)
    return out[0], out[1]


def measure(size: int, a: Path, b: Path, runs: int, work: Path) -> bool:
    """Print the figures for one size; False when B's symbol files differ."""
    module = work / "prog.noeh"  # where both builds are, one after the other
    shutil.copy(a, module)
    with_a = work / "after-a"
    make(module, with_a, 1)
    kept = [p for p in with_a.iterdir() if p.name.endswith(".analysis")]
    assert len(kept) == 1, kept
    shutil.copy(b, module)  # the rebuild: a new build-id, a cache miss
    ok = True
    fdes = 0
    for jobs, label in ((1, "--jobs 1, CPU"), (0, "default jobs, wall")):
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        files: set[bytes] = set()
        for _ in range(runs):
            for variant in VARIANTS:
                cache = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=work))
                if variant == "reuse":
                    shutil.copy(kept[0], cache / kept[0].name)
                count = jobs or _default_jobs()
                wall, cpu, fdes, path = make(module, cache, count, off=variant == "off",
                                             saved=variant != "none", native=variant == "native")
                times[variant].append(cpu if jobs == 1 else wall)
                if variant != "none":  # other rules: another file
                    files.add(path.read_bytes())
                shutil.rmtree(cache)
        median = {v: statistics.median(t) for v, t in times.items()}
        same = len(files) == 1
        ok &= same
        print(f"  {label}: off {median['off']:.2f} s, empty {median['empty']:.2f} s, "
              f"reuse {median['reuse']:.2f} s ({median['reuse'] / fdes * 1e3:.3f} ms per function); "
              f"off / reuse {median['off'] / median['reuse']:.2f}x; no analysis at all "
              f"{median['none']:.2f} s; the C analysis {median['native']:.2f} s; "
              f"{'same bytes' if same else 'DIFFERENT BYTES'}", flush=True)
    print(f"  ({fdes} FDEs; kept results from A: {kept[0].stat().st_size} bytes)", flush=True)
    return ok


def _default_jobs() -> int:
    from sframe_core.symfiles.workers import default_jobs
    return default_jobs()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="function counts, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="runs per variant (median)")
    parser.add_argument("--keep", metavar="DIR",
                        help="build the programs in DIR and keep them (reused when already there)")
    opts = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="sframe-bench-rebuild-") as scratch:
        base = Path(opts.keep) if opts.keep else Path(scratch)
        for size in (int(s) for s in opts.sizes.split(",") if s):
            print(f"generated {size} functions, build B edited at f{size // 2}:", flush=True)
            a, b = programs(size, base, bool(opts.keep))
            work = Path(tempfile.mkdtemp(prefix="work-", dir=scratch))
            ok &= measure(size, a, b, opts.runs, work)
    print("same bytes" if ok else "DIFFERENT BYTES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
