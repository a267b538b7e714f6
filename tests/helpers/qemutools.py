"""Helpers for the cross-architecture tests: qemu-user gdbstubs, guest cores,
and backtraces read from gdb-multiarch, lldb and ``sframe backtrace``.

Everything here has a bounded run time: every child runs with a timeout, and
every qemu started is killed by ``QemuStub.close`` (the tests call it from a
finalizer), so a hung gdbstub can never hang the suite.

Backtraces are read as lists of :class:`helpers.Frame` (pc, name), never by
parsing gdb's ``bt`` text: gdb sources ``gdbtools.FRAMES_SCRIPT``, which
prints one ``FRAME`` line per frame and one ``FRAME-END`` line with the
reason the walk stopped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import DEBUGGERS, ROOT, Frame, missing, require_debuggers
from .gdbtools import FRAMES_SCRIPT, parse_frames

GDB_PLUGIN = ROOT / "sframe_gdb.py"
LLDB_PLUGIN = ROOT / "lldb_plugin"
__all__ = ["Frame", "missing", "require_debuggers"]  # re-exported for test_cross

# Bounds (seconds). A debugger session on these static programs takes well
# under a second; the bounds only keep a broken stub from hanging the suite.
SESSION_TIMEOUT = 60.0
LISTEN_TIMEOUT = 10.0

# Virtual address bits of qemu-user's aarch64 guests (Linux user space, 48-bit
# VA, TBI on): pointer-authentication codes live above them.
AARCH64_VA_BITS = 48


def tool(name: str) -> str:
    """Absolute path of ``name`` (PATH first, then ``.debuggers/bin``), or skip/fail."""
    found = shutil.which(name)
    if found is None:
        candidate = DEBUGGERS / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            found = str(candidate)
    if found is None:
        missing(f"{name} not found (install it, or run scripts/setup.sh)")
    assert found is not None
    return found


def repro(cmd: Sequence[str], cwd: str | Path | None = None) -> str:
    text = shlex.join(str(c) for c in cmd)
    return f"(cd {shlex.quote(str(cwd))} && {text})" if cwd else text


@dataclass
class Trace:
    """A backtrace plus everything needed to explain it when a test fails."""

    frames: list[Frame]
    end: str = ""  # why the walk stopped, as the debugger said it
    output: str = ""
    command: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def pcs(self) -> list[int]:
        return [f.pc for f in self.frames]

    @property
    def names(self) -> list[str | None]:
        return [f.name for f in self.frames]

    def show(self) -> str:
        lines = [f"  #{i} {f}" for i, f in enumerate(self.frames)]
        return "\n".join(lines + [f"  end: {self.end}", f"  repro: {self.command}"])


# -- processes ---------------------------------------------------------------


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run(cmd: Sequence[str], *, cwd: str | Path | None = None, timeout: float = SESSION_TIMEOUT,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group; on timeout kill the whole group and fail."""
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    if timed_out:
        _kill_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout:.0f} s: {repro(cmd, cwd)}\n"
                    f"stdout:\n{out.decode(errors='replace')[-3000:]}\n"
                    f"stderr:\n{err.decode(errors='replace')[-3000:]}", pytrace=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode,
                                       out.decode(errors="replace"), err.decode(errors="replace"))


