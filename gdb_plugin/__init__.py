"""sframe-gdb's GDB adapter: lets GDB 13 to 18 unwind stacks from SFrame.

Loaded by ``source /path/to/sframe_gdb.py``: that loader makes ``sframe_core``
and pyelftools importable (the rule is ``sframe_core/deps.py``) and calls
``register()``. This package holds no format or unwind logic: it turns GDB's
registers, memory and objfiles into ``sframe_core``'s types and the core's
answer (a caller frame, or a reason to stop) back into a ``gdb.UnwindInfo``.

Modules, in the order GDB meets them: ``objfiles`` (which objfile covers a
PC, parsed from GDB's section and mapping lists; no ``import gdb``),
``unwinder`` (the global unwinder ``sframe``), ``commands`` (``info sframe``,
``sframe lookup``, ``set sframe mode``), ``events`` (when the objfile table is
re-read).
"""

from __future__ import annotations

import gdb  # type: ignore[import-not-found]
import gdb.unwinder  # type: ignore[import-not-found]

from . import commands, events
from .unwinder import SFrameUnwinder

__all__ = ["LOADED_LINE", "SFrameUnwinder", "register"]

# Printed once the plugin is ready: tests wait for it, users see what loaded.
LOADED_LINE = "sframe: SFrame unwinder ready (help sframe)"


def register() -> SFrameUnwinder:
    """Install the unwinder, the commands and the event handlers, replacing
    those of an earlier load (the mode is kept)."""
    previous = getattr(gdb, "_sframe_gdb_plugin", None)
    plugin = SFrameUnwinder()
    if previous is not None:
        plugin.mode = previous.mode
    gdb.unwinder.register_unwinder(None, plugin, replace=True)
    gdb._sframe_gdb_plugin = plugin
    commands.register(plugin)
    events.connect(plugin)
    plugin.mark_dirty(None)
    try:
        plugin.refresh()
    except Exception:  # noqa: BLE001 - no program yet
        pass
    gdb.write(LOADED_LINE + "\n")
    return plugin

