"""gdb's own testsuite as a measure: the twin against ``.noeh`` + the plugin.

Fetches the DejaGnu testsuite of the gdb under test from Debian's source
package of that gdb version (the installed ``gdb`` package's own version for
the system gdb; else the Debian source of the same major version, or the
nearest one, which is said), through a private apt configuration (no change
to the host's sources). It configures only ``gdb/testsuite`` twice and runs
each chosen ``.exp`` file in both:

- ``twin``: every test program built with ``-Wa,--gsframe``, its ``.eh_frame``
  kept; plain gdb;
- ``noeh``: the same, with ``.eh_frame``/``.eh_frame_hdr`` removed after each
  link (executables and shared libraries, start files included), and gdb run
  as ``gdb -iex "source sframe_gdb.py" ...`` with a cache of its own.

Both run gdb with ``-iex "set debuginfod enabled off"``.

Then it prints the ``.exp`` files whose results (the multiset of
``STATUS: test name`` lines of each ``gdb.sum``) differ, with their known
cause, and exits 1 when some difference has no known cause outside the
plugin (``NOT_OURS``), 0 otherwise.

Usage (from the checkout; needs dejagnu, dpkg-dev, gcc and g++)::

    python -m bench.gdb_testsuite [--gdb PATH] [--part default|ci] [--exp A.exp,B.exp] [-j N]
    python -m bench.gdb_testsuite --fetch-only

Everything (sources, builds, logs) lives under ``.gdb-testsuite/`` (gitignored);
``outputs/<side>/<exp>/gdb.{sum,log}`` of the last run of a part are kept there.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / ".gdb-testsuite"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
SUITES = ("bookworm", "trixie", "forky", "sid")
# twin: .eh_frame kept, plain gdb; noeh: .eh_frame removed, gdb + the plugin;
# bare (--bare): the .noeh programs under plain gdb, what the plugin is for.
SIDES = ("twin", "noeh")

# A small part for CI: forks, the Python unwinder API, breakpoints, entry
# values and tail calls, cores, inline frames, MI, and two known differences
# that are not the plugin's (shlib-call, i386-signal).
CI_PART = (
    "gdb.base/step-over-exit.exp",
    "gdb.threads/fork-child-threads.exp",
    "gdb.arch/i386-signal.exp",
    "gdb.python/py-unwind-maint.exp",
    "gdb.base/break.exp",
    "gdb.arch/amd64-entry-value.exp",
    "gdb.arch/amd64-tailcall-ret.exp",
    "gdb.base/foll-fork.exp",
    "gdb.base/corefile.exp",
    "gdb.base/backtrace.exp",
    "gdb.base/finish.exp",
    "gdb.opt/inline-bt.exp",
    "gdb.python/py-unwind.exp",
    "gdb.mi/mi-stack.exp",
    "gdb.base/shlib-call.exp",
)

# Backtraces, frames, finish/return/until, inferior calls, signals, cores,
# watchpoints, inline frames, entry values, tail calls, the Python unwinder
# API, MI, reverse execution, forks and exec. Files a gdb version lacks are
# left out (and said).
DEFAULT_PART = (
    *(f"gdb.base/{n}.exp" for n in (
        "advance", "advance-until-multiple-locations", "backtrace", "break", "bt-on-error-and-warning",
        "bt-on-fatal-signal", "bt-selected-frame", "call-ar-st", "call-rt-st", "call-sc",
        "call-signal-resume", "call-strs", "callfuncs", "catch-fork-kill", "catch-signal",
        "catch-signal-fork", "corefile", "corefile2", "corefile-buildid", "coredump-filter",
        "finish", "finish-pretty", "foll-exec", "foll-exec-mode", "foll-fork", "foll-vfork",
        "fork-print-inferior-events", "frame-args", "frame-info-consistent", "frame-selection",
        "frame-view", "frameapply", "gcore", "gcore-relro", "inferior-died", "infcall-nested-structs-c",
        "multi-forks", "recurse", "return", "return2", "return-nodebug", "savedregs",
        "shlib-call", "sigall", "sigaltstack", "sigbpt", "sigchld", "siginfo", "siginfo-addr",
        "siginfo-infcall", "siginfo-obj", "siginfo-thread", "signals", "signals-state-child",
        "signest", "signull", "sigrepeat", "sigstep", "stack-checking", "stack-protector",
        "step-over-exit", "step-over-no-symbols", "step-over-syscall", "store", "structs",
        "structs2", "until", "until-nodebug", "until-trailing-insns", "unwind-on-each-insn",
        "unwindonsignal", "watch-cond", "watch-cond-infcall", "watch-read", "watch_thread_num",
        "watchpoint", "watchpoint-cond-gone", "watchpoint-delete", "watchpoint-hw",
        "watchpoint-hw-hit-once", "watchpoint-reuse-slot", "watchpoint-solib",
        "watchpoint-stops-at-right-insn", "watchpoint-unaligned", "watchpoints",
    )),
    *(f"gdb.opt/{n}.exp" for n in (
        "inline-break", "inline-bt", "inline-cmds", "inline-locals", "inline-small-func",
    )),
    *(f"gdb.arch/{n}.exp" for n in (
        "amd64-disp-step", "amd64-entry-value", "amd64-entry-value-inline", "amd64-entry-value-param",
        "amd64-entry-value-param-dwarf5", "amd64-entry-value-paramref", "amd64-invalid-stack-middle",
        "amd64-invalid-stack-top", "amd64-prologue-skip", "amd64-prologue-xmm", "amd64-tailcall-cxx",
        "amd64-tailcall-noret", "amd64-tailcall-ret", "amd64-tailcall-self", "i386-signal",
        "i386-unwind",
    )),
    *(f"gdb.python/{n}.exp" for n in (
        "py-finish-breakpoint", "py-finish-breakpoint2", "py-frame", "py-frame-args", "py-frame-inline",
        "py-framefilter", "py-framefilter-mi", "py-pending-frame-level", "py-unwind", "py-unwind-inline",
        "py-unwind-maint", "py-unwind-user-regs",
    )),
    *(f"gdb.mi/{n}.exp" for n in (
        "mi-break", "mi-cli", "mi-frame-regs", "mi-return", "mi-stack", "mi-until", "mi-var-cmd",
        "mi-watch", "mi-fill-memory", "mi-syn-frame",
    )),
    *(f"gdb.reverse/{n}.exp" for n in (
        "break-reverse", "finish-reverse", "finish-reverse-bkpt", "finish-precsave", "machinestate",
        "sigall-reverse", "solib-reverse", "step-reverse", "until-reverse", "watch-reverse",
        "consecutive-reverse", "next-reverse-bkpt-over-sr",
    )),
    *(f"gdb.threads/{n}.exp" for n in (
        "fork-child-threads", "fork-thread-pending", "pthreads", "thread-unwindonsignal",
        "threadapply", "watchthreads",
    )),
    *(f"gdb.cp/{n}.exp" for n in ("annota2", "bs15503", "exception", "mb-inline", "userdef")),
)

# Differences that are not the plugin's: the program itself needs .eh_frame,
# the .noeh recipe (objcopy after the link) changes the program, or SFrame
# cannot say what the program's CFI says.
NOT_OURS = {
    "gdb.base/shlib-call.exp": "recipe: objcopy leaves the .dynsym section indexes stale in the .noeh "
    "shared library (sg's index 23 now names another section), so linking against it makes a "
    "DT_TEXTREL and the test's compile fails",
    "gdb.base/corefile-buildid.exp": "recipe: 'strip --only-keep-debug' of the objcopy-edited program "
    "warns (section .note.gnu.build-id can't be allocated in segment 0), so the test cannot make "
    "its separate debug file (UNTESTED)",
    "gdb.cp/exception.exp": "program: a C++ throw needs .eh_frame in the program (std::terminate, SIGABRT)",
    "gdb.python/py-finish-breakpoint2.exp": "program: a C++ throw needs .eh_frame in the program "
    "(std::terminate, SIGABRT)",
    "gdb.arch/amd64-tailcall-cxx.exp": "program: a C++ throw needs .eh_frame in the program",
    "gdb.arch/i386-signal.exp": "format: the hand-written .cfi_signal_frame has no SFrame equivalent "
    "(SFrame has no signal-frame mark), so gdb unwinds the imitation signal frame as a call "
    "('setup ()' where the twin shows '<signal handler called>')",
}

# The plugin causes no difference it knows of. These it caused once, and
# no longer does (docs/gdb.md, "gdb's testsuite"); named here only so that
# one coming back is recognised by its first cause.
_FORK_DETACHED = ("fork, follow-fork-mode child: the detached parent kept breakpoint "
                  "locations at link-time addresses, so the child's stop read 'Breakpoint N.2' "
                  "where the twin's read 'Breakpoint N' (the step-over-exit family)")
FIXED = {
    "gdb.base/step-over-exit.exp": "after a fork of a PIE (detach-on-fork off) the new "
    "inferior's breakpoint locations stayed at link-time addresses (Cannot insert breakpoint)",
    "gdb.python/py-unwind-maint.exp": "its global 'sframe' Python unwinder was counted by "
    "'disable unwinder global' even when gdb's own unwinder served every objfile",
    "gdb.threads/fork-child-threads.exp": _FORK_DETACHED,
    "gdb.threads/fork-thread-pending.exp": _FORK_DETACHED,
}

STATUSES = ("PASS", "FAIL", "XFAIL", "XPASS", "KFAIL", "KPASS", "UNRESOLVED", "UNTESTED",
            "UNSUPPORTED", "ERROR")
_RESULT = re.compile(r"^({}): (.*)$".format("|".join(STATUSES)))
# A count some tests append to a PASS's name, which varies with the
# scheduling from run to run (pthreads.exp: "... 15 times (17 times)").
_RUN_COUNT = re.compile(r" \(\d+ times\)$")


@dataclass(frozen=True)
class Source:
    """A Debian gdb source package: its version and the testsuite it unpacks to."""

    version: str
    note: str

    @property
    def tree(self) -> Path:
        return WORK / "src" / f"gdb-{self.version}"

    @property
    def testsuite(self) -> Path:
        return self.tree / "gdb" / "testsuite"


def _apt_options() -> list[str]:
    """A private apt configuration with deb-src lines of every suite: the
    host's sources and lists stay untouched."""
    apt = WORK / "apt"
    return ["-o", f"Dir::Etc::SourceList={apt}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={apt}/lists", "-o", f"Dir::Cache={apt}/cache",
            "-o", "Dir::State::status=/dev/null", "-o", "Dir::Etc::Preferences=/dev/null",
            "-o", "Dir::Etc::PreferencesParts=/dev/null"]


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    """Run a setup step; on failure, one line naming the command and its error."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"gdb_testsuite: {cmd[0]}: {e.strerror}")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        sys.exit(f"gdb_testsuite: {os.path.basename(cmd[0])} ... {cmd[-1]} failed: {' | '.join(tail)}")
    return str(proc.stdout)


def gdb_version(gdb: str) -> tuple[int, int]:
    out = _run([gdb, "-nx", "--version"])
    m = re.search(r"^GNU gdb .*?(\d+)\.(\d+)", out, re.M)
    if not m:
        sys.exit(f"gdb_testsuite: {gdb}: no version in its --version output")
    return int(m.group(1)), int(m.group(2))


def _source_versions() -> list[str]:
    (WORK / "apt" / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (WORK / "apt" / "sources.list").write_text(
        "".join(f"deb-src {MIRROR} {s} main\n" for s in SUITES))
    _run(["apt-get", *_apt_options(), "update", "-qq"])
    out = _run(["apt-cache", *_apt_options(), "showsrc", "gdb"])
    return sorted(set(re.findall(r"^Version: (\S+)$", out, re.M)))


def _key(version: str) -> tuple[int, int]:
    m = re.match(r"(?:\d+:)?(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def source_candidates(gdb: str) -> list[Source]:
    """Debian gdb sources for the gdb under test, best first: the installed
    package's version for the system gdb; the same major.minor, then the same
    major, newest first; then the nearest majors (each note says which)."""
    major, minor = gdb_version(gdb)
    installed = None
    if os.path.realpath(shutil.which(gdb) or gdb) == "/usr/bin/gdb" or _wraps_system_gdb(gdb):
        installed = _run(["dpkg-query", "-W", "-f=${Version}", "gdb"]).strip()
        mine = Source(installed, f"gdb {major}.{minor}: Debian's source of the installed gdb {installed}")
        if (mine.testsuite / "configure").exists():
            return [mine]  # fetched before: no network needed
    versions = _source_versions()
    out: list[Source] = []
    if installed in versions:
        out.append(mine)
    for v in sorted(versions, key=lambda v: (_key(v) != (major, minor), abs(_key(v)[0] - major),
                                              -_key(v)[0], -_key(v)[1], v)):
        if _key(v)[0] == major:
            out.append(Source(v, f"gdb {major}.{minor}: Debian's gdb source {v}"))
        else:
            out.append(Source(v, f"gdb {major}.{minor}: no Debian source of gdb {major} here; "
                                 f"the nearest, {v}"))
    return out


def _wraps_system_gdb(gdb: str) -> bool:
    """A wrapper script (.debuggers/bin/gdb-system) that execs /usr/bin/gdb."""
    try:
        head = Path(shutil.which(gdb) or gdb).read_bytes()[:512]
    except OSError:
        return False
    return b'exec "/usr/bin/gdb"' in head


def fetch(source: Source) -> bool:
    """Download and unpack the source package (Debian's patches applied);
    False when the archive does not have its files."""
    if (source.testsuite / "configure").exists():
        return True
    dl = WORK / "src" / "dl"
    shutil.rmtree(dl, ignore_errors=True)
    dl.mkdir(parents=True)
    got = subprocess.run(["apt-get", *_apt_options(), "source", "--download-only", f"gdb={source.version}"],
                         cwd=dl, capture_output=True, text=True)
    if got.returncode != 0:
        why = [ln for ln in got.stderr.splitlines() if ln.startswith("E:")] or ["?"]
        print(f"source: gdb {source.version} not downloadable here: {why[0]}", flush=True)
        shutil.rmtree(dl)
        return False
    upstream = re.sub(r"^\d+:", "", source.version)
    tmp = source.tree.with_name(source.tree.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(["dpkg-source", "--no-check", "-x", str(dl / f"gdb_{upstream}.dsc"), str(tmp)])
    tmp.rename(source.tree)
    shutil.rmtree(dl)
    for orig in (WORK / "src").glob("gdb_*"):  # dpkg-source's copy of the tarball
        orig.unlink()
    return True


_CC = """#!/bin/sh
# {side}: {what}
{driver} -Wa,--gsframe "$@" || exit
{strip}"""
# Only links: after -c/-S/-E and queries there is no program to strip.
_STRIP = """out=a.out; link=1; prev=
for a; do
  [ "$prev" = -o ] && out=$a
  case "$a" in -c|-S|-E|-M|-MM|-print-*|-dump*|--version) link= ;; esac
  prev=$a
