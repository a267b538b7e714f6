"""Helpers to drive a real LLDB (the lldb-for-pwndbg wrappers lldb-N, Debian's lldb-debN) with pexpect."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pexpect

from . import DEBUGGERS, FIXTURES, ROOT, Frame, missing

PLUGIN = ROOT / "lldb_plugin"
__all__ = ["FIXTURES", "NO_DEBUGINFOD", "PLUGIN", "PYTHON_STACKS", "SERIAL_MODULE_LOAD", "Session",
           "break_command", "command_output", "hang_report", "native_stacks", "parse_bt", "run_lldb",
           "run_lldb_status", "symbol_address", "lldb_path"]

ANSI_RE = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[78])")
FRAME_RE = re.compile(r"^\s*\*?\s*frame #(\d+): 0x([0-9a-f]+)(?: ([^`\s]+)(?:`(\S*))?)?", re.M)


def major(version: str) -> int:
    """LLDB's major version of a wrapper's name: "23" (PyPI's), "deb19" (Debian's)."""
    return int(version.removeprefix("deb"))


def startup_settings(version: str) -> list[str]:
    """The settings every LLDB of the tests starts with, as far as it has them
    (an unknown setting ends a batch LLDB): no statusline (21+), no
    debuginfod (its symbol locator: 18+)."""
    found = ["settings set show-statusline false"] if major(version) >= 21 else []
    return found + ([NO_DEBUGINFOD] if major(version) >= 18 else [])


def lldb_path(version: str) -> Path:
    """The wrapper for ``lldb-VERSION``; skips (or fails under CI=true) when missing."""
    path = DEBUGGERS / f"lldb-{version}"
    if not path.exists():
        missing(f"{path} is missing (run scripts/setup.sh)")
    return path


# No symbol file from the network. lldb-for-pwndbg asks debuginfod.pwndbg.re
# (no timeout) for the symbol files modules lack: six name lookups at each
# ``target create --core`` of deep.noeh.stripped. On 2 loaded CPUs LLDB 23
# then hung for minutes in curl's name lookup (the core's [vdso], from
# Module::PreloadSymbols: 6 of 27 LLDBs of 40 core loads each), and 40 loads
# took 27-150 s, 2 s without. As gdbtools' gdb ("set debuginfod enabled
# off"), every LLDB of the tests runs without it.
NO_DEBUGINFOD = "settings clear plugin.symbol-locator.debuginfod.server-urls"


# LLDB 23.1.0 deadlocks now and then in its parallel module load of a core
# (about 1 in 5,000 core loads, LLDB alone too: ``hang_report`` names it; one
# CI run in a few met it, in test_core_file). So every LLDB 23 of the tests
# that loads a core loads its modules one at a time: not what any test tests.
SERIAL_MODULE_LOAD = "settings set target.parallel-module-load false"


def loads_core(version: str, command: str) -> bool:
    """Whether ``command`` makes LLDB ``version`` load a core in parallel (23)."""
    return version == "23" and command.startswith("target create") and (
        " --core " in command or " -c " in command)


# An LLDB command that makes SIGUSR2 print every Python thread's traceback
# (``faulthandler``, from its C signal handler: no GIL needed, so it answers
# while a thread waits for the GIL or holds it) on LLDB's stderr, fd 2 (not
# ``sys.stderr``: in a ``script`` command that is a pipe LLDB closes after
# it). Only for the sessions that ask for it (``python_stacks=True``): it
# starts LLDB's Python before anything else would.
PYTHON_STACKS = ("script import faulthandler, signal; "
                 "faulthandler.register(signal.SIGUSR2, file=2, all_threads=True)")


def native_stacks(pid: int) -> str:
    """Every thread's native stack of a hung process (gdb attaches in batch
    mode), for a failure message: where LLDB waits, and for which lock."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no gdb to show them)"
    try:
        out = subprocess.run([gdb, "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt 40"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(gdb could not show them: {exc})"
    # "from /long/path/lib.so" -> "from lib.so": the frames are what matters.
    return "\n".join(_LIBRARY_PATH.sub(r" from \1", line) for line in out.splitlines()
                     if line.startswith(("Thread", "#")))


_LIBRARY_PATH = re.compile(r" from \S*/([^/\s]+)$")
_PYTHON_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\)", re.M)


def hang_report(child: pexpect.spawn, *, python_stacks: bool = False) -> str:
    """What a hung LLDB is doing, while it still runs: with ``python_stacks``
    (LLDB ran ``PYTHON_STACKS``), each Python thread's traceback, then every
    native thread's stack (``native_stacks``)."""
    parts = []
    if python_stacks and child.isalive():
        text = ""
        try:
            os.kill(child.pid, signal.SIGUSR2)
            # faulthandler writes at once; what else LLDB had buffered comes too.
            while True:
                text += child.read_nonblocking(65536, timeout=2)
        except (pexpect.ExceptionPexpect, OSError):
            pass
        text = ANSI_RE.sub("", text.replace("\r\n", "\n"))
        found = _PYTHON_THREAD.search(text)
        parts.append("Python threads (faulthandler):\n"
                     + (text[found.start():] if found else f"(none printed; output:\n{text[-2000:]})"))
    native = native_stacks(child.pid)
    main = native[native.find("\nThread 1 "):]
    if "Editline::GetLine" in main and "HandleCommand" not in main:
        parts.append("(LLDB's main thread waits for the next command: the command was slow, "
                     "not hung)")
    if all(frame in native for frame in _PARALLEL_LOAD_DEADLOCK):
        parts.append("(LLDB's own deadlock in its parallel module load, LLDB 23.1.0: two "
                     "llvm-worker threads in ObjectFile::GetSectionList, each waiting for the "
                     "module or section mutex the other holds; 'settings set "
                     "target.parallel-module-load false' avoids it)")
    parts.append("native threads (gdb):\n" + native)
    return "\n".join(parts)


# The frames of LLDB's parallel-module-load deadlock (test_lldb_route.py,
# test_core_target_delete_and_create_again, says how it comes about).
_PARALLEL_LOAD_DEADLOCK = ("DynamicLoaderPOSIXDYLD::LoadAllCurrentModules",
                           "llvm::StdThreadPool::wait", "ObjectFile::GetSectionList")


def run_lldb(version: str, commands: list[str], *, plugin: bool = True, timeout: int = 120,
             env: dict[str, str] | None = None, python_stacks: bool = False,
             program: str | None = None) -> str:
    """Run LLDB in batch mode; the whole transcript (a hang fails the test).

    ``program``: started as ``lldb PROGRAM`` (LLDB's own ``target create``
    after the startup commands), the plugin imported before it, as from
    ``~/.lldbinit``."""
    return run_lldb_status(version, commands, plugin=plugin, timeout=timeout, env=env,
                           python_stacks=python_stacks, program=program)[0]


# LLDB 22 once (in 1 of ~1,300 launches of a CI run, not again in 700 launches
# under load, with and without the plugin) reported a launch's first stop as
# "stop reason = trace" inside the dynamic loader, before any breakpoint of
# the test: a launch that never reached the program, retried. Only that: a
# stop anywhere else, or any other reason, is the test's to judge.
_LOADER_TRACE_STOP = re.compile(
    r"^Process \d+ launched: .*\nProcess \d+ stopped\n\* thread #1, [^\n]*stop reason = trace\n"
    r"\s+frame #0: 0x[0-9a-f]+ ld-linux[^`\s]*`", re.M)
LAUNCH_TRIES = 3


def run_lldb_status(version: str, commands: list[str], *, plugin: bool = True, timeout: int = 120,
                    env: dict[str, str] | None = None, python_stacks: bool = False,
                    program: str | None = None) -> tuple[str, int]:
    """``run_lldb`` and LLDB's exit status (a signal that killed it: 128 + its number).

    A hang fails with LLDB's threads (``hang_report``): their native stacks,
    and with ``python_stacks`` their Python tracebacks too (LLDB then runs
    ``PYTHON_STACKS`` first)."""
    for _ in range(LAUNCH_TRIES):
        text, status = _run_lldb_once(version, commands, plugin=plugin, timeout=timeout, env=env,
                                      python_stacks=python_stacks, program=program)
        if not _LOADER_TRACE_STOP.search(text):
            break
    return text, status


def _run_lldb_once(version: str, commands: list[str], *, plugin: bool, timeout: int,
                   env: dict[str, str] | None, python_stacks: bool,
                   program: str | None = None) -> tuple[str, int]:
    args = [str(lldb_path(version)), "--no-lldbinit", "--no-use-colors", "-b"]
    for setting in startup_settings(version):
        args += ["-O", setting]
    if python_stacks:
        args += ["-O", PYTHON_STACKS]
    if any(loads_core(version, command) for command in commands):
        args += ["-O", SERIAL_MODULE_LOAD]
    if plugin:
        args += ["-O" if program else "-o", f"command script import {PLUGIN}"]
    for command in commands:
        args += ["-o", command]
    if program:
        args += ["--", program]
    full_env = dict(os.environ)
    full_env.pop("VIRTUAL_ENV", None)
    # No statusline: LLDB 21 deadlocks now and then when its event thread
    # redraws it while `gdb-remote` loads modules (without the plugin too;
    # `settings set show-statusline false` comes too late to prevent it).
    full_env["TERM"] = "dumb"
    # Symbol files made before LLDB goes on, as before there were workers
    # (a test of the background route sets "auto").
    full_env["SFRAME_LLDB_SYMBOL_FILES"] = "foreground"
    full_env.update(env or {})
    child = pexpect.spawn(args[0], args[1:], timeout=timeout, env=full_env, encoding="utf-8",
                          cwd=str(ROOT))
    try:
        out = child.read()
    except pexpect.TIMEOUT:
        out = ANSI_RE.sub("", (child.before or "").replace("\r\n", "\n"))
        report = hang_report(child, python_stacks=python_stacks)
        child.close(force=True)
        raise AssertionError(f"lldb-{version} timed out after {timeout} s:\n{out[-3000:]}\n"
                             f"-- its threads then --\n{report}") from None
    child.close()
    status = child.exitstatus if child.exitstatus is not None else 128 + (child.signalstatus or 0)
    text = ANSI_RE.sub("", out.replace("\r\n", "\n"))
    assert status < 128, f"lldb-{version} was killed by signal {status - 128}:\n{text[-3000:]}"
    return text, status


def command_output(transcript: str, command: str, occurrence: int = -1) -> str:
    """The output of one command of a batch transcript (``(lldb) CMD`` up to the next prompt)."""
    parts = transcript.split(f"(lldb) {command}\n")
    assert len(parts) > 1, f"no '{command}' in transcript:\n{transcript[-3000:]}"
    chosen = parts[1:][occurrence]
    return chosen.split("(lldb) ", 1)[0]


def parse_bt(text: str) -> list[Frame]:
    """LLDB's ``bt`` lines; ``name`` is None where LLDB knows no symbol."""
    frames = []
    for m in FRAME_RE.finditer(text):
        name = m.group(4)
        if name is not None:
            name = re.split(r"[ (]", name, maxsplit=1)[0] or None
        frames.append(Frame(int(m.group(2), 16), name, level=int(m.group(1)), module=m.group(3)))
    return frames


def symbol_address(binary: Path, name: str) -> int:
    """A symbol's file address, from the twin's symbol table (pyelftools)."""
    from elftools.elf.elffile import ELFFile
    with open(binary, "rb") as stream:
        elf = ELFFile(stream)
        symtab = elf.get_section_by_name(".symtab")
        assert symtab is not None, f"{binary} has no symbols"
        for sym in symtab.get_symbol_by_name(name) or []:
            return int(sym["st_value"])
    raise KeyError(name)


def break_command(binary: Path, twin: Path, name: str = "stop_here") -> str:
    """Breakpoint by name, or by file address in the module on a stripped binary."""
    if binary.name.endswith(".stripped"):
        return f"breakpoint set -a {symbol_address(twin, name):#x} -s {binary.name}"
    return f"breakpoint set -n {name}"


class Session:
    """An interactive LLDB (pexpect), for command sequences that depend on output."""

    PROMPT = r"\(lldb\) "

    def __init__(self, version: str, *, plugin: bool = True, timeout: int = 60,
                 env: dict[str, str] | None = None) -> None:
        base = dict(os.environ)
        base.pop("VIRTUAL_ENV", None)
        base["TERM"] = "dumb"
        base.setdefault("SFRAME_LLDB_SYMBOL_FILES", "foreground")  # as run_lldb
        env = {**base, **(env or {})}
        self.version, self.serial = version, False
        self.child = pexpect.spawn(str(lldb_path(version)), ["--no-lldbinit", "--no-use-colors"],
                                   env=env, encoding="utf-8", timeout=timeout, cwd=str(ROOT),
                                   dimensions=(200, 400))
        self.child.delaybeforesend = None  # as gdbtools.Gdb: cmd waits for the prompt
        self.child.expect(self.PROMPT)
        if major(version) >= 18:
            self.cmd(NO_DEBUGINFOD)
        if plugin:
            self.cmd(f"command script import {PLUGIN}")

    def cmd(self, command: str) -> str:
        if loads_core(self.version, command) and not self.serial:
            self.serial = True
            self.cmd(SERIAL_MODULE_LOAD)
        self.child.sendline(command)
        self.child.expect(self.PROMPT)
        text = ANSI_RE.sub("", (self.child.before or "").replace("\r\n", "\n"))
        return text.split("\n", 1)[1] if "\n" in text else ""

    def close(self) -> None:
        try:
            self.child.sendline("quit")
            self.child.expect(pexpect.EOF, timeout=10)
        except (pexpect.ExceptionPexpect, OSError):
            pass
        self.child.close(force=True)


# One top-level variable of ``frame variable``: ``(TYPE) NAME = ``.
VARIABLE = re.compile(r"^\((.*?)\) (\S+) = ", re.M)


def frame_variables(text: str) -> dict[str, str]:
    """Top-level variables of ``frame variable``: "TYPE NAME" -> its whole printed value."""
    found = {}
    starts = list(VARIABLE.finditer(text))
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        found[f"{m.group(1)} {m.group(2)}"] = text[m.end():end].strip()
    return found


def is_aggregate(value: str | None) -> bool:
    """Arrays, strings and structs: their bytes include uninitialised stack, which
    differs between the twin and the .noeh file (the loader's stack use differs)."""
    return value is not None and ("{" in value or '"' in value)
