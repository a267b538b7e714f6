"""Register and variable values in LLDB's caller frames on the real programs: right / wrong / unavailable.

For every deep stop of tests/helpers/realprogs.py (lua5.4 and bzip2 at -O2 -g,
first hit of each breakpoint), in caller frames 1..3, every register that
``register read`` shows on the twin (``.eh_frame``, LLDB alone) is compared
with what it shows on the ``.noeh`` build:

  (a) LLDB alone on ``.noeh``;
  (b) LLDB + ``command script import lldb_plugin`` on ``.noeh`` (a fresh
      XDG_CACHE_HOME, so the SFrame symbol file is generated anew).

A value is *right* when equal to the twin's, *wrong* when shown with another
value, *unavailable* when not shown. Scalars of ``frame variable`` are counted
the same way (aggregates, and values that differ between two runs of the twin,
are left out; "optimized out" and the like count as unavailable).

Both builds run from directories of the same length with the same environment,
so that their stacks are alike byte for byte (as tests/test_lldb_realprogs.py).
Stops are driven by tests/helpers/lldb_stops.py under LLDB's own Python.

    .venv/bin/python scripts/lldb_values_report.py --lldb 23
    .venv/bin/python scripts/lldb_values_report.py --lldb 22 --producers busid-v3 bu2.40-v1

Every wrong value (and every frame whose pc differs from the twin's) is listed.
Exit status 1 when (b) shows any wrong value.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.lldbtools import frame_variables, is_aggregate  # noqa: E402
from helpers.realprogs import MAIN_PRODUCERS, PROGRAMS  # noqa: E402

DEBUGGERS = ROOT / ".debuggers" / "bin"
PLUGIN = ROOT / "lldb_plugin"
STOPS = ROOT / "tests" / "helpers" / "lldb_stops.py"
REGISTER = re.compile(r"^\s*(\w+) = (0x[0-9a-f]+)", re.M)
UNAVAILABLE = ("not available", "unavailable", "could not evaluate", "<no location",
               "optimized out", "<empty constant data>", "<incomplete type")


def stops(version: str, binary: Path, program: str, plugin: Path | None, cache: Path,
          frames: int) -> tuple[dict, str]:
    prog = PROGRAMS[program]
    config = {"binary": str(binary), "args": list(prog.args),
              "breakpoints": list(prog.breakpoints),
              "plugin": str(plugin) if plugin else None, "frames": frames, "addresses": None}
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["XDG_CACHE_HOME"] = str(cache)
    result = subprocess.run(["nice", "-n", "19", str(DEBUGGERS / f"lldb-{version}-python"),
                             str(STOPS), json.dumps(config)], capture_output=True, text=True,
                            timeout=3600, env=env, cwd=str(ROOT))
    if result.returncode != 0:
        raise RuntimeError(f"{binary} plugin={plugin}: {result.stderr[-3000:]}")
    found = json.loads(result.stdout)
    log = found.pop("__log__") + result.stderr
    return found, log




def compare(label: str, want: dict, again: dict, got: dict, frames: int,
            counts: Counter, wrong: list[str]) -> None:
    for bp, stop in want.items():
        g = got.get(bp)
        if g is None:
            counts[f"{label} stop missing"] += 1
            wrong.append(f"{label}: {bp}: no stop")
            continue
        for k in range(1, frames + 1):
            if k > len(stop["frames"]):
                break
            w_pc = stop["list"][k][0] if k < len(stop["list"]) else None
            g_pc = g["list"][k][0] if k < len(g["list"]) else None
            w_vars, w_regs = stop["frames"][k - 1]
            wr = dict(REGISTER.findall(w_regs))
            wv = frame_variables(w_vars)
            other = again.get(bp, {}).get("frames", [])
            av = frame_variables(other[k - 1][0]) if len(other) >= k else {}
            if k > len(g["frames"]) or g_pc != w_pc:
                # no such frame, or another frame: nothing it shows is the twin's
                counts["frames other pc or missing"] += 1
                wrong.append(f"{label}: {bp} frame #{k}: pc {g_pc and hex(g_pc)}, "
                             f"the twin {w_pc and hex(w_pc)}")
                gr: dict[str, str] = {}
                gv: dict[str, str] = {}
                if k <= len(g["frames"]):
                    gr = dict(REGISTER.findall(g["frames"][k - 1][1]))
                    gv = frame_variables(g["frames"][k - 1][0])
                counts["registers in other-pc frames"] += len(wr)
                counts["registers in other-pc frames shown"] += sum(r in gr for r in wr)
                counts["variables in other-pc frames shown"] += len(gv)
                continue
            counts["frames"] += 1
            g_vars, g_regs = g["frames"][k - 1]
            gr = dict(REGISTER.findall(g_regs))
            for reg, value in wr.items():
                counts["registers"] += 1
                if reg not in gr:
                    counts["registers unavailable"] += 1
                elif gr[reg] == value:
                    counts["registers right"] += 1
                else:
                    counts["registers wrong"] += 1
                    wrong.append(f"{label}: {bp} frame #{k} ({stop['list'][k][2]}, pc "
                                 f"{w_pc:#x}): {reg} = {gr[reg]}, the twin: {value}")
            for reg in gr.keys() - wr.keys():
                counts["registers shown only here"] += 1
                wrong.append(f"{label}: {bp} frame #{k}: {reg} = {gr[reg]}, not in the twin")
            gv = frame_variables(g_vars)
            for name, value in wv.items():
                if is_aggregate(value) or av.get(name) != value:
                    continue
                if any(u in value for u in UNAVAILABLE):
                    continue  # unavailable on the twin too: nothing to compare
                counts["variables"] += 1
                shown = gv.get(name)
                if shown is None or any(u in shown for u in UNAVAILABLE):
                    counts["variables unavailable"] += 1
                elif shown == value:
                    counts["variables right"] += 1
                else:
                    counts["variables wrong"] += 1
                    wrong.append(f"{label}: {bp} frame #{k}: {name} = {shown!r}, "
                                 f"the twin: {value!r}")


def measure(version: str, program: str, producer: str, frames: int, work: Path,
            plugin_dir: Path) -> dict:
    prog = PROGRAMS[program]
    base = work / f"{program}-{producer}"
    copies = {}
    for label, which in (("twin", "twin"), ("noeh", "noeh")):
        (base / label).mkdir(parents=True)
        copies[label] = base / label / prog.name
        shutil.copy(prog.path(producer, which), copies[label])
    # XDG_CACHE_HOME is in the program's environment too: cache directories of
    # one length, or the stack shifts (by 16 bytes at some lengths) and every
    # stack address in a register or pointer differs from the twin's.
    caches = {k: base / f"cache-{k}" for k in ("twin", "alon", "plug")}
    assert len({len(str(c)) for c in caches.values()}) == 1
    want, _ = stops(version, copies["twin"], program, None, caches["twin"], frames)
    again, _ = stops(version, copies["twin"], program, None, caches["twin"], frames)
    alone, _ = stops(version, copies["noeh"], program, None, caches["alon"], frames)
    plugin, log = stops(version, copies["noeh"], program, plugin_dir, caches["plug"], frames)
    # (b) means nothing unless the plugin loaded and made the module's symbol file
    made = list((caches["plug"] / "sframe-gdb" / "symbols").glob("*.debug"))
    if not made or "cannot load" in log or "Traceback" in log:
        raise RuntimeError(f"{program} {producer}: the plugin made no symbol file:\n{log[-3000:]}")
    result: dict = {"program": program, "producer": producer, "stops": len(want)}
    twin_regs = sum(len(REGISTER.findall(f[1])) for s in want.values() for f in s["frames"])
    result["twin registers"] = twin_regs
    for label, got in (("alone", alone), ("plugin", plugin)):
        counts: Counter = Counter()
        wrong: list[str] = []
        compare(label, want, again, got, frames, counts, wrong)
        result[label] = {"counts": dict(counts), "wrong": wrong}
    if "no SFrame symbol file" in log:
        result["plugin log"] = log[-2000:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lldb", default="23", help="LLDB version (.debuggers/bin/lldb-N)")
    parser.add_argument("--producers", nargs="+", default=list(MAIN_PRODUCERS))
    parser.add_argument("--programs", nargs="+", default=list(PROGRAMS))
    parser.add_argument("--frames", type=int, default=3, help="caller frames 1..N")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every result here too")
    parser.add_argument("--plugin", type=Path, default=PLUGIN,
                        help="the lldb_plugin directory to import (default: this checkout's; "
                        "another tree's, e.g. from git archive, to compare versions)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lldbvals-"))
    jobs = [(p, q) for q in args.producers for p in args.programs]
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda j: measure(args.lldb, j[0], j[1], args.frames, work,
                                                    args.plugin.resolve()),
                                    jobs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    total: dict[str, Counter] = {"alone": Counter(), "plugin": Counter()}
    keys = ("right", "wrong", "unavailable")
    print(f"LLDB {args.lldb}, caller frames 1-{args.frames}; right / wrong / unavailable "
          f"against the twin; plugin {args.plugin.resolve()}")
    for r in results:
        print(f"\n{r['program']} {r['producer']}: {r['stops']} stops, "
              f"twin registers {r['twin registers']}")
        for label in ("alone", "plugin"):
            c = r[label]["counts"]
            total[label].update(c)
            print(f"  {label:6} registers " + " / ".join(str(c.get(f'registers {k}', 0))
                                                        for k in keys)
                  + "   variables " + " / ".join(str(c.get(f'variables {k}', 0)) for k in keys)
                  + f"   frames compared {c.get('frames', 0)}, other pc/missing "
                  f"{c.get('frames other pc or missing', 0)}")
    print("\nTotal")
    for label in ("alone", "plugin"):
        c = total[label]
        print(f"  {label:6} registers " + " / ".join(str(c.get(f'registers {k}', 0)) for k in keys)
              + f" (of {c.get('registers', 0)})   variables "
              + " / ".join(str(c.get(f'variables {k}', 0)) for k in keys)
              + f" (of {c.get('variables', 0)})   frames {c.get('frames', 0)}, other pc/missing "
              f"{c.get('frames other pc or missing', 0)}, registers shown only there "
              f"{c.get('registers shown only here', 0)}")
    for label in ("plugin", "alone"):
        lines = [w for r in results for w in r[label]["wrong"]]
        print(f"\n{label}: {len(lines)} wrong or other-pc entries")
        for line in lines[: None if label == "plugin" else 40]:
            print("  " + line)
    return 1 if total["plugin"].get("registers wrong") or total["plugin"].get("variables wrong") \
        else 0


if __name__ == "__main__":
    sys.exit(main())
