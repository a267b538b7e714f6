"""The DWARF route: SFrame handed to gdb's own unwinder as a separate debug file.

For every objfile that has ``.sframe`` and no ``.eh_frame``/``.debug_frame``
(so gdb has no CFI for its code), the core's symbol file (the objfile's
build-id and debug information, plus a ``.debug_frame`` made from the
SFrame rows and the callee-saved-register rules the analysis proves; the one
generator and cache LLDB's route uses) is attached with
``gdb.Objfile.add_separate_debug_file``. gdb's DWARF frame sniffer then
applies that ``.debug_frame`` to the objfile's code at its load address, and
everything that needs gdb's own unwinder works as with ``.eh_frame``:
tail-call frames from ``DW_TAG_call_site``, entry values, dummy frames of
inferior calls, ``info frame``'s saved registers, MI, several inferiors.

Objfiles are found through gdb's Python API only (``Progspace.objfiles()``,
``new_objfile``/``free_objfile``, ``Objfile.filename``/``build_id``/``owner``),
never by parsing command output, so the CLI and MI behave the same.

When: for the objfiles there at ``source`` time, then from ``new_objfile``
(the executable, libraries at start and from ``dlopen``, cores, ``attach``,
``gdbserver``, exec). A cached file is attached at once. A missing one is
made at once when the module is small (``FOREGROUND_FDES``); a larger one by
a worker process (``sframe_core.symfiles.jobs``) while the Python unwinder serves
the objfile, and attached at the first stop after it is ready. ``set sframe
symbol-files foreground`` always waits; ``off`` leaves every objfile to the
Python unwinder. ``info sframe`` says, per objfile, which one serves it and
why.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

import gdb

from sframe_core.base import settings
from sframe_core.base.abi import AARCH64_BE, AARCH64_LE, S390X
from sframe_core.base.errors import SFrameError
from sframe_core.format.elf import read_elf
from sframe_core.symfiles.jobs import FOREGROUND_FDES, Job, JobResult, made_at_once, symbol_file_now
from sframe_core.symfiles.symfile import (
    ModuleInfo,
    cache_dir,
    cached_symbol_file,
    read_module,
    writes_debug_frame,
)

from .cmdline import batch_mode
from .messages import warn

__all__ = ["Route", "Routes", "SETTINGS", "FOREGROUND_FDES", "NATIVE", "PENDING", "FALLBACK",
           "OWN_CFI", "HELD"]

# The setting a session starts with (scripts and test harnesses that want the
# route from the first stop set ``foreground``); ``set sframe symbol-files``.
ENV = "SFRAME_GDB_SYMBOL_FILES"
SETTINGS = settings.SETTINGS[ENV].choices


NATIVE = "native"  # gdb's DWARF unwinder, from our symbol file
PENDING = "pending"  # the symbol file is being made; the Python unwinder serves meanwhile
HELD = "symbol file ready, attached at the next stop"  # a PENDING route's detail (``_held_at``)
FALLBACK = "fallback"  # the Python unwinder serves: the reason says why
OWN_CFI = "own CFI"  # gdb has the objfile's CFI; the Python unwinder covers what it lacks


class Route(NamedTuple):
    """Which unwinder serves one objfile, and why."""

    kind: str
    path: str  # the objfile's file on this machine
    detail: str  # the symbol file, or the reason
    since: float = 0.0  # PENDING: when the worker started


def _signs_return_addresses(path: str) -> bool:
    """Does any FRE of the file say its RA is signed (aarch64 PAC)?"""
    try:
        section = read_elf(path).open()
        if section is None:
            return False
        return any(fre.mangled_ra for fde in section.iter_fdes() for fre in section.get_fres(fde))
    except SFrameError:
        return False


def _local_file(objfile) -> str | None:
    """The file on this machine an objfile was read from, or None.

    ``target:PATH`` (a remote target's sysroot) is the local PATH when gdb's
    build-id of the objfile is that file's too (gdbserver on this machine).
    """
    name = objfile.filename or ""
    if name.startswith("target:"):
        name = name[len("target:"):]
    if not os.path.isabs(name) or not os.path.isfile(name):
        return None
    return name


class Routes:
    """The route of every objfile with SFrame, in every program space."""

    def __init__(self, changed: Callable[[object], None]) -> None:
        # ``changed(progspace)``: which objfiles the Python unwinder must
        # serve there has changed.
        self._changed = changed
        self.setting = settings.choice(ENV)
        self._routes: dict[gdb.Objfile, Route] = {}
        self._jobs: dict[str, Job] = {}  # module path -> its worker
        self._ready: dict[str, JobResult] = {}  # workers done, not yet attached
        # Stopped where attaching would leave gdb warning at every prompt
        # (``_held_at``): the ready files wait for the next stop.
        self._held = False
        # Has gdb shown its first prompt? Before, it runs the commands of
        # its command line and scripts one after another, and may exit
        # (``-ex quit``) with a posted event it never ran, which crashes
        # gdb 13 as it exits: a worker's result is then taken at the next
        # stop or prompt instead (``on_stop``).
        self._prompted = False
        self._warned: set[str] = set()
        # Objfiles whose file on this machine has section headers and no
        # .sframe: gdb lists no .sframe of theirs either (``adds_no_sframe``).
        self._no_sframe: set[gdb.Objfile] = set()

    # What the unwinder and the commands ask -----------------------------------

    def routes(self, progspace: object | None = None) -> Iterator[tuple[gdb.Objfile, Route]]:
        for objfile, route in list(self._routes.items()):
            if objfile.is_valid() and (progspace is None or objfile.progspace == progspace):
                yield objfile, route

    def native_paths(self, progspace: object) -> set[str]:
        """The objfiles (by file name, as gdb shows it) gdb's own unwinder serves."""
        return {objfile.filename for objfile, route in self.routes(progspace)
                if route.kind == NATIVE}

    def adds_no_sframe(self, objfile) -> bool:
        """Is ``objfile`` known to bring no objfile with SFrame (``consider``
        has seen it)? A separate debug file or the vdso (neither is an
        objfile the unwinder serves), or a local file with section headers
        and no ``.sframe``: then the unwinder's table of objfiles with SFrame
        is what it was, and only the code ranges it keeps change."""
        if objfile.owner is not None or not getattr(objfile, "is_file", True):
            return True
        return objfile in self._no_sframe

    def serves_fallback(self, progspace: object) -> bool:
        """Does an objfile with SFrame there wait for, or go without, its symbol file?"""
        return any(route.kind in (PENDING, FALLBACK) for _, route in self.routes(progspace))

    # Events --------------------------------------------------------------------

    def consider_all(self) -> None:
        for progspace in gdb.progspaces():
            for objfile in progspace.objfiles():
                self.consider(objfile)

    def consider(self, objfile) -> None:
        """Route a new objfile (a separate debug file or the vdso is not one)."""
        if objfile.owner is not None or not getattr(objfile, "is_file", True):
            return
        if objfile in self._routes:
            return
        route = self._decide(objfile)
        if route is None:
            return
        self._no_sframe.discard(objfile)
        self._set(objfile, route)

    def reconsider(self) -> None:
        """The setting changed: route again what no symbol file serves yet."""
        for objfile, route in list(self.routes()):
            if route.kind in (PENDING, FALLBACK):
                del self._routes[objfile]
                self.consider(objfile)
                if objfile not in self._routes:
                    self._changed(objfile.progspace)

    def forget(self, objfile) -> None:
        self._no_sframe.discard(objfile)
        if self._routes.pop(objfile, None) is not None:
            self._changed(objfile.progspace)

    def take_finished(self) -> None:
        """Attach the files of workers done, at a prompt (``info sframe``
        too: before the first prompt nothing else takes them between
        commands); not while the program runs, nor while a frame other than
        the newest is selected (attaching makes gdb unwind again from frame
        0 and select it: ``frame 2`` then ``info frame`` would show frame 0),
        nor after a stop that holds them: the next stop attaches them."""
        if self._held or not (self._ready or any(job.result is not None
                                                  for job in self._jobs.values())):
            return  # before asking gdb for a frame: that unwinds frame 0 (and runs
            # the user's own Python unwinders, which py-unwind-maint.exp counts)
        if _running() or _frame_selected():
            return
        for path, job in list(self._jobs.items()):
            if job.result is not None:
                del self._jobs[path]
                self._ready[path] = job.result
        ready, self._ready = self._ready, {}
        for path, result in ready.items():
            self._finish(path, result)

    def on_stop(self, event: object = None) -> None:
        """Attach the symbol files workers finished while the inferior ran
        (at a stop ``event``: and those of workers nearly done,
        ``Job.result_at_stop``, so that the stop's ``bt`` is gdb's own,
        tail-call frames included); ``event`` None: a prompt (``take_finished``)."""
        if event is None:
            self._prompted = True
            self.take_finished()
            return
        self._held = _held_at(event)
        if self._held:
            return
        for path, job in list(self._jobs.items()):
            result = job.result_at_stop()
            if result is not None:
                # Its posted ``_worker_done`` finds the routes attached.
                del self._jobs[path]
                self._ready[path] = result
        ready, self._ready = self._ready, {}
        for path, result in ready.items():
            self._finish(path, result)

    def on_new_thread(self, event: object) -> None:
        """A core's thread (gdb adds it as it opens the core, before it shows
        the core's first frame): the workers' files are waited for, whole,
        so that the core's frames, from the first one on, are gdb's own (its
        tail-call frames and entry values, the twin's), where nothing would
        attach them before the user's ``bt`` (``gdb -batch -ex bt PROG
        CORE``) and the Python unwinder would serve it without them."""
        if not self._jobs:
            return
        thread = getattr(event, "inferior_thread", None)
        inferior = getattr(thread, "inferior", None)
        if inferior is None or not _core(inferior):
            return
        for path, job in list(self._jobs.items()):
            result = _whole(job)
            if result is not None:
                del self._jobs[path]
                self._finish(path, result)

    # Deciding --------------------------------------------------------------------

    def _set(self, objfile, route: Route) -> None:
        old = self._routes.get(objfile)
        self._routes[objfile] = route
        if old is None or old.kind != route.kind:
            self._changed(objfile.progspace)

    def _decide(self, objfile) -> Route | None:
        path = _local_file(objfile)
        if path is None:
            return None  # not on this machine: the Python unwinder cannot read it either
        try:
            module = read_module(path)
        except SFrameError:
            return None  # not an ELF file gdb and we agree on: left to gdb
        if module.section(".sframe") is None:
            if module.sections:
                if not (objfile.filename or "").startswith("target:"):
                    self._no_sframe.add(objfile)  # what gdb reads is this file
                return None
            try:
                segment = read_elf(path).has_sframe
            except SFrameError:
                segment = False
            # PT_GNU_SFRAME only: gdb has no section to place a debug file's by.
            return Route(FALLBACK, path, "no section headers") if segment else None
        if objfile.build_id and module.build_id and objfile.build_id != module.build_id:
            return Route(FALLBACK, path, "the file on disk is another build than gdb loaded")
        cfi = [name for name in (".eh_frame", ".debug_frame")
               if (sec := module.section(name)) is not None and sec.size]
        if cfi:
            return Route(OWN_CFI, path, f"has {' and '.join(cfi)}")
        arch = module.arch
        if not writes_debug_frame(arch):
            return Route(FALLBACK, path, "no .debug_frame is written for this architecture")
        if arch is S390X:
            # Seen with gdb-multiarch under qemu: gdb takes a .debug_frame
            # rule for f8-f15 as one for the vector registers over them and
            # shows other values in caller frames than the Python unwinder
            # hands (which are the values the registers hold there).
            return Route(FALLBACK, path, "gdb misreads s390x floating-point register rules "
                         "in .debug_frame")
        if arch in (AARCH64_LE, AARCH64_BE) and _signs_return_addresses(path):
            # Seen with gdb-multiarch under qemu: the callers' signed return
            # addresses came out unstripped from the symbol file's
            # DW_CFA_AARCH64_negate_ra_state, where the twin's .eh_frame
            # gives them stripped. The Python unwinder strips them itself.
            return Route(FALLBACK, path, "return addresses signed (pointer authentication): gdb "
                         "does not strip them through a separate debug file")
        if self.setting == "off":
            return Route(FALLBACK, path, "symbol files off (set sframe symbol-files)")
        existing = self._attached(objfile)
        if existing is not None:
            return Route(NATIVE, path, existing)
        try:
            cached = cached_symbol_file(path, function_symbols=False, module=module)
        except SFrameError as exc:
            return Route(FALLBACK, path, str(exc))
        if cached is not None:
            return self._attach(objfile, path, cached.path)
        # Made before gdb goes on where the user waits for exactly the
        # answer it gives: a small module, gdb in batch mode (its commands
        # run once, the first stop's line and ``bt`` included, with no
        # prompt where a file made later would be attached), a core being
        # opened (its first frame is shown at once).
        if self.setting == "foreground" or made_at_once(path) or batch_mode() \
                or _core(gdb.selected_inferior()):
            try:
                made = symbol_file_now(path, function_symbols=False, module=module)
            except SFrameError as exc:
                return Route(FALLBACK, path, str(exc))
            self._warn(made.warning)
            return self._attach(objfile, path, made.path)
        return self._start(path, module)

    @staticmethod
    def _attached(objfile) -> str | None:
        """Our symbol file, if an earlier load of the plugin attached it already."""
        ours = cache_dir()
        for other in objfile.progspace.objfiles():
            if other.owner == objfile and (other.filename or "").startswith(ours):
                return other.filename
        return None

    def _attach(self, objfile, path: str, symbol_file: str) -> Route:
        try:
            objfile.add_separate_debug_file(symbol_file)
        except gdb.error as exc:
            return Route(FALLBACK, path, f"gdb did not take the symbol file {symbol_file}: {exc}")
        gdb.invalidate_cached_frames()
        return Route(NATIVE, path, symbol_file)

    # Workers ---------------------------------------------------------------------

    def _start(self, path: str, module: ModuleInfo | None = None) -> Route:
        job = self._jobs.get(path)
        if job is None:
            def done(result: JobResult, path: str = path) -> None:
                # A worker's thread: gdb is touched only from its own, and
                # only once it has shown a prompt (``_prompted``).
                if self._prompted:
                    gdb.post_event(lambda: self._worker_done(path, result))
            job = self._jobs[path] = Job(path, done, function_symbols=False, module=module)
        return Route(PENDING, path, _being_made(job), job.started)

    def on_resume(self) -> None:
        self._held = False

    def _worker_done(self, path: str, result: JobResult) -> None:
        # Run by gdb's event loop (gdb.post_event): nothing may escape.
        try:
            self._jobs.pop(path, None)
            if self._held or _running() or _frame_selected():
                self._ready[path] = result  # attached at the next stop or prompt
                if self._held:
                    for objfile, route in list(self.routes()):
                        if route.kind == PENDING and route.path == path:
                            self._routes[objfile] = route._replace(detail=HELD)
                return
            self._finish(path, result)
        except Exception as exc:  # noqa: BLE001 - never a traceback in gdb
            warn(f"{path}: symbol file: {type(exc).__name__}: {exc}")

    def _finish(self, path: str, result: JobResult) -> None:
        self._warn(result.warning)
        for objfile, route in list(self.routes()):
            if route.kind != PENDING or route.path != path:
                continue
            if result.path is None:
                self._set(objfile, Route(FALLBACK, path, result.error or "no symbol file"))
            else:
                self._set(objfile, self._attach(objfile, path, result.path))

    def _warn(self, text: str | None) -> None:
        if text and text not in self._warned:
            self._warned.add(text)
            warn(text)

    def cancel(self) -> None:
        """Stop the workers (the plugin is being replaced)."""
        for job in self._jobs.values():
            job.cancel()
        self._jobs.clear()


def _being_made(job: Job) -> str:
    """A PENDING route's detail: who makes its file."""
    if job.elsewhere is None:
        return "symbol file being made"
    who = f" (process {job.elsewhere})" if job.elsewhere else ""
    return f"symbol file being made by another session's worker{who}"


def _whole(job: Job) -> JobResult | None:
    """The job's result, waited for until it is done (None: Ctrl-C gave up
    the wait, and the Python unwinder serves meanwhile)."""
    job.claim()
    try:
        while job.running():
            job.result_within(0.1)
    except KeyboardInterrupt:
        return None
    return job.result


def _core(inferior: object) -> bool:
    """Is ``inferior`` a core file's (gdb 13+: ``Inferior.connection``)?"""
    try:
        connection = getattr(inferior, "connection", None)
        return connection is not None and getattr(connection, "type", None) == "core"
    except (RuntimeError, gdb.error):
        return False


def _held_at(event: object) -> bool:
    """Is this a stop at a breakpoint of several locations? An objfile given
    a separate debug file makes gdb (13 to 18) set its breakpoints again, and
    the stop's record of such a breakpoint then names a location that is
    gone: ``warning: location number not found for breakpoint 1 address
    0x...`` after every command until the program goes on, where the twin's
    session says nothing. The symbol file is attached at the next stop."""
    for breakpoint in getattr(event, "breakpoints", None) or ():
        try:
            if len(breakpoint.locations) > 1:
                return True
        except (AttributeError, RuntimeError, gdb.error):
            continue  # gdb without Breakpoint.locations: no location numbers either
    return False


def _frame_selected() -> bool:
    """Is a frame other than the newest selected (``frame N``, ``up``)?"""
    try:
        return gdb.selected_frame().level() > 0
    except (gdb.error, RuntimeError):
        return False


def _running() -> bool:
    """Is a thread of any inferior running (gdb may not read its memory now)?"""
    for inferior in gdb.inferiors():
        try:
            threads = inferior.threads()
        except gdb.error:
            continue
        if any(thread.is_valid() and thread.is_running() for thread in threads):
            return True
    return False
