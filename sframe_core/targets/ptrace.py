"""Live processes: stop every thread with ptrace, copy what the walk needs, let go.

Each thread is stopped only while its own registers and stack are copied
(it is let go at once, not after the last thread has stopped); everything
that touches files (``/proc/PID/maps``, opening every
module's ELF headers and SFrame section) happens before it is stopped, and
the walk, symbol names and output after it runs again, on the copy
(``Snapshot``). So a slow disk, a FIFO or an unreadable file behind a
``--sysroot`` path can never keep the process stopped, and the stop lasts
what copying a few stacks takes (about a millisecond per thread).

Uses ctypes and libc's ``ptrace`` directly rather than python-ptrace: we need
four requests (SEIZE, INTERRUPT, GETREGSET, DETACH) and ``waitpid``, and
python-ptrace attaches with PTRACE_ATTACH, whose SIGSTOP can turn into a
visible stop and whose detach cannot tell "was stopped" from "was running".

``PTRACE_SEIZE`` + ``PTRACE_INTERRUPT`` stops a thread without sending it a
signal, so detaching puts it back exactly as it was: running if it was
running, still in its group stop if it was stopped (``kill -STOP``). A thread
caught in the middle of receiving a signal (signal-delivery-stop) gets that
signal back on detach. Stacks are copied through ``/proc/PID/mem`` with
``pread``, which the kernel allows once we are the tracer: from the stack
pointer (less a red zone) to the end of its mapping, at most
``STACK_COPY_LIMIT`` bytes per thread, and, for a thread running a signal
handler on an alternate stack, the stack its signal frame returns to (found
in the copy: ``signal_return_sps``). Registers come from
``PTRACE_GETREGSET(NT_PRSTATUS)``, the ``user_regs_struct`` a core's
``NT_PRSTATUS`` note holds.

Ctrl-C while threads are stopped is held until every thread is detached,
then raised as ``KeyboardInterrupt``. For tests only, the environment
variable ``SFRAME_TEST_HOLD_STOPPED=SECONDS`` keeps the threads stopped that
long after the copy (ended early by Ctrl-C), so a test can interrupt the
command at that moment.

Permission: the same as any debugger attaching: same user and, under Yama
(``/proc/sys/kernel/yama/ptrace_scope`` >= 1), root or ``CAP_SYS_PTRACE``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..base import settings
from ..base.abi import AARCH64_LE, AMD64, Arch
from ..base.errors import ProcessError
from ..unwind.addresses import Region as AddressRegion
from ..unwind.addresses import name_stacks
from .corefile import NT_PRSTATUS, CoreMemory, Segment, Thread, regs_from_user_regs
from .modules import Mapping

__all__ = ["Region", "Survey", "Snapshot", "survey", "snapshot", "read_maps",
           "STACK_COPY_LIMIT", "HOLD_ENV"]

PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
WALL = 0x40000000  # __WALL: wait for threads (clones) too

_USER_REGS_SIZE = {"amd64": 27 * 8, "aarch64": 34 * 8}

# Stack bytes copied per thread, from the stack pointer up: the default
# stack limit (ulimit -s), so any stack that did not overflow fits.
STACK_COPY_LIMIT = 8 << 20
# Below the stack pointer: amd64's 128-byte red zone, with room to spare.
RED_ZONE = 256
# Linux keeps this much unmapped below a growing stack (stack_guard_gap,
# 256 pages): a stack pointer that far below a stack overflowed it.
GUARD_GAP = 256 * 4096 + RED_ZONE
# A thread that does not stop within this long (uninterruptible sleep on a
# dead NFS server) is not waited for: the others are let go.
STOP_TIMEOUT = 2.0
HOLD_ENV = "SFRAME_TEST_HOLD_STOPPED"


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


@dataclass(frozen=True, slots=True)
class Region:
    """One line of ``/proc/PID/maps``: stacks are found here, files too."""

    start: int
    end: int
    writable: bool
    file_offset: int
    path: str  # "" for anonymous memory
    executable: bool = False


def _read_regions(maps: str) -> list[Region]:
    out = []
    with open(maps, encoding="utf-8", errors="surrogateescape") as stream:
        for line in stream:
            parts = line.rstrip("\n").split(maxsplit=5)
            if len(parts) < 5:
                continue
            lo, hi = parts[0].split("-")
            out.append(Region(int(lo, 16), int(hi, 16), parts[1][1:2] == "w", int(parts[2], 16),
                              parts[5] if len(parts) == 6 else "", parts[1][2:3] == "x"))
    return out


def _file_mappings(regions: list[Region]) -> list[Mapping]:
    return [Mapping(r.start, r.end, r.file_offset, r.path) for r in regions
            if r.path.startswith("/")]


def read_maps(pid: int) -> list[Mapping]:
    """The file-backed mappings of ``/proc/PID/maps``."""
    return _file_mappings(_read_regions(f"/proc/{pid}/maps"))


def _status(path: str) -> dict[str, str]:
    with open(path, encoding="ascii", errors="replace") as stream:
        return dict(line.rstrip("\n").split(":\t", 1) for line in stream if ":\t" in line)


def _tasks(pid: int) -> list[int]:
    try:
        return sorted((int(t) for t in os.listdir(f"/proc/{pid}/task")),
                      key=lambda t: (t != pid, t))
    except FileNotFoundError:
        raise ProcessError(f"process {pid}: no such process") from None
    except OSError as exc:
        raise ProcessError(f"process {pid}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Survey:
    """What is known of a process before it is stopped.

    ``view`` is the thread whose ``/proc`` files show the address space: the
    process itself, or, when its main thread has exited and others live on,
    the first of those (a dead thread's ``maps`` and ``mem`` are empty).
    """

    pid: int
    arch: Arch
    view: int
    regions: tuple[Region, ...]
    notes: tuple[str, ...] = ()

    @property
    def mappings(self) -> tuple[Mapping, ...]:
        return tuple(_file_mappings(list(self.regions)))


def survey(pid: int) -> Survey:
    """Check that ``pid`` can be examined and read its mappings; nothing is stopped.

    :raises ProcessError: no such process, this process, a zombie, or a
        process whose threads have all exited.
    """
    if pid <= 0:
        raise ProcessError(f"process {pid}: no such process")
    if pid == os.getpid():
        raise ProcessError(f"process {pid}: cannot trace this process itself")
    arch = _host_arch()
    try:
        status = _status(f"/proc/{pid}/status")
    except FileNotFoundError:
        raise ProcessError(f"process {pid}: no such process") from None
    except OSError as exc:
        raise ProcessError(f"process {pid}: {exc.strerror or exc}") from None
    if status.get("Tgid", str(pid)).strip() != str(pid):
        raise ProcessError(f"process {pid}: is a thread of process {status['Tgid'].strip()}; "
                           "give the process ID")
    view = pid
    notes: tuple[str, ...] = ()
    if status.get("State", "")[:1] in ("Z", "X"):
        live = [t for t in _tasks(pid) if t != pid and _alive(pid, t)]
        if not live:
            raise ProcessError(f"process {pid}: is a zombie (it has exited and its parent "
                               f"{status.get('PPid', '?').strip()} has not collected its status); "
                               "it has no stack")
        view = live[0]
        many = len(live) > 1
        notes = (f"process {pid}: its main thread has exited; {len(live)} other "
                 f"{'threads run on and are' if many else 'thread runs on and is'} shown",)
    try:
        regions = _read_regions(f"/proc/{pid}/task/{view}/maps")
    except FileNotFoundError:
        raise ProcessError(f"process {pid}: no such process") from None
    except PermissionError:
        raise _denied(pid) from None  # the kernel asks what ptrace would
    except OSError as exc:
        raise ProcessError(f"process {pid}: cannot read its mappings: {exc.strerror or exc}"
                           ) from None
    return Survey(pid, arch, view, tuple(regions), notes)


def _alive(pid: int, tid: int) -> bool:
    try:
        return _status(f"/proc/{pid}/task/{tid}/status").get("State", "Z")[:1] not in ("Z", "X")
    except OSError:
        return False


@dataclass(frozen=True)
class Snapshot:
    """Registers and stacks copied from a process, after it was let go; a
    ``backtrace.Target``. ``stopped_seconds`` is the longest any thread was
    stopped (from the poll before the one that saw its stop to its detach)."""

    pid: int
    arch: Arch
    threads: tuple[Thread, ...]
    mappings: tuple[Mapping, ...]
    memory: CoreMemory
    stopped_seconds: float
    stack_bytes: int
    pac_mask: int | None = None
    notes: tuple[str, ...] = field(default=())
    # /proc/PID/maps with permissions, stacks named: where a return address may point.
    regions: tuple[AddressRegion, ...] = ()
    # Where the time went, in seconds (bench/bench_pid.py): "wait" for the
    # threads to enter their stops (they run meanwhile), "copy" of their
    # registers and stacks, "detach" (each thread is let go after its copy).
    phases: tuple[tuple[str, float], ...] = ()


def _tracer(pid: int) -> int:
    try:
        return int(_status(f"/proc/{pid}/status").get("TracerPid", "0").strip() or 0)
    except (OSError, ValueError):
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


def _read_regs(libc: ctypes.CDLL, arch: Arch, tid: int) -> Thread:
    size = _USER_REGS_SIZE[arch.name]
    buffer = ctypes.create_string_buffer(size)
    iov = _Iovec(ctypes.cast(buffer, ctypes.c_void_p), size)
    _ptrace(libc, PTRACE_GETREGSET, tid, NT_PRSTATUS, ctypes.addressof(iov))
    pc, regs = regs_from_user_regs(arch, buffer.raw[:iov.len])
    return Thread(tid, pc, regs)


def _stack_span(regions: tuple[Region, ...], sp: int, limit: int) -> tuple[int, int] | None:
    for region in regions:
        if region.start <= sp < region.end or region.start <= sp - RED_ZONE < region.end:
            if not region.writable:
                return None
            return max(region.start, sp - RED_ZONE), min(region.end, sp + limit)
    # A stack pointer just below its stack, in the guard gap: the stack
    # overflowed (a handler on the alternate stack caught the SIGSEGV).
    above = [r for r in regions if sp < r.start <= sp + GUARD_GAP]
    if above and above[0].writable and not above[0].path.startswith("/"):
        return above[0].start, min(above[0].end, sp + limit)
    return None


# amd64's rt_sigframe holds a ucontext: uc_flags, uc_link, then uc_stack
# (ss_sp, ss_flags, ss_size: the alternate stack the handler runs on, as the
# kernel's __save_altstack wrote it) and uc_mcontext, whose rsp is the stack
# pointer the signal interrupted. uc_flags is UC_SIGCONTEXT_SS |
# UC_STRICT_RESTORE_SS (6), with UC_FP_XSTATE (7); uc_link is NULL.
_UC_HEADS = {"amd64": (b"\x06" + bytes(15), b"\x07" + bytes(15))}
_UC_RSP = 160  # offset of uc_mcontext.rsp in the ucontext
# Signal frames followed out of one thread's stack: nested handlers on the
# alternate stack each return to another stack (each copy is bounded too).
MAX_SIGNAL_STACKS = 4


def signal_return_sps(data: bytes, start: int, sp: int, arch: Arch) -> list[int]:
    """The stack pointers interrupted by the signal frames in ``data`` (the
    stack copied from ``start``) whose handler ran on an alternate stack
    that holds ``sp``, innermost first: where the callers of a handler on a
    ``sigaltstack`` are. A pure scan of the copy (C-speed ``bytes.find``),
    so it costs the stopped process next to nothing."""
    heads = _UC_HEADS.get(arch.name)
    if heads is None:
        return []
    found: list[tuple[int, int]] = []
    for head in heads:
        at = data.find(head)
        while at >= 0 and at + _UC_RSP + 8 <= len(data):
            if (start + at) % 8 == 0:
                ss_sp, flags, ss_size = struct.unpack_from("<QIxxxxQ", data, at + 16)
                if (ss_sp <= sp < ss_sp + ss_size and (flags & 0x7FFFFFFF) in (0, 1)
                        and ss_size < 1 << 32):
                    rsp = struct.unpack_from("<Q", data, at + _UC_RSP)[0]
                    if not ss_sp <= rsp < ss_sp + ss_size:
                        found.append((at, rsp))
            at = data.find(head, at + 1)
    return [rsp for _, rsp in sorted(found)]


def _copy_stack(fd: int, regions: tuple[Region, ...], sp: int, limit: int,
                stacks: list[tuple[int, bytes]], arch: Arch) -> None:
    """Copy the stack at ``sp`` into ``stacks`` and, where a signal handler
    runs on an alternate stack, the stack its signal frame returns to
    (each at most ``limit`` bytes, ``MAX_SIGNAL_STACKS`` at most)."""
    pending = [sp]
    for _ in range(1 + MAX_SIGNAL_STACKS):
        if not pending:
            return
        at = pending.pop(0)
        if any(begin <= at < begin + len(data) for begin, data in stacks):
            continue
        span = _stack_span(regions, at, limit)
        if span is None:
            continue
        try:
            data = os.pread(fd, span[1] - span[0], span[0])
        except OSError:
            continue  # unreadable: the walk says "memory unreadable"
        stacks.append((span[0], data))
        pending += signal_return_sps(data, span[0], at, arch)


class _Seized:
    """The threads we seized, and the signals to give back when letting go."""

    def __init__(self, libc: ctypes.CDLL, pid: int, view: int) -> None:
        self.libc, self.pid, self.view = libc, pid, view
        self.seized: list[int] = []
        self.stopped: dict[int, int] = {}  # tid -> signal to deliver on detach
        self.detached: set[int] = set()

    def interrupt_new(self) -> list[int]:
        """Seize and interrupt the threads not seized yet; those interrupted.

        All are interrupted before any is waited for: threads waiting for a
        CPU to enter their stop then wait side by side, not one after another.
        """
        new = [t for t in _tasks(self.pid) if t not in self.seized
               and (t != self.pid or self.view == self.pid)]
        interrupted = []
        for tid in new:
            try:
                _ptrace(self.libc, PTRACE_SEIZE, tid, 0, 0)
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    if tid == self.view:
                        raise ProcessError(f"process {self.pid}: no such process") from None
                    continue  # a thread that just exited
                if exc.errno == errno.EPERM:
                    raise _denied(self.pid) from None
                raise ProcessError(f"process {self.pid}: ptrace: {exc.strerror}") from None
            self.seized.append(tid)
            try:
                _ptrace(self.libc, PTRACE_INTERRUPT, tid)
            except OSError:
                continue
            interrupted.append(tid)
        return interrupted

    def each_stop(self, tids: list[int], deadline: float) -> Iterator[tuple[int, float]]:
        """Yield each of ``tids`` as it stops, with the time it stopped by (the
        poll before the one that saw it: an upper bound on its stop), in the
        order they stop. A thread that exits or does not stop before
        ``deadline`` is left out; ``stopped`` gets the signal to give back."""
        pending = list(tids)
        pause = 50e-6
        polled = time.monotonic()
        while pending:
            seen = []
            for tid in pending:
                sig = _poll_stopped(tid)
                if sig is not False:
                    seen.append(tid)
                    if sig is not None:
                        self.stopped[tid] = sig
            before, polled = polled, time.monotonic()
            for tid in seen:
                pending.remove(tid)
                if tid in self.stopped:
                    yield tid, before
            if seen or not pending:
                pause = 50e-6
                continue
            if polled > deadline:
                return
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def detach(self, tid: int) -> None:
        if tid in self.detached:
            return
        self.detached.add(tid)
        try:
            _ptrace(self.libc, PTRACE_DETACH, tid, 0, self.stopped.get(tid, 0))
        except OSError:
            pass  # gone; nothing to give back

    def detach_all(self) -> None:
        for tid in self.seized:
            self.detach(tid)


def _poll_stopped(tid: int) -> int | None | bool:
    """One look at ``tid``: False while it runs on, None if it exited, else
    the signal to give back on detach (0 for our interrupt's stop; a
    signal-delivery-stop's signal, which the thread was about to get)."""
    while True:
        try:
            got, status = os.waitpid(tid, WALL | os.WNOHANG)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if got == 0:
            return False
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            return None
        if os.WIFSTOPPED(status):
            return 0 if status >> 16 == PTRACE_EVENT_STOP else os.WSTOPSIG(status)
        return False


def _hold_seconds() -> float:
    return settings.number(HOLD_ENV) or 0.0


def _hold_for_tests(seconds: float, interrupted: list[bool]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not interrupted:
        time.sleep(0.01)


# How much the nice value is lowered while threads are stopped (``snapshot``).
BOOST = 10


def _boost() -> int | None:
    """Lower this thread's nice value by ``BOOST``; the old one, or None if not allowed."""
    try:
        old = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, max(old - BOOST, -20))
    except OSError:
        return None
    return old


def _unboost(old: int) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, old)
    except OSError:
        pass  # raising a nice value is always allowed: not reached


def snapshot(info: Survey, *, sysroot: str | None = None,
             stack_limit: int = STACK_COPY_LIMIT, boost: bool = True) -> Snapshot:
    """Stop every thread of the surveyed process, copy registers and stacks, let go.

    Each thread is let go as soon as its own registers and stack are
    copied: on a loaded machine a thread may wait many milliseconds for a
    CPU before it can enter its stop, and the threads stopped first then
    run on meanwhile instead of waiting for it (a backtrace needs each
    thread's own stack consistent, not all of them at one instant).

    With ``boost``, this thread's nice value is lowered by ``BOOST`` while
    threads are stopped, where that is allowed (root, ``CAP_SYS_NICE``):
    on a loaded machine this command being preempted between a thread's
    stop and its detach is what keeps a thread stopped longest.

    Nothing here opens a file but ``/proc/PID/task`` and ``/proc/PID/mem``;
    ``sysroot`` only tells the returned memory where the mapped files are
    (read-only file bytes are read from them, after the process runs again).

    :raises ProcessError: permission denied, already traced, or the process
        exited while being attached.
    """
    pid = info.pid
    libc = _libc()
    seized = _Seized(libc, pid, info.view)
    # Ctrl-C while threads are stopped must still detach: hold it until then.
    interrupted: list[bool] = []
    old_handler: Any = None
    try:
        old_handler = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    except ValueError:
        pass  # not the main thread: leave signals alone
    hold = _hold_seconds()
    restore = _boost() if boost else None
    fd = -1
    started = time.monotonic()
    deadline = started + STOP_TIMEOUT
    waited = copied = detached = longest = 0.0
    threads: list[Thread] = []
    stacks: list[tuple[int, bytes]] = []
    regions = info.regions
    stopped_at: dict[int, float] = {}
    try:
        for _ in range(100):  # until no new thread appears
            new = seized.interrupt_new()
            if not new:
                break
            if fd < 0 and info.view in seized.seized:
                try:
                    fd = os.open(f"/proc/{pid}/task/{info.view}/mem", os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    raise ProcessError(f"process {pid}: {exc.strerror or exc} (did it exit?)"
                                       ) from None
            wait_from = time.monotonic()
            for tid, stopped_by in seized.each_stop(new, deadline):
                at = time.monotonic()
                waited += at - wait_from
                stopped_at[tid] = stopped_by
                try:
                    thread = _read_regs(libc, info.arch, tid)
                except OSError as exc:
                    if tid == info.view:
                        raise ProcessError(f"process {pid}: {exc.strerror or exc} "
                                           "(did it exit?)") from None
                    thread = None
                if thread is not None and fd >= 0:
                    threads.append(thread)
                    sp = thread.regs.get(info.arch.sp, 0)
                    if not any(r.start <= sp < r.end for r in regions):
                        # A thread started after the survey: its stack is new.
                        regions = tuple(_read_regions(f"/proc/{pid}/task/{info.view}/maps"))
                    _copy_stack(fd, regions, sp, stack_limit, stacks, info.arch)
                wait_from = time.monotonic()
                copied += wait_from - at
                if not hold:
                    seized.detach(tid)
                    ended = time.monotonic()
                    detached += ended - wait_from
                    longest = max(longest, ended - stopped_by)
                    wait_from = ended
        if info.view not in seized.stopped:
            raise ProcessError(f"process {pid}: exited while being attached")
        _hold_for_tests(hold, interrupted)
    finally:
        if fd >= 0:
            os.close(fd)
        seized.detach_all()
        if restore is not None:
            _unboost(restore)
        if hold or not stopped_at:
            ended = time.monotonic()
            longest = max([longest, *(ended - at for at in stopped_at.values())])
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
    if interrupted:
        raise KeyboardInterrupt
    threads.sort(key=lambda t: (t.lwp != pid, t.lwp))
    return Snapshot(pid, info.arch, tuple(threads), info.mappings,
                    _memory(stacks, info.regions, sysroot), longest,
                    sum(len(data) for _, data in stacks), notes=info.notes,
                    regions=tuple(name_stacks(
                        [AddressRegion(r.start, r.end, r.executable, r.path) for r in regions],
                        [t.regs.get(info.arch.sp) for t in threads])),
                    phases=(("wait", waited), ("copy", copied), ("detach", detached)))


def _memory(stacks: list[tuple[int, bytes]], regions: tuple[Region, ...],
            sysroot: str | None) -> CoreMemory:
    """The copied stacks, as a core's memory: a read outside them is unknown,
    except in read-only file mappings, whose bytes the files hold."""
    from .corefile import resolve_path

    segments, offset = [], 0
    for start, data in stacks:
        segments.append(Segment(start, len(data), offset, len(data), True))
        offset += len(data)
    read_only = [Mapping(r.start, r.end, r.file_offset, r.path) for r in regions
                 if r.path.startswith("/") and not r.writable]
    return CoreMemory(b"".join(data for _, data in stacks), segments, read_only,
                      lambda path: resolve_path(path, sysroot))
