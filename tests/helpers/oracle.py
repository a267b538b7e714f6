"""Helpers for the core-file, live-process and bench backtraces: gdb as the oracle.

gdb makes the cores (``gcore`` at a breakpoint or at a fatal signal) and
unwinds the twin that still has ``.eh_frame``; ``gdbtools.FRAMES_SCRIPT``
prints every thread's frames. gdb's inline and tail-call frames (made from
libc's debug info, not found on the stack) are left out: an unwinder only
sees real frames.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import ROOT
from .gdbtools import FRAMES_SCRIPT, parse_frames

PRODUCERS = ("bu2.40-v1", "bu2.44-v2", "bu2.44-v2pcrel", "busid-v3")


def gdb_path() -> str:
    found = shutil.which("gdb")
    if found is None:
        raise AssertionError("gdb is not installed (scripts/setup.sh installs it)")
    return found


GDB_SETUP = ["-nx", "-batch", "-ex", "set backtrace past-main on",
             "-ex", "set backtrace past-entry on", "-ex", "set pagination off",
             "-ex", "set confirm off"]


def gdb_run(program: Path | str, args: list[str], tmp: Path, *, core: Path | None = None,
            breakpoint: str | None = "stop_here", pcs: bool = True,
            timeout: float = 120, settle: bool = False) -> dict[int, list[int]]:
    """Run ``program`` under gdb to ``breakpoint`` (or a fatal signal); gcore; PCs per LWP.

    ``settle``: at the breakpoint, run the program on for 0.3 s (an inferior
    call of usleep, the other threads running too), so that threads just
    released from a barrier reach the place they wait in.
    """
    cmd = [gdb_path(), *GDB_SETUP]
    if breakpoint:
        cmd += ["-ex", f"break {breakpoint}"]
    cmd += ["-ex", "run"]
    if settle:
        cmd += ["-ex", "call (int)usleep(300000)"]
    if core is not None:
        cmd += ["-ex", f"gcore {core}"]
    if pcs:
        cmd += ["-x", str(FRAMES_SCRIPT)]
    cmd += ["-ex", "kill", "--args", str(program), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                         stdin=subprocess.DEVNULL)
    if core is not None and not core.exists():
        raise AssertionError(f"gdb made no core:\n{out.stdout}\n{out.stderr}")
    return parse_pcs(out.stdout) if pcs else {}


def gdb_attach_pcs(pid: int, tmp: Path) -> dict[int, list[int]]:
    cmd = [gdb_path(), *GDB_SETUP, "-p", str(pid), "-x", str(FRAMES_SCRIPT), "-ex", "detach"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                         stdin=subprocess.DEVNULL)
    return parse_pcs(out.stdout)


def parse_pcs(text: str) -> dict[int, list[int]]:
    """LWP -> the PCs of its real frames (no inline or tail-call frames)."""
    return {thread.lwp: thread.real for thread in parse_frames(text)}


def sframe(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "sframe_core", *args], capture_output=True,
                         text=True, timeout=600, check=False, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if check and out.returncode != 0:
        raise AssertionError(f"sframe {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out


def sframe_json(*args: str) -> dict:  # type: ignore[type-arg]
    data: dict = json.loads(sframe(*args, "--json").stdout)  # type: ignore[type-arg]
    return data


def our_pcs(data: dict) -> dict[int, list[int]]:  # type: ignore[type-arg]
    return {t["lwp"]: [f["pc"] for f in t["frames"]] for t in data["threads"]}


def one_line_error(*args: str) -> str:
    """``sframe ARGS`` fails as the CLI promises: exit 1, one line on stderr."""
    out = sframe(*args, check=False)
    assert out.returncode == 1, out
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]
