"""The commands: ``info sframe``, ``sframe lookup``, ``set``/``show sframe mode``.

Each is a module-level ``gdb.Command`` (or ``gdb.Parameter``) made with the
unwinder it reports on; ``register`` makes them all (GDB replaces a command
defined again, so sourcing the loader twice is harmless).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import gdb

from sframe_core.base.errors import SFrameError
from sframe_core.version import __version__

from .symfiles import FALLBACK, HELD, NATIVE, PENDING, SETTINGS, Route
from .unwinder import MODES, SFrameUnwinder

__all__ = ["register"]


def _parse_address(arg: str) -> int:
    arg = arg.strip()
    if not arg:
        raise gdb.GdbError("an address is required, e.g. `info sframe $pc'")
    try:
        value = gdb.parse_and_eval(arg)
        if value.type.code == gdb.TYPE_CODE_FUNC:
            value = value.address
        return int(value.cast(gdb.lookup_type("unsigned long")))
    except gdb.error as exc:
        raise gdb.GdbError(str(exc)) from None


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """Whatever the bytes of a section say, a command fails with one line
    (``gdb.GdbError``), never "Python Exception ..." and a traceback."""
    try:
        yield
    except gdb.GdbError:
        raise
    except SFrameError as exc:
        raise gdb.GdbError(f"sframe: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a bug: still one line
        raise gdb.GdbError(f"sframe: internal error: {type(exc).__name__}: {exc}") from None


def _lookup_lines(plugin: SFrameUnwinder, address: int) -> list[str]:
    plugin.refresh()
    table = plugin.table()
    entry = table.find(address) if table is not None else None
    if entry is None:
        raise gdb.GdbError(f"sframe: no objfile with a .sframe section covers 0x{address:x}")
    section = entry.sframe(plugin)
    if section is None:
        raise gdb.GdbError(f"sframe: {entry.path}: .sframe unusable (see the warning above)")
    head = f"{entry.path}: SFrame v{section.version}"
    try:
        hit = section.lookup(address)
        if hit is None:
            fde = section.find_fde(address)
            if fde is None:
                return [head, f"address 0x{address:x} is not covered by any FDE"]
            return [head,
                    f"address 0x{address:x} is in FDE [{fde.index}] but before its first FRE"]
        # Imported here: the words of a lookup (and the analysis modules they
        # name registers with) are for this command, not for gdb's start-up.
        from sframe_core.format.describe import lookup_text
        lines = lookup_text(section, hit, pc=address)
    except SFrameError as exc:
        raise gdb.GdbError(f"sframe: {entry.path}: {exc}") from None
    if entry.has_eh_frame and entry.covered_by_cfi(plugin, address):
        lines.append(f"(.eh_frame also covers this address: the sframe unwinder "
                     f"{'uses SFrame here' if plugin.mode == 'always' else 'leaves it to gdb'} "
                     f"in mode {plugin.mode})")
    return [head] + lines


class SFramePrefix(gdb.Command):
    """Inspect and control the SFrame unwinder.

Usage: sframe lookup ADDRESS
       info sframe [ADDRESS]
       set sframe mode auto|always|off
       show sframe mode
       set sframe symbol-files auto|foreground|off
       show sframe symbol-files

