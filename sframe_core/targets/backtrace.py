"""Whole-process backtraces: walk every thread, name the frames, print them.

Used by ``sframe backtrace`` (cores and live processes): a *target* is
anything with an ``arch``, ``threads``, ``mappings``, ``memory`` and
``pac_mask`` (``corefile.CoreFile``, ``ptrace.Snapshot``). Walking is
``unwind.walk``; this module only adds names and words, so the step function
stays the one place with unwinding rules. Its formatter, ``thread_lines``,
also prints the LLDB ``sframe bt`` command (in LLDB's style, ``LLDB_STYLE``).

Text format (documented in docs/backtrace.md), one block per thread::

    Thread 1 (LWP 1234):
    #0  0x00005555555552a0 in stop_here+0 (/path/deep)
    #1  0x000055555555531e in f4+30 (/path/deep)
    ...
    Backtrace stopped: outermost frame (return address undefined)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from ..base.abi import Arch
from ..base.errors import SFrameError
from ..unwind.addresses import AddressMap, Region
from ..unwind.step import DEFAULT_PAC_MASK, MAX_FRAMES, Frame, Memory, Stop, StopReason, walk
from .modules import SOURCES, Mapping, Module, ModuleTable
from .symbols import Symbolizer

__all__ = [
    "Target", "FrameLine", "ThreadTrace", "trace_thread", "trace_target", "text_lines",
    "to_json", "describe_stop", "explain_stop", "configure", "run", "parse_sources", "Style",
    "GDB_STYLE", "LLDB_STYLE", "thread_lines",
]


class _Thread(Protocol):
    @property
    def lwp(self) -> int: ...
    @property
    def pc(self) -> int: ...
    @property
    def regs(self) -> dict[int, int]: ...


class Target(Protocol):
    """A stopped process: a core file or a copy of a live process (``ptrace.Snapshot``)."""

    @property
    def arch(self) -> Arch: ...
    @property
    def threads(self) -> Sequence[_Thread]: ...
    @property
    def mappings(self) -> Sequence[Mapping]: ...
    @property
    def memory(self) -> Memory: ...
    @property
    def pac_mask(self) -> int | None: ...
    @property
    def regions(self) -> Sequence[Region]: ...


@dataclass(frozen=True, slots=True)
class FrameLine:
    """One printed frame. ``source`` is the kind of row that unwound *from* it."""

    index: int
    pc: int
    cfa: int | None
    function: str | None
    offset: int | None
    module: str | None
    source: str | None
    # The frame's registers the walk knows (name, value), in DWARF order:
    # for callers, what the rows recover (SP, FP, RA register, callee-saved
    # registers); a register not listed is unknown in that frame.
    registers: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ThreadTrace:
    lwp: int
    frames: tuple[FrameLine, ...]
    stop: Stop


def explain_stop(stop: Stop, last: Frame, modules: ModuleTable) -> Stop:
    """Name the module where the walk found no unwind information, or say the
    PC is in none: the step itself only knows the PC."""
    if stop.reason is not StopReason.NO_INFO:
        return stop
    module = modules.module_for(last.lookup_pc)
    if module is None:
        return Stop(StopReason.NO_INFO, f"pc {last.pc:#x} is in no mapped ELF file")
    if module.error is not None:
        return Stop(StopReason.NO_INFO, f"pc {last.pc:#x} in {module.name}: {module.error}")
    return Stop(StopReason.NO_INFO, f"pc {last.pc:#x} in {module.name}")


def _line(index: int, frame: Frame, modules: ModuleTable, symbols: Symbolizer,
          arch: Arch) -> FrameLine:
    module: Module | None = modules.module_for(frame.lookup_pc)
    function = offset = None
    if module is not None:
        # Name callers by pc - 1, as gdb does: a call to a noreturn function
        # can be its caller's last instruction, so the RA is already past it.
        hit = symbols.lookup(module.path, module.bias, frame.lookup_pc)
        if hit is not None:
            function, offset = hit[0], hit[1] + (frame.pc - frame.lookup_pc)
    registers = tuple((arch.reg_name(n), v) for n, v in sorted(frame.regs.items()))
    return FrameLine(index, frame.pc, frame.cfa, function, offset,
                     module.name if module else None, frame.row.source if frame.row else None,
                     registers)


def trace_thread(thread: _Thread, modules: ModuleTable, memory: Memory, arch: Arch,
                 symbols: Symbolizer, *, max_frames: int = MAX_FRAMES,
                 pac_mask: int | None = None, addresses: AddressMap | None = None,
                 ) -> ThreadTrace:
    """Unwind one thread from its registers to the end, naming each frame."""
    lines: list[FrameLine] = []
    last: Frame | None = None
    stop = Stop(StopReason.ERROR, "the walk ended without a reason")
    start = Frame(thread.pc, dict(thread.regs), interrupted=True)
    for item in walk(start, modules, memory, arch, max_frames=max_frames,
                     pac_mask=DEFAULT_PAC_MASK if pac_mask is None else pac_mask,
                     addresses=addresses):
        if isinstance(item, Stop):
            stop = item
        else:
            last = item
            lines.append(_line(len(lines), item, modules, symbols, arch))
    if last is not None:
        stop = explain_stop(stop, last, modules)
    return ThreadTrace(thread.lwp, tuple(lines), stop)


def module_table(mappings: Sequence[Mapping], *, sources: Sequence[str] = SOURCES,
                 sysroot: str | None = None, warnings: list[str] | None = None) -> ModuleTable:
    """The target's modules, each table that fails to load reported once in ``warnings``."""
    def on_error(module: Module, exc: SFrameError) -> None:
        if warnings is not None:
            text = str(exc)
            warnings.append(text if module.name in text or module.path in text
                            else f"{module.name}: {text}")

    return ModuleTable.from_mappings(mappings, sysroot=sysroot, sources=sources,
                                     on_error=on_error)


