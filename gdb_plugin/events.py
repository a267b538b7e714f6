"""Event wiring: when the objfile table is re-read and a walk's cache dropped.

GDB may not run commands from inside an unwinder, so the table of objfiles
(``maint info sections``) is read here, on ``new_objfile``, stops and
``before_prompt``, and marked stale when objfiles or program spaces change.
A walk's memory cache is dropped whenever the target runs or is written.

An objfile gdb copies into a program space on a fork (``_Unready``) is
routed only once that program space's inferior has a process and is the
current one: attaching a symbol file makes gdb re-set its breakpoints, which
at the copy's arrival breaks the fork child (gdb 13 to 16) or gives the
detached parent breakpoint locations the twin's session has not.
"""

from __future__ import annotations

from collections.abc import Callable

import gdb

from .messages import warn
from .unwinder import SFrameUnwinder

__all__ = ["connect"]


def _inferiors(progspace: object) -> list:
    return [inferior for inferior in gdb.inferiors() if inferior.progspace == progspace]


def _has_threads(inferior) -> bool:
    try:
        return bool(inferior.threads())
    except gdb.error:
        return False


def _copied(objfile) -> bool:
    """Is ``objfile`` gdb's copy of an executable into a fork's new program space?

    On a fork it stays attached to, gdb (13 to 18) copies the executable
    into a new program space (``clone_program_space``): the child's
    (``detach-on-fork off``), or the parent's when it follows the child and
    detaches the parent. It does so outside the current program space, and
    for the child before the child inferior has its target and its thread;
    it relocates the child's copy (a PIE) only after that. A separate debug
    file attached in between makes gdb re-set its breakpoints there, which
    reads the child's auxiliary vector through no target: gdb 13 to 16 keep
    that empty vector, so the child's executable is never relocated and
    ld.so is placed at its PC (``Cannot insert breakpoint 1. Cannot access
    memory at address 0x1090``) where the twin's session goes on in the
    child; and the detached parent's copy gets breakpoint locations at its
    link-time addresses that the twin's ``info breakpoints`` does not list.
    An exec's new program waits as well: its ld.so follows at once.
    """
    if objfile.owner is not None:
        return False
    progspace = objfile.progspace
    if progspace != gdb.current_progspace():
        return True
    inferiors = _inferiors(progspace)
    if any(inferior.pid and not _has_threads(inferior) for inferior in inferiors):
        return True
    # An executable arriving under a live process: the parent's copy when
    # gdb follows the child and detaches the parent (gdb 18 copies it in
    # the current program space, the parent's), or an exec's new program,
    # relocated once ld.so is known.
    return objfile.filename == progspace.filename and any(map(_has_threads, inferiors))


class _Unready:
    """Copied objfiles (``_copied``) waiting for their program space to be
    the current one, with a process: the first objfile gdb adds there (the
    fork child's libraries, once gdb relocated its executable; the
    libraries of a detached parent run again), or a stop or prompt there.
    gdb re-sets its breakpoints for such a new objfile itself."""

    def __init__(self) -> None:
        self._waiting: list[gdb.Objfile] = []

    def hold(self, objfile) -> bool:
        """Keep ``objfile`` for later if gdb is copying it (``_copied``)."""
        if not _copied(objfile):
            return False
        self._waiting.append(objfile)
        return True

    def ready(self) -> list[gdb.Objfile]:
        """The objfiles kept whose program space is now the current one, with
        a process (forgotten here)."""
        if not self._waiting:
            return []
        current = gdb.current_progspace()
        live = any(_has_threads(inferior) for inferior in _inferiors(current))
        kept: list[gdb.Objfile] = []
        now: list[gdb.Objfile] = []
        for objfile in self._waiting:
            if objfile.is_valid():
                (now if live and objfile.progspace == current else kept).append(objfile)
        self._waiting = kept
        return now


def connect(plugin: SFrameUnwinder) -> None:
    """Connect the handlers, replacing those of an earlier load."""
    events = gdb.events

    routes = plugin.routes
    unready = _Unready()

    def route(objfile) -> None:
        if routes is None:
            return
        try:
            routes.consider(objfile)
        except Exception as exc:  # noqa: BLE001 - never a traceback in gdb
            warn(f"{objfile.filename}: symbol file: {type(exc).__name__}: {exc}")

    def route_ready() -> None:
        for objfile in unready.ready():
            route(objfile)
            plugin.mark_dirty(objfile.progspace)

    def on_new_objfile(event) -> None:
        objfile = event.new_objfile
        try:
            held = unready.hold(objfile)
            if not held:
                route_ready()
        except Exception as exc:  # noqa: BLE001 - never a traceback in gdb
            held = False
            warn(f"{objfile.filename}: {type(exc).__name__}: {exc}")
        if not held:
            route(objfile)
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

    listening = True  # is on_stop connected to gdb's stop event (follow_annotations)

    def guarded(what: str, call: Callable[[], object]) -> None:
        # An event handler's step: a failure is one warning, never a traceback.
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            warn(f"{what}{type(exc).__name__}: {exc}")

    def on_stop(event=None) -> None:
        plugin.end_walk()
        guarded("symbol file: ", route_ready)
        if routes is not None:
            # event None: a prompt, where no worker is waited for
            guarded("symbol file: ", lambda: routes.on_stop(event))
        guarded("cannot read the section table: ", plugin.refresh)

    def on_prompt() -> None:
        on_stop(None)
        follow_annotations()

    def follow_annotations() -> None:
        # gdb 16 and later make every Python stop event's ``details`` by
        # printing the stop once more (py-stopevent.c: bpstat_print), and
        # its annotations go to the terminal: with ``set annotate 2`` (or
        # --annotate=2) a stop shows "breakpoint 1" or "watchpoint 3" twice
        # while any Python stop listener is connected. With annotations on,
        # the stop's work is left to the prompt, which such a session has;
        # the level is looked at as the program resumes and at each prompt.
        nonlocal listening
        wanted = not _annotating()
        if wanted != listening:
            (events.stop.connect if wanted else events.stop.disconnect)(on_stop)
            listening = wanted

    def on_new_thread(event=None) -> None:
        # A core's files are waited for; then a process to unwind (``run``,
        # ``attach``, a core) lists the unwinder before its first stop if an
        # objfile needs it.
        if routes is not None:
            guarded("symbol file: ", lambda: routes.on_new_thread(event))
        guarded("", plugin.list_if_needed)

    def on_cont(event=None) -> None:
        plugin.forget_frames()
        if routes is not None:
            routes.on_resume()
        follow_annotations()  # before the stop this resume ends in

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
        ("before_prompt", on_prompt),
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
    follow_annotations()


def _annotating() -> bool:
    """Does gdb print annotations of level 2 or more (``set annotate``)?"""
    try:
        return int(gdb.parameter("annotate")) > 1
    except (gdb.error, RuntimeError, TypeError, ValueError):
        return False
