"""Registering the frame provider for the current target and later ones.

LLDB 22/23 register providers per target (``SBTarget.RegisterScriptedFrameProvider``);
the dummy target's providers are not copied into new targets, but its
stop-hooks are. So the plugin registers on every existing target at import
and adds a scripted stop-hook (to the dummy target when no target exists yet)
that registers on the target it fires in. The hook also fires at a launch's
initial stop, before the first user-visible stop, which matters on 22.1.0:
there a provider registered while stopped only takes effect at the next stop.
For a core file the frames are worked out before the provider is registered
(at the stop-hook as the core loads, or at import) and the provider only
hands them out, making no SB call that takes the target's API lock (see
``SFrameFrameProvider.__init__``: LLDB 23 deadlocked otherwise). LLDB 22.1.0
gets no provider for cores (its frame lists race there): ``sframe bt`` is
the way.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence

import lldb

from . import locate, seed, state, symfiles
from .state import target_key, warn, warn_once
from .target import is_core, is_live_remote

__all__ = ["supported", "register", "install", "status", "StopHook"]

# Survives a re-import of the package (only lldb_plugin/__init__.py is reloaded).
_ids: dict[object, int] = {}
_hooked: set[object] = set()
# Where the hook was added ("dummy", or ("t", target key)) -> its stop-hook id
# there; a target primed from the dummy target has the dummy's hooks, ids and all.
_hook_ids: dict[object, int] = {}
# Targets whose hook starts at the next stop (``_before_connect``).
_late: set[object] = set()
# The dummy target's hook starts at the next stop, for the target a
# connection makes from it; put back at that stop (``_dummy_hook``).
_dummy_late = False
# The debugger whose connect commands are overridden (the callback is given
# only the command's words).
_debugger: lldb.SBDebugger | None = None
_said_unsupported = False
_marker: lldb.SBBroadcaster | None = None


def supported() -> bool:
    """Feature detection (``state.providers_supported``): can providers be registered?"""
    return state.providers_supported()


def say_unsupported() -> None:
    global _said_unsupported
    if not _said_unsupported:
        _said_unsupported = True
        warn("this LLDB has no scripted frame providers: plain 'bt' is unchanged; "
             "use 'sframe bt' for SFrame backtraces")


def register(target: lldb.SBTarget, *, check_now: bool = False) -> int | None:
    """Register the provider on ``target`` once; its id, or None."""
    if not supported() or target is None or not target.IsValid():
        return None
    key = target_key(target)
    if key in _ids:
        return _ids[key]
    core = is_core(target)
    if core and not hasattr(lldb.SBProcess, "IsLiveDebugSession"):
        # LLDB 22.1.0 builds a provider's frame list on two threads at once
        # for a core (the main and the event thread): frame 0 twice, and its
        # own frames out of order even once the provider is removed. The SB
        # API that tells a core from a live session came with the LLDB (23)
        # whose frame lists are built under a lock: no provider without it.
        warn_once(("core", key), "core file: plain 'bt' is not changed with this LLDB "
                  "(no SBProcess.IsLiveDebugSession); use 'sframe bt'")
        _ids[key] = 0
        return None
    if core:
        # LLDB also builds a core's frame lists on its event thread, where a
        # provider making SB calls deadlocked 23.1.0: every thread's frames
        # are worked out here, first, and the provider only hands them out.
        # And not while that thread still prints the core's stop (an import
        # right after 'target create --core'), which builds the same frame
        # lists with LLDB's unwinder: the SB calls below would contend with
        # it for the thread's frame-list lock and the target's API lock.
        if not _wait_for_event_thread(target.GetDebugger()):
            warn_once(("core-busy", key), "core file: LLDB's event thread is still busy with "
                      "the core's stop; the frame provider is not registered (use "
                      "'sframe enable' once its status line is printed, or 'sframe bt')")
            return None
        from .provider import SFrameFrameProvider
        process = target.GetProcess()
        for i in range(process.GetNumThreads()):
            SFrameFrameProvider.precompute(target, process.GetThreadAtIndex(i))
    if is_live_remote(target):
        # Registering while a remote process exists (from the stop-hook at the
        # connect stop, at import, or 'sframe enable') makes LLDB recompute the
        # thread's frames on its event thread, concurrently with the stop that
        # follows: LLDB 22.1.0 deadlocked in the provider's creation
        # (SBThread.IsValid), 23.1.0 in SBFrame calls on the input frames.
        warn_once(("remote", key),
                  "remote process: the frame provider is not registered once the process "
                  "exists (that can deadlock LLDB); plain 'bt' is unchanged, use 'sframe bt' "
                  "(or import the plugin after 'target create', before 'gdb-remote')")
        return None
    from .provider import CLASS_NAME, SFrameFrameProvider, registration_args
    error = lldb.SBError()
    before = SFrameFrameProvider.instances
    ident = target.RegisterScriptedFrameProvider(CLASS_NAME, registration_args(target), error)
    if not error.Success() or not ident:
        warn(f"could not register the frame provider: {error.GetCString() or 'unknown error'}")
        return None
    _ids[key] = ident
    if core and not _wait_for_event_thread(target.GetDebugger()):
        warn_once("event-thread", "LLDB's event thread is busy (waited 2 s); "
                  "wait for the core's status line before 'target delete'")
    # Nothing here asks a core's threads for their frames once the provider
    # is registered: LLDB's event-handler thread may be making it, holding
    # the thread's frame-list lock, while an SB call from here would hold the
    # target's API lock and wait for that list (the deadlock of issue 12).
    if check_now and not core:
        process = target.GetProcess()
        if process.IsValid() and process.GetState() in (lldb.eStateStopped, lldb.eStateCrashed):
            thread = process.GetSelectedThread()
            if thread.IsValid():
                thread.GetFrameAtIndex(0)
                thread.GetFrameAtIndex(1)
                if SFrameFrameProvider.instances == before:
                    warn("frame provider registered; this LLDB applies it from the next stop "
                         "on: use 'sframe bt' for the current one")
    return ident


def _wait_for_event_thread(debugger: lldb.SBDebugger, timeout: float = 2.0) -> bool:
    """Return once LLDB's event-handler thread has handled what it has queued:
    True, or False when it was still busy after ``timeout`` seconds.

    Registering a provider broadcasts a stack-changed event per thread; the
    event thread takes it and prints the thread's status, which runs the
    provider, so it waits for the Python lock until this command returns.
    On a core, a ``target delete`` that came before it had printed crashed
    LLDB 23.1.0 (SIGSEGV in ``Debugger::DefaultEventHandler``: 10 runs of 10
    core loads and deletes after the import, 10 crashed; never without the
    plugin, nor on the native route, which registers no provider). So an
    event of our own is queued behind those and this waits, sleeping (which
    lets the event thread run Python), until the event thread has taken it,
    that is, has finished with the ones before: about 5-50 ms. Bounded, so
    it never hangs LLDB.
    """
    listener = debugger.GetListener()
    if not listener.IsValid():
        return True
    global _marker
    if _marker is None:
        # One for the session: a queued event may outlive a wait that timed out.
        _marker = lldb.SBBroadcaster("sframe.event-thread-flush")
    marker, bit = _marker, 1
    if not marker.AddListener(listener, bit):
        return True
    try:
        marker.BroadcastEventByType(bit)
        event = lldb.SBEvent()
        deadline = time.monotonic() + timeout
        while listener.PeekAtNextEventForBroadcaster(marker, event):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True
    finally:
        marker.RemoveListener(listener, bit)


class StopHook:
    """``target stop-hook add -P lldb_plugin.registry.StopHook``: register at each stop."""

    def __init__(self, target: lldb.SBTarget, extra_args: lldb.SBStructuredData,
                 internal_dict: dict) -> None:
        pass

    def handle_stop(self, exe_ctx: lldb.SBExecutionContext, stream: lldb.SBStream) -> bool:
        try:
            global _dummy_late
            target = exe_ctx.GetTarget()
            if _dummy_late and target.IsValid():
                _dummy_late = False  # the connection's target has its hook: later ones, the whole
                _dummy_hook(target.GetDebugger(), True)
            if target.IsValid():
                _say_if_stop_reasons_lost(target)
                symfiles.route_target(target.GetDebugger(), target, at_stop=True)
            if target.IsValid() and target_key(target) not in _ids and _provider_wanted(target):
                # LLDB 23 runs the new provider at once, inside this hook, where
                # reading an input frame's registers can hang: pass through then.
                state.in_stop_hook = True
                try:
                    register(target)
                finally:
                    state.in_stop_hook = False
        except Exception as exc:  # noqa: BLE001
            warn(f"stop-hook: {type(exc).__name__}: {exc}")
        return True


_first_stops: set[tuple[object, int]] = set()


def _say_if_stop_reasons_lost(target: lldb.SBTarget) -> None:
    """Say once if a remote process's first stop came without any stop reason.

    LLDB (21, 22 and 23) runs stop-hooks at the first stop of a connection
    (``gdb-remote``, ``process connect``, attach) before it has applied the
    stub's stop reply, and asks each thread's stop reason then; a stub that
    cannot tell it again (GNU gdbserver has no ``qThreadStopInfo``) leaves it
    empty, so the stop report (``* thread #1, stop reason = signal
    SIGTRAP``, frame 0) is not printed. Any stop-hook does it, without the
    plugin too; one that does not run at the first stop does not, but the
    plugin needs that stop for cores and attaches. ``_before_connect`` keeps
    the plugin's hook from that stop when ``gdb-remote``/``process connect``
    connects a target that exists, and, where none does, from the dummy
    target's hook that the connection's target copies; where neither could
    be done, it is said, with the way round it, instead of passing in
    silence.
    """
    process = target.GetProcess()
    if not process.IsValid() or process.GetState() != lldb.eStateStopped:
        return
    key = (target_key(target), process.GetProcessID())
    if key in _first_stops:
        return
    _first_stops.add(key)
    if is_core(target) or process.GetNumThreads() == 0:
        return
    if any(process.GetThreadAtIndex(i).GetStopReason() != lldb.eStopReasonNone
           for i in range(process.GetNumThreads())):
        return
    warn_once(("lost-stop-reason", key),
              "LLDB dropped this stop's reason (its report lacks the thread and frame "
              "lines): LLDB runs stop-hooks at a connection's first stop before reading "
              "the stub's stop reply, and this stub cannot resend it (GNU gdbserver: no "
              "qThreadStopInfo); 'target create PROGRAM' before 'gdb-remote' avoids that "
              "(the plugin's hook then starts at the next stop)")


def _add_stop_hook(debugger: lldb.SBDebugger, target: lldb.SBTarget | None,
                   key: object = None, *, at_initial_stop: bool = True,
                   replace: int | None = None) -> None:
    """Add the hook to ``target`` (selected), or to the dummy target when None.

    ``at_initial_stop=False``: the hook does not run at the first stop of the
    process (``-I false``); ``replace``: the id of the hook it replaces there.
    """
    if key is None:
        key = "dummy" if target is None else ("t", target_key(target))
    if key in _hooked and replace is None:
        return
    result = lldb.SBCommandReturnObject()
    interp = debugger.GetCommandInterpreter()
    previous = debugger.GetSelectedTarget()
    if target is not None:
        debugger.SetSelectedTarget(target)
    if replace is not None:
        interp.HandleCommand(f"target stop-hook delete {replace}", lldb.SBCommandReturnObject())
    result, hook = _hook_add(interp, at_initial_stop)
    if target is not None and previous.IsValid():
        debugger.SetSelectedTarget(previous)
    if result.Succeeded():
        _hooked.add(key)
        if hook is not None:
            _hook_ids[key] = hook
    else:
        warn(f"could not add the stop-hook: {(result.GetError() or '').strip()}")


def _hook_add(interp: lldb.SBCommandInterpreter, at_initial_stop: bool,
              context: lldb.SBExecutionContext | None = None
              ) -> tuple[lldb.SBCommandReturnObject, int | None]:
    """``target stop-hook add`` of the plugin's hook (in ``context``'s target,
    else the selected one): LLDB's answer, and the new hook's id if it said one."""
    result = lldb.SBCommandReturnObject()
    initial = "" if at_initial_stop else "-I false "
    command = f"target stop-hook add {initial}-P {__name__}.StopHook"
    if context is None:
        interp.HandleCommand(command, result)
    else:
        interp.HandleCommand(command, context, result, False)
    found = re.search(r"#(\d+)", result.GetOutput() or "") if result.Succeeded() else None
    return result, int(found.group(1)) if found else None


def _dummy_hook(debugger: lldb.SBDebugger, at_initial_stop: bool) -> bool:
    """Replace the dummy target's hook by one that does (not) run at a process's
    first stop; True when done. The dummy target is reached through an
    execution context (``SBDebugger.GetDummyTarget``), while targets exist too."""
    hook = _hook_ids.get("dummy")
    dummy = debugger.GetDummyTarget() if hasattr(debugger, "GetDummyTarget") else None
    if hook is None or dummy is None or not dummy.IsValid():
        return False
    interp = debugger.GetCommandInterpreter()
    context = lldb.SBExecutionContext(dummy)
    result = lldb.SBCommandReturnObject()
    interp.HandleCommand(f"target stop-hook delete {hook}", context, result, False)
    if not result.Succeeded():
        return False
    result, added = _hook_add(interp, at_initial_stop, context)
    if added is None:
        _hook_ids.pop("dummy", None)
        _hooked.discard("dummy")
        warn(f"could not add the stop-hook: {(result.GetError() or '').strip()}")
        return False
    _hook_ids["dummy"] = added
    return True


def _before_connect(*argv: str) -> bool:
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
        debugger = _debugger
        target = debugger.GetSelectedTarget() if debugger is not None else None
        if target is None or not target.IsValid():
            # No target yet: the one the connection makes gets the dummy's
            # hook, so that one starts at the next stop until then.
            global _dummy_late
            if not _dummy_late and debugger is not None and _dummy_hook(debugger, False):
                _dummy_late = True
            return False
        process = target.GetProcess()
        if process.IsValid() and process.GetState() not in (
                lldb.eStateInvalid, lldb.eStateUnloaded, lldb.eStateExited,
                lldb.eStateDetached):
            return False  # connected already: LLDB refuses the command
        key = ("t", target_key(target))
        hook = _hook_ids.get(key, _hook_ids.get("dummy"))
        if key not in _late and hook is not None:
            _add_stop_hook(debugger, target, key, at_initial_stop=False, replace=hook)
            _late.add(key)
        symfiles.route_target(debugger, target)
        if target_key(target) not in _ids and _provider_wanted(target):
            register(target)
    except Exception as exc:  # noqa: BLE001 - one line; the command runs as always
        warn(f"before {' '.join(argv) or 'connecting'}: {type(exc).__name__}: {exc}")
    return False


def _override_connect(debugger: lldb.SBDebugger) -> None:
    """Run ``_before_connect`` ahead of ``gdb-remote`` and ``process connect``
    (``SBCommandInterpreter.SetCommandOverrideCallback``, LLDB 21+), once."""
    global _debugger
    if _debugger is not None:
        return
    interp = debugger.GetCommandInterpreter()
    if not hasattr(interp, "SetCommandOverrideCallback"):
        return
    for command in ("gdb-remote", "process connect"):
        interp.SetCommandOverrideCallback(command, _before_connect)
    interp.SetCommandOverrideCallback("target create", _before_target_create)  # and 'file'
    _debugger = debugger


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


def _before_target_create(*argv: str) -> bool:
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


def _provider_wanted(target: lldb.SBTarget) -> bool:
    """The provider serves only modules the native route (``symfiles``) could not."""
    if not symfiles.needs_provider(target):
        return False
    if not supported():
        say_unsupported()
        return False
    return True


def install(debugger: lldb.SBDebugger) -> None:
    """Route (and, where needed, register on) every existing target; arrange it for later ones."""
    supported()  # worked out here, before any locate-module callback asks
    if symfiles.enabled():
        seed.seed_command_line()
    if symfiles.enabled():
        locate.install(debugger.GetSelectedPlatform())
    _override_connect(debugger)
    count = debugger.GetNumTargets()
    if count == 0:
        _add_stop_hook(debugger, None)
        return
    # The dummy target can only be reached while no target exists: targets
    # created after this point need 'sframe enable' (or the plugin loaded
    # from ~/.lldbinit, before any target).
    for i in range(count):
        target = debugger.GetTargetAtIndex(i)
        symfiles.route_target(debugger, target)
        if _provider_wanted(target):
            register(target, check_now=True)
        if "dummy" not in _hooked:
            _add_stop_hook(debugger, target)


def status(debugger: lldb.SBDebugger, target: lldb.SBTarget) -> str:
    if target is not None and target.IsValid():
        # What the stop-hook would have done: an LLDB before 21 runs none when
        # a core loads, and the status says what LLDB uses, not what it missed.
        symfiles.route_target(debugger, target)
    lines = (symfiles.status_lines(target, debugger) if target is not None and target.IsValid()
             else [])
    return "\n".join(lines + [_provider_status(target)])


def _provider_status(target: lldb.SBTarget) -> str:
    if target is not None and target.IsValid() and not symfiles.needs_provider(target):
        return "frame provider: not needed (no module it could help: see above)"
    if not supported():
        return ("frame provider: not available in this LLDB (no scripted frame providers); "
                "'sframe bt' works")
    if target is None or not target.IsValid():
        return "frame provider: will be registered for targets created from now on"
    ident = _ids.get(target_key(target))
    if not ident and is_core(target):
        return "frame provider: not used for core files (plain 'bt' is unchanged); use 'sframe bt'"
    if not ident:
        return "frame provider: not registered for this target"
    return f"frame provider: registered for this target (id {ident})"