done
[ -n "$link" ] && [ -f "$out" ] || exit 0
exec objcopy --remove-section=.eh_frame --remove-section=.eh_frame_hdr "$out"
"""


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _configured_for(makefile: Path) -> str | None:
    """The testsuite source a build directory's Makefile was configured for."""
    try:
        text = makefile.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"^srcdir = (.*)$", text, re.M)
    return found.group(1).strip() if found else None


def configure(source: Source, gdb: str, side: str, timeout: int) -> Path:
    """A build directory of the testsuite for one side, its site.exp pointing
    at that side's compilers and gdb."""
    build = WORK / "build" / source.version / side
    bindir = build / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    strip = _STRIP if side != "twin" else ""
    what = ("links lose .eh_frame/.eh_frame_hdr" if strip else "the twin: .eh_frame kept")
    for name, driver in (("cc", "gcc"), ("c++", "g++")):
        _write_exec(bindir / name, _CC.format(side=side, what=what, driver=driver, strip=strip))
    # Every side: no debuginfod (the PyPI gdbs have a server built in, which
    # the testsuite's unset DEBUGINFOD_URLS does not turn off: each run asks).
    plugin = ""
    if side == "noeh":
        plugin = (f"XDG_CACHE_HOME='{build / 'cache'}'; export XDG_CACHE_HOME\n"
                  f"set -- -iex 'source {REPO / 'sframe_gdb.py'}' \"$@\"\n")
    what = "the gdb under test" + (", with the plugin" if plugin else "")
    real = os.path.abspath(shutil.which(gdb) or gdb)
    _write_exec(bindir / "gdb", f"#!/bin/sh\n# {side}: {what}\n{plugin}"
                f"exec '{real}' -iex 'set debuginfod enabled off' \"$@\"\n")
    gdb_path = str(bindir / "gdb")
    if _configured_for(build / "Makefile") != str(source.testsuite):
        # Not configured yet, or for a source elsewhere (the checkout moved).
        (build / "Makefile").unlink(missing_ok=True)
        _run([str(source.testsuite / "configure")], cwd=build)
    (build / "site.exp").unlink(missing_ok=True)
    _run(["make", "site.exp"], cwd=build)
    with open(build / "site.exp", "a") as f:
        f.write(f"set GDB {{{os.path.abspath(gdb_path)}}}\n"
                f"set CC_FOR_TARGET {{{bindir / 'cc'}}}\n"
                f"set CXX_FOR_TARGET {{{bindir / 'c++'}}}\n"
                f"set gdb_test_timeout {timeout}\n")
    return build


