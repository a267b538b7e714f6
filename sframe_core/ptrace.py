"""Live processes: stop every thread with ptrace, read registers and memory, let go.

Uses ctypes and libc's ``ptrace`` directly rather than python-ptrace: we need
four requests (SEIZE, INTERRUPT, GETREGSET, DETACH) and ``waitpid``, and
python-ptrace attaches with PTRACE_ATTACH, whose SIGSTOP can turn into a
visible stop and whose detach cannot tell "was stopped" from "was running".

``PTRACE_SEIZE`` + ``PTRACE_INTERRUPT`` stops a thread without sending it a
signal, so detaching puts it back exactly as it was: running if it was
running, still in its group stop if it was stopped (``kill -STOP``). A thread
caught in the middle of receiving a signal (signal-delivery-stop) gets that
signal back on detach. Memory is read through ``/proc/PID/mem`` with
``pread``, which the kernel allows once we are the tracer; registers come
from ``PTRACE_GETREGSET(NT_PRSTATUS)``, which returns the same
``user_regs_struct`` a core's ``NT_PRSTATUS`` note holds.

Permission: the same as any debugger attaching: same user and, under Yama
(``/proc/sys/kernel/yama/ptrace_scope`` >= 1), root or ``CAP_SYS_PTRACE``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .abi import AARCH64_LE, AMD64, Arch
from .addresses import Region, name_stacks, regions_from_maps
from .corefile import NT_PRSTATUS, Thread, regs_from_user_regs
from .errors import ProcessError
from .modules import Mapping

__all__ = ["Process", "ProcessMemory", "attach", "read_maps"]

PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
WALL = 0x40000000  # __WALL: wait for threads (clones) too

_USER_REGS_SIZE = {"amd64": 27 * 8, "aarch64": 34 * 8}


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    return libc


def _ptrace(libc: ctypes.CDLL, request: int, tid: int, addr: int | None = 0,
            data: int | ctypes.c_void_p | None = 0) -> None:
    ctypes.set_errno(0)
    if libc.ptrace(request, tid, addr, data) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _host_arch() -> Arch:
    machine = platform.machine()
    if machine == "x86_64":
        return AMD64
    if machine == "aarch64":
        return AARCH64_LE
    raise ProcessError(f"live processes are not supported on {machine}")


def read_maps(pid: int) -> list[Mapping]:
    """The file-backed mappings of ``/proc/PID/maps``."""
    out = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as stream:
        for line in stream:
            parts = line.rstrip("\n").split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            lo, hi = parts[0].split("-")
            out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5]))
    return out


class ProcessMemory:
    """``unwind.Memory`` over ``/proc/PID/mem`` (valid while we are the tracer)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read(self, address: int, size: int) -> bytes | None:
        if size <= 0 or size > 1 << 20 or address < 0 or address + size > 1 << 63:
            return None
        try:
            data = os.pread(self._fd, size, address)
        except OSError:
            return None
        return data if len(data) == size else None


@dataclass(frozen=True)
class Process:
    """A process with every thread stopped by us; a ``backtrace.Target``."""

    pid: int
    arch: Arch
    threads: tuple[Thread, ...]
    mappings: tuple[Mapping, ...]
    memory: ProcessMemory
    pac_mask: int | None = None
    regions: tuple[Region, ...] = ()  # /proc/PID/maps, with permissions


def _tasks(pid: int) -> list[int]:
    try:
        return sorted((int(t) for t in os.listdir(f"/proc/{pid}/task")),
                      key=lambda t: (t != pid, t))
    except FileNotFoundError:
        raise ProcessError(f"process {pid}: no such process") from None
    except OSError as exc:
        raise ProcessError(f"process {pid}: {exc.strerror or exc}") from None


def _tracer(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as stream:
            for line in stream:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _denied(pid: int) -> ProcessError:
    tracer = _tracer(pid)
    if tracer:
        return ProcessError(f"process {pid}: already traced by process {tracer}")
    hint = ""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="ascii") as stream:
            scope = stream.read().strip()
        hint = f"; kernel.yama.ptrace_scope is {scope}"
    except OSError:
        pass
    return ProcessError(f"process {pid}: permission denied (ptrace needs the same user, "
                        f"or root/CAP_SYS_PTRACE{hint})")


