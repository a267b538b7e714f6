"""``sframe backtrace --pid`` on running fixtures, and what it leaves behind.

Both the ``.noeh`` program and its twin run with ASLR off (``setarch -R``),
so their code is at the same addresses: gdb attaches to the twin, we attach
to the ``.noeh`` copy, and every frame's PC must be equal. Afterwards the
process must be exactly as it was: sleeping (not stopped, not traced) and
killable by an ordinary signal; a stopped process must stay stopped.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import ROOT, X86
from helpers.oracle import gdb_attach_pcs, one_line_error, our_pcs, sframe, sframe_json

PROGRAM_FRAMES = ["f4", "f2", "f1", "main"]


def _glibc() -> tuple[int, ...]:
    name, version = os.confstr("CS_GNU_LIBC_VERSION").split()  # type: ignore[union-attr]
    assert name == "glibc", name
    return tuple(int(part) for part in version.split("."))


# libc frames above f4 while the fixture sleeps in pause(): glibc 2.41 (Debian 13)
# makes the syscall through __syscall_cancel -> __internal_syscall_cancel, glibc
# 2.36 (Debian 12) from pause itself.
PAUSE_FRAMES = (["__internal_syscall_cancel", "__syscall_cancel", "pause"]
                if _glibc() >= (2, 41) else ["pause"])


@contextmanager
def running(program: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start a fixture in a sleeping mode; yield once it has said READY and sleeps."""
    assert program.is_file(), f"fixture {program} is missing (run tests/fixtures/build.sh)"
    proc = subprocess.Popen(["setarch", platform.machine(), "-R", str(program), *args],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line == f"READY {proc.pid}\n", line
        _wait_for_state(proc.pid, "S")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as stream:
        return dict(line.rstrip("\n").split(":\t", 1) for line in stream if ":\t" in line)


def _state(pid: int) -> str:
    return _status(pid)["State"][0]


def _wait_for_state(pid: int, state: str) -> None:
    for _ in range(200):
        if _state(pid) == state:
            time.sleep(0.05)  # the last instructions before the syscall
            if _state(pid) == state:
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} is in state {_state(pid)}, not {state}")


def _fixture(name: str) -> Path:
    return X86 / "bu2.40-v1" / name


@pytest.mark.gdb
def test_pid_matches_gdb_and_leaves_the_process_running(tmp_path: Path) -> None:
    with running(_fixture("deep"), "sleep") as twin, \
            running(_fixture("deep.noeh"), "sleep") as proc:
        gdb = gdb_attach_pcs(twin.pid, tmp_path)
        data = sframe_json("backtrace", "--pid", str(proc.pid))
        assert list(our_pcs(data)) == [proc.pid]
        assert list(our_pcs(data).values()) == list(gdb.values())
        names = [f["function"] for f in data["threads"][0]["frames"]]
        assert names == [*PAUSE_FRAMES, *PROGRAM_FRAMES, "__libc_start_call_main",
                         "__libc_start_main", "_start"]
        assert data["threads"][0]["stop"]["reason"] == "outermost"
        # Exactly as before: sleeping, no tracer, and it still takes signals.
        assert _state(proc.pid) == "S"
        assert _status(proc.pid)["TracerPid"] == "0"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.gdb
def test_pid_every_thread(tmp_path: Path) -> None:
    with running(_fixture("threads"), "sleep") as twin, \
            running(_fixture("threads.noeh"), "sleep") as proc:
        for _ in range(4):  # a thread may be between two usleep() calls: try again
            gdb = gdb_attach_pcs(twin.pid, tmp_path)
            data = sframe_json("backtrace", "--pid", str(proc.pid))
            if sorted(our_pcs(data).values()) == sorted(gdb.values()):
                break
        assert sorted(our_pcs(data).values()) == sorted(gdb.values())
        assert len(data["threads"]) == 4
        assert data["threads"][0]["lwp"] == proc.pid
        assert os.path.isdir(f"/proc/{proc.pid}")
        assert _state(proc.pid) == "S"


def test_a_stopped_process_stays_stopped() -> None:
    with running(_fixture("deep.noeh"), "sleep") as proc:
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_for_state(proc.pid, "T")
        out = sframe("backtrace", "--pid", str(proc.pid)).stdout
        assert out.splitlines()[0] == f"Thread 1 (LWP {proc.pid}):"
        assert " in f4+" in out
        time.sleep(0.1)
        assert _state(proc.pid) == "T"
        assert _status(proc.pid)["TracerPid"] == "0"
        os.kill(proc.pid, signal.SIGCONT)
        _wait_for_state(proc.pid, "S")


def test_no_such_process() -> None:
    with open("/proc/sys/kernel/pid_max") as stream:
        pid = int(stream.read()) + 1
    assert one_line_error("backtrace", "--pid", str(pid)) == f"sframe: process {pid}: no such process"


def test_already_traced(tmp_path: Path) -> None:
    with running(_fixture("deep.noeh"), "sleep") as proc:
        holder = subprocess.Popen(
            ["gdb", "-nx", "-batch", "-p", str(proc.pid), "-ex", "shell sleep 30"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            for _ in range(500):
                if _status(proc.pid)["TracerPid"] != "0":
                    break
                time.sleep(0.02)
            tracer = _status(proc.pid)["TracerPid"]
            assert tracer != "0"
            assert one_line_error("backtrace", "--pid", str(proc.pid)) == \
                f"sframe: process {proc.pid}: already traced by process {tracer}"
        finally:
            holder.kill()
            holder.wait(timeout=30)


def test_permission_denied() -> None:
    if os.geteuid() != 0:
        raise AssertionError("this test drops privileges with setpriv and must run as root")
    # The unprivileged child imports sframe_core from a world-readable copy: the
    # checkout may sit where uid 65534 cannot read it (a clone under /root, 0700).
    with tempfile.TemporaryDirectory() as copy, \
            running(_fixture("deep.noeh"), "sleep") as proc:
        shutil.copytree(ROOT / "sframe_core", Path(copy) / "sframe_core",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for path in [copy, *glob.glob(f"{copy}/**", recursive=True)]:
            os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-m", "sframe_core", "backtrace", "--pid", str(proc.pid)],
            capture_output=True, text=True, timeout=60, cwd=copy,
            env={**os.environ, "PYTHONPATH": copy}, check=False)
        assert out.returncode == 1, out
        assert out.stderr.startswith(f"sframe: process {proc.pid}: permission denied (ptrace "
                                     "needs the same user, or root/CAP_SYS_PTRACE")
        assert len(out.stderr.splitlines()) == 1
        assert _state(proc.pid) == "S"
