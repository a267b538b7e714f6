"""``bt`` of a 10,000-deep recursion: the plugin versus native LLDB on the twin.

    .venv/bin/python -m bench.bench_lldb [--lldb 23] [--depth 10000] [--producer busid-v3]
                                         [--runs 3] [--provider]

Native LLDB unwinds the twin that has ``.eh_frame``; the plugin unwinds
``deep.noeh.stripped`` (no ``.eh_frame``, no symbols), in the same run:

- the native route (default): LLDB's own unwinder reading the ``.debug_frame``
  symbol file the plugin added (target: within 1.1x of native);
- ``--provider``: also the frame provider (``SFRAME_LLDB_ROUTE=provider``)
  and ``sframe bt``, for comparison.

Each time is the wall time of one ``bt`` command at the prompt (pexpect
round trip, output included), after the process stopped at ``stop_here``;
the first ``bt`` of a stop (frames not cached yet). Runs alternate between
the variants and the median is reported: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers.lldbtools import FIXTURES, Session, break_command, parse_bt


def session_with(version: str, *, plugin: bool, env: dict[str, str] | None = None,
                 timeout: int = 900) -> Session:
    """An LLDB session whose environment has ``env`` added (``Session`` copies ours)."""
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        return Session(version, plugin=plugin, timeout=timeout)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def timed_bt(version: str, binary: Path, twin: Path, depth: int, *, plugin: bool,
             command: str = "bt", env: dict[str, str] | None = None) -> tuple[float, int]:
    session = session_with(version, plugin=plugin, env=env)
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
    parser.add_argument("--lldb", default="23", help="21, 22 or 23")
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--producer", default="busid-v3")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--provider", action="store_true",
                        help="also time the frame provider and 'sframe bt' (LLDB 22+)")
    args = parser.parse_args()
    base = FIXTURES / "x86_64" / args.producer
    twin, stripped = base / "deep", base / "deep.noeh.stripped"
    with tempfile.TemporaryDirectory() as cache:
        route_env = {"XDG_CACHE_HOME": cache}
        timed_bt(args.lldb, stripped, twin, 10, plugin=True, env=route_env)  # fills the cache
        variants: dict[str, list[tuple[float, int]]] = {"native": [], "route": [], "provider": [],
                                                         "sframe bt": []}
        for _ in range(args.runs):
            variants["native"].append(timed_bt(args.lldb, twin, twin, args.depth, plugin=False))
            variants["route"].append(timed_bt(args.lldb, stripped, twin, args.depth, plugin=True,
                                              env=route_env))
            if args.provider:
                off = {"SFRAME_LLDB_ROUTE": "provider"}
                variants["provider"].append(timed_bt(args.lldb, stripped, twin, args.depth,
                                                     plugin=True, env=off))
                variants["sframe bt"].append(timed_bt(args.lldb, stripped, twin, args.depth,
                                                      plugin=True, command="sframe bt", env=off))
    print(f"lldb-{args.lldb}, recursion depth {args.depth}, {args.producer}, "
          f"median of {args.runs} runs")
    native = statistics.median(t for t, _ in variants["native"])
    frames = {name: {n for _, n in runs} for name, runs in variants.items() if runs}
    labels = {"native": "native bt (deep, .eh_frame)", "route": "native route bt (deep.noeh.stripped)",
              "provider": "provider bt (deep.noeh.stripped)", "sframe bt": "sframe bt (deep.noeh.stripped)"}
    for name, runs in variants.items():
        if not runs:
            continue
        median = statistics.median(t for t, _ in runs)
        print(f"  {labels[name]:40s} {median:8.2f} s  {sorted(frames[name])} frames  "
              f"ratio {median / native:.2f}x")
    return 0 if frames["route"] == frames["native"] else 1


if __name__ == "__main__":
    sys.exit(main())