Each objfile with a .sframe section and no .eh_frame/.debug_frame gets a
symbol file whose .debug_frame says what its .sframe says (plus where the
machine code keeps the callee-saved registers), attached as its separate
debug file: gdb's own DWARF unwinder then unwinds it, as with .eh_frame
(see `help set sframe symbol-files').
Until an objfile's symbol file is ready, and where none can be made, a
global Python unwinder named `sframe' serves it: registered only while some
objfile needs it, `info unwinder' then lists it and `disable unwinder
global sframe' turns it off.  In mode `auto' it
unwinds frames whose PC lies in such an objfile and no .eh_frame or
.debug_frame FDE covering that PC; `always' uses SFrame wherever it covers
the PC; `off' never does.  `info sframe' says which serves each objfile."""

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("sframe", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, True)
        self.plugin = plugin


class SFrameLookup(gdb.Command):
    """Show the SFrame FDE and row that apply at an address.

Usage: sframe lookup ADDRESS
ADDRESS is any expression, e.g. $pc, f4, 0x5555555552a0.  The words are those
of the shell command `sframe lookup'."""

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("sframe lookup", gdb.COMMAND_STACK, gdb.COMPLETE_EXPRESSION)
        self.plugin = plugin

    def invoke(self, arg: str, from_tty: bool) -> None:
        with _one_line_errors():
            for line in _lookup_lines(self.plugin, _parse_address(arg)):
                gdb.write(line + "\n")


def _unwind_gaps(progspace: gdb.Progspace) -> list[str]:
    """One line per objfile whose file holds no unwind information at all
    (the plugin's symbol files, separate debug files, are not asked)."""
    from sframe_core.format.elf import unwind_gap

    lines = []
    for objfile in progspace.objfiles():
        path = objfile.filename
        if path and objfile.owner is None and (gap := unwind_gap(path)) is not None:
            lines.append(f"{path}: {gap}")
    return lines


class InfoSFrame(gdb.Command):
    """List objfiles with SFrame sections, or show the row at an address.

Usage: info sframe [ADDRESS]
Without ADDRESS: each objfile with a .sframe section, with its SFrame version,
ABI, number of FDEs, address range, whether it also has .eh_frame, and whether
the unwinder uses it in the current mode.  With ADDRESS: like `sframe lookup'."""

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("info sframe", gdb.COMMAND_STATUS, gdb.COMPLETE_EXPRESSION)
        self.plugin = plugin

    def invoke(self, arg: str, from_tty: bool) -> None:
        with _one_line_errors():
            self._invoke(arg)

    def _invoke(self, arg: str) -> None:
        if arg.strip():
            for line in _lookup_lines(self.plugin, _parse_address(arg)):
                gdb.write(line + "\n")
            return
        plugin = self.plugin
        routes = plugin.routes
        if routes is not None:
            routes.take_finished()  # what it says is then so
        progspace = gdb.current_progspace()
        plugin.refresh()
        entries = plugin.tables_entries(progspace)
        setting = routes.setting if routes is not None else "off"
        gdb.write(f"sframe unwinder (sframe-gdb {__version__}): mode {plugin.mode}, "
                  f"{'enabled' if plugin.enabled else 'disabled'}; symbol files {setting}\n"
                  f"{_listing(plugin)}\n")
        for line in _unwind_gaps(progspace):
            gdb.write(line + "\n")
        if not entries:
            gdb.write("No objfile has a .sframe section.\n")
            return
        by_path = {objfile.filename: route for objfile, route in
                   (routes.routes(progspace) if routes is not None else ())}
        for entry in entries:
            section = entry.sframe(self.plugin)
            if section is None:
                error = entry.module.error if entry.module is not None else None
                reason = str(error).removeprefix(f"{entry.path}: .sframe: ") if error else ""
                gdb.write(f"{entry.path}: .sframe unusable{': ' + reason if reason else ''}\n")
                continue
            lo = min((lo for lo, _ in entry.code), default=0)
            hi = max((hi for _, hi in entry.code), default=0)
            cfi = [n for n, f in ((".eh_frame", entry.has_eh_frame),
                                  (".debug_frame", entry.has_debug_frame)) if f]
            gdb.write(f"{entry.path}\n"
                      f"  SFrame v{section.version}, ABI {section.arch.name}, "
                      f"{section.num_fdes} FDEs, code 0x{lo:x}-0x{hi:x}, "
                      f".sframe at 0x{entry.sframe_address:x}\n"
                      f"  {'has ' + ' and '.join(cfi) if cfi else 'no .eh_frame'}; "
                      f"{_served_by(plugin.mode, cfi, by_path.get(entry.path))}\n")


def _listing(plugin: SFrameUnwinder) -> str:
    """Whether gdb's list of unwinders holds the Python unwinder, and why."""
    if plugin.listed():
        return "The Python unwinder `sframe' is registered (info unwinder)."
    if plugin.mode == "off":
        return "The Python unwinder `sframe' is not registered: mode off."
    if not gdb.selected_inferior().pid:
        return "The Python unwinder `sframe' is not registered: no process."
    return ("The Python unwinder `sframe' is not registered: no objfile needs it "
            "(gdb's own unwinder serves each).")


# What a backtrace lacks while the Python unwinder serves an objfile whose
# file is being made: what only gdb's own DWARF unwinder makes.
PENDING_MISSING = ("tail-call frames and entry values (x@entry) are gdb's own only once it is "
                   "ready; frame numbers after a missing tail-call frame are one less")


def _served_by(mode: str, cfi: list[str], route: Route | None) -> str:
    """Which unwinder serves an objfile with SFrame, in words."""
    if route is not None and route.kind == NATIVE and mode != "always":
        return f"unwound by gdb's DWARF unwinder from the symbol file {route.detail}"
    if mode == "off":
        return "the sframe unwinder is off (set sframe mode)"
    if mode == "always":
        return "unwound by the sframe unwinder (mode always)"
    if cfi:
        return f"the sframe unwinder serves only where {'/'.join(cfi)} has no FDE"
    if route is not None and route.kind == PENDING and route.detail == HELD:
        return ("unwound by the sframe unwinder until the program next stops: its symbol file "
                "is ready, attached then (not at this stop at a breakpoint of several "
                "locations, where gdb would warn after every command)")
    if route is not None and route.kind == PENDING:
        who = route.detail.partition(" being made")[2].strip()
        return (f"unwound by the sframe unwinder until its symbol file is ready (being made"
                f"{' ' + who if who else ''} for {time.monotonic() - route.since:.1f} s); "
                f"{PENDING_MISSING}")
    if route is not None and route.kind == FALLBACK:
        return f"unwound by the sframe unwinder: no symbol file ({route.detail})"
    return "unwound by the sframe unwinder"


class SetSFrame(gdb.Command):
    """Settings of the SFrame unwinder.

Usage: set sframe mode auto|always|off
       set sframe symbol-files auto|foreground|off"""

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("set sframe", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)
        self.plugin = plugin


class ShowSFrame(gdb.Command):
    """Settings of the SFrame unwinder.

Usage: show sframe mode
       show sframe symbol-files"""

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("show sframe", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)
        self.plugin = plugin


class ModeParameter(gdb.Parameter):
    """When the SFrame unwinder claims frames.

auto:   where the objfile's .sframe covers the PC and no .eh_frame or
        .debug_frame FDE does (the default).
always: wherever .sframe covers the PC, even where DWARF CFI exists.
off:    never (like `disable unwinder global sframe')."""

    set_doc = "Set when the SFrame unwinder claims frames."
    show_doc = "Show when the SFrame unwinder claims frames."

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("sframe mode", gdb.COMMAND_STACK, gdb.PARAM_ENUM, list(MODES))
        self.plugin = plugin
        self.value = plugin.mode

    def get_set_string(self) -> str:
        if self.value != self.plugin.mode:
            self.plugin.mode = self.value
            gdb.invalidate_cached_frames()
            try:
                # Out of ``auto`` the table is read again where new objfiles
                # left it stale (``events.on_new_objfile``).
                self.plugin.refresh()
            except Exception:  # noqa: BLE001 - no program, or the next stop reads it
                pass
        return ""

    def get_show_string(self, svalue: str) -> str:
        return f"The SFrame unwinder mode is \"{svalue}\"."


class SymbolFilesParameter(gdb.Parameter):
    """Whether gdb's own DWARF unwinder gets the SFrame rules, as a symbol file.

auto:       for every objfile with .sframe and no .eh_frame/.debug_frame, a
            symbol file holding a .debug_frame made from the SFrame rows is
            attached as its separate debug file (the default).  A cached one
            at once; a missing one is made at once for a small objfile, and
            for a large one in a worker process, the sframe unwinder serving
            the objfile until it is attached at the next stop.
foreground: the same, but always made before gdb goes on.
off:        no symbol files: the sframe unwinder serves every such objfile.
A symbol file already attached stays (gdb cannot detach one).  `info sframe'
says which unwinder serves each objfile."""

    set_doc = "Set whether gdb's DWARF unwinder gets the SFrame rules as symbol files."
    show_doc = "Show whether gdb's DWARF unwinder gets the SFrame rules as symbol files."

    def __init__(self, plugin: SFrameUnwinder) -> None:
        super().__init__("sframe symbol-files", gdb.COMMAND_STACK, gdb.PARAM_ENUM, list(SETTINGS))
        self.plugin = plugin
        routes = plugin.routes
        self.value = routes.setting if routes is not None else "off"

    def get_set_string(self) -> str:
        routes = self.plugin.routes
        if routes is not None and self.value != routes.setting:
            routes.setting = self.value
            with _one_line_errors():
                routes.reconsider()
        return ""

    def get_show_string(self, svalue: str) -> str:
        return f"SFrame symbol files for gdb's DWARF unwinder: \"{svalue}\"."


def register(plugin: SFrameUnwinder) -> None:
    for command in (SFramePrefix, SFrameLookup, InfoSFrame, SetSFrame, ShowSFrame, ModeParameter,
                    SymbolFilesParameter):
        command(plugin)
