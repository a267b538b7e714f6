"""``sframe backtrace --core`` of a small core: wall time against ``eu-stack``, and where it goes.

    .venv/bin/python -m bench.bench_core_start [--depth 5] [--runs 5]

Makes a core of ``deep.noeh recurse DEPTH`` stopped at ``stop_here`` (gdb's
``gcore``) and its twin's, then times, median of ``--runs`` each, taking
turns: ``python -m sframe_core backtrace --core`` on the ``.noeh`` core,
``eu-stack --core`` on the twin's (elfutils with ``.eh_frame``), and, on a
live process (``deep.noeh`` stopped in ``stop_here`` by a SIGSTOP it sends
itself), ``sframe backtrace --pid`` against ``eu-stack --pid``; the ratios
are of figures measured in this run. Then the parts of the core command:
an empty interpreter (``python -c pass``), importing what the command
imports, and, in one process, reading the DWARF CFI (``cfi.CFITable``'s
first look at a file: ``.eh_frame_hdr``'s table, or the whole section where
there is no usable one) and the rest of the walk. The target (issue 17):
under 0.5 s.

Python runs as an installed package does, with its bytecode cached (in a
temporary ``PYTHONPYCACHEPREFIX``, warmed by one untimed run): this
machine's environment sets ``PYTHONDONTWRITEBYTECODE``, which would make
every run compile the package's sources again (about 0.1 s); the last line
gives that figure too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.bench_unwind import make_core
from tests.helpers import X86

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.5  # seconds (issue 17)


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


@contextlib.contextmanager
def sleeping(program: Path) -> Iterator[int]:
    """``program sleep`` (the fixture's ``pause()`` in f4), once it says READY: its pid."""
    proc = subprocess.Popen([str(program), "sleep"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if line != f"READY {proc.pid}\n":
            raise SystemExit(f"bench: {program} said {line!r}, not READY")
        time.sleep(0.1)  # into pause()
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)


def in_process(core: Path, exe: Path) -> tuple[float, float]:
    """(whole command, of which reading DWARF CFI), in this process (imports done).

    The CFI figure is the time inside ``CFITable._open`` (a file's first
    look: the header's table, or the full read) and ``CFITable._read`` (the
    full read, also when a lying header sends a lookup there), outermost
    calls only.
    """
    from sframe_core import cfi
    from sframe_core.cli import main

    originals = {name: getattr(cfi.CFITable, name) for name in ("_open", "_read")}
    spent = [0.0]
    depth = [0]

    def timing(original: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object) -> object:
            depth[0] += 1
            start = time.perf_counter()
            try:
                return original(*args)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[0] += time.perf_counter() - start
        return wrapper

    for name, original in originals.items():
        setattr(cfi.CFITable, name, timing(original))
    try:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            main(["backtrace", "--core", str(core), "--exe", str(exe)])
        return time.perf_counter() - start, spent[0]
    finally:
        for name, original in originals.items():
            setattr(cfi.CFITable, name, original)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--producer", default="busid-v3")
    args = parser.parse_args()
    eu_stack = shutil.which("eu-stack")
    base = X86 / args.producer
    noeh, twin = base / "deep.noeh", base / "deep"
    median = statistics.median
    with tempfile.TemporaryDirectory() as tmp:
        core, twin_core = Path(tmp) / "noeh.core", Path(tmp) / "twin.core"
        make_core(noeh, args.depth, core)
        make_core(twin, args.depth, twin_core)
        cached = {key: value for key, value in os.environ.items()
                  if key != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        uncached = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        ours_cmd = [sys.executable, "-m", "sframe_core", "backtrace", "--core", str(core), "--exe",
                    str(noeh)]
        eu_cmd = [eu_stack, "--core", str(twin_core), "-e", str(twin)] if eu_stack else None
        timed(ours_cmd, cached)  # compiles the bytecode into the cache
        ours, theirs, empty, imports, compiling = [], [], [], [], []
        for _ in range(args.runs):
            ours.append(timed(ours_cmd, cached))
            if eu_cmd:
                theirs.append(eu_timed(eu_cmd))
            empty.append(timed([sys.executable, "-c", "pass"], cached))
            imports.append(timed([sys.executable, "-c", "import sframe_core.cli, sframe_core.corefile"],
                                 cached))
            compiling.append(timed(ours_cmd, uncached))
        pid_ours, pid_theirs = [], []
        with sleeping(noeh) as pid, sleeping(twin) as twin_pid:
            pid_cmd = [sys.executable, "-m", "sframe_core", "backtrace", "--pid", str(pid)]
            for _ in range(args.runs):
                pid_ours.append(timed(pid_cmd, cached))
                if eu_stack:
                    pid_theirs.append(eu_timed([eu_stack, "--pid", str(twin_pid)]))
        whole, cfi_read = in_process(core, noeh)
    print(f"small core (deep.noeh recurse {args.depth}), median of {args.runs} runs")
    print(f"  sframe backtrace --core        {median(ours):6.3f} s")
    if theirs:
        print(f"  eu-stack --core (twin)         {median(theirs):6.3f} s   "
              f"ratio {median(ours) / median(theirs):.0f}x")
    print(f"  of which: interpreter start    {median(empty):6.3f} s")
    print(f"            imports (+ start)    {median(imports):6.3f} s")
    print(f"            in-process command   {whole:6.3f} s, of which DWARF CFI read {cfi_read:.3f} s")
    print(f"live process (deep.noeh sleep, in pause()), median of {args.runs} runs")
    print(f"  sframe backtrace --pid         {median(pid_ours):6.3f} s")
    if pid_theirs:
        print(f"  eu-stack --pid (twin)          {median(pid_theirs):6.3f} s   "
              f"ratio {median(pid_ours) / median(pid_theirs):.0f}x")
    print(f"without a bytecode cache (PYTHONDONTWRITEBYTECODE=1): --core {median(compiling):.3f} s")
    verdict = "under" if median(ours) < TARGET else "NOT under"
    print(f"target: --core {verdict} {TARGET} s")
    return 0


def eu_timed(command: list[str]) -> float:
    try:
        return timed(command)
    except subprocess.CalledProcessError:  # eu-stack exits 1 at an unwind error
        return float("nan")


if __name__ == "__main__":
    sys.exit(main())