def trace_target(target: Target, *, sources: Sequence[str] = SOURCES, sysroot: str | None = None,
                 max_frames: int = MAX_FRAMES, warnings: list[str] | None = None,
                 modules: ModuleTable | None = None) -> list[ThreadTrace]:
    """Every thread's backtrace, in the target's thread order (``modules``:
    the target's module table, when it was built beforehand)."""
    if modules is None:
        modules = module_table(target.mappings, sources=sources, sysroot=sysroot,
                               warnings=warnings)
    symbols = Symbolizer()
    # A core's segments and /proc/PID/maps list every mapping.
    addresses = AddressMap(target.regions, complete=bool(target.regions))
    return [trace_thread(t, modules, target.memory, target.arch, symbols,
                         max_frames=max_frames, pac_mask=target.pac_mask, addresses=addresses)
            for t in target.threads]


# -- output -----------------------------------------------------------------


def _where(frame: FrameLine) -> str:
    if frame.function is None:
        name = "??"
    else:
        name = f"{frame.function}+{frame.offset}"
    return f"{name} ({frame.module})" if frame.module else name


def describe_stop(stop: Stop) -> str:
    """The words after ``Backtrace stopped:``."""
    if stop.reason is StopReason.OUTERMOST and stop.detail:
        return f"outermost frame ({stop.detail})"
    return str(stop)


@dataclass(frozen=True, slots=True)
class Style:
    """How one debugger prints a thread's backtrace.

    ``frame`` formats a frame line from ``index``, ``marker`` (``*`` on frame
    0) and ``where``; ``stopped`` the line saying why the walk ended, printed
    unless the reason is one of ``quiet_ends``; ``no_frames`` that line when
    a quiet end left no frame at all.
    """

    frame: str
    stopped: str
    quiet_ends: frozenset[StopReason] = frozenset()
    no_frames: str = ""


# gdb's ``thread apply all bt`` look (``sframe backtrace``): every end is said.
GDB_STYLE = Style("#{index:<2} {where}", "Backtrace stopped: {reason}")
# LLDB's ``bt`` look (``sframe bt``), and every end said as gdb says it.
LLDB_STYLE = Style("  {marker} frame #{index}: {where}", "Backtrace stopped: {reason}")


def thread_lines(header: str, wheres: Iterable[str], stop: Stop | None, style: Style
                 ) -> Iterator[str]:
    """One thread's backtrace: ``header``, a line per frame (``wheres``
    describe them, innermost first), then the end (none when ``stop`` is None:
    the walk was cut short on purpose)."""
    yield header
    count = 0
    for count, where in enumerate(wheres, 1):
        yield style.frame.format(index=count - 1, marker="*" if count == 1 else " ", where=where)
    if stop is None:
        return
    if stop.reason not in style.quiet_ends:
        yield style.stopped.format(reason=describe_stop(stop))
    elif count == 0:
        yield style.no_frames.format(reason=describe_stop(stop))


def text_lines(traces: Iterable[ThreadTrace]) -> Iterator[str]:
    """gdb's ``thread apply all bt`` look, with ``func+OFF`` and the stop reason."""
    for number, trace in enumerate(traces, 1):
        if number > 1:
            yield ""
        yield from thread_lines(f"Thread {number} (LWP {trace.lwp}):",
                                (f"0x{f.pc:016x} in {_where(f)}" for f in trace.frames),
                                trace.stop, GDB_STYLE)


