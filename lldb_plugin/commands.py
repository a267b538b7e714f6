"""The ``sframe`` command (any LLDB with Python): bt, info, lookup, status, load, create.

``sframe bt`` walks with the core from frame 0's registers and prints in
LLDB's own backtrace style, symbolicated with
``SBTarget.ResolveSymbolContextForAddress`` (callers at pc - 1, the real pc
printed). It does not depend on the frame provider, so on LLDB 22/23 it is
also a cross-check of plain ``bt``.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

import lldb

from sframe_core.base.errors import SFrameError
from sframe_core.version import __version__

from .target import INVALID, TargetInfo, info_for, innermost, process_memory

if TYPE_CHECKING:
    from sframe_core.unwind.step import Frame, Stop

# The walk, the backtrace's text and the row descriptions are imported by the
# commands that print them: a session that never types ``sframe bt`` or
# ``sframe lookup`` (LLDB's own ``bt`` on the native route) does not pay for
# them at import.

__all__ = ["SFrameCommand", "backtrace_lines", "describe_pc"]


class CommandError(Exception):
    """The command cannot run (bad arguments, no target): its message is the error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise CommandError(f"{message}\n{self.format_usage().rstrip()}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise CommandError(message or "")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sframe", add_help=True,
                     description="Unwind with SFrame (.sframe) where .eh_frame is missing.")
    sub = parser.add_subparsers(dest="cmd", metavar="SUBCOMMAND")
    bt = sub.add_parser("bt", help="backtrace of the current thread, unwound with SFrame")
    bt.add_argument("-c", "--count", type=int, default=None, help="at most COUNT frames")
    bt.add_argument("-a", "--all", action="store_true", help="all threads")
    bt.add_argument("all_word", nargs="?", choices=["all"], help=argparse.SUPPRESS)
    sub.add_parser("info", help="modules with SFrame: version, ABI, FDEs, range, .eh_frame")
    lookup = sub.add_parser("lookup", help="the unwind row that applies at ADDRESS")
    lookup.add_argument("address", help="0x... or decimal")
    sub.add_parser("status", help="which route (LLDB's own unwinder or the frame provider) "
                   "serves each SFrame module of this target")
    sub.add_parser("load", help="add the SFrame symbol files to this target's modules now "
                   "(before setting breakpoints: see docs/lldb.md)")
    create = sub.add_parser("create", help="target create FILE, with a module LLDB can unwind "
                            "with SFrame where its debug information cannot take a symbol file "
                            "(LLDB before 22)")
    create.add_argument("file", help="the executable")
    create.add_argument("-c", "--core", default=None, help="the core file to load with it")
    sub.add_parser("enable", help="register the frame provider for the current target "
                   "(needed after loading a core once the plugin was loaded)")
    return parser


# -- symbolication -----------------------------------------------------------


def describe_pc(target: lldb.SBTarget, pc: int, *, caller: bool) -> str:
    """``0x... module`symbol + off at file:line``, resolved at pc - 1 for callers."""
    text = f"0x{pc:016x}"
    if pc == INVALID:
        return text
    at = pc - 1 if caller and pc > 0 else pc
    address = lldb.SBAddress(at, target)
    sc = target.ResolveSymbolContextForAddress(address, lldb.eSymbolContextEverything)
    module = sc.GetModule()
    if not module.IsValid():
        return text
    text += f" {module.GetFileSpec().GetFilename()}"
    name = None
    start = None
    function = sc.GetFunction()
    symbol = sc.GetSymbol()
    if function.IsValid():
        name = function.GetDisplayName() or function.GetName()
        start = function.GetStartAddress().GetLoadAddress(target)
    elif symbol.IsValid():
        name = symbol.GetDisplayName() or symbol.GetName()
        start = symbol.GetStartAddress().GetLoadAddress(target)
    if name:
        text += f"`{name}"
        if start is not None and start != INVALID and pc > start:
            text += f" + {pc - start}"
    line = sc.GetLineEntry()
    if line.IsValid() and line.GetFileSpec().IsValid() and line.GetLine():
        text += f" at {line.GetFileSpec().GetFilename()}:{line.GetLine()}"
        if line.GetColumn():
            text += f":{line.GetColumn()}"
    return text


# -- bt --------------------------------------------------------------------


