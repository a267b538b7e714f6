"""How fast GDB backtraces with the SFrame plugin, against GDB's own DWARF unwinder.

Two measurements, each on ``deep.noeh`` with the plugin and on its twin
``deep`` (same code, with ``.eh_frame``) under plain gdb, in the same run.
The plugin is measured on each of its routes: ``dwarf`` (the default: its
symbol file attached, gdb's own DWARF unwinder unwinds, the Python unwinder
only guards against PCs that cannot be code) and ``python`` (no symbol files:
the Python unwinder, as while a large module's symbol file is being made).

1. ``bt`` of a 10,000-deep recursion (``deep recurse 10000``), timed inside
   gdb with ``time.process_time`` (gdb's CPU time: what the unwinding costs,
   not how long a loaded machine kept gdb waiting) around
   ``gdb.execute('bt', to_string=True)``
   after flushing the frame cache (``maint flush register-cache``), so each
   repetition unwinds every frame again; the best of ``--repeat`` after one
   untimed bt.
2. ``stepi`` + ``bt`` per instruction from f2 on (what a user stepping
   with a backtrace window pays), timed the same way.

The gdbs of one measurement (native, and the plugin with each ``--saved``
mode) run side by side and take turns, so that the ratios printed together
were measured under the same load.

Usage: python -m bench.bench_gdb [--gdb PATH] [--depth N] [--repeat N] [--route dwarf|python|both]
[--saved on|off|both] (from the checkout). Prints absolute times and the
plugin/native ratio (targets: the DWARF route within 1.05x, the Python
unwinder within 1.25x). ``--saved both`` measures the Python unwinder without
and with the callee-saved register rules (sframe_core.analysis.saved), in the same run.
"""

from __future__ import annotations

import argparse
import re
import sys
from contextlib import ExitStack
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
        t0 = time.process_time()
        out = gdb.execute("bt", to_string=True)
        t = time.process_time() - t0
        best = t if best is None else min(best, t)
        frames = out.count("\\n#") + 1
    print("BENCH bt %.6f %d" % (best, frames))
def _sframe_bench_step(n):
    t0 = time.process_time()
    for _ in range(n):
        gdb.execute("stepi", to_string=True)
        gdb.execute("bt", to_string=True)
    print("BENCH step %.6f %d" % (time.process_time() - t0, n))
end"""


def _session(gdb: str, program: Path, plugin: bool, saved: bool = True,
             symbol_files: str = "foreground") -> Gdb:
    env = {"SFRAME_SAVED_REGISTERS": "0"} if plugin and not saved else None
    g = Gdb(gdb, plugin=plugin, args=[str(program)], timeout=600, symbol_files=symbol_files,
            env=env)
    g.cmd(_TIMER)
    return g


def _configs(saved_modes: tuple[bool, ...], dwarf: bool = True
             ) -> list[tuple[str, str, bool, bool, str]]:
    """(label, fixture, plugin, saved registers, symbol files): native first,
    then the DWARF route, then the Python unwinder's modes."""
    return ([("native", "deep", False, True, "off")]
            + ([("dwarf", "deep.noeh", True, True, "foreground")] if dwarf else [])
            + [(f"sframe-{'on' if saved else 'off'}", "deep.noeh", True, saved, "off")
               for saved in saved_modes])


def bench_bt(gdb: str, depth: int, repeat: int, saved_modes: tuple[bool, ...] = (True,),
             dwarf: bool = True) -> dict[str, tuple[float, int]]:
    """Best bt time per configuration. The gdbs run side by side and take
    turns, one bt each per round (after one untimed bt), so that a change in
    the machine's load hits every configuration alike."""
    result: dict[str, tuple[float, int]] = {}
    with ExitStack() as stack:
        sessions = []
        for label, name, plugin, saved, files in _configs(saved_modes, dwarf):
            g = stack.enter_context(_session(gdb, fixture("x86_64", PRODUCER, name), plugin, saved,
                                             files))
            g.cmd("break stop_here")
            g.cmd(f"run recurse {depth}", timeout=600)
            g.cmd("python _sframe_bench_bt(1)", timeout=600)  # warm: symbols, analysis
            sessions.append((label, g))
        for _ in range(repeat):
            for label, g in sessions:
                out = g.cmd("python _sframe_bench_bt(1)", timeout=600)
                m = re.search(r"BENCH bt (\S+) (\d+)", out)
                if not m:
                    raise SystemExit(f"{label}: no result:\n{out[-2000:]}")
                t, frames = float(m.group(1)), int(m.group(2))
                if label not in result or t < result[label][0]:
                    result[label] = (t, frames)
    return result


