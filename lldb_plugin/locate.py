"""Symbol files handed to LLDB as it creates a module, before it reads the module's DWARF.

``target symbols add`` at a stop (``symfiles.route_target``) comes after
LLDB may have parsed types from the module's own DWARF, for example while
resolving ``b NAME`` before ``run``; LLDB keeps the module's type system when
the symbol file is replaced, and such a structure then prints as
``<incomplete type>`` in caller frames. LLDB asks a platform's locate-module
callback (``SBPlatform.SetLocateModuleCallback``) for a module's file and
symbol file while it creates the module, synchronously, on the thread that
creates it: answering there gives the module our symbol file from the start,
with no listener thread racing the next command. Observed: LLDB 23.1.0 asks
for the executable at ``target create`` and for every library; 21.1.7 and
22.1.0 ask for libraries only (the executable keeps the stop-hook's add).
Before 22, a library with debug information of its own is answered with a
copy of itself whose ``.debug_frame`` holds the SFrame rows, as the module
(``sframe_core.symfiles.module_copy``): a symbol file would lose its
addresses there (``state.keeps_addresses_when_debug_info_is_replaced``).

It answers from the cache, or makes the file at once for a small module;
a large module's file is left to a worker (``jobs.start_job``) and LLDB
goes on with the module alone, which the frame provider serves until the
file is ready (``symfiles``: PENDING). Where no provider would serve it
(before 22, ``jobs.in_background``) the file is made before LLDB goes on,
whatever the module's size; ``seed`` asks for that too.

The callback makes no SB call but on the specs it is given (LLDB holds its
module locks while it runs, and calls it from several threads at once while
it loads libraries in parallel), and never raises: anything it cannot serve
(a file not on this machine, no ``.sframe``, CFI of its own, a generation
error) is left to LLDB as if there were no callback, and to the stop-hook.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import lldb

from sframe_core.base.errors import SFrameError

from .jobs import in_background, start_job
from .state import (
    enabled,
    keeps_addresses_when_debug_info_is_replaced,
    symbol_file_options,
    warn,
    warn_once,
)

if TYPE_CHECKING:
    from sframe_core.symfiles.symfile import ModuleInfo, SymbolFile

__all__ = ["install", "attached", "copy_of", "handed", "note_copy", "supported",
           "start_worker"]

_lock = threading.Lock()
# e_machine of the ABIs the callback was tested with (x86_64, aarch64). s390x
# is on the native route too (symfiles.ROUTE_ABIS) but reached here only
# through qemu-user, where the stop-hook adds its symbol file at the first stop.
_ROUTE_MACHINES = frozenset({62, 183})
# realpath of a module -> the symbol file handed to LLDB for it (the stop-hook
# then records the module as on the native route without adding it again).
_attached: dict[str, str] = {}
# (realpath, size, mtime) -> symbol file path, or None: not ours to serve.
_decided: dict[tuple[str, int, int], str | None] = {}
# realpath of a module copy handed to LLDB as the module itself -> the original,
# and how LLDB got it.
_copies: dict[str, tuple[str, str]] = {}


def supported() -> bool:
    return hasattr(lldb.SBPlatform, "SetLocateModuleCallback")


def attached(path: str | None) -> str | None:
    """The symbol file the callback gave LLDB for the module at ``path``, if any."""
    if not path:
        return None
    return _attached.get(os.path.realpath(path))


def _served(info: ModuleInfo) -> bool:
    """Only the clear case: .sframe and no CFI at all. A module whose
    .eh_frame covers part of its code is the stop-hook's to judge."""
    return (info.header[1] in _ROUTE_MACHINES and info.section(".sframe") is not None
            and info.section(".eh_frame") is None and info.section(".debug_frame") is None)


def start_worker(path: str) -> bool:
    """Start the worker making ``path``'s symbol file now, if one will make
    it (for ``target create``: LLDB 21 and 22 do not ask the callback for
    the executable, and its worker would otherwise start at the first stop,
    too late for that stop to wait for it). Never raises."""
    from sframe_core.symfiles.symfile import read_module

    try:
        if not enabled() or not os.path.isfile(path):
            return False
        with _lock:
            info = read_module(path)
            return _served(info) and _cached_or_started(path, info)[1]
    except Exception:  # noqa: BLE001 - the stop-hook tries again and says why
        return False


def _cached_or_started(path: str, info: ModuleInfo) -> tuple[SymbolFile | None, bool]:
    """(the cached symbol file of a module ``_served``, whether a worker now
    makes it): a large module without one goes to a worker (``jobs.start_job``)
    from the moment LLDB knows it. Records nothing: ``target create`` asks
    this too, for a module the callback may never be asked for."""
    from sframe_core.symfiles.symfile import cached_symbol_file

    result = cached_symbol_file(path, module=info, **symbol_file_options())
    if result is None and in_background(path):
        start_job(path)
        return None, True
    return result, False