def _wait_stopped(pid: int, tid: int) -> int | None:
    """Wait for ``tid``'s stop; the signal to give back on detach, or None if it exited."""
    while True:
        try:
            _, status = os.waitpid(tid, WALL)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            return None
        if os.WIFSTOPPED(status):
            if status >> 16 == PTRACE_EVENT_STOP:
                return 0
            # Signal-delivery-stop: the thread was about to get this signal.
            return os.WSTOPSIG(status)


def _read_regs(libc: ctypes.CDLL, arch: Arch, tid: int) -> Thread:
    size = _USER_REGS_SIZE[arch.name]
    buffer = ctypes.create_string_buffer(size)
    iov = _Iovec(ctypes.cast(buffer, ctypes.c_void_p), size)
    _ptrace(libc, PTRACE_GETREGSET, tid, NT_PRSTATUS, ctypes.addressof(iov))
    pc, regs = regs_from_user_regs(arch, buffer.raw[:iov.len])
    return Thread(tid, pc, regs)


@contextmanager
def attach(pid: int) -> Iterator[Process]:
    """Stop every thread of ``pid``; detach on exit, whatever happens inside.

    :raises ProcessError: no such process, permission denied, already
        traced, or the process exited while being attached.
    """
    if pid <= 0:
        raise ProcessError(f"process {pid}: no such process")
    if pid == os.getpid():
        raise ProcessError(f"process {pid}: cannot trace this process itself")
    arch = _host_arch()
    libc = _libc()
    stopped: dict[int, int] = {}  # tid -> signal to deliver on detach
    seized: list[int] = []
    # Ctrl-C while threads are stopped must still detach: hold it until then.
    old_handler = signal.getsignal(signal.SIGINT)
    interrupted: list[bool] = []
    try:
        signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    except ValueError:
        old_handler = None  # not the main thread: leave signals alone
    fd = -1
    try:
        for _ in range(100):  # until no new thread appears
            new = [t for t in _tasks(pid) if t not in seized]
            if not new:
                break
            for tid in new:
                try:
                    _ptrace(libc, PTRACE_SEIZE, tid, 0, 0)
                except OSError as exc:
                    if exc.errno == errno.ESRCH:
                        if tid == pid:
                            raise ProcessError(f"process {pid}: no such process") from None
                        continue  # a thread that just exited
                    if exc.errno == errno.EPERM:
                        raise _denied(pid) from None
                    raise ProcessError(f"process {pid}: ptrace: {exc.strerror}") from None
                seized.append(tid)
                try:
                    _ptrace(libc, PTRACE_INTERRUPT, tid)
                except OSError:
                    continue
                sig = _wait_stopped(pid, tid)
                if sig is not None:
                    stopped[tid] = sig
        if pid not in stopped:
            raise ProcessError(f"process {pid}: exited while being attached")
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
            threads = []
            for tid in sorted(stopped, key=lambda t: (t != pid, t)):
                try:
                    threads.append(_read_regs(libc, arch, tid))
                except OSError:
                    if tid == pid:
                        raise
            mappings = read_maps(pid)
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as maps:
                regions = name_stacks(regions_from_maps(maps.read()),
                                      [t.regs.get(arch.sp) for t in threads])
        except OSError as exc:
            raise ProcessError(f"process {pid}: {exc.strerror or exc} (did it exit?)") from None
        yield Process(pid, arch, tuple(threads), tuple(mappings), ProcessMemory(fd),
                      regions=tuple(regions))
    finally:
        if fd >= 0:
            os.close(fd)
        for tid in seized:
            try:
                _ptrace(libc, PTRACE_DETACH, tid, 0, stopped.get(tid, 0))
            except OSError:
                pass  # gone; nothing to give back
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
            if interrupted:
                raise KeyboardInterrupt
