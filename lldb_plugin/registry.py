"""Registering the frame provider on a target, and what ``sframe status`` says of it.

LLDB 22/23 register providers per target (``SBTarget.RegisterScriptedFrameProvider``);
the dummy target's providers are not copied into new targets, but its
stop-hooks are: so a stop-hook (``hooks``) registers on the target it fires
in, and ``install`` (the package's entry) on every existing target. The hook
also fires at a launch's initial stop, before the first user-visible stop,
which matters on 22.1.0: there a provider registered while stopped only
takes effect at the next stop. For a core file the frames are worked out
before the provider is registered (at the stop-hook as the core loads, or
at import) and the provider only hands them out, making no SB call that
takes the target's API lock (see ``SFrameFrameProvider.__init__``: LLDB 23
deadlocked otherwise). LLDB 22.1.0 gets no provider for cores (its frame
lists race there): ``sframe bt`` is the way.
"""

from __future__ import annotations

import time

import lldb

from . import state, symfiles
from .state import target_key, warn, warn_once
from .target import is_core, is_live_remote

__all__ = ["supported", "say_unsupported", "register", "provider_wanted", "status"]

# What the plugin registered with LLDB, kept across a re-import (``state.Registrations``).
_kept = state.registrations


def supported() -> bool:
    """Feature detection (``state.providers_supported``): can providers be registered?"""
    return state.providers_supported()


def say_unsupported() -> None:
    if not _kept.said_unsupported:
        _kept.said_unsupported = True
        warn("this LLDB has no scripted frame providers: plain 'bt' is unchanged; "
             "use 'sframe bt' for SFrame backtraces")


def register(target: lldb.SBTarget, *, check_now: bool = False) -> int | None:
    """Register the provider on ``target`` once; its id, or None."""
    if not supported() or target is None or not target.IsValid():
        return None
    key = target_key(target)
    if key in _kept.provider_ids:
        return _kept.provider_ids[key]
    core = is_core(target)
    if core and not hasattr(lldb.SBProcess, "IsLiveDebugSession"):
        # LLDB 22.1.0 builds a provider's frame list on two threads at once
        # for a core (the main and the event thread): frame 0 twice, and its
        # own frames out of order even once the provider is removed. The SB
        # API that tells a core from a live session came with the LLDB (23)
        # whose frame lists are built under a lock: no provider without it.
        warn_once(("core", key), "core file: plain 'bt' is not changed with this LLDB "
                  "(no SBProcess.IsLiveDebugSession); use 'sframe bt'")
        _kept.provider_ids[key] = 0
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
    _kept.provider_ids[key] = ident
    if core and not _wait_for_event_thread(target.GetDebugger()):
        warn_once("event-thread", "LLDB's event thread is busy (waited 2 s); "
                  "wait for the core's status line before 'target delete'")
    # Nothing here asks a core's threads for their frames once the provider
    # is registered: LLDB's event-handler thread may be making it, holding
    # the thread's frame-list lock, while an SB call from here would hold the
    # target's API lock and wait for that list: a deadlock.
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
    if _kept.marker is None:
        # One for the session: a queued event may outlive a wait that timed out.
        _kept.marker = lldb.SBBroadcaster("sframe.event-thread-flush")
    marker, bit = _kept.marker, 1
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


def provider_wanted(target: lldb.SBTarget) -> bool:
    """The provider serves only modules the native route (``symfiles``) could not."""
    if not symfiles.needs_provider(target):
        return False
    if not supported():
        say_unsupported()
        return False
    return True


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
    ident = _kept.provider_ids.get(target_key(target))
    if not ident and is_core(target):
        return "frame provider: not used for core files (plain 'bt' is unchanged); use 'sframe bt'"
    if not ident:
        return "frame provider: not registered for this target"
    return f"frame provider: registered for this target (id {ident})"
