"""The GDB adapter as a whole: ``register()`` installs it (``sframe_gdb.py`` calls it)."""

from __future__ import annotations

import gdb
import gdb.unwinder

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

