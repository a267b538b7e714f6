"""The GDB adapter as a whole: ``register()`` installs it (``sframe_gdb.py`` calls it)."""

from __future__ import annotations

import gdb

from . import commands, events
from .cmdline import mi_mode
from .messages import warn
from .symfiles import Routes
from .unwinder import SFrameUnwinder

__all__ = ["LOADED_LINE", "SFrameUnwinder", "register"]

# Printed once the plugin is ready: tests wait for it, users see what loaded.
LOADED_LINE = "sframe: SFrame unwinder ready (help sframe)"


def register() -> SFrameUnwinder:
    """Install the unwinder, the commands and the event handlers, replacing
    those of an earlier load (the mode is kept)."""
    previous = getattr(gdb, "_sframe_gdb_plugin", None)
    plugin = SFrameUnwinder()
    routes = plugin.routes = Routes(plugin.route_changed)
    if previous is not None:
        plugin.mode = previous.mode
        old_routes = getattr(previous, "routes", None)
        if old_routes is not None:
            routes.setting = old_routes.setting
            old_routes.cancel()
    # In gdb's list of unwinders once the table says some objfile needs it
    # (``refresh``); an earlier load's goes now.
    gdb.frame_unwinders[:] = [u for u in gdb.frame_unwinders
                              if getattr(u, "name", None) != plugin.name]
    gdb._sframe_gdb_plugin = plugin
    commands.register(plugin)
    events.connect(plugin)
    try:
        routes.consider_all()
    except Exception as exc:  # noqa: BLE001 - never a traceback in gdb
        warn(f"symbol files: {type(exc).__name__}: {exc}")
    plugin.mark_dirty(None)
    try:
        plugin.refresh()
    except Exception:  # noqa: BLE001 - no program yet
        plugin.list_if_needed()
    if not mi_mode():  # an IDE's records as on the twin, which has no such line
        gdb.write(LOADED_LINE + "\n")
    return plugin

