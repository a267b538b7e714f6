"""The symbol file's cost as programs grow: generated C programs of 1k/10k/40k functions and a real one.

    .venv/bin/python -m bench.bench_scale [--sizes 1000,10000,40000] [--lldb 21,22,23]
                                          [--gdb PATH | --gdb none] [--real lua5.4|bzip2|none]
                                          [--runs 1] [--keep DIR]

Each generated program (``gen_program``: functions of varied shapes, namely
callee-saved registers live across calls, switch tables, stack buffers, loops,
and a deep chain of calls ending at ``stop_here``) is built by the host gcc
and as with ``-Wa,--gsframe`` at -O2 -g, as a twin (``.eh_frame`` and
``.sframe``) and a ``.noeh`` copy (``objcopy --remove-section .eh_frame
--remove-section .eh_frame_hdr``). For each program it prints:

- the CPU cost per function of the symbol file, cold (a fresh process:
  ``symfile.symbol_file_bytes``, imports excluded), with and without the
  callee-saved register analysis (``SFRAME_SAVED_REGISTERS``);
- the wall time of ``python -m sframe_core to-dwarf`` (it always generates)
  with ``--jobs 1`` and with the default, and of a cache hit
  (``symbol_file_for`` in a fresh process, start-up included);
- per LLDB version: the time from starting LLDB to the end of the first
  ``bt`` at ``stop_here`` (``target create``, breakpoint, ``process launch``,
  ``bt``), plain LLDB on the twin against the plugin on ``.noeh`` with an
  empty cache (cold: the symbol file is made in the session) and a filled
  one (warm), and the ratios;
- for gdb: plain gdb on the twin against gdb with the plugin on ``.noeh``
  (loaded with ``-iex``, as from a gdbinit), with an empty cache (cold) and
  a filled one (warm), and the ratios, in three cases: ``batch`` (``gdb
  -batch``: ``break``, ``run``, ``bt``; a missing file is made before gdb
  goes on, so the frames are the twin's), ``interactive`` (the same commands
  in a session that is not batch: a large module's file is made by a worker
  while the Python unwinder serves the first stop, unless the worker is
  nearly done; its frames may lack the twin's tail-call frames) and
  ``core`` (``gdb -batch -ex bt PROG CORE``, a core made at the same stop:
  the file is waited for as the core is opened).

The frame counts of each variant are printed beside the times: a variant
whose ``bt`` differs from the native one makes the exit status 1. The target
(issue 17): first ``bt`` within 2x native cold and 1.2x warm at every size.
Everything runs in one invocation, variants alternating, so the ratios
printed together were measured under the same load of a shared machine.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REALPROGS = ROOT / "tests" / "fixtures" / "realprogs"
DEBUGGERS = ROOT / ".debuggers" / "bin"
CHAIN = 24  # calls from main down to stop_here
PER_FILE = 500  # functions per generated translation unit (built in parallel)
# The real programs: where to stop, and the arguments that get there.
REAL = {
    "lua5.4": ("luaV_concat", ["-E", str(REALPROGS / "lua5.4" / "deep.lua")]),
    "bzip2": ("BZ2_compressBlock", ["-c", str(REALPROGS / "bzip2" / "input.txt")]),
}


# -- the programs ------------------------------------------------------------------


def _function(i: int, edited: bool = False) -> str:
    """Function ``f<i>``, one of five shapes a compiler lays out differently;
    ``edited``: with three more calls first (an edit between builds: longer
    by more than the 16-byte alignment, so the functions after it move)."""
    text = _shaped(i)
    if edited:
        text = text.replace("(long a, long b) { ", "(long a, long b) { b += ext(b ^ 77); "
                            "b ^= ext(b + 78); b -= ext(b * 79); ", 1)
    return text


def _shaped(i: int) -> str:
    shape = i % 5
    name = f"f{i}"
    if shape == 0:  # callee-saved registers live across calls
        return (f"long {name}(long a, long b) {{ long x = a * {i % 7 + 3} + b; long y = ext(x); "
                f"long z = ext(y + a); long w = ext(z ^ x); return x + y + z + w + b; }}\n")
    if shape == 1:  # a switch table
        cases = "".join(f"case {k}: r = ext(a + {k * (i % 5 + 1)}) * {k + 1}; break; "
                        for k in range(9))
        return (f"long {name}(long a, long b) {{ long r = b; switch ((a + {i}) & 15) {{ {cases}"
                f"default: r = b - a; }} return r + ext(r); }}\n")
    if shape == 2:  # a stack buffer handed to a callee
        size = 32 + (i % 6) * 24
        return (f"long {name}(long a, long b) {{ char buf[{size}]; for (int k = 0; k < {size}; k++) "
                f"buf[k] = (char)(a + k * b); return use(buf, {size}) + a; }}\n")
    if shape == 3:  # a loop
        return (f"long {name}(long a, long b) {{ long s = 0; for (long k = 0; k < a; k++) "
                f"{{ s += (k * {i % 11 + 1}) ^ b; if (s > {1000 + i}) s -= b; }} return s; }}\n")
    # many callee-saved registers at once
    return (f"long {name}(long a, long b) {{ long p = ext(a), q = ext(b), r = ext(p + q), "
            f"s = ext(r - a), t = ext(s + {i}); return p * q + r * s + t + ext(p + q + r + s + t); }}\n")


_HEADER = "long ext(long);\nlong use(char *, int);\n"


def gen_program(functions: int, directory: Path, edited: int | None = None) -> list[Path]:
    """C files for a program of ``functions`` functions plus the chain, ``ext``,
    ``use``, ``stop_here`` and ``main`` (a few more FDEs); ``edited``: the
    function changed as between two builds of an edit-compile-debug loop."""
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for first in range(0, functions, PER_FILE):
        path = directory / f"part{first // PER_FILE}.c"
        path.write_text(_HEADER + "".join(_function(i, i == edited) for i in range(
            first, min(first + PER_FILE, functions))))
        files.append(path)
    chain = ["#include <stdio.h>\n", "volatile long sink;\n",
             "__attribute__((noinline)) long ext(long x) { sink = x; return sink * 3 + 1; }\n",
             "__attribute__((noinline)) long use(char *b, int n) { sink = b[n / 2]; return sink; }\n",
             "__attribute__((noinline)) long stop_here(long x) { sink = x; return sink; }\n"]
    for k in range(CHAIN - 1, -1, -1):
        callee = "stop_here" if k == CHAIN - 1 else f"chain{k + 1}"
        chain.append(f"__attribute__((noinline)) long chain{k}(long a) {{ long x = ext(a * {k + 2}); "
                     f"long r = {callee}(a + x); return r + x * ext(r); }}\n")
    chain.append("int main(int argc, char **argv) { (void)argv; printf(\"%ld\\n\", chain0(argc)); "
                 "return 0; }\n")
    main = directory / "main.c"
    main.write_text("".join(chain))
    return [*files, main]


def build(sources: list[Path], out: Path) -> tuple[Path, Path]:
    """The twin (``out``) and ``out.noeh``, built by the host gcc, as and objcopy."""
    flags = ["-O2", "-g", "-Wa,--gsframe"]
    objects = [src.with_suffix(".o") for src in sources]

    def compile_one(pair: tuple[Path, Path]) -> None:
        subprocess.run(["gcc", *flags, "-c", str(pair[0]), "-o", str(pair[1])], check=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(compile_one, zip(sources, objects, strict=True)))
    subprocess.run(["gcc", *flags, "-o", str(out), *map(str, objects)], check=True)
    noeh = out.with_name(out.name + ".noeh")
    subprocess.run(["objcopy", "--remove-section", ".eh_frame", "--remove-section", ".eh_frame_hdr",
                    str(out), str(noeh)], check=True)
    return out, noeh


# -- measurements ------------------------------------------------------------------


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, **(env or {})})
    return out.stdout


_CPU = """
import sys, time
from sframe_core.format.elf import read_elf
from sframe_core.symfiles.symfile import symbol_file_bytes
sframe = read_elf(sys.argv[1]).open()
start = time.process_time()
symbol_file_bytes(sys.argv[1])
print(time.process_time() - start, sframe.num_fdes)
"""

_HIT = """
import sys
from sframe_core.symfiles.symfile import symbol_file_for
print(symbol_file_for(sys.argv[1]).cached)
"""


def cpu_per_function(noeh: Path, saved: bool) -> tuple[float, int]:
    """(CPU seconds, FDEs) of one cold symbol file, in a fresh process."""
    seconds, fdes = _python(_CPU, str(noeh), env={"SFRAME_SAVED_REGISTERS": "1" if saved else "0"}).split()
    return float(seconds), int(fdes)


def wall(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def to_dwarf(noeh: Path, out: Path, jobs: int | None) -> float:
    args = [sys.executable, "-m", "sframe_core", "to-dwarf", str(noeh), "-o", str(out)]
    if jobs is not None:
        args += ["--jobs", str(jobs)]
    return wall(lambda: subprocess.run(args, cwd=ROOT, check=True, capture_output=True))


def cache_hit(noeh: Path, cache: Path) -> float:
    """Wall time of a fresh process whose ``symbol_file_for`` finds the file cached."""
    env = {"XDG_CACHE_HOME": str(cache)}
    _python(_HIT, str(noeh), env=env)  # fills the cache
    start = time.perf_counter()
    cached = _python(_HIT, str(noeh), env=env).strip()
    elapsed = time.perf_counter() - start
    assert cached == "True", cached
    return elapsed


def lldb_first_bt(version: str, binary: Path, stop: str, args: list[str], *, plugin: bool,
                  cache: Path | None) -> Run:
    """(seconds from starting LLDB to the end of the first ``bt``, frames)."""
    from bench.bench_lldb import session_with
    from tests.helpers.lldbtools import parse_bt

    # The plugin's default (a large module's symbol file made by a worker while
    # the frame provider serves), not the test harness's "foreground".
    env = {"SFRAME_LLDB_SYMBOL_FILES": "auto"}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    start = time.perf_counter()
    session = session_with(version, plugin=plugin, timeout=1800, env=env)
    try:
        session.cmd("settings set show-statusline false")
        session.cmd(f"target create {binary}")
        session.cmd(f"breakpoint set -n {stop}")
        session.cmd("process launch -o /dev/null -- " + " ".join(args))
        frames = parse_bt(session.cmd("bt"))
        elapsed = time.perf_counter() - start
        if plugin and "not a valid command" in session.cmd("sframe status"):
            raise SystemExit(f"lldb-{version}: the plugin did not load (is the checkout's .venv "
                             "there, or VIRTUAL_ENV set?)")
        return elapsed, tuple((f.pc, f.name) for f in frames)
    finally:
        session.close()
        if cache is not None:
            _wait_for_workers(binary)


def _wait_for_workers(binary: Path, timeout: float = 1800) -> None:
    """Wait until no symbol file worker for ``binary`` runs any more: a
    session's worker outlives it (its file is the next session's), and would
    load the machine while the next variant is timed."""
    needle = f"sframe_core.symfiles.jobs\0{os.path.realpath(binary)}".encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = False
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as stream:
                        running |= needle in stream.read()
                except OSError:
                    continue
        if not running:
            return
        time.sleep(0.2)


def gdb_first_bt(gdb: str, binary: Path, stop: str, args: list[str], plugin: bool = False,
                 cache: Path | None = None, *, batch: bool = True,
                 core: Path | None = None, cpu: list[float] | None = None) -> Run:
    """(seconds from starting gdb to the end of its first ``bt``, frames); with
    ``plugin``, ``source sframe_gdb.py`` first (``-iex``, as from a gdbinit),
    its symbol files in ``cache`` (the default ``set sframe symbol-files
    auto``). ``batch``: ``gdb -batch``, which makes a missing file before it
    goes on; else the same commands in a session that is not (stdin at its
    end: gdb quits after them), whose first stop waits for a large module's
    worker only if it is nearly done (the Python unwinder serves it
    otherwise). ``core``: ``bt`` of that core (no ``break``/``run``).
    ``cpu``: gets the CPU seconds of gdb and the processes it waited for
    (the program, the workers it waited for), which a loaded machine
    changes less than the wall time."""
    from tests.helpers.gdbtools import PLUGIN, clean_env, parse_bt

    command = [gdb, "-nx", "-iex", "set pagination off", "-iex", "set confirm off"]
    if batch:
        command.append("-batch")
    env = clean_env()
    if plugin:
        command += ["-iex", f"source {PLUGIN}"]
        env["SFRAME_GDB_SYMBOL_FILES"] = "auto"
        # SFRAME_FOREGROUND_FDES=300 sends lua5.4 (705 FDEs) to a worker,
        # as a module above the made-at-once size goes.
        for name in ("SFRAME_FOREGROUND_FDES", "SFRAME_NATIVE"):
            if name in os.environ:
                env[name] = os.environ[name]
        if cache is not None:
            env["XDG_CACHE_HOME"] = str(cache)
    if core is None:
        command += ["-ex", f"break {stop}", "-ex", "run " + " ".join(args) + " > /dev/null"]
    command += ["-ex", "bt", str(binary)] + ([str(core)] if core is not None else [])
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env,
                         stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if cache is not None:
        _wait_for_workers(binary)
    # The frames of the last bt (a core's first frame is shown before it).
    text = out.stdout[out.stdout.rfind("\n#0 ") + 1:] if "\n#0 " in out.stdout else out.stdout
    return elapsed, tuple((f.pc, f.name) for f in parse_bt(text))


def make_core(gdb: str, binary: Path, stop: str, args: list[str], core: Path) -> Path:
    """A core of ``binary`` stopped at ``stop``'s first hit (plain gdb's ``gcore``)."""
    from tests.helpers.gdbtools import clean_env

    if not core.exists():
        subprocess.run([gdb, "-nx", "-batch", "-ex", f"break {stop}",
                        "-ex", "run " + " ".join(args) + " > /dev/null", "-ex", f"gcore {core}",
                        "-ex", "kill", str(binary)], capture_output=True, timeout=1800,
                       env=clean_env(), check=True)
    return core


Run = tuple[float, tuple[tuple[int, str | None], ...]]  # seconds, (pc, function) of each frame


def _median(runs: list[Run]) -> tuple[float, set[tuple[tuple[int, str | None], ...]]]:
    return statistics.median(t for t, _ in runs), {n for _, n in runs}


def measure(label: str, twin: Path, noeh: Path, stop: str, args: list[str], opts: argparse.Namespace,
            work: Path) -> bool:
    """Print every figure for one program; False when a variant's bt differs from native."""
    ok = True
    on, fdes = cpu_per_function(noeh, True)
    off, _ = cpu_per_function(noeh, False)
    print(f"{label}: {fdes} FDEs; symbol file cold CPU {on:.2f} s = {on / fdes * 1e3:.3f} ms per "
          f"function ({off / fdes * 1e3:.3f} ms without the saved-register analysis)", flush=True)
    jobs1 = to_dwarf(noeh, work / "out1.debug", 1)
    jobsn = to_dwarf(noeh, work / "outn.debug", None)
    same = (work / "out1.debug").read_bytes() == (work / "outn.debug").read_bytes()
    ok &= same
    hit = cache_hit(noeh, Path(tempfile.mkdtemp(prefix="hit-", dir=work)))
    print(f"  sframe to-dwarf: {jobs1:.2f} s with --jobs 1, {jobsn:.2f} s with the default "
          f"({'same bytes' if same else 'DIFFERENT BYTES'}); cache hit (fresh process) {hit:.2f} s",
          flush=True)
    for version in opts.lldb:
        if not (DEBUGGERS / f"lldb-{version}").exists():
            print(f"  lldb-{version}: not installed")
            continue
        variants: dict[str, list[Run]] = {"native": [], "cold": [], "warm": []}
        # Caches made here, empty: a kept work directory holds older ones.
        warm_cache = Path(tempfile.mkdtemp(prefix=f"lldb{version}-warm-", dir=work))
        fill_cache(noeh, warm_cache, function_symbols=True)
        for _ in range(opts.runs):
            cold_cache = Path(tempfile.mkdtemp(prefix=f"lldb{version}-cold-", dir=work))
            variants["native"].append(lldb_first_bt(version, twin, stop, args, plugin=False,
                                                    cache=None))
            variants["cold"].append(lldb_first_bt(version, noeh, stop, args, plugin=True,
                                                  cache=cold_cache))
            variants["warm"].append(lldb_first_bt(version, noeh, stop, args, plugin=True,
                                                  cache=warm_cache))
        agree = _report(f"lldb-{version}", variants)
        if not agree and version == "21":
            # docs/lldb.md: LLDB 21.1.7 keeps its own unwinding for a module
            # with debug information (these are built -g): not the route.
            print("  (lldb-21: frames differ as docs/lldb.md says LLDB 21 does for modules with "
                  "debug information: not counted)")
            agree = True
        ok &= agree
    if opts.gdb != "none":
        gdb = os.path.basename(opts.gdb)
        warm_cache = Path(tempfile.mkdtemp(prefix="gdb-warm-", dir=work))
        fill_cache(noeh, warm_cache, function_symbols=False)
        cores = {which: make_core(opts.gdb, binary, stop, args, work / f"{which}.core")
                 for which, binary in (("twin", twin), ("noeh", noeh))}
        # batch: ``gdb -batch`` (break, run, bt); interactive: the same
        # commands in a session that is not batch (its first stop's stop
        # wait); core: ``gdb -batch -ex bt PROG CORE``.
        for case, batch in (("batch", True), ("interactive", False), ("core", True)):
            variants: dict[str, list[Run]] = {"native": [], "cold": [], "warm": []}
            cpu: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(opts.runs):
                cold_cache = Path(tempfile.mkdtemp(prefix="gdb-cold-", dir=work))
                for variant, binary, cache in (("native", twin, None), ("cold", noeh, cold_cache),
                                               ("warm", noeh, warm_cache)):
                    core = None if case != "core" else cores["twin" if binary == twin else "noeh"]
                    variants[variant].append(gdb_first_bt(
                        opts.gdb, binary, stop, args, binary != twin, cache, batch=batch,
                        core=core, cpu=cpu[variant]))
            agree = _report(f"gdb ({gdb}, the plugin) {case}", variants)
            native_cpu = statistics.median(cpu["native"])
            print(f"    CPU (gdb, the program, the workers gdb waited for): native "
                  f"{native_cpu:.2f} s, cold {statistics.median(cpu['cold']):.2f} s, warm "
                  f"{statistics.median(cpu['warm']):.2f} s; ratio cold "
                  f"{statistics.median(cpu['cold']) / native_cpu:.2f}x, warm "
                  f"{statistics.median(cpu['warm']) / native_cpu:.2f}x", flush=True)
            # An interactive first stop is the Python unwinder's where the
            # worker is not nearly done: the twin's frames but its tail-call
            # frames (docs/gdb.md); the figure is its time.
            ok &= agree or case == "interactive"
    return ok


