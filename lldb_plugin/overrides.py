"""What the plugin does before some of LLDB's commands run
(``SBCommandInterpreter.SetCommandOverrideCallback``: its Python binding
from 19, its C++ method through ``ctypes`` on 14 and 16): before
``gdb-remote``/``process connect``, what its stop-hook would do at the
connection's first stop (``before_connect``); before ``target create``
(and ``file``), the module LLDB should get (``seed``) or its symbol file's
worker (``locate``). Each callback returns False: LLDB then runs the
command as always.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Callable, Iterator, Sequence

import lldb

from . import locate, seed, state, symfiles
from .hooks import add_stop_hook, dummy_hook, run_at_first_stop
from .registry import provider_wanted, register
from .state import target_key, warn

__all__ = ["override_commands", "before_connect", "before_target_create", "target_create_path"]

# What the plugin registered with LLDB, kept across a re-import (``state.Registrations``).
_kept = state.registrations


def before_connect(*argv: str) -> bool:
    """``gdb-remote`` / ``process connect`` is about to connect the selected target.

    LLDB runs the stop-hooks that run at a process's initial stop, at a
    connection's first stop, before it has applied the stub's stop reply,
    and asks each thread's stop reason then: a stub that cannot resend it
    (GNU gdbserver: no ``qThreadStopInfo``) leaves none, and LLDB's stop
    report (``* thread #1, stop reason = signal SIGTRAP``, frame 0) is not
    printed (without the plugin too, with any such hook). So here, before the
    connection, the plugin does for this target what its hook would do at
    that stop (the native route for the modules the target has, and the
    provider, which must be registered before a remote process exists), and
    its hook on the target becomes one that starts at the next stop
    (``-I false``). Returns False: LLDB then runs the command as always.
    """
    try:
        debugger = _kept.debugger
        target = debugger.GetSelectedTarget() if debugger is not None else None
        # Before 21 no stop-hook runs at that stop: the hooks stay as they are.
        swap = debugger is not None and run_at_first_stop(debugger)
        if target is None or not target.IsValid():
            # No target yet: the one the connection makes gets the dummy's
            # hook, so that one starts at the next stop until then.
            if swap and not _kept.dummy_late and dummy_hook(debugger, False):
                _kept.dummy_late = True
            return False
        process = target.GetProcess()
        if process.IsValid() and process.GetState() not in (
                lldb.eStateInvalid, lldb.eStateUnloaded, lldb.eStateExited,
                lldb.eStateDetached):
            return False  # connected already: LLDB refuses the command
        key = ("t", target_key(target))
        hook = _kept.hook_ids.get(key, _kept.hook_ids.get("dummy"))
        if swap and key not in _kept.late and hook is not None:
            add_stop_hook(debugger, target, key, at_initial_stop=False, replace=hook)
            _kept.late.add(key)
        symfiles.route_target(debugger, target)
        if target_key(target) not in _kept.provider_ids and provider_wanted(target):
            register(target)
    except Exception as exc:  # noqa: BLE001 - one line; the command runs as always
        warn(f"before {' '.join(argv) or 'connecting'}: {type(exc).__name__}: {exc}")
    return False


def override_commands(debugger: lldb.SBDebugger) -> None:
    """Run ``before_connect`` ahead of ``gdb-remote`` and ``process connect``,
    ``before_target_create`` ahead of ``target create``, once per session."""
    if _kept.debugger is not None:
        return
    interp = debugger.GetCommandInterpreter()
    if hasattr(interp, "SetCommandOverrideCallback"):
        set_override = interp.SetCommandOverrideCallback
    else:
        found = _sb_set_override(interp)
        if found is None:
            return  # the status line says what a typed 'target create' then gets
        set_override = found
    for command in ("gdb-remote", "process connect"):
        set_override(command, before_connect)
    set_override("target create", before_target_create)  # and 'file', its alias
    _kept.debugger = debugger


# lldb::SBCommandInterpreter::SetCommandOverrideCallback(char const*,
# bool (*)(void*, char const**), void*), in every liblldb since 3.x; its
# Python binding came with 19.
_SET_OVERRIDE = "_ZN4lldb20SBCommandInterpreter26SetCommandOverrideCallbackEPKcPFbPvPS2_ES3_"
_OVERRIDE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p,
                                      ctypes.POINTER(ctypes.c_char_p))


def _liblldb() -> Iterator[ctypes.CDLL]:
    """The loaded libraries that may hold LLDB's SB API: the process's global
    symbols (the ``lldb`` driver links liblldb, whose ``_lldb`` module is
    built in), then the ``_lldb`` extension's own file, then each liblldb
    mapped in this process. Nothing is loaded that was not already."""
    from sframe_core.targets.ptrace import read_maps
    yield ctypes.CDLL(None)
    paths = [getattr(lldb._lldb, "__file__", None)]
    try:
        paths += sorted({mapping.path for mapping in read_maps(os.getpid())
                         if "liblldb" in mapping.path})
    except OSError:
        pass
    for path in paths:
        if path:
            try:
                yield ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
            except OSError:
                continue


def _sb_set_override(interp: lldb.SBCommandInterpreter
                     ) -> Callable[[str, Callable[..., bool]], bool] | None:
    """Where LLDB's Python binding lacks ``SetCommandOverrideCallback`` (14,
    16) but its library has the C++ method, that method called through
    ``ctypes`` on ``interp``; None if anything is missing (then nothing runs
    before those commands, as before).

    LLDB calls the callback as its own binding's (19+), from
    ``CommandObject::InvokeOverrideCallback`` before the command parses its
    options: with the command's words (``target``, ``create``, its
    arguments; ``file`` is its alias and comes as ``target create``; a raw
    command such as ``gdb-remote`` as one string) as a NULL-terminated
    array. The callbacks are kept for the session (``Registrations``)."""
    try:
        this = ctypes.c_void_p(int(interp.this))
    except (AttributeError, TypeError, ValueError):
        return None
    for library in _liblldb():
        method = getattr(library, _SET_OVERRIDE, None)
        if method is not None:
            break
    else:
        return None
    method.restype = ctypes.c_bool
    method.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _OVERRIDE_CALLBACK, ctypes.c_void_p]

    def set_override(command: str, function: Callable[..., bool]) -> bool:
        def call(_baton: int | None, argv: Sequence[bytes | None]) -> bool:
            try:
                words: list[str] = []
                while (word := argv[len(words)]) is not None:
                    words.append(word.decode(errors="replace"))
                function(*words)
            except Exception:  # noqa: BLE001 - the callbacks say their own errors
                pass
            return False  # LLDB runs the command as always
        callback = _OVERRIDE_CALLBACK(call)
        _kept.c_callbacks.append(callback)
        return bool(method(this, command.encode(), callback, None))
    return set_override


# ``target create`` options followed by a value (``help target create``).
_VALUED = frozenset({"-a", "--arch", "-p", "--platform", "-S", "--sysroot", "-c", "--core",
                     "-l", "--label", "-s", "--symfile", "-r", "--remote-file"})


def target_create_path(argv: Sequence[str]) -> str | None:
    """The local executable ``target create ARGS`` names, or None (none, or
    one on another platform: ``-p``, ``-r``)."""
    words = list(argv)[2:]
    path = None
    while words:
        word = words.pop(0)
        if word == "--":
            path = words[0] if words else None
            break
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if name in ("-p", "--platform", "-r", "--remote-file"):
                return None
            if name in _VALUED and "=" not in word and words:
                words.pop(0)
            continue
        path = word
        break
    if not path:
        return None
    path = os.path.expanduser(path)
    return os.path.abspath(path) if os.path.isfile(path) else shutil.which(path)


def before_target_create(*argv: str) -> bool:
    """Before 22, give LLDB the copy of an executable with debug information
    (``seed``); else start the executable's worker as the target is created
    (``locate.start_worker``), so that it may be done, or nearly, at the
    first stop. Returns False: LLDB then runs the command as always."""
    try:
        path = target_create_path(argv)
        if path is not None and not seed.seed(path):
            locate.start_worker(path)
    except Exception as exc:  # noqa: BLE001 - one line; the command runs as always
        warn(f"before {' '.join(argv)}: {type(exc).__name__}: {exc}")
    return False