def walk_thread(thread: lldb.SBThread, info: TargetInfo) -> Iterator[Frame | Stop]:
    """The core's walk from the thread's frame 0, or one Stop saying why not."""
    from sframe_core.unwind.step import Stop, StopReason, walk

    if info.arch is None:
        yield Stop(StopReason.ERROR, f"no SFrame ABI for {thread.GetProcess().GetTarget().GetTriple()}")
        return
    start = innermost(thread, info.arch)
    if start is None:
        yield Stop(StopReason.REGISTER_UNKNOWN, "no frame 0")
        return
    process = thread.GetProcess()
    yield from walk(start, info.table, process_memory(process), info.arch,
                    addresses=info.addresses(process, start.regs.get(info.arch.sp)))


def _thread_header(thread: lldb.SBThread, selected: bool) -> str:
    parts = [f"thread #{thread.GetIndexID()}"]
    if thread.GetName():
        parts.append(f"name = '{thread.GetName()}'")
    reason = thread.GetStopDescription(256)
    if reason:
        parts.append(f"stop reason = {reason}")
    return f"{'*' if selected else ' '} " + ", ".join(parts)


def backtrace_lines(thread: lldb.SBThread, target: lldb.SBTarget, info: TargetInfo, *,
                    count: int | None, selected: bool) -> list[str]:
    from sframe_core.targets.backtrace import LLDB_STYLE, explain_stop, thread_lines
    from sframe_core.unwind.step import Stop

    wheres: list[str] = []
    stop: Stop | None = None
    last: Frame | None = None
    for item in walk_thread(thread, info):
        if isinstance(item, Stop):
            stop = item if last is None else explain_stop(item, last, info.table)
            break
        if count is not None and len(wheres) >= count:
            break
        last = item
        # A return address is resolved at pc - 1; an interrupted pc, and the
        # start of a signal trampoline (its FDE starts a byte early), at pc.
        caller = not item.interrupted and not (item.row is not None and item.row.signal)
        wheres.append(describe_pc(target, item.pc, caller=caller))
    return list(thread_lines(_thread_header(thread, selected), wheres, stop, LLDB_STYLE))


# -- info / lookup -------------------------------------------------------------


def info_lines(info: TargetInfo) -> list[str]:
    lines = []
    for module in info.modules:
        section = module.sframe
        if section is None:
            if module.error is not None and module.sframe_section is not None:
                lines.append(f"{module.name}: .sframe unusable: {module.error}")
            continue
        count = section.num_fdes
        span = ""
        if count:
            if section.header.sorted:
                first, last = section.get_fde(0), section.get_fde(count - 1)
                lo, hi = first.start, last.end
            else:
                fdes = list(section.iter_fdes())
                lo, hi = min(f.start for f in fdes), max(f.end for f in fdes)
            span = f", range 0x{lo:x}-0x{hi:x}"
        lines.append(f"{module.name}: SFrame v{section.version}, ABI {section.arch.name}, "
                     f"{count} FDEs{span}, .sframe at 0x{section.address:x} (bias 0x{module.bias:x}), "
                     f".eh_frame {'present' if module.has_eh_section else 'absent'}")
    if not lines:
        lines.append("no loaded module has an .sframe section")
    return lines


def _parse_address(text: str, target: lldb.SBTarget) -> int:
    try:
        return int(text, 0)
    except ValueError:
        pass
    if text.startswith("$"):
        frame = target.GetProcess().GetSelectedThread().GetSelectedFrame()
        if text in ("$pc", "$ip"):
            return frame.GetPC()
        if text == "$sp":
            return frame.GetSP()
        value = frame.FindRegister(text[1:])
        if value.IsValid() and value.GetValue() is not None:
            return value.GetValueAsUnsigned()
        raise CommandError(f"no register {text[1:]!r} in the selected frame")
    symbols = target.FindSymbols(text)
    for i in range(symbols.GetSize()):
        address = symbols.GetContextAtIndex(i).GetSymbol().GetStartAddress().GetLoadAddress(target)
        if address != INVALID:
            return address
    raise CommandError(f"not an address or a loaded symbol: {text!r}")


