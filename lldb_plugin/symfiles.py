"""The native route: SFrame handed to LLDB's own unwinder as DWARF CFI.

For every module that has ``.sframe`` and no ``.eh_frame``/``.debug_frame``
(so LLDB has no CFI for its code), the core writes a symbol file holding a
``.debug_frame`` made from the SFrame rows (plus the module's own debug
information, and the separate debug file LLDB already used) and this module
adds it with ``target symbols add``. From then on plain ``bt``, ``up``,
``frame variable``, ``register read``, ``finish`` and stepping are LLDB's
own: native symbolication (callers at pc - 1, inlined frames) and real
register contexts, on every LLDB (21 included).

When: at import for existing targets, and from the plugin's stop-hook at
every stop (launch, attach, core load, ``gdb-remote``, and the first stop
after a ``dlopen``) for modules not seen before. LLDB 21.1.7, 22.1.0 and
23.1.0 all drop the frames and unwind plans they built before a symbol file
is added, so adding it at a stop is enough (observed, docs/lldb.md).

Cost: a cached symbol file is handed over at once. A missing one is made
at once for a small module (``symjobs.made_at_once``, up to 300 FDEs), and
on LLDB 21 (no frame provider to serve meanwhile), on a core of LLDB 22, for
a live remote process (where the provider is not registered), and for a
module with debug information on an LLDB that cannot take its file late
(23, ``late_add_keeps_types``); otherwise a worker process (``jobs.start_job``)
makes it from the moment the module is known, while the frame provider
serves the module's frames (``PENDING``), and it is added at the first stop
after it is ready. Should a late add still meet a module with debug
information there, the provider serves it for the rest of the session
(``PROVIDER``) and the next session finds the file in the cache.
``SFRAME_LLDB_SYMBOL_FILES=foreground`` always waits instead.

A module the route cannot serve (no file, generation failed, LLDB refused
the file) is recorded with the reason; the frame provider (22+) serves only
such modules and the pending ones, and ``sframe status`` lists each
module's route.
"""

from __future__ import annotations

import os
import time

import lldb

from sframe_core.base.abi import AARCH64_BE, AARCH64_LE, AMD64, S390X
from sframe_core.base.errors import SFrameError
from sframe_core.base.files import elf_layout, open_elf
from sframe_core.symfiles.jobs import Job, JobResult

from . import locate, seed
from .jobs import in_background, job_for, start_job
from .state import (
    ENV,
    FAILED,
    NATIVE,
    PENDING,
    PROVIDER,
    SETTING_ENV,
    Route,
    _routes,
    enabled,
    is_native,
    keeps_addresses_when_debug_info_is_replaced,
    late_add_keeps_types,
    lldb_major,
    providers_supported,
    routes,
    symbol_file_options,
    target_key,
    warn_once,
)
from .target import LLDBModule, info_for, is_core, is_live_remote

__all__ = ["Route", "NATIVE", "FAILED", "PROVIDER", "PENDING", "ROUTE_ABIS", "route_target", "routes",
           "is_native", "needs_provider", "enabled", "status_lines", "ENV", "SETTING_ENV",
           "in_background", "start_job", "late_add_keeps_types"]

# ABIs whose generated .debug_frame LLDB's unwinder was seen to walk to the
# outermost frame. (s390x too, since the CIE gives the caller's SP as a
# DW_CFA_val_expression: LLDB ignores DW_CFA_val_offset and stopped after f1.)
ROUTE_ABIS = frozenset({AMD64.abi_id, AARCH64_LE.abi_id, AARCH64_BE.abi_id, S390X.abi_id})


# Modules whose code LLDB has CFI for already (or without usable SFrame).
_covered: set[tuple[str, str]] = set()


def _module_key(module: lldb.SBModule) -> tuple[str, str]:
    return (module.GetFileSpec().fullpath or module.GetFileSpec().GetFilename() or "?",
            module.GetUUIDString() or "")


def _name(module: lldb.SBModule) -> str:
    return module.GetFileSpec().GetFilename() or module.GetFileSpec().fullpath or "?"


def _has_section(module: lldb.SBModule, name: str) -> bool:
    section = module.FindSection(name)
    return bool(section.IsValid() and section.GetByteSize())


