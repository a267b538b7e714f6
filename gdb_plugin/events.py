"""Event wiring: when the objfile table is re-read and a walk's cache dropped.

GDB may not run commands from inside an unwinder, so the table of objfiles
(``maint info sections``) is read here, on ``new_objfile``, stops and
``before_prompt``, and marked stale when objfiles or program spaces change.
A walk's memory cache is dropped whenever the target runs or is written.
"""

from __future__ import annotations

import gdb

from .unwinder import SFrameUnwinder, warn

__all__ = ["connect"]


def connect(plugin: SFrameUnwinder) -> None:
    """Connect the handlers, replacing those of an earlier load."""
    events = gdb.events

    routes = plugin.routes

    def on_new_objfile(event) -> None:
        objfile = event.new_objfile
        if routes is not None:
            try:
                routes.consider(objfile)
            except Exception as exc:  # noqa: BLE001 - never a traceback in gdb
                warn(f"{objfile.filename}: symbol file: {type(exc).__name__}: {exc}")
        plugin.mark_dirty(objfile.progspace)
        # Refresh now: GDB may unwind (stop at a breakpoint, `finish') before
        # the next prompt, and the unwinder may not read the table itself.
        # Unless the unwinder looks at no frame there (every objfile with
        # SFrame has its symbol file) and this objfile brings none: then
        # nothing it would read changed, and the next stop or prompt
        # re-reads the table (one `maint info sections' for all the
        # libraries a `run' loads, not one per library).
        if routes is not None and plugin.idle_in(objfile.progspace) \
                and routes.adds_no_sframe(objfile):
            return
        if objfile.progspace == gdb.current_progspace():
            try:
                plugin.refresh()
            except Exception as exc:  # noqa: BLE001
                warn(f"cannot read the section table: {exc}")

    def on_free_objfile(event) -> None:
        if routes is not None:
            routes.forget(event.objfile)
        plugin.mark_dirty(event.objfile.progspace)

    def on_clear_objfiles(event) -> None:
        plugin.mark_dirty(event.progspace)

    def on_free_progspace(event) -> None:
        plugin.forget(event.progspace)

    def on_anything(event=None) -> None:
        plugin.mark_dirty(None)
        plugin.forget_frames()

    def on_stop(event=None) -> None:
        plugin.end_walk()
        if routes is not None:
            try:
                routes.on_stop(event)  # None: a prompt, where no worker is waited for
            except Exception as exc:  # noqa: BLE001
                warn(f"symbol file: {type(exc).__name__}: {exc}")
        try:
            plugin.refresh()
        except Exception as exc:  # noqa: BLE001
            warn(f"cannot read the section table: {exc}")

    def on_new_thread(event) -> None:
        if routes is not None:
            try:
                routes.on_new_thread(event)  # a core's: its files waited for
            except Exception as exc:  # noqa: BLE001
                warn(f"symbol file: {type(exc).__name__}: {exc}")

    def on_cont(event=None) -> None:
        plugin.forget_frames()
        if routes is not None:
            routes.on_resume()

    handlers = [
        ("new_objfile", on_new_objfile),
        ("free_objfile", on_free_objfile),
        ("clear_objfiles", on_clear_objfiles),
        ("free_progspace", on_free_progspace),  # GDB 14+
        ("new_progspace", on_anything),  # GDB 14+
        ("executable_changed", on_anything),  # GDB 14+
        ("corefile_changed", on_anything),  # GDB 18
        ("exited", on_anything),
        ("new_thread", on_new_thread),
        ("cont", on_cont),
        ("memory_changed", plugin.forget_frames),
        ("register_changed", plugin.forget_frames),
        ("stop", on_stop),
        ("before_prompt", on_stop),
    ]
    old = getattr(gdb, "_sframe_gdb_handlers", [])
    for name, handler in old:
        try:
            getattr(events, name).disconnect(handler)
        except Exception:  # noqa: BLE001 - already gone
            pass
    connected = []
    for name, handler in handlers:
        registry = getattr(events, name, None)
        if registry is not None:
            registry.connect(handler)
            connected.append((name, handler))
    gdb._sframe_gdb_handlers = connected
