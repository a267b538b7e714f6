"""How fast GDB backtraces with the SFrame plugin, against GDB's own DWARF unwinder.

Two measurements, each on ``deep.noeh`` with the plugin and on its twin
``deep`` (same code, with ``.eh_frame``) under plain gdb, in the same run:

1. ``bt`` of a 10,000-deep recursion (``deep recurse 10000``), timed inside
   gdb with ``time.perf_counter`` around ``gdb.execute('bt', to_string=True)``
   after flushing the frame cache (``maint flush register-cache``), so each
   repetition unwinds every frame again.
2. ``stepi`` + ``bt`` per instruction through f2 .. f4 (what a user stepping
   with a backtrace window pays), timed the same way.

Usage: python -m bench.bench_gdb [--gdb PATH] [--depth N] [--repeat N] (from the checkout)
Prints absolute times and the plugin/native ratio (target: within 1.25x).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tests.helpers.gdbtools import GDBS, Gdb, fixture, gdb_version

PRODUCER = "bu2.44-v2"

_TIMER = """python
import time
def _sframe_bench_bt(repeat):
    best = None
    frames = 0
    for _ in range(repeat):
        gdb.execute("maint flush register-cache", to_string=True)
        t0 = time.perf_counter()
        out = gdb.execute("bt", to_string=True)
        t = time.perf_counter() - t0
        best = t if best is None else min(best, t)
        frames = out.count("\\n#") + 1
    print("BENCH bt %.6f %d" % (best, frames))
def _sframe_bench_step(n):
    t0 = time.perf_counter()
    for _ in range(n):
        gdb.execute("stepi", to_string=True)
        gdb.execute("bt", to_string=True)
    print("BENCH step %.6f %d" % (time.perf_counter() - t0, n))
end"""


def _session(gdb: str, program: Path, plugin: bool) -> Gdb:
    g = Gdb(gdb, plugin=plugin, args=[str(program)], timeout=600)
    g.cmd(_TIMER)
    return g


def bench_bt(gdb: str, depth: int, repeat: int) -> dict[str, tuple[float, int]]:
    result = {}
    for label, name, plugin in (("native", "deep", False), ("sframe", "deep.noeh", True)):
        with _session(gdb, fixture("x86_64", PRODUCER, name), plugin) as g:
            g.cmd("break stop_here")
            g.cmd(f"run recurse {depth}", timeout=600)
            out = g.cmd(f"python _sframe_bench_bt({repeat})", timeout=600)
            m = re.search(r"BENCH bt (\S+) (\d+)", out)
            if not m:
                raise SystemExit(f"{label}: no result:\n{out[-2000:]}")
            result[label] = (float(m.group(1)), int(m.group(2)))
    return result


def bench_step(gdb: str, steps: int) -> dict[str, float]:
    result = {}
    for label, name, plugin in (("native", "deep", False), ("sframe", "deep.noeh", True)):
        with _session(gdb, fixture("x86_64", PRODUCER, name), plugin) as g:
            g.cmd("break *f2")
            g.cmd("run")
            out = g.cmd(f"python _sframe_bench_step({steps})", timeout=600)
            m = re.search(r"BENCH step (\S+) (\d+)", out)
            if not m:
                raise SystemExit(f"{label}: no result:\n{out[-2000:]}")
            result[label] = float(m.group(1)) / steps
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gdb", action="append", help="gdb to use (default: every one found)")
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    gdbs = args.gdb or [p for p in GDBS.values() if gdb_version(p)]
    for gdb in gdbs:
        version = gdb_version(gdb)
        name = f"gdb {version[0]}.{version[1]}" if version else gdb
        bt = bench_bt(gdb, args.depth, args.repeat)
        (tn, fn), (ts, fs) = bt["native"], bt["sframe"]
        print(f"{name}: bt of recurse {args.depth}: native {tn:.3f} s ({fn} frames), "
              f"sframe {ts:.3f} s ({fs} frames), ratio {ts / tn:.2f}x")
        st = bench_step(gdb, args.steps)
        print(f"{name}: stepi+bt per instruction: native {st['native'] * 1e3:.2f} ms, "
              f"sframe {st['sframe'] * 1e3:.2f} ms, ratio {st['sframe'] / st['native']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