def _wants_route(target: lldb.SBTarget, module: lldb.SBModule) -> bool | None:
    """Does LLDB lack CFI for code that SFrame describes? None: cannot tell yet.

    Checked before anything is added: ``.sframe`` and neither ``.eh_frame``
    nor ``.debug_frame``, or an SFrame FDE whose function no DWARF CFI
    covers (a library whose ``.eh_frame`` holds only the C runtime's FDEs).
    """
    if not _has_section(module, ".sframe"):
        return False
    if not _has_section(module, ".eh_frame") and not _has_section(module, ".debug_frame"):
        return True
    built = _built(target, module)
    if built is None:
        return None
    section = built.sframe
    if section is None:
        return None if built.error is None else False
    return built.any_sframe_only()


def _built(target: lldb.SBTarget, module: lldb.SBModule) -> LLDBModule | None:
    """The core's view of ``module`` (None while it has no load address)."""
    return _module_at(target, module.GetFileSpec().fullpath)


def _module_at(target: lldb.SBTarget, path: str | None) -> LLDBModule | None:
    for built in info_for(target).modules:
        if built.path == path:
            return built
    return None


def _has_debug_info(module: lldb.SBModule) -> bool:
    """DWARF in the module itself, or a separate debug file LLDB found for it."""
    if module.FindSection(".debug_info").IsValid():  # its size reads 0 before it is loaded
        return True
    own, used = module.GetFileSpec(), module.GetSymbolFileSpec()
    return bool(used.IsValid() and used.fullpath and used.fullpath != own.fullpath)


def _generate(path: str) -> str:
    """The core's cached symbol file for ``path`` (raises SFrameError).

    The core copies in the module's debug information, or that of the
    separate debug file gdb and LLDB would find (build-id directory,
    ``.gnu_debuglink``), so adding it never loses variables or line tables.
    """
    from sframe_core.symfiles.jobs import symbol_file_now
    made = symbol_file_now(path, **symbol_file_options())
    if made.warning:
        warn_once(("symfile-warning", made.warning), made.warning)
    return made.path


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _add(debugger: lldb.SBDebugger, target: lldb.SBTarget, module: lldb.SBModule,
         at_stop: bool, remakes: dict[str, str]) -> Route:
    name = _name(module)
    path = module.GetFileSpec().fullpath
    if not path or not os.path.isfile(path):
        return Route(FAILED, name, "its file is not on this machine")
    given = locate.attached(path)
    if given is not None and os.path.realpath(module.GetSymbolFileSpec().fullpath or "") == \
            os.path.realpath(given):
        return Route(NATIVE, name, given)  # LLDB has it since it created the module
    if _has_debug_info(module) and not keeps_addresses_when_debug_info_is_replaced():
        return Route(FAILED, name, _lost_addresses(target, path), False)
    try:
        symbol_file = _now_or_later(target, path, at_stop)
    except (SFrameError, OSError, ValueError) as exc:
        return Route(FAILED, name, str(exc) or type(exc).__name__)
    if symbol_file is None:
        return Route(PENDING, name, "its symbol file is being made by a worker process",
                     since=time.monotonic())
    if not target.GetProcess().IsValid() and seed.stripped(path):
        remakes[path] = symbol_file  # made again with it, once no SBModule is held (``seed.remake``)
        return Route(NATIVE, name, symbol_file)
    return _symbols_add(debugger, target, path, name, symbol_file)


def needs_copy(path: str) -> bool:
    """Does LLDB need the module copy to use ``path``'s SFrame rows?"""
    if keeps_addresses_when_debug_info_is_replaced():
        return False
    names = seed.section_names(path)
    return (".sframe" in names and ".debug_info" in names
            and not names & {".eh_frame", ".debug_frame"})