def _listening(port: int) -> bool:
    """Is some socket LISTENing on ``port`` (any address)? From /proc/net/tcp{,6}."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_RESERVED_VA = "0x8000000000"  # 512 GiB: the static fixtures sit far below


class QemuStub:
    """``qemu-ARCH -g PORT EXE ARGS``: the guest waits for a debugger at its first insn.

    qemu-user 7.2 binds its gdbstub to every address, not only loopback; the
    debuggers here always connect to 127.0.0.1. The stub serves a single
    connection: when the debugger disconnects, qemu kills the guest and exits.
    """

    def __init__(self, arch: str, exe: str | Path, args: Sequence[str] = (), *,
                 cwd: str | Path | None = None, same_layout: bool = False) -> None:
        self.qemu = tool(f"qemu-{arch}")
        # same_layout: a guest address space qemu allocates itself (-R), so
        # that two runs of a program have their stack at the same address.
        # qemu 10 (Debian 13) otherwise puts the guest stack where the host's
        # mmap does, which varies between runs even without ASLR; tests that
        # compare two processes' values (the twin's and .noeh's) need it.
        self.layout = ["-R", _RESERVED_VA] if same_layout else []
        self.exe = str(exe)
        self.args = list(args)
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.command = ""
        self.log = ""

    def start(self) -> QemuStub:
        last = ""
        for _ in range(5):  # the port can be taken between free_port() and qemu's bind
            self.port = free_port()
            cmd = [self.qemu, *self.layout, "-g", str(self.port), self.exe, *self.args]
            self.command = repro(cmd, self.cwd)
            self.proc = subprocess.Popen(cmd, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            deadline = time.monotonic() + LISTEN_TIMEOUT
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if _listening(self.port):
                    return self
                time.sleep(0.02)
            out = b""
            if self.proc.poll() is not None and self.proc.stdout is not None:
                out = self.proc.stdout.read()
            last = out.decode(errors="replace")
            self.close()
        pytest.fail(f"qemu gdbstub did not listen: {self.command}\n{last}")

    def close(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            if self.proc.stdout is not None:
                try:
                    self.log = self.proc.stdout.read().decode(errors="replace")
                except (OSError, ValueError):
                    pass
                self.proc.stdout.close()
            self.proc = None


# -- gdb -----------------------------------------------------------------------

def parse_gdb_frames(text: str) -> tuple[list[Frame], str]:
    """The selected thread's frames and why the walk ended (``FRAMES_SCRIPT``'s output)."""
    threads = parse_frames(text)
    thread = next((t for t in threads if t.selected), threads[0] if threads else None)
    if thread is None:
        return [], "(no FRAME-END line: the walk did not finish)"
    return thread.frames, thread.end


def gdb_live(gdb: str, stub: QemuStub, exe: str | Path, workdir: Path, *,
             plugin: bool, before: Sequence[str] = (), after_stop: Sequence[str] = (),
             breakpoint: str = "stop_here") -> Trace:
    """Attach ``gdb`` to ``stub``, stop at ``breakpoint``, return the backtrace."""
    cmd = [gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off",
           "-ex", "set pagination off", "-ex", "set confirm off",
           "-ex", "set backtrace past-main on", "-ex", "set backtrace limit 200"]
    for line in before:
        cmd += ["-ex", line]
    if plugin:
        cmd += ["-ex", f"source {GDB_PLUGIN}"]
    cmd += ["-ex", f"target remote 127.0.0.1:{stub.port}", "-ex", f"break {breakpoint}",
            "-ex", "continue"]
    for line in after_stop:
        cmd += ["-ex", line]
    cmd += ["-ex", "bt", "-ex", f"source {FRAMES_SCRIPT}", "-ex", "kill", str(exe)]
    proc = run(cmd, cwd=workdir)
    frames, end = parse_gdb_frames(proc.stdout)
    output = proc.stdout + proc.stderr
    return Trace(frames, end, output, f"{stub.command} &  {repro(cmd, workdir)}")


def gdb_core(gdb: str, exe: str | Path, core: str | Path, workdir: Path, *,
             plugin: bool = False) -> Trace:
    cmd = [gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off",
           "-ex", "set pagination off", "-ex", "set backtrace past-main on"]
    if plugin:
        cmd += ["-ex", f"source {GDB_PLUGIN}"]
    cmd += ["-ex", f"core-file {core}", "-ex", f"source {FRAMES_SCRIPT}", str(exe)]
    proc = run(cmd, cwd=workdir)
    frames, end = parse_gdb_frames(proc.stdout)
    return Trace(frames, end, proc.stdout + proc.stderr, repro(cmd, workdir))


# -- lldb ----------------------------------------------------------------------

# "frame #3: 0x0000000000400a30 deep`f1 + 48" (also "* frame #0: ...", no name for
# a PC outside every module)
_LLDB_FRAME = re.compile(r"^\s*\*?\s*frame #(\d+):\s+(0x[0-9a-fA-F]+)(?:\s+(\S+))?")


def lldb_frame_runs(text: str, start: str = "") -> list[list[Frame]]:
    """Every run of ``frame #0, #1, ...`` lines after the line ``start`` and
    before the next ``(lldb)`` command echo.

    lldb's asynchronous output (a stop-hook's thread display, the stop
    report) can land inside another command's output, so a command's output
    may hold more than one run.
    """
    lines = text.splitlines()
    if start:
        for i, line in enumerate(lines):
            if line.rstrip() == start:
                lines = lines[i + 1:]
                break
        else:
            return []
    runs: list[list[Frame]] = []
    current: list[Frame] | None = None
    for line in lines:
        if line.startswith("(lldb) "):
            break
        m = _LLDB_FRAME.match(line)
        if not m:
            continue
        index = int(m.group(1))
        if index == 0:
            current = []
            runs.append(current)
        elif current is None or index != len(current):
            current = None
            continue
        where = m.group(3)
        name = where.split("`", 1)[1] if where and "`" in where else None
        current.append(Frame(int(m.group(2), 16), name, level=index))
    return runs


def parse_lldb_frames(text: str, start: str = "", first_pc: int | None = None) -> list[Frame]:
    """The longest run after ``start`` (whose frame #0 is ``first_pc`` if given)."""
    runs = [r for r in lldb_frame_runs(text, start) if first_pc is None or r[0].pc == first_pc]
    return max(runs, key=len, default=[])


def lldb_live(lldb: str, stub: QemuStub, exe: str | Path, workdir: Path, *,
              commands: Sequence[str], before: Sequence[str] = (),
              breakpoint: Sequence[str] = ("breakpoint set -n stop_here",),
              timeout: float = SESSION_TIMEOUT) -> tuple[str, str]:
    """(output, repro) of an ``lldb -b`` session attached to ``stub``."""
    cmd = [lldb, "--no-lldbinit", "-b", "-o", "settings set auto-confirm true",
           "-o", f"target create {exe}"]
    for line in before:
        cmd += ["-o", line]
    cmd += ["-o", f"gdb-remote 127.0.0.1:{stub.port}"]
    for line in breakpoint:
        cmd += ["-o", line]
    cmd += ["-o", "continue"]
    for line in commands:
        cmd += ["-o", line]
    cmd += ["-o", "process kill"]
    proc = run(cmd, cwd=workdir, timeout=timeout)
    return proc.stdout + proc.stderr, f"{stub.command} &  {repro(cmd, workdir)}"


# -- cores -----------------------------------------------------------------------


def guest_core(arch: str, exe: str | Path, mode: str, workdir: Path) -> Path:
    """Run ``qemu-ARCH EXE MODE`` until it dies of a signal; return the guest's core.

    qemu-user writes the guest core itself, into the cwd, as
    ``qemu_<exe basename>_<YYYYmmdd-HHMMSS>_<pid>.core``, when RLIMIT_CORE
    allows it. Its notes are NT_PRSTATUS, NT_PRPSINFO and NT_AUXV only (no
    NT_FILE, no NT_ARM_PAC_MASK); ``.text`` is a PT_LOAD with no file bytes.
    The host kernel may also dump qemu itself (``core`` per core_pattern); that
    file is removed.
    """
    import resource

    qemu = tool(f"qemu-{arch}")
    workdir.mkdir(parents=True, exist_ok=True)
    before = set(workdir.iterdir())

    def unlimited() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    cmd = [qemu, str(exe), mode]
    try:
        proc = subprocess.run(cmd, cwd=workdir, preexec_fn=unlimited, capture_output=True,
                              timeout=SESSION_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out: {repro(cmd, workdir)}")
    except ValueError:  # hard RLIMIT_CORE lower than infinity
        missing("cannot raise RLIMIT_CORE here")
    new = sorted(set(workdir.iterdir()) - before)
    for path in new:
        if path.name == "core" or path.name.startswith("core."):
            path.unlink()
    cores = [p for p in new if p.name.startswith("qemu_") and p.name.endswith(".core")]
    if len(cores) != 1:
        pytest.fail(f"expected one qemu guest core from {repro(cmd, workdir)} "
                    f"(exit {proc.returncode}), found {[p.name for p in new]}")
    return cores[0]


def sframe_cli_core(core: Path, exe: str | Path, workdir: Path) -> Trace:
    """``sframe backtrace --core CORE --exe EXE --json``: thread 1's frames."""
    cmd = [sys.executable, "-m", "sframe_core", "backtrace", "--core", str(core), "--exe", str(exe),
           "--json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = run(cmd, cwd=workdir, env=env)
    command = repro(cmd[:1] + cmd[1:], workdir)
    if proc.returncode != 0:
        pytest.fail(f"sframe backtrace failed (exit {proc.returncode}): {command}\n{proc.stderr}")
    data = json.loads(proc.stdout)
    thread = data["threads"][0]
    frames = [Frame(f["pc"], f["function"]) for f in thread["frames"]]
    stop = thread.get("stop") or {}
    return Trace(frames, f"{stop.get('reason')}: {stop.get('message')}", proc.stdout + proc.stderr,
                 command, extra={"warnings": data.get("warnings", [])})


def strip_pac(pc: int, va_bits: int = AARCH64_VA_BITS) -> int:
    return pc & ((1 << va_bits) - 1)


def has_pac_bits(pc: int, va_bits: int = AARCH64_VA_BITS) -> bool:
    return pc >> va_bits != 0