def run_one(build: Path, exp: str) -> Counter[tuple[str, str]]:
    """Run one .exp file (make's check/<exp> rule, as `make check-parallel`
    does) and read its gdb.sum."""
    name = exp.removesuffix(".exp")
    out = build / "outputs" / name
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["make", f"check/{exp}"], cwd=build, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=3600, check=False)
    results: Counter[tuple[str, str]] = Counter()
    try:
        text = (out / "gdb.sum").read_text(errors="replace")
    except OSError:
        results[("ERROR", "no gdb.sum")] += 1
        return results
    for line in text.splitlines():
        m = _RESULT.match(line)
        if m:
            results[(m.group(1), _RUN_COUNT.sub("", m.group(2)))] += 1
    return results


def _counts(results: Counter[tuple[str, str]]) -> Counter[str]:
    c: Counter[str] = Counter()
    for (status, _), n in results.items():
        c[status] += n
    return c


def _fmt_counts(c: Counter[str]) -> str:
    return " ".join(f"{s} {c[s]}" for s in STATUSES if c[s])


def recipe_check(build: Path) -> tuple[int, list[str], int]:
    """(programs and shared libraries the tests built on a side, those that
    still have .eh_frame, those without .sframe): the .noeh recipe at work."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    programs, with_eh, without_sframe = 0, [], 0
    for path in (build / "outputs").rglob("*"):
        try:
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
                f.seek(0)
                elf = ELFFile(f)
                if elf["e_type"] not in ("ET_EXEC", "ET_DYN"):
                    continue
                names = {sec.name for sec in elf.iter_sections()}
        except (OSError, ELFError):
            continue
        programs += 1
        if ".eh_frame" in names or ".eh_frame_hdr" in names:
            with_eh.append(str(path.relative_to(build / "outputs")))
        without_sframe += ".sframe" not in names
    return programs, with_eh, without_sframe


def _racy_only(twin: Counter[tuple[str, str]], noeh: Counter[tuple[str, str]]) -> bool:
    """The two differ only in tests of known gdb bugs, passing on one side
    and KFAIL on the other (or KPASS): the testsuite's own racy ones, such as
    step-over-syscall's clone with displaced stepping, vary on the twin alone
    from run to run."""
    def strip(c: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
        out: Counter[tuple[str, str]] = Counter()
        for (status, name), n in c.items():
            status = "PASS" if status in ("KPASS", "KFAIL") else status
            out[(status, re.sub(r" \(PRMS:? [^)]*\)$", "", name))] += n
        return out
    return strip(twin) == strip(noeh)


def cause(exp: str, twin: Counter[tuple[str, str]], noeh: Counter[tuple[str, str]]) -> tuple[bool, str]:
    """(not the plugin's, the cause) of a difference in exp."""
    if exp in NOT_OURS:
        return True, NOT_OURS[exp]
    if _racy_only(twin, noeh):
        return True, ("flaky: only tests of known gdb bugs differ, PASS or KPASS against KFAIL "
                      "(the twin varies run to run too)")
    if exp in FIXED:
        return False, f"plugin, fixed once, back again? it was: {FIXED[exp]}"
    return False, "unknown: read outputs/<side>/" + exp.removesuffix(".exp") + "/gdb.log"


def _run_all(source: Source, args: argparse.Namespace,
             exps: list[str]) -> dict[tuple[str, str], Counter[tuple[str, str]]]:
    sides = (*SIDES, "bare") if args.bare else SIDES
    builds = {side: configure(source, args.gdb, side, args.timeout) for side in sides}
    print(f"running {len(exps)} .exp files {len(sides)} times, {args.jobs} at a time", flush=True)
    jobs = [(side, exp) for exp in exps for side in sides]

    def one(job: tuple[str, str]) -> Counter[tuple[str, str]]:
        results = run_one(builds[job[0]], job[1])
        print(f"  {job[0]} {job[1]}: {_fmt_counts(_counts(results))}", flush=True)
        return results

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        return dict(zip(jobs, pool.map(one, jobs), strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gdb", default="gdb", help="the gdb to test (default: gdb on PATH)")
    ap.add_argument("--part", choices=("default", "ci"), default="default")
    ap.add_argument("--exp", help="comma-separated .exp files (relative to gdb/testsuite), instead of a part")
    ap.add_argument("-j", "--jobs", type=int, default=2, help=".exp runs at a time (both sides together)")
    ap.add_argument("--timeout", type=int, default=20, help="gdb_test_timeout, seconds (testsuite: 10)")
    ap.add_argument("--bare", action="store_true",
                    help="a third run: the .noeh programs under plain gdb (totals only)")
    ap.add_argument("--fetch-only", action="store_true", help="fetch and unpack the source, then stop")
    ap.add_argument("--details", type=int, default=8, help="differing test names shown per .exp")
    args = ap.parse_args(argv)

    for tool, package in (("dpkg-source", "dpkg-dev"), ("runtest", "dejagnu"), ("expect", "expect"),
                          ("gcc", "gcc"), ("g++", "g++"), ("objcopy", "binutils")):
        if shutil.which(tool) is None:
            sys.exit(f"gdb_testsuite: {tool} not found (apt-get install {package}; scripts/setup.sh does)")
    source = next((c for c in source_candidates(args.gdb) if fetch(c)), None)
    if source is None:
        sys.exit("gdb_testsuite: no Debian gdb source could be downloaded")
    print(f"source: {source.note}", flush=True)
    if args.fetch_only:
        return 0
    wanted = args.exp.split(",") if args.exp else list(CI_PART if args.part == "ci" else DEFAULT_PART)
    exps = [e for e in wanted if (source.testsuite / e).is_file()]
    missing = sorted(set(wanted) - set(exps))
    if missing:
        print(f"not in gdb {source.version}'s testsuite (left out): {' '.join(missing)}")
    if not exps:
        sys.exit(f"gdb_testsuite: no .exp file to run in gdb {source.version}'s testsuite")
    lock_path = WORK / "build" / f"{source.version}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        # one run at a time per source: runs share the build directories
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = _run_all(source, args, exps)

    sides = sorted({side for side, _ in done}, key=("twin", "noeh", "bare").index)
    totals = {side: Counter[str]() for side in sides}
    differing: list[str] = []
    unexplained = 0
    for exp in exps:
        twin, noeh = done[("twin", exp)], done[("noeh", exp)]
        for side in sides:
            totals[side].update(_counts(done[(side, exp)]))
        if twin == noeh:
            continue
        differing.append(exp)
        not_ours, why = cause(exp, twin, noeh)
        unexplained += not not_ours
        print(f"\nDIFF {exp}\n  twin: {_fmt_counts(_counts(twin))}\n  noeh: {_fmt_counts(_counts(noeh))}"
              f"\n  cause: {why}")
        names = sorted({n for _, n in (twin - noeh) + (noeh - twin)})
        for n in names[: args.details]:
            t = ",".join(s for s, m in twin if m == n) or "-"
            o = ",".join(s for s, m in noeh if m == n) or "-"
            print(f"    {t} -> {o}: {n}")
        if len(names) > args.details:
            print(f"    ... {len(names) - args.details} more")
    for side in sides:
        print(f"\n{side}: {_fmt_counts(totals[side])}", end="")
    print(f"\n{len(differing)} of {len(exps)} .exp files differ; "
          f"{unexplained} not known to be outside the plugin")
    programs, with_eh, without_sframe = recipe_check(WORK / "build" / source.version / "noeh")
    print(f"noeh programs and libraries built: {programs}, {without_sframe} without .sframe "
          f"(hand-written assembly), {len(with_eh)} with .eh_frame {' '.join(with_eh[:5])}")
    print("DIFFERING " + " ".join(differing))
    return 1 if unexplained or with_eh else 0


if __name__ == "__main__":
    sys.exit(main())