def _lost_addresses(target: lldb.SBTarget, path: str) -> str:
    """Why a module with debug information is left to LLDB's own unwinder
    before LLDB 22, and what serves it (the module copy: the executable only,
    by ``sframe create`` or ``lldb FILE``; 19+ give it to a plain ``target
    create`` too, ``seed``)."""
    major = lldb_major()
    why = (f"LLDB {major if major is not None else 'before 22'} loses a module's addresses when "
           "a symbol file replaces its debug information (LLDB 22 does not); left to LLDB's own "
           "unwinder, which has no CFI for it: ")
    if os.path.realpath(target.GetExecutable().fullpath or "") != os.path.realpath(path):
        return why + "'sframe bt' has the SFrame frames (LLDB 22 serves this library)"
    if not needs_copy(path):
        # Its debug information is in a separate file: the copy would not carry it.
        return why + "'sframe bt' has the SFrame frames (LLDB 22 serves this module)"
    return (why + f"'sframe create {path}' (with '--core CORE' for a core), or 'lldb {path}' "
            "with the plugin imported from ~/.lldbinit, gives LLDB a copy of the module with "
            "the SFrame rows as its .debug_frame; 'sframe bt' has the SFrame frames")


def _provider_serves(target: lldb.SBTarget) -> bool:
    """Would the frame provider serve this target's frames while a worker runs?
    (Not without providers (21), on a core of LLDB 22, nor for a live remote
    process: ``registry.register`` says why.)"""
    if not providers_supported() or is_live_remote(target):
        return False
    return not is_core(target) or hasattr(lldb.SBProcess, "IsLiveDebugSession")


def _job_file(result: JobResult) -> str:
    if result.warning:
        warn_once(("symfile-warning", result.warning), result.warning)
    if result.path is None:
        raise SFrameError(result.error or "the symbol file worker made nothing")
    return result.path


def _result(job: Job, at_stop: bool) -> JobResult | None:
    """The worker's result, if it is done (or nearly done at a stop: ``Job.result_at_stop``)."""
    return job.result_at_stop() if at_stop else job.result


def _now_or_later(target: lldb.SBTarget, path: str, at_stop: bool) -> str | None:
    """The symbol file to add now, or None: a worker makes it, the provider serves meanwhile."""
    from sframe_core.symfiles.symfile import cached_symbol_file
    cached = cached_symbol_file(path, **symbol_file_options())
    if cached is not None:
        if cached.warning:
            warn_once(("symfile-warning", cached.warning), cached.warning)
        return cached.path
    job = job_for(path)  # started by the locate-module callback?
    serves = _provider_serves(target)
    if job is None:
        if not serves or not in_background(path):
            return _generate(path)
        job = start_job(path)
    if not serves:
        return _job_file(job.wait())
    result = _result(job, at_stop)
    return None if result is None else _job_file(result)


def _pending(debugger: lldb.SBDebugger, target: lldb.SBTarget, module: lldb.SBModule,
             old: Route, at_stop: bool) -> Route:
    """A pending module at a later stop: its file added, or still the provider's."""
    path = module.GetFileSpec().fullpath or ""
    job = job_for(path)
    result = _result(job, at_stop) if job is not None else None
    if result is None:
        return old
    try:
        symbol_file = _job_file(result)
    except SFrameError as exc:
        return Route(FAILED, old.name, str(exc))
    if _has_debug_info(module) and not late_add_keeps_types():
        return Route(PROVIDER, old.name, "for this session: this LLDB (23) would leave types it "
                     "had read from the module's own debug information incomplete if the "
                     f"symbol file were added now; the next session adds {symbol_file} from "
                     "the start (LLDB's own unwinder)")
    return _symbols_add(debugger, target, path, old.name, symbol_file)


def _symbols_add(debugger: lldb.SBDebugger, target: lldb.SBTarget, path: str, name: str,
                 symbol_file: str) -> Route:
    result = lldb.SBCommandReturnObject()
    interp = debugger.GetCommandInterpreter()
    interp.HandleCommand(f"target symbols add -s {_quote(path)} {_quote(symbol_file)}",
                         lldb.SBExecutionContext(target), result, False)
    if not result.Succeeded():
        return Route(FAILED, name, f"LLDB refused {symbol_file}: "
                     f"{(result.GetError() or 'no reason given').strip()}")
    return Route(NATIVE, name, symbol_file, note=_names_missing(target, path))