def _frame_json(f: FrameLine, registers: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "index": f.index, "pc": f.pc, "cfa": f.cfa, "function": f.function,
        "offset": f.offset, "module": f.module, "source": f.source,
    }
    if registers:
        data["registers"] = dict(f.registers)
    return data


def to_json(traces: Iterable[ThreadTrace], warnings: Sequence[str] = (), *,
            registers: bool = False) -> dict[str, Any]:
    """``registers``: each frame's known registers by name (absent: unknown there)."""
    return {
        "threads": [{
            "number": number,
            "lwp": trace.lwp,
            "frames": [_frame_json(f, registers) for f in trace.frames],
            "stop": {"reason": trace.stop.reason.name.lower(),
                     "message": describe_stop(trace.stop), "detail": trace.stop.detail},
        } for number, trace in enumerate(traces, 1)],
        "warnings": list(warnings),
    }


# -- the ``sframe backtrace`` subcommand ------------------------------------------


def parse_sources(text: str) -> tuple[str, ...]:
    """``sframe,eh_frame`` -> the row sources, in the order they are tried."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names or any(name not in SOURCES for name in names):
        raise ValueError(text)
    return names


parse_sources.__name__ = "source list"  # argparse names the type in its message


def configure(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--core", metavar="CORE", help="ELF core file to unwind")
    what.add_argument("--pid", type=int, metavar="PID",
                      help="live process to attach to with ptrace (stopped while unwinding)")
    parser.add_argument("--exe", metavar="EXE",
                        help="the executable, where the core's file list lacks it or names "
                             "another path")
    parser.add_argument("--sysroot", metavar="DIR",
                        help="prefix for the absolute paths of mapped files")
    parser.add_argument("--source", type=parse_sources, default=SOURCES, metavar="LIST",
                        help="row sources to try, in order (default: sframe,eh_frame)")
    parser.add_argument("--max-frames", type=int, default=MAX_FRAMES, metavar="N",
                        help=f"stop after N frames per thread (default {MAX_FRAMES})")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--registers", action="store_true",
                        help="also print each frame's registers where they are known (callers: "
                             "what the unwind rules and the code analysis recover)")


def _register_line(frame: FrameLine) -> str:
    return "    " + " ".join(f"{name}=0x{value:x}" for name, value in frame.registers)


def _emit(traces: list[ThreadTrace], warnings: list[str], as_json: bool, out: TextIO,
          registers: bool = False) -> None:
    if as_json:
        json.dump(to_json(traces, warnings, registers=registers), out, indent=1)
        out.write("\n")
        return
    frames = iter([f for trace in traces for f in trace.frames])
    for line in text_lines(traces):
        out.write(line + "\n")
        if registers and line.startswith("#"):
            frame = next(frames, None)
            if frame is not None and frame.registers:
                out.write(_register_line(frame) + "\n")
    out.flush()
    for text in warnings:
        sys.stderr.write(f"sframe: warning: {text}\n")


def run(args: argparse.Namespace) -> int:
    """``sframe backtrace``; errors are SFrameError, printed by the CLI as one line."""
    warnings: list[str] = []
    if args.exe is not None:
        # The user named it: a bad executable is the command's error, not a
        # warning after a backtrace without it.
        from ..format.elf import read_elf

        read_elf(args.exe)
    if args.core is not None:
        from .corefile import open_core

        with open_core(args.core, exe=args.exe, sysroot=args.sysroot) as core:
            traces = trace_target(core, sources=args.source, sysroot=args.sysroot,
                                  max_frames=args.max_frames, warnings=warnings)
    else:
        traces = _trace_pid(args, warnings)
    _emit(traces, warnings, args.json, sys.stdout, args.registers)
    return 0


def _trace_pid(args: argparse.Namespace, warnings: list[str]) -> list[ThreadTrace]:
    """Every file is opened before the process is stopped, and it is stopped
    only while its registers and stacks are copied: the walk, the names and
    the output work on the copy, so nothing slow or blocking happens while
    it is stopped."""
    from .ptrace import snapshot, survey

    try:
        info = survey(args.pid)
        modules = module_table(info.mappings, sources=args.source, sysroot=args.sysroot,
                               warnings=warnings)
        for module in modules.modules:
            module.sframe  # noqa: B018 - open each SFrame section now, not later
        copy = snapshot(info, sysroot=args.sysroot)
        warnings[:0] = copy.notes
        return trace_target(copy, max_frames=args.max_frames, warnings=warnings,
                            modules=modules)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted; process {args.pid} was left as it was") from None