def _symbol_file(path: str, *, now: bool = False) -> str | None:
    """Our symbol file for ``path`` when LLDB would have no CFI for its code, else None.

    A cached file is answered at once, a missing one made at once for a small
    module; a large one's is left to a worker (``_cached_or_started``: where
    a frame provider serves meanwhile, 22+) and None is answered, so LLDB
    goes on with the module's own file and the stop-hook hands the module to
    the frame provider until the file is ready. With ``now`` (``seed``,
    before the target exists: nothing would serve the module the target
    gets) a large one's is made here too, and said in one line.
    """
    from sframe_core.symfiles.jobs import symbol_file_now
    from sframe_core.symfiles.symfile import cached_symbol_file, read_module

    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key in _decided:
        return _decided[key]
    info = read_module(path)
    made = None
    if _served(info):
        options = symbol_file_options()
        if now:
            result = cached_symbol_file(path, module=info, **options)
        else:
            result, started = _cached_or_started(path, info)
            if started:
                return None  # not decided: a later module of that file may find it cached
        if result is None:
            if now:
                _say_making(path)
            result = symbol_file_now(path, module=info, **options)
        if result.warning:
            warn_once(("symfile-warning", result.warning), result.warning)
        if result.debug_source is None or keeps_addresses_when_debug_info_is_replaced():
            made = result.path
            _attached[key[0]] = made
        else:
            # Before 22, with debug information: the module itself is a copy
            # with the SFrame rows (``create``), which keeps its addresses.
            from sframe_core.symfiles.module_copy import module_with_debug_frame
            made = module_with_debug_frame(path)
            note_copy(made, path)
    _decided[key] = made
    return made


def _say_making(path: str) -> None:
    """One line before LLDB waits for a large module's file (``made_at_once``
    says which are large), as gdb's batch mode waits for its workers."""
    from sframe_core.format.elf import read_elf
    from sframe_core.symfiles.jobs import made_at_once
    from sframe_core.symfiles.symfile import cache_dir

    if made_at_once(path):
        return
    try:
        found = read_elf(path).open()
    except SFrameError:
        found = None  # the generation says what is wrong with it
    count = f" of its {found.num_fdes:,} functions" if found is not None else ""
    warn(f"{os.path.basename(path)}: making LLDB's .debug_frame from the SFrame rows{count} "
         f"before LLDB reads the module (once: cached in {cache_dir()} for next time)")


def handed(path: str, *, now: bool = False) -> tuple[str, bool] | None:
    """What the callback hands LLDB for the module at ``path``: the file
    (our symbol file, or the module copy), and whether it is the copy; None
    when nothing (``_symbol_file``; ``now``: made now whatever its size)."""
    with _lock:
        made = _symbol_file(path, now=now)
    if made is None:
        return None
    return made, os.path.realpath(made) in _copies


def copy_of(path: str | None) -> tuple[str, str] | None:
    """The module ``path`` is a copy of, and how LLDB got the copy, if the
    plugin gave LLDB one (``_symbol_file``, ``seed``)."""
    return _copies.get(os.path.realpath(path)) if path else None


def note_copy(copy: str, path: str, how: str = "from the locate-module callback") -> None:
    """Remember that the module at ``copy`` stands for ``path``."""
    _copies[os.path.realpath(copy)] = (path, how)


def _set(spec: lldb.SBFileSpec, path: str) -> None:
    directory, name = os.path.split(path)
    spec.SetDirectory(directory)
    spec.SetFilename(name)


def _callback(module_spec: lldb.SBModuleSpec, module_file_spec: lldb.SBFileSpec,
              symbol_file_spec: lldb.SBFileSpec) -> lldb.SBError:
    try:
        if not enabled():
            return lldb.SBError("sframe: native route off")
        path = module_spec.GetFileSpec().fullpath
        if not path or not os.path.isabs(path) or not os.path.isfile(path):
            return lldb.SBError("sframe: not a local file")
        with _lock:
            made = _symbol_file(path)
        if made is None:
            return lldb.SBError("sframe: not served here (LLDB has CFI for it, or its symbol "
                                "file is being made)")
        _set(module_file_spec, path if os.path.realpath(made) not in _copies else made)
        _set(symbol_file_spec, made)
        return lldb.SBError()
    except (SFrameError, OSError, ValueError) as exc:
        # Said by the stop-hook, which tries again and reports once.
        return lldb.SBError(f"sframe: {exc}")
    except Exception as exc:  # noqa: BLE001 - LLDB goes on as without the callback
        return lldb.SBError(f"sframe: {type(exc).__name__}: {exc}")


def install(platform: lldb.SBPlatform) -> None:
    """Set the callback on ``platform`` (the host's, at import; a target's, at its stops)."""
    if not supported() or platform is None or not platform.IsValid():
        return
    name = platform.GetName() or ""
    if name != "host":
        return  # remote files are not on this machine; the stop-hook serves them
    platform.SetLocateModuleCallback(_callback)