def _names_missing(target: lldb.SBTarget, path: str) -> str:
    """Why a stripped module's functions have no names after a late add, or "".

    LLDB builds a module's symbol table once, and a symbol file added to a
    stripped module later (which had no symbol file of its own to replace)
    is read for its CFI, not for its function symbols (``seed.remake``):
    asked of LLDB at the module's first function outside the PLT (a symbol
    starting there, or none)."""
    try:
        if not seed.stripped(path):
            return ""
        from sframe_core.format.elf import read_elf
        info = read_elf(path)
        section = info.open()
        with open_elf(path) as stream:
            plts = [(s.addr, s.size) for s in elf_layout(stream, path).sections
                    if s.name.startswith(".plt")]
        start = next((start for start, size in (section.extents() if section else ())
                      if size > 0 and not any(a <= start < a + n for a, n in plts)), None)
    except (SFrameError, OSError, ValueError):
        return ""
    module = target.FindModule(lldb.SBFileSpec(path))
    if start is None or not module.IsValid():
        return ""
    symbol = module.ResolveFileAddress(start).GetSymbol()
    if symbol.IsValid() and symbol.GetStartAddress().GetFileAddress() == start:
        return ""
    return ("its functions are not named as on the twin (none in frame 0): LLDB built the "
            "module's symbol table before the symbol file was added and keeps it (a symbol file "
            "added later gives a stripped module its CFI, not its function symbols); import the "
            "plugin before 'target create' (~/.lldbinit) for the twin's names")


def route_target(debugger: lldb.SBDebugger, target: lldb.SBTarget, *,
                 at_stop: bool = False) -> list[Route]:
    """Add symbol files for the target's modules not seen yet; the new routes
    (``at_stop``: from the stop-hook, where a nearly done worker is waited for)."""
    if not enabled() or target is None or not target.IsValid():
        return []
    seed.refresh()
    seen = _routes.setdefault(target_key(target), {})
    new: list[Route] = []
    remakes: dict[str, str] = {}
    keys: dict[str, tuple[str, str]] = {}
    for module in target.module_iter():
        key = _module_key(module)
        old = seen.get(key)
        if old is not None and old.kind == PENDING:
            route = _pending(debugger, target, module, old, at_stop)
            if route is not old:
                seen[key] = route
                new.append(route)
                if route.kind == FAILED:
                    warn_once(("route", key), f"{route.name}: no SFrame symbol file for "
                              f"LLDB's unwinder: {route.detail}")
            continue
        if old is not None or key in _covered:
            continue
        copied = locate.copy_of(key[0])
        if copied is not None:
            original, how = copied
            seen[key] = Route(NATIVE, _name(module), f"{key[0]} (the module LLDB loaded for "
                              f"{original}, {how})")
            continue
        wanted = _wants_route(target, module)
        if wanted is None:
            continue  # not loaded yet: asked again at the next stop
        if not wanted:
            _covered.add(key)
            continue
        built = _built(target, module)
        arch = info_for(target).arch
        if arch is not None and arch.abi_id not in ROUTE_ABIS:
            seen[key] = route = Route(PROVIDER, _name(module), f"LLDB's unwinder does not walk "
                                      f"{arch.name} .debug_frame (observed on 22 and 23)")
            new.append(route)
            continue
        try:
            if built is not None and built.sframe is None and built.error is not None:
                # The core said why, once ("... its unwind data is ignored").
                route = Route(FAILED, _name(module), f"unusable .sframe: {built.error}", False)
                seen[key] = route
                new.append(route)
                continue
            route = _add(debugger, target, module, at_stop, remakes)
        except Exception as exc:  # noqa: BLE001 - one line, LLDB keeps working
            route = Route(FAILED, _name(module), f"{type(exc).__name__}: {exc}")
        keys[key[0]] = key
        seen[key] = route
        new.append(route)
        if route.kind == FAILED:
            warn_once(("route", key), f"{route.name}: no SFrame symbol file for LLDB's "
                      f"unwinder: {route.detail}")
    if remakes:
        del module  # the last one iterated: held, LLDB would not make it again
        _remake(debugger, target, remakes, keys, seen, new)
    return new


