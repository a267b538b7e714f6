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
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from bench.bench_unwind import make_core
from tests.helpers import X86

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.5  # seconds (issue 17)


class Timing(NamedTuple):
    wall: float
    cpu: float  # user + system of the child: what other load on the machine changes least


def timed(command: list[str], env: dict[str, str] | None = None) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Timing(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def median(runs: list[Timing]) -> Timing:
    return Timing(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs))


def line(label: str, ours: list[Timing], theirs: list[Timing] | None = None) -> str:
    mine = median(ours)
    text = f"  {label:<30} wall {mine.wall:6.3f} s   cpu {mine.cpu:6.3f} s"
    if theirs:
        other = median(theirs)
        text += f"   ratio {mine.wall / other.wall:.0f}x wall, {mine.cpu / max(other.cpu, 1e-3):.0f}x cpu"
    return text


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
    from sframe_core.cli.commands import main
    from sframe_core.dwarf import cfi

    originals = {name: getattr(cfi.CFITable, name) for name in ("_open", "_read")
                 if hasattr(cfi.CFITable, name)}  # (_open: since the header lookups)
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
        ours: list[Timing] = []
        theirs: list[Timing] = []
        empty: list[Timing] = []
        imports: list[Timing] = []
        compiling: list[Timing] = []
        for _ in range(args.runs):
            ours.append(timed(ours_cmd, cached))
            if eu_cmd:
                theirs.append(eu_timed(eu_cmd))
            empty.append(timed([sys.executable, "-c", "pass"], cached))
            imports.append(timed([sys.executable, "-c",
                                  "import sframe_core.cli.commands, sframe_core.targets.corefile"],
                                 cached))
            compiling.append(timed(ours_cmd, uncached))
        pid_ours: list[Timing] = []
        pid_theirs: list[Timing] = []
        with sleeping(noeh) as pid, sleeping(twin) as twin_pid:
            pid_cmd = [sys.executable, "-m", "sframe_core", "backtrace", "--pid", str(pid)]
            for _ in range(args.runs):
                pid_ours.append(timed(pid_cmd, cached))
                if eu_stack:
                    pid_theirs.append(eu_timed([eu_stack, "--pid", str(twin_pid)]))
        whole, cfi_read = in_process(core, noeh)
    print(f"small core (deep.noeh recurse {args.depth}), median of {args.runs} runs")
    if theirs:
        print(line("eu-stack --core (twin)", theirs))
    print(line("sframe backtrace --core", ours, theirs))
    print(line("of which: interpreter start", empty))
    print(line("          imports (+ start)", imports))
    print(f"  {'          in-process command':<30} wall {whole:6.3f} s, of which DWARF CFI read "
          f"{cfi_read:.3f} s")
    print(f"live process (deep.noeh sleep, in pause()), median of {args.runs} runs")
    if pid_theirs:
        print(line("eu-stack --pid (twin)", pid_theirs))
    print(line("sframe backtrace --pid", pid_ours, pid_theirs))
    print(line("--core, no bytecode cache", compiling, theirs))
    mine = median(ours)
    print(f"target {TARGET} s: --core wall {'under' if mine.wall < TARGET else 'NOT under'}, "
          f"cpu {'under' if mine.cpu < TARGET else 'NOT under'} (cpu: what other load on "
          "the machine changes least)")
    return 0


def eu_timed(command: list[str]) -> Timing:
    try:
        return timed(command)
    except subprocess.CalledProcessError:  # eu-stack exits 1 at an unwind error
        return Timing(float("nan"), float("nan"))


if __name__ == "__main__":
    sys.exit(main())
