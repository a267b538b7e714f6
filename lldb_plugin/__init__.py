"""sframe-gdb's LLDB adapter: ``command script import /path/to/lldb_plugin``.

On import it makes ``sframe_core`` and pyelftools importable (see
``bootstrap``), adds the ``sframe`` command (``bt``, ``info``, ``lookup``,
``status``) and, where LLDB has scripted frame providers (22+), registers
one so that plain ``bt``/``up``/``down``/``frame select`` use SFrame where
``.eh_frame`` is missing. Importing it twice is harmless. All the unwinding
is ``sframe_core``'s; this package only talks to LLDB.

The same shape as ``gdb_plugin``, bottom to top, over ``state`` (what it
keeps across calls: a target's identity, warnings said once, each module's
route, what it registered with LLDB):

- what finds modules: ``target`` (an ``SBTarget``'s module table, memory and
  registers for the core);
- what hands symbol files to the debugger: ``locate`` (as LLDB creates a
  module) and ``symfiles`` (at stops, and the route each module took);
- what serves the fallback: ``provider`` (the scripted frame provider, 22+,
  for what the symbol files cannot serve), with ``registry`` (registering
  it on a target);
- what runs at LLDB's events: ``hooks`` (the stop-hook: the route and the
  provider at each stop) and ``overrides`` (before ``target create``,
  ``gdb-remote`` and ``process connect``), over ``seed`` and ``create`` (the
  module LLDB should get before 22);
- the commands: ``commands`` (``sframe bt``, ``info``, ``lookup``, ``status``);
- the entry: this file (which wires the parts at import), ``selfcheck`` (LLDB's own Python module works) and
  ``bootstrap`` (finding the dependencies).
"""

from __future__ import annotations

__all__ = ["__lldb_init_module"]


def _error(debugger, text: str) -> None:
    try:
        import sys
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass


def __lldb_init_module(debugger, internal_dict) -> None:
    try:
        from .selfcheck import broken_lldb_module
        problem = broken_lldb_module()
        if problem is not None:
            _error(debugger, problem)
            return
        from . import bootstrap
        bootstrap.ensure()
        problem = bootstrap.missing()
        if problem is not None:
            _error(debugger, problem)
            return
        from .commands import SFrameCommand  # noqa: F401 - must import before registering
        name = f"{__name__}.commands.SFrameCommand"
        result = _run(debugger, f"command script add -o -c {name} sframe")
        if result is not None:
            _error(debugger, f"sframe: could not add the 'sframe' command: {result}")
            return
        _install(debugger)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        _error(debugger, f"sframe: cannot load: {type(exc).__name__}: {exc}")


def _install(debugger) -> None:
    """Route (and, where needed, register the provider on) every existing
    target; arrange it for later ones: the stop-hook, the command overrides,
    the locate-module callback, the module put in LLDB's list for ``lldb FILE``."""
    from . import create, hooks, locate, overrides, registry, seed, state, symfiles
    registry.supported()  # worked out here, before any locate-module callback asks
    state.numbers_unnamed_symbols()  # likewise
    if symfiles.enabled():
        seed.seed_command_line()
    if symfiles.enabled():
        locate.install(debugger.GetSelectedPlatform())
    overrides.override_commands(debugger)
    count = debugger.GetNumTargets()
    if count == 0:
        hooks.add_stop_hook(debugger, None)
        return
    # The dummy target can only be reached while no target exists: targets
    # created after this point need 'sframe enable' (or the plugin loaded
    # from ~/.lldbinit, before any target).
    for target in [debugger.GetTargetAtIndex(i) for i in range(count)]:
        if symfiles.enabled():
            # A core loaded before the import: made again with the module copy
            # where LLDB needs one (before 22), as 'sframe create' would.
            target = create.remake_core(debugger, target) or target
        symfiles.route_target(debugger, target)
        if registry.provider_wanted(target):
            registry.register(target, check_now=True)
        if "dummy" not in state.registrations.hooked:
            hooks.add_stop_hook(debugger, target)


def _run(debugger, command: str) -> str | None:
    """Run an LLDB command quietly; None on success, else its error text."""
    import lldb
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(command, result)
    if result.Succeeded():
        return None
    return (result.GetError() or "failed").strip()
