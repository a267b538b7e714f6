"""``sframe create FILE [--core CORE]``: a target whose module carries the SFrame rows.

LLDB before 22 loses a module's addresses when a symbol file replaces the
module's own debug information (``state.keeps_addresses_when_debug_info_is_replaced``),
so the native route leaves such modules to LLDB's own unwinder, which has
no CFI for them. Handed instead, as the module itself, a copy of the file
whose ``.debug_frame`` says what its ``.sframe`` says
(``sframe_core.symfiles.module_copy``: same bytes, build-id and layout),
LLDB finds the debug information and the unwind rows in one file: plain
``bt``, ``frame variable`` and ``register read`` are then the twin's. A
live program still runs from FILE (``target create COPY --remote-file
FILE``: LLDB launches the module's platform path); a core names its own
process. Where the copy is not needed (no ``.sframe``, CFI present, no
debug information, LLDB 22+), this is plain ``target create``.
"""

from __future__ import annotations

import os

import lldb

from sframe_core.base.errors import SFrameError
from sframe_core.base.files import elf_layout, open_elf

from .state import NATIVE, Route, _routes, keeps_addresses_when_debug_info_is_replaced, target_key

__all__ = ["create_target", "needs_copy"]


def needs_copy(path: str) -> bool:
    """Does LLDB need the module copy to use ``path``'s SFrame rows?"""
    if keeps_addresses_when_debug_info_is_replaced():
        return False
    with open_elf(path) as stream:
        layout = elf_layout(stream, path)
    names = {s.name for s in layout.sections if s.size}
    return (".sframe" in names and ".debug_info" in names
            and not names & {".eh_frame", ".debug_frame"})


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def create_target(debugger: lldb.SBDebugger, path: str, core: str | None) -> str:
    """Create the target (LLDB's own messages, or raise SFrameError with LLDB's error)."""
    if not os.path.isfile(path):
        raise SFrameError(f"{path}: No such file")
    copy = None
    if needs_copy(path):
        from sframe_core.symfiles.module_copy import module_with_debug_frame
        copy = module_with_debug_frame(path)
    command = f"target create {_quote(copy or path)}"
    if core is not None:
        command += f" --core {_quote(core)}"
    elif copy is not None:
        command += f" --remote-file {_quote(os.path.abspath(path))}"
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(command, result)
    if not result.Succeeded():
        raise SFrameError((result.GetError() or "target create failed").strip()
                          .removeprefix("error: "))
    text = (result.GetOutput() or "").rstrip()
    target = debugger.GetSelectedTarget()
    if copy is None:
        # A core's modules now: before 21 no stop-hook runs when a core loads.
        from .symfiles import route_target
        route_target(debugger, target)
        return text
    module = target.FindModule(lldb.SBFileSpec(copy))
    if module.IsValid():
        key = (module.GetFileSpec().fullpath or copy, module.GetUUIDString() or "")
        _routes.setdefault(target_key(target), {})[key] = Route(
            NATIVE, os.path.basename(path), f"{copy} (the module LLDB loaded for {path}: "
            "'sframe create')")
    return (f"{text}\nsframe: the module is {copy}, a copy of {os.path.basename(path)} whose "
            ".debug_frame holds its SFrame rows (same build-id and layout)")