def bench_step(gdb: str, steps: int, saved_modes: tuple[bool, ...] = (True,),
               dwarf: bool = True) -> dict[str, float]:
    """Time per stepi+bt, the configurations taking turns ten steps at a time."""
    result: dict[str, float] = {}
    with ExitStack() as stack:
        sessions = []
        for label, name, plugin, saved, files in _configs(saved_modes, dwarf):
            g = stack.enter_context(_session(gdb, fixture("x86_64", PRODUCER, name), plugin, saved,
                                             files))
            g.cmd("break *f2")
            g.cmd("run")
            sessions.append((label, g))
            result[label] = 0.0
        done = 0
        while done < steps:
            chunk = min(10, steps - done)
            for label, g in sessions:
                out = g.cmd(f"python _sframe_bench_step({chunk})", timeout=600)
                m = re.search(r"BENCH step (\S+) (\d+)", out)
                if not m:
                    raise SystemExit(f"{label}: no result:\n{out[-2000:]}")
                result[label] += float(m.group(1))
            done += chunk
    return {label: total / steps for label, total in result.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gdb", action="append", help="gdb to use (default: every one found)")
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--route", choices=("dwarf", "python", "both"), default="both",
                        help="the plugin's routes to measure (default both)")
    parser.add_argument("--saved", choices=("on", "off", "both"), default="on",
                        help="callee-saved register rules in the Python unwinder (default on)")
    parser.add_argument("--no-step", action="store_true", help="only the bt measurement")
    args = parser.parse_args()
    gdbs = args.gdb or [p for p in GDBS.values() if gdb_version(p)]
    modes = {"on": (True,), "off": (False,), "both": (False, True)}[args.saved]
    if args.route == "dwarf":
        modes = ()
    dwarf = args.route != "python"
    for gdb in gdbs:
        version = gdb_version(gdb)
        name = f"gdb {version[0]}.{version[1]}" if version else gdb
        bt = bench_bt(gdb, args.depth, args.repeat, modes, dwarf)
        tn, fn = bt["native"]
        if dwarf:
            ts, fs = bt["dwarf"]
            print(f"{name} (symbol file, gdb's DWARF unwinder): bt of recurse {args.depth}: "
                  f"native {tn:.3f} s ({fn} frames), sframe {ts:.3f} s ({fs} frames), "
                  f"ratio {ts / tn:.2f}x", flush=True)
        for saved in modes:
            tag = f"{name} (Python unwinder, saved registers {'on' if saved else 'off'})"
            ts, fs = bt[f"sframe-{'on' if saved else 'off'}"]
            print(f"{tag}: bt of recurse {args.depth}: native {tn:.3f} s ({fn} frames), "
                  f"sframe {ts:.3f} s ({fs} frames), ratio {ts / tn:.2f}x", flush=True)
        if args.no_step:
            continue
        st = bench_step(gdb, args.steps, modes, dwarf)
        if dwarf:
            print(f"{name} (symbol file, gdb's DWARF unwinder): stepi+bt per instruction: "
                  f"native {st['native'] * 1e3:.2f} ms, sframe {st['dwarf'] * 1e3:.2f} ms, "
                  f"ratio {st['dwarf'] / st['native']:.2f}x", flush=True)
        for saved in modes:
            tag = f"{name} (Python unwinder, saved registers {'on' if saved else 'off'})"
            ss = st[f"sframe-{'on' if saved else 'off'}"]
            print(f"{tag}: stepi+bt per instruction: native {st['native'] * 1e3:.2f} ms, "
                  f"sframe {ss * 1e3:.2f} ms, ratio {ss / st['native']:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
