"""``sframe create FILE [--core CORE]``: a target whose module carries the SFrame rows.

LLDB before 22 loses a module's addresses when a symbol file replaces the
module's own debug information (``state.keeps_addresses_when_debug_info_is_replaced``),
so the native route leaves such modules to LLDB's own unwinder, which has
no CFI for them. Handed instead, as the module itself, a copy of the file
whose ``.debug_frame`` says what its ``.sframe`` says
(``sframe_core.symfiles.module_copy``: same bytes, build-id and layout),
LLDB finds the debug information and the unwind rows in one file: plain
``bt``, ``frame variable`` and ``register read`` are then the twin's. The
copy (or, for FILE without debug information, FILE with its symbol file)
is put where ``target create FILE`` finds it (``seed``), which LLDB then
runs as always: a live program runs from FILE, a core names its own
process. This is what the plugin does by itself before ``target create``
(``overrides``; on 14 and 16 through the C++ method) and for ``lldb FILE``
on every LLDB, and for a core loaded before the import (``remake_core``):
``sframe create`` is for where none of these could run (a live target
created before the import, or no override found).
"""

from __future__ import annotations

import os

import lldb

from sframe_core.base.errors import SFrameError

__all__ = ["create_target", "remake_core", "core_file"]


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def create_target(debugger: lldb.SBDebugger, path: str, core: str | None) -> str:
    """Create the target (LLDB's own messages, or raise SFrameError with LLDB's error).

    The module copy, or a stripped module with its symbol file, is put where
    ``target create`` finds it first (``seed``): LLDB's own command then
    names ``path`` as the current executable and launches it."""
    if not os.path.isfile(path):
        raise SFrameError(f"{path}: No such file")
    from . import seed
    seed.seed(path)
    command = f"target create {_quote(os.path.abspath(path))}"
    if core is not None:
        command += f" --core {_quote(core)}"
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(command, result)
    if not result.Succeeded():
        raise SFrameError((result.GetError() or "target create failed").strip()
                          .removeprefix("error: "))
    # A core's modules now: before 21 no stop-hook runs when a core loads.
    from .symfiles import route_target
    route_target(debugger, debugger.GetSelectedTarget())
    return (result.GetOutput() or "").rstrip()


def remake_core(debugger: lldb.SBDebugger, target: lldb.SBTarget) -> lldb.SBTarget | None:
    """A core's target made before the plugin was imported, whose executable
    LLDB needs the module copy for (before 22, with debug information:
    ``symfiles.needs_copy``), made again from the copy; the new target
    (which the routes then judge as any other), or None where nothing was
    done.

    A core's target holds nothing a session adds that a second load would
    not give again (no breakpoint is hit, no memory written), so this is
    what ``sframe create FILE --core CORE`` would give, without asking the
    user to type it. Only where the plugin can tell which core LLDB loaded
    (``core_file``). The new target is made from
    the copy's own path rather than from FILE put in the module list
    (``seed``): while the import runs, the command's context still holds
    the old target's modules, and LLDB would give FILE's to the new one; a
    core is not run, so only ``target list`` and ``image list`` show the
    difference (the copy's name is FILE's). The old target is deleted once
    the new one has loaded the core."""
    from . import locate
    from .symfiles import needs_copy
    from .target import is_core
    if not is_core(target):
        return None
    path = target.GetExecutable().fullpath
    if not path or not os.path.isfile(path) or not needs_copy(path):
        return None
    # Only now: before 17 finding the core reads the headers of every file mapped.
    core = core_file(target.GetProcess())
    if not core or not os.path.isfile(core):
        return None
    handed = locate.handed(path, now=True)
    if handed is None or not handed[1]:
        return None
    copy = handed[0]
    made = debugger.CreateTarget(copy)
    if not made.IsValid():
        return None
    if not made.LoadCore(core).IsValid():
        debugger.DeleteTarget(made)
        return None
    locate.note_copy(copy, path, "made from it when the plugin loaded the core again")
    selected = debugger.GetSelectedTarget() == target
    debugger.DeleteTarget(target)
    if selected:
        debugger.SetSelectedTarget(made)
    return made


def core_file(process: lldb.SBProcess) -> str | None:
    """The core file LLDB loaded ``process`` from.

    ``SBProcess.GetCoreFile`` from 17 (19 here); before, LLDB's own mapping
    of it: LLDB keeps a core file mapped while its process lives, so among
    the files this process maps, the one core (``ET_CORE``) whose
    ``NT_PRPSINFO`` names the process's pid. None when there is not exactly
    one."""
    if hasattr(process, "GetCoreFile"):
        return process.GetCoreFile().fullpath or None
    from sframe_core.targets.ptrace import read_maps
    pid = process.GetProcessID()
    try:
        mapped = sorted({mapping.path for mapping in read_maps(os.getpid())})
    except OSError:
        return None
    found = [path for path in mapped if _core_of(path) == pid]
    return found[0] if len(found) == 1 else None


def _core_of(path: str) -> int | None:
    """The pid an ELF core file at ``path`` was dumped from, or None (no such core)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.segments import NoteSegment

    try:
        with open(path, "rb") as stream:
            if stream.read(4) != b"\x7fELF":
                return None
            stream.seek(0)
            elf = ELFFile(stream)
            if elf["e_type"] != "ET_CORE":
                return None
            for segment in elf.iter_segments():
                if not isinstance(segment, NoteSegment):
                    continue
                for note in segment.iter_notes():
                    if note["n_type"] == "NT_PRPSINFO":
                        return int(note["n_desc"]["pr_pid"])
    except Exception:  # noqa: BLE001 - any file the debugger maps: not a core we can read
        return None
    return None