def lookup_lines(info: TargetInfo, target: lldb.SBTarget, pc: int) -> list[str]:
    from sframe_core.format.describe import describe_row, lookup_text

    module = info.module_for(pc)
    if module is None:
        return [f"0x{pc:x} is in no loaded module"]
    lines = [f"{describe_pc(target, pc, caller=False)} (module {module.name})"]
    section = module.sframe
    arch = info.arch
    hit = section.lookup(pc) if section is not None else None
    if section is not None and hit is not None:
        lines += ["  " + line for line in lookup_text(section, hit, pc=pc)[1:]]
    elif section is not None:
        lines.append("  sframe: no FDE covers this address")
    else:
        lines.append("  sframe: the module has no .sframe section")
    if module.has_eh_section and arch is not None and "eh_frame" in module.sources:
        cfi = module.cfi
        row = cfi.row_at(pc) if cfi is not None else None
        lines.append("  eh_frame: " + (describe_row(row, arch) if row is not None
                                       else "no FDE covers this address"))
    return lines


# -- the command -------------------------------------------------------------


def _target(debugger: lldb.SBDebugger, exe_ctx: lldb.SBExecutionContext | None) -> lldb.SBTarget:
    target = exe_ctx.GetTarget() if exe_ctx is not None else lldb.SBTarget()
    if not target or not target.IsValid():
        target = debugger.GetSelectedTarget()
    return target


class SFrameCommand:
    """``sframe bt [-c N] [--all] | info | lookup ADDRESS | status | load | create FILE | enable``."""

    def __init__(self, debugger: lldb.SBDebugger, internal_dict: dict) -> None:
        self.parser = _parser()

    def get_short_help(self) -> str:
        return ("Unwind with SFrame: sframe bt [-c COUNT] [--all] | info | lookup ADDRESS | status | "
                "load | create FILE [-c CORE] | enable")

    def get_long_help(self) -> str:
        return self.parser.format_help()

    def __call__(self, debugger: lldb.SBDebugger, command: str,
                 exe_ctx: lldb.SBExecutionContext, result: lldb.SBCommandReturnObject) -> None:
        try:
            self._run(debugger, command, exe_ctx, result)
        except CommandError as exc:
            result.SetError(str(exc).strip() or self.parser.format_usage().strip())
        except SFrameError as exc:
            result.SetError(f"sframe: {exc}")
        except Exception as exc:  # noqa: BLE001 - never a traceback at the prompt
            result.SetError(f"sframe: internal error: {type(exc).__name__}: {exc}")

    def _run(self, debugger: lldb.SBDebugger, command: str, exe_ctx: lldb.SBExecutionContext,
             result: lldb.SBCommandReturnObject) -> None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if not argv:
            result.AppendMessage(self.parser.format_help().rstrip())
            return
        if argv[0] in ("-h", "--help", "help"):
            result.AppendMessage(self.parser.format_help().rstrip())
            return
        args = self.parser.parse_args(argv)
        if args.cmd == "create":
            from .create import create_target
            result.AppendMessage(create_target(debugger, args.file, args.core))
            return
        target = _target(debugger, exe_ctx)
        from . import registry
        if args.cmd == "enable":
            if not registry.supported():
                raise CommandError("this LLDB has no scripted frame providers: use 'sframe bt'")
            if not target.IsValid():
                raise CommandError("no target")
            registry.register(target)
            result.AppendMessage(registry.status(debugger, target))
            return
        if args.cmd == "status":
            result.AppendMessage(f"sframe-gdb {__version__}\n{registry.status(debugger, target)}")
            return
        if args.cmd == "load":
            if not target.IsValid():
                raise CommandError("no target")
            from . import symfiles
            symfiles.route_target(debugger, target)
            result.AppendMessage(registry.status(debugger, target))
            return
        if not target.IsValid():
            raise CommandError("no target")
        info = info_for(target)
        if args.cmd == "info":
            result.AppendMessage("\n".join(info_lines(info)))
            return
        if args.cmd == "lookup":
            pc = _parse_address(args.address, target)
            result.AppendMessage("\n".join(lookup_lines(info, target, pc)))
            return
        # bt
        process = target.GetProcess()
        if not process.IsValid() or not process.GetNumThreads():
            raise CommandError("no process: run the program or load a core first")
        selected = process.GetSelectedThread()
        threads = list(process) if (args.all or args.all_word) else [selected]
        out: list[str] = []
        for thread in threads:
            if not thread.IsValid():
                continue
            out += backtrace_lines(thread, target, info, count=args.count,
                                   selected=thread.GetThreadID() == selected.GetThreadID())
            out.append("")
        result.AppendMessage("\n".join(out).rstrip())
