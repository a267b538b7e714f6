"""``sframe backtrace --pid`` on running fixtures, and what it leaves behind.

Both the ``.noeh`` program and its twin run with ASLR off (``setarch -R``),
so their code is at the same addresses: gdb attaches to the twin, we attach
to the ``.noeh`` copy, and every frame's PC must be equal. Afterwards the
process must be exactly as it was: sleeping (not stopped, not traced) and
killable by an ordinary signal; a stopped process must stay stopped.
"""

from __future__ import annotations

import glob
import json
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


# -- what --pid does while it works, and odd processes (issue 12) -----------------


def test_ctrl_c_while_stopped_detaches_and_exits_130() -> None:
    """SIGINT while every thread is stopped: let go, one line, exit 130.

    ``SFRAME_TEST_HOLD_STOPPED`` keeps the threads stopped after the copy, so
    the signal arrives at the worst moment (see sframe_core/targets/ptrace.py)."""
    with running(_fixture("deep.noeh"), "sleep") as proc:
        cli = subprocess.Popen([sys.executable, "-m", "sframe_core", "backtrace", "--pid",
                                str(proc.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(ROOT),
                                    "SFRAME_TEST_HOLD_STOPPED": "60"})
        try:
            for _ in range(3000):
                if _status(proc.pid)["TracerPid"] == str(cli.pid) and _state(proc.pid) == "t":
                    break
                time.sleep(0.01)
            assert _state(proc.pid) == "t", "the CLI never stopped the process"
            cli.send_signal(signal.SIGINT)
            out, err = cli.communicate(timeout=30)
        finally:
            if cli.poll() is None:
                cli.kill()
        assert cli.returncode == 130, (out, err)
        assert out == ""
        assert err == f"sframe: interrupted; process {proc.pid} was left as it was\n"
        _wait_for_state(proc.pid, "S")
        assert _status(proc.pid)["TracerPid"] == "0"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM


def test_zombie() -> None:
    child = subprocess.Popen(["true"])
    try:
        for _ in range(500):
            if _state(child.pid) == "Z":
                break
            time.sleep(0.01)
        assert one_line_error("backtrace", "--pid", str(child.pid)) == (
            f"sframe: process {child.pid}: is a zombie (it has exited and its parent "
            f"{os.getpid()} has not collected its status); it has no stack")
    finally:
        child.wait()


LEADER_EXITS = r"""
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) void worker_sleeps(void) { for (;;) pause(); }
__attribute__((noinline)) void *worker(void *arg) { worker_sleeps(); return arg; }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    printf("READY %d\n", getpid());
    fflush(stdout);
    pthread_exit(0);
}
"""


def test_main_thread_exited_others_run_on(tmp_path: Path) -> None:
    src = tmp_path / "leader.c"
    src.write_text(LEADER_EXITS)
    program = tmp_path / "leader"
    subprocess.run(["gcc", "-O1", "-g", "-pthread", "-Wa,--gsframe", "-o", str(program),
                    str(src)], check=True)
    proc = subprocess.Popen([str(program)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().decode() == f"READY {proc.pid}\n"
        for _ in range(500):
            if _state(proc.pid) == "Z":
                break
            time.sleep(0.01)
        assert _state(proc.pid) == "Z"  # the leader, while its worker sleeps
        out = sframe("backtrace", "--pid", str(proc.pid), "--json")
        data = json.loads(out.stdout)
        (thread,) = data["threads"]
        assert thread["lwp"] != proc.pid
        names = [f["function"] for f in thread["frames"]]
        assert "worker_sleeps" in names and "worker" in names, names
        assert data["warnings"][0] == (f"process {proc.pid}: its main thread has exited; "
                                       "1 other thread runs on and is shown")
        assert _status(proc.pid)["TracerPid"] == "0"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_fifo_behind_sysroot_never_blocks(tmp_path: Path) -> None:
    """The process's libc is a FIFO in the sysroot: refused before the process
    is stopped, named where the walk needed it, and the command ends."""
    with running(_fixture("deep.noeh"), "sleep") as proc:
        libc = next(m.split()[-1] for m in Path(f"/proc/{proc.pid}/maps").read_text().splitlines()
                    if "/libc.so" in m)
        fifo = tmp_path / libc.lstrip("/")
        fifo.parent.mkdir(parents=True)
        os.mkfifo(fifo)
        out = sframe("backtrace", "--pid", str(proc.pid), "--sysroot", str(tmp_path))
        assert out.stderr == f"sframe: warning: {fifo}: not a regular file (a FIFO)\n"
        assert out.stdout.splitlines()[-1] == (
            f"Backtrace stopped: no unwind information covers this PC: pc "
            f"{int(out.stdout.split()[5], 16):#x} in {libc}: {fifo}: not a regular file (a FIFO)")
        assert _state(proc.pid) == "S"
        assert _status(proc.pid)["TracerPid"] == "0"


# -- a handler on the alternate signal stack (sigaltstack) -----------------------

ALTSTACK_CALLERS = {
    "segv": ["seg2", "seg1", "main"],
    "usr1": ["kill", "usr2", "usr1", "main"],
}
START = ["__libc_start_call_main", "__libc_start_main", "_start"]


@pytest.fixture(scope="module")
def altstack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """tests/fixtures/src/altstack.c: the ``.noeh`` program, and its twin under
    the same file name in another directory of the same length (so both
    start with the same stack, byte for byte, and overflow at the same depth)."""
    from helpers.host_programs import build
    out = tmp_path_factory.mktemp("altstack")
    built = build("altstack", out / "a")
    twin_dir = out / "b"
    twin_dir.mkdir()
    twin = twin_dir / built.noeh.name
    shutil.copy2(built.twin, twin)
    return built.noeh, twin


def _altstack_pair(noeh: Path, twin: Path, mode: str, tmp_path: Path
                   ) -> tuple[dict, dict[int, list[int]]]:  # type: ignore[type-arg]
    """Our ``--pid`` JSON on ``noeh`` and gdb's PCs on ``twin``, both in the
    handler of ``mode``; overflow runs with a 256 KiB stack (``ulimit -s``)."""
    def start(program: Path):  # type: ignore[no-untyped-def]
        if mode != "overflow":
            return running(program, mode)
        return running(Path("/bin/sh"), "-c", f"ulimit -s 256 && exec {program} {mode}")
    with start(twin) as other, start(noeh) as proc:
        gdb = gdb_attach_pcs(other.pid, tmp_path)
        data = sframe_json("backtrace", "--pid", str(proc.pid))
    return data, gdb


@pytest.mark.gdb
@pytest.mark.parametrize("mode", ["segv", "usr1"])
def test_pid_handler_on_the_alternate_stack(altstack: tuple[Path, Path], mode: str,
                                            tmp_path: Path) -> None:
    """The handler's callers are on the main stack, which the signal frame
    returns to: copied too, so the walk goes on past the signal frame."""
    noeh, twin = altstack
    data, gdb = _altstack_pair(noeh, twin, mode, tmp_path)
    frames = data["threads"][0]["frames"]
    names = [f["function"] for f in frames]
    assert names[names.index("on_signal") + 2:] == ALTSTACK_CALLERS[mode] + START, names
    assert data["threads"][0]["stop"]["reason"] == "outermost"
    assert list(our_pcs(data).values()) == list(gdb.values())


@pytest.mark.gdb
def test_pid_stack_overflow_caught_on_the_alternate_stack(altstack: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    """A SIGSEGV at the guard page, handled on the alternate stack: the
    interrupted stack pointer is below the stack's mapping, the whole
    (256 KiB) stack is copied, and every runaway frame is there, as gdb
    shows them on the twin."""
    noeh, twin = altstack
    data, gdb = _altstack_pair(noeh, twin, "overflow", tmp_path)
    names = [f["function"] for f in data["threads"][0]["frames"]]
    runaway = names[names.index("on_signal") + 2:-len(START) - 1]
    assert len(runaway) > 1000 and set(runaway) == {"runaway"}, names[:10]
    assert names[-len(START) - 1:] == ["main", *START]
    assert list(our_pcs(data).values()) == list(gdb.values())