def fill_cache(noeh: Path, cache: Path, *, function_symbols: bool) -> None:
    """Fill ``cache`` with the symbol file of ``noeh`` the plugin uses (LLDB's
    with function symbols for a stripped module, gdb's without)."""
    code = ("import sys; from sframe_core.symfiles.symfile import symbol_file_for; "
            "symbol_file_for(sys.argv[1], cache=sys.argv[2], function_symbols=sys.argv[3] == '1')")
    subprocess.run([sys.executable, "-c", code, str(noeh), str(cache / "sframe-gdb" / "symbols"),
                    "1" if function_symbols else "0"], check=True, cwd=ROOT)


def _report(name: str, variants: dict[str, list[Run]]) -> bool:
    """One line of figures; True when every variant's frames (pc and function) are native's."""
    native, native_frames = _median(variants["native"])
    cold, cold_frames = _median(variants["cold"])
    warm, warm_frames = _median(variants["warm"])

    def counts(found: set[tuple[tuple[int, str | None], ...]]) -> list[int]:
        return sorted(len(frames) for frames in found)
    agree = cold_frames == native_frames == warm_frames
    print(f"  {name} first bt: native {native:.2f} s ({counts(native_frames)} frames), "
          f"cold {cold:.2f} s ({counts(cold_frames)}), warm {warm:.2f} s ({counts(warm_frames)}); "
          f"ratio cold {cold / native:.2f}x, warm {warm / native:.2f}x"
          + ("" if agree else "; FRAMES DIFFER (pc or function)"), flush=True)
    return agree


