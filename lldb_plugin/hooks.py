"""The plugin's stop-hook: at each stop, the native route for the target's
modules and, where they need it, the frame provider (``registry``).

The hook is added to the dummy target when no target exists (targets
created later copy its stop-hooks, ids and all), else to each target. At a
connection's first stop LLDB runs the hooks before it has applied the
stub's stop reply (``say_if_stop_reasons_lost``), so before ``gdb-remote``
(``overrides``) the hook is swapped for one that starts at the next stop
(``-I false``, ``dummy_hook``/``add_stop_hook`` with ``replace``).
"""

from __future__ import annotations

import re

import lldb

from . import state, symfiles
from .registry import provider_wanted, register
from .state import target_key, warn, warn_once
from .target import is_core

__all__ = ["StopHook", "add_stop_hook", "dummy_hook", "run_at_first_stop",
           "say_if_stop_reasons_lost"]

# What the plugin registered with LLDB, kept across a re-import (``state.Registrations``).
_kept = state.registrations


class StopHook:
    """``target stop-hook add -P lldb_plugin.hooks.StopHook``: route and register at each stop."""

    def __init__(self, target: lldb.SBTarget, extra_args: lldb.SBStructuredData,
                 internal_dict: dict) -> None:
        pass

    def handle_stop(self, exe_ctx: lldb.SBExecutionContext, stream: lldb.SBStream) -> bool:
        try:
            target = exe_ctx.GetTarget()
            if _kept.dummy_late and target.IsValid():
                _kept.dummy_late = False  # the connection's target has its hook: later ones, the whole
                dummy_hook(target.GetDebugger(), True)
            if target.IsValid():
                say_if_stop_reasons_lost(target)
                symfiles.route_target(target.GetDebugger(), target, at_stop=True)
            if target.IsValid() and target_key(target) not in _kept.provider_ids and provider_wanted(target):
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


def say_if_stop_reasons_lost(target: lldb.SBTarget) -> None:
    """Say once if a remote process's first stop came without any stop reason.

    LLDB (21, 22 and 23) runs stop-hooks at the first stop of a connection
    (``gdb-remote``, ``process connect``, attach) before it has applied the
    stub's stop reply, and asks each thread's stop reason then; a stub that
    cannot tell it again (GNU gdbserver has no ``qThreadStopInfo``) leaves it
    empty, so the stop report (``* thread #1, stop reason = signal
    SIGTRAP``, frame 0) is not printed. Any stop-hook does it, without the
    plugin too; one that does not run at the first stop does not, but the
    plugin needs that stop for cores and attaches. ``overrides.before_connect`` keeps
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
    if key in _kept.first_stops:
        return
    _kept.first_stops.add(key)
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


def add_stop_hook(debugger: lldb.SBDebugger, target: lldb.SBTarget | None,
                   key: object = None, *, at_initial_stop: bool = True,
                   replace: int | None = None) -> None:
    """Add the hook to ``target`` (selected), or to the dummy target when None.

    ``at_initial_stop=False``: the hook does not run at the first stop of the
    process (``-I false``); ``replace``: the id of the hook it replaces there.
    """
    if key is None:
        key = "dummy" if target is None else ("t", target_key(target))
    if key in _kept.hooked and replace is None:
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
        _kept.hooked.add(key)
        if hook is not None:
            _kept.hook_ids[key] = hook
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


_first_stop: bool | None = None


def run_at_first_stop(debugger: lldb.SBDebugger) -> bool:
    """Do stop-hooks run at a process's first stop (21+: ``target stop-hook
    add`` then has ``-I``, ``--at-initial-stop``)? Before 21 none does (nor
    when a core loads), so there is no first-stop hook to keep off."""
    global _first_stop
    if _first_stop is None:
        result = lldb.SBCommandReturnObject()
        debugger.GetCommandInterpreter().HandleCommand("help target stop-hook add", result)
        _first_stop = "--at-initial-stop" in (result.GetOutput() or "")
    return _first_stop


def dummy_hook(debugger: lldb.SBDebugger, at_initial_stop: bool) -> bool:
    """Replace the dummy target's hook by one that does (not) run at a process's
    first stop; True when done. The dummy target is reached through an
    execution context (``SBDebugger.GetDummyTarget``), while targets exist too."""
    hook = _kept.hook_ids.get("dummy")
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
        _kept.hook_ids.pop("dummy", None)
        _kept.hooked.discard("dummy")
        warn(f"could not add the stop-hook: {(result.GetError() or '').strip()}")
        return False
    _kept.hook_ids["dummy"] = added
    return True