def _remake(debugger: lldb.SBDebugger, target: lldb.SBTarget, remakes: dict[str, str],
            keys: dict[str, tuple[str, str]], seen: dict[tuple[str, str], Route],
            new: list[Route]) -> None:
    """Stripped modules made before the plugin was imported, no process yet:
    made again with their symbol files (``seed.remake``), which gives them
    their names; a module that could not be is given its file as any other."""
    try:
        done = seed.remake(target, remakes)
    except Exception:  # noqa: BLE001 - each module is given its file below
        done = set()
    for path, symbol_file in remakes.items():
        if path in done:
            continue
        key = keys[path]
        route = _symbols_add(debugger, target, path, seen[key].name, symbol_file)
        new[new.index(seen[key])] = seen[key] = route


def needs_provider(target: lldb.SBTarget) -> bool:
    """Is there an SFrame module the native route could not serve (or is the route off)?"""
    if not enabled():
        return True
    return any(route.kind in (PROVIDER, PENDING) or (route.kind == FAILED and route.provider_helps)
               for route in _routes.get(target_key(target), {}).values())


def _no_cfi_plan(debugger: lldb.SBDebugger, target: lldb.SBTarget, path: str) -> int | None:
    """The address of the module's first SFrame function if LLDB has no DWARF
    CFI unwind plan there (``image show-unwind``): the symbol file was taken
    but its ``.debug_frame`` is not read (Debian's LLDB 14 and 16 for a
    stripped module). None when it has one, or when it cannot be asked."""
    built = _module_at(target, path)
    section = built.sframe if built is not None else None
    if section is None or not target.GetProcess().IsValid():
        return None
    start = next((start for start, size in section.extents() if size > 0), None)
    if start is None:
        return None
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(
        f"image show-unwind -a {start:#x}", lldb.SBExecutionContext(target.GetProcess()), result,
        False)
    text = result.GetOutput() or ""
    if not result.Succeeded() or "debug_frame UnwindPlan" in text or "eh_frame UnwindPlan" in text:
        return None
    return start


def status_lines(target: lldb.SBTarget, debugger: lldb.SBDebugger | None = None) -> list[str]:
    gaps = _unwind_gaps(target)
    if not enabled():
        return [f"native route: off ({ENV}=provider)", *gaps]
    return _route_lines(target, debugger) + gaps


def _unwind_gaps(target: lldb.SBTarget) -> list[str]:
    """One line per module whose file holds no unwind information at all."""
    from sframe_core.format.elf import unwind_gap

    lines = []
    for module in target.module_iter():
        spec = module.GetFileSpec()
        path = spec.fullpath
        if path and os.path.isfile(path) and (gap := unwind_gap(path)) is not None:
            lines.append(f"{spec.GetFilename() or path}: {gap}")
    return lines


def _route_lines(target: lldb.SBTarget, debugger: lldb.SBDebugger | None) -> list[str]:
    found = _routes.get(target_key(target), {})
    if not found:
        return ["native route: no loaded module needs it (none has .sframe without .eh_frame)"]
    lines = []
    for (path, _uuid), route in found.items():
        missing = (_no_cfi_plan(debugger, target, path)
                   if debugger is not None and route.kind == NATIVE else None)
        if missing is not None:
            major = lldb_major()
            lines.append(f"{route.name}: not on the native route: LLDB {major} took "
                         f"{route.detail} but has no DWARF CFI plan from it ('image show-unwind "
                         f"-a {missing:#x}'): LLDB's own unwinder without SFrame; 'sframe bt' "
                         "has the SFrame frames")
        elif route.kind == NATIVE:
            lines.append(f"{route.name}: LLDB's own unwinder, .debug_frame from SFrame in "
                         f"{route.detail}" + (f"; {route.note}" if route.note else ""))
        elif route.kind == PROVIDER:
            lines.append(f"{route.name}: the frame provider: {route.detail}")
        elif route.kind == PENDING:
            lines.append(f"{route.name}: the frame provider until its symbol file is ready "
                         f"(being made by a worker for {time.monotonic() - route.since:.0f} s); "
                         "added at the first stop after that")
        else:
            lines.append(f"{route.name}: not on the native route: {route.detail}")
    return lines