def compiled() -> None:
    """Byte-compile the plugin's modules first: a user's installed or once
    loaded plugin has its ``.pyc`` files, and a shell with
    ``PYTHONDONTWRITEBYTECODE=1`` (which Python still reads them under)
    would otherwise have every debugger session compile the sources again
    (about 20 ms of gdb's start-up) and charge that to the plugin."""
    import compileall

    for package in ("sframe_core", "gdb_plugin", "lldb_plugin"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,40000",
                        help="generated programs' function counts, comma-separated")
    parser.add_argument("--lldb", default="21,22,23", help="LLDB versions, comma-separated, or none")
    parser.add_argument("--gdb", default=str(DEBUGGERS / "gdb-system"), help="gdb to time, or none")
    parser.add_argument("--real", default="lua5.4", choices=[*REAL, "none"],
                        help="a real program from tests/fixtures/realprogs (busid-v3 build)")
    parser.add_argument("--runs", type=int, default=1, help="runs per variant (median)")
    parser.add_argument("--keep", metavar="DIR",
                        help="build the programs in DIR and keep them (reused when already there)")
    opts = parser.parse_args()
    compiled()
    opts.lldb = [] if opts.lldb == "none" else opts.lldb.split(",")
    sizes = [int(s) for s in opts.sizes.split(",") if s]
    if opts.gdb != "none" and not os.access(opts.gdb, os.X_OK):
        opts.gdb = shutil.which("gdb") or "none"
    ok = True
    with tempfile.TemporaryDirectory(prefix="sframe-bench-scale-") as scratch:
        base = Path(opts.keep) if opts.keep else Path(scratch)
        for size in sizes:
            directory = base / f"gen{size}"
            start = time.perf_counter()
            twin, noeh = directory / "prog", directory / "prog.noeh"
            if opts.keep and twin.exists() and noeh.exists():
                print(f"generated, {size} functions (built before, kept in {directory})", flush=True)
            else:
                twin, noeh = build(gen_program(size, directory / "src"), twin)
                print(f"generated, {size} functions (built in {time.perf_counter() - start:.0f} s)",
                      flush=True)
            work = directory / "work"
            work.mkdir(exist_ok=True)
            ok &= measure(f"generated {size}", twin, noeh, "stop_here", [], opts, work)
        if opts.real != "none":
            stop, args = REAL[opts.real]
            build_dir = REALPROGS / opts.real / "busid-v3"
            work = base / opts.real
            work.mkdir(parents=True, exist_ok=True)
            ok &= measure(opts.real, build_dir / opts.real, build_dir / f"{opts.real}.noeh", stop,
                          args, opts, work)
    print("frames agree" if ok else "FRAMES OR BYTES DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
