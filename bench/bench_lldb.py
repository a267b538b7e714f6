"""``bt`` of a 10,000-deep recursion: the SFrame provider versus native LLDB.

    .venv/bin/python -m bench.bench_lldb [--lldb 23] [--depth 10000] [--producer busid-v3]

Native LLDB unwinds the twin that has ``.eh_frame``; the provider unwinds
``deep.noeh.stripped`` (no ``.eh_frame``, no symbols), in the same run. Each
time is the wall time of one ``bt`` command at the prompt (pexpect round
trip, output included), after the process stopped at ``stop_here``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.helpers.lldbtools import FIXTURES, Session, break_command, parse_bt


def timed_bt(version: str, binary: Path, twin: Path, depth: int, *, plugin: bool,
             command: str = "bt") -> tuple[float, int]:
    session = Session(version, plugin=plugin, timeout=900)
    try:
        session.cmd("settings set show-statusline false")
        session.cmd(f"target create {binary}")
        session.cmd(break_command(binary, twin))
        session.cmd(f"process launch -- recurse {depth}")
        start = time.perf_counter()
        out = session.cmd(command)
        elapsed = time.perf_counter() - start
        return elapsed, len(parse_bt(out))
    finally:
        session.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lldb", default="23", help="22 or 23 (needs frame providers)")
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--producer", default="busid-v3")
    args = parser.parse_args()
    base = FIXTURES / "x86_64" / args.producer
    twin, stripped = base / "deep", base / "deep.noeh.stripped"
    native_t, native_n = timed_bt(args.lldb, twin, twin, args.depth, plugin=False)
    prov_t, prov_n = timed_bt(args.lldb, stripped, twin, args.depth, plugin=True)
    cmd_t, cmd_n = timed_bt(args.lldb, stripped, twin, args.depth, plugin=True,
                            command="sframe bt")
    print(f"lldb-{args.lldb}, recursion depth {args.depth}, {args.producer}")
    print(f"  native bt (deep, .eh_frame):            {native_t:8.2f} s  {native_n} frames")
    print(f"  provider bt (deep.noeh.stripped):       {prov_t:8.2f} s  {prov_n} frames")
    print(f"  sframe bt (deep.noeh.stripped):         {cmd_t:8.2f} s  {cmd_n} frames")
    print(f"  ratio provider/native: {prov_t / native_t:.2f}x; "
          f"sframe bt/native: {cmd_t / native_t:.2f}x")
    return 0 if prov_n == native_n else 1


if __name__ == "__main__":
    sys.exit(main())
