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
from LLDB 19 and for ``lldb FILE`` on every LLDB: ``sframe create`` is for
a ``target create`` typed after the import on 14 and 16.
"""

from __future__ import annotations

import os

import lldb

from sframe_core.base.errors import SFrameError

__all__ = ["create_target"]


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
