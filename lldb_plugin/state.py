"""What the LLDB plugin keeps across calls, below every other of its modules.

A target's identity, the warnings already said, the route each module took
(LLDB's own unwinder reading our symbol file, or the frame provider),
whether the stop-hook is running and what the plugin registered with LLDB
(``Registrations``): ``target.py`` (the module table), ``locate.py`` and
``symfiles.py`` (the symbol files), ``provider.py``, ``registry.py``,
``hooks.py`` and ``overrides.py`` (the fallback, LLDB's events) all read
them, so they stand here, importing none of those.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import NamedTuple, TypedDict, TypeVar

import lldb

from sframe_core.base import settings

__all__ = ["target_key", "warn", "warn_once", "Route", "NATIVE", "FAILED", "PROVIDER", "PENDING",
           "ENV", "SETTING_ENV", "enabled", "routes", "is_native",
           "keeps_addresses_when_debug_info_is_replaced", "late_add_keeps_types", "lldb_major",
           "numbers_unnamed_symbols", "symbol_file_options",
           "providers_supported", "in_stop_hook", "remember", "TARGETS_KEPT", "Registrations",
           "registrations"]

K = TypeVar("K")
V = TypeVar("V")

_reported: set[object] = set()


def target_key(target: lldb.SBTarget) -> object:
    """A target's identity across SBTarget wrappers (a lock-free SB call)."""
    if hasattr(target, "GetGloballyUniqueID"):
        return target.GetGloballyUniqueID()
    return target.GetExecutable().fullpath


# The targets whose module tables and core frames are kept (``remember``).
TARGETS_KEPT = 8


def remember(cache: dict[K, V], key: K, value: V,
             target_of: Callable[[K], object] = lambda key: key) -> None:
    """``cache[key] = value``, keeping the entries of the ``TARGETS_KEPT``
    targets stored to last: a deleted target's entries (decoded SFrame
    sections, a core's frames) go in time. No lock-free SB call tells that a
    target was deleted; a live target's evicted entry is only made again."""
    cache.pop(key, None)
    cache[key] = value
    recent: list[object] = []
    for k in reversed(cache):
        target = target_of(k)
        if target not in recent:
            recent.append(target)
    if len(recent) > TARGETS_KEPT:
        old = recent[TARGETS_KEPT:]
        for k in [k for k in cache if target_of(k) in old]:
            del cache[k]


def warn(text: str) -> None:
    """One line on LLDB's error stream (the embedded interpreter's stderr)."""
    try:
        sys.stderr.write(f"sframe: {text}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - nowhere left to say it
        pass


def warn_once(key: object, text: str) -> None:
    if key in _reported:
        return
    _reported.add(key)
    warn(text)


# -- routes --------------------------------------------------------------------

ENV = "SFRAME_LLDB_ROUTE"
"""``provider`` turns the native route off: the frame provider alone serves
every module, with no symbol file added to LLDB's modules."""
SETTING_ENV = "SFRAME_LLDB_SYMBOL_FILES"
"""``foreground``: a missing symbol file is always made before LLDB goes on
(``auto``, the default: a large module's in a worker, ``symfiles.py``)."""

NATIVE = "native"
FAILED = "failed"
PROVIDER = "provider"  # left to the frame provider on purpose, not a failure
PENDING = "pending"  # the frame provider serves it until its symbol file is ready


class Route(NamedTuple):
    kind: str  # NATIVE, FAILED, PROVIDER or PENDING
    name: str  # the module's file name, for messages
    detail: str  # the symbol file added, or why not
    provider_helps: bool = True  # False: its SFrame data is unusable anyway
    since: float = 0.0  # PENDING: when it started waiting (time.monotonic)
    note: str = ""  # NATIVE: what LLDB still lacks, for ``sframe status``


# target key -> module key -> Route. Survives a re-import of the package.
_routes: dict[object, dict[tuple[str, str], Route]] = {}


def enabled() -> bool:
    return settings.choice(ENV) != "provider"


def routes(target: lldb.SBTarget) -> dict[tuple[str, str], Route]:
    return dict(_routes.get(target_key(target), {}))


def is_native(target: lldb.SBTarget, path: str) -> bool:
    """Does LLDB's own unwinder read our ``.debug_frame`` for the module at ``path``?"""
    return any(key[0] == path and route.kind == NATIVE
               for key, route in _routes.get(target_key(target), {}).items())


def keeps_addresses_when_debug_info_is_replaced() -> bool:
    """LLDB 21.1.7 loses a module's load addresses when the symbol file that
    replaces the module's own DWARF is added (breakpoints set afterwards are
    never hit, a backtrace shows the callers of inlined frames at file
    addresses; with the add before launch, no breakpoint is hit at all);
    22.1.0 and 23.1.0 do not (observed on lua5.4 -O2 -g). Debian's 14.0.6,
    16.0.6 and 19.1.7 and PyPI's 20.1.8 lose them too (examples/demo.c -O2
    -g: added before launch, no breakpoint is hit; at a stop, the caller
    frames' variables are unavailable): ``sframe create`` serves those. No SB call tells
    the two apart, so the SB API that came with the fixed releases stands in
    for it: ``SBThread.GetFrames`` (22+)."""
    return hasattr(lldb.SBThread, "GetFrames")


def lldb_major() -> int | None:
    """LLDB's major version ("lldb version 19.1.7", "lldb-22.1.8"), for messages."""
    found = re.search(r"(\d+)\.\d+", lldb.SBDebugger.GetVersionString() or "")
    return int(found.group(1)) if found else None


def merges_symbol_file_eh_frame() -> bool:
    """Does LLDB take an ``.eh_frame`` from a symbol file into the module?
    22.1.0 and 23.1.0 do; 21.1.7's ``SymbolVendorELF`` merges only the
    ``.debug_*`` sections and the symbol table, so 21 gets a file of its own
    (``frames._before_entry``). The SB API that came with 22,
    ``SBThread.GetFrames``, stands in for it."""
    return hasattr(lldb.SBThread, "GetFrames")


def numbers_unnamed_symbols() -> bool:
    """Does this LLDB name the functions it finds only in ``.eh_frame`` by
    their symbol id (``___lldb_unnamed_symbol17``)? 14.0.6, 16.0.6, 19.1.7
    and 20.1.8 do, 21 and later name them by address
    (``___lldb_unnamed_symbol_11c0``, ``Symbol::SynthesizeNameIfNeeded``):
    a stripped module then gets a symbol table numbered as theirs
    (``sframe_core.symfiles.elfsyms.numbered_symbols``). A name format, not
    an API: the version says it (an unknown version: 21's). Worked out once
    (the locate-module callback asks too, where it makes no SB call)."""
    global _numbers
    if _numbers is None:
        major = lldb_major()
        _numbers = major is not None and major < 21
    return _numbers


_numbers: bool | None = None


class SymbolFileOptions(TypedDict):
    before_entry: bool
    numbered_names: bool


def symbol_file_options() -> SymbolFileOptions:
    """Which symbol file this LLDB gets (``symfile.symbol_file_for``'s
    options): every caller asks for the same file."""
    return SymbolFileOptions(before_entry=not merges_symbol_file_eh_frame(),
                             numbered_names=numbers_unnamed_symbols())


def late_add_keeps_types() -> bool:
    """Does a symbol file added at a later stop leave the module's types as
    the twin's? LLDB keeps a module's type system when its symbol file is
    replaced: a structure declared from the module's own DWARF before (as
    ``b NAME`` does) then prints as ``<incomplete type>`` in caller frames
    on 23.1.0; 22.1.0 completes it from the new file (observed on lua5.4's
    ``BuffFS``). No SB call tells them apart; the SB API that came with 23,
    ``SBProcess.IsLiveDebugSession``, stands in for it."""
    return not hasattr(lldb.SBProcess, "IsLiveDebugSession")


_providers: bool | None = None


def providers_supported() -> bool:
    """Feature detection: the provider base class and the SB registration call exist.

    Worked out once (the locate-module callback asks too, where LLDB holds
    its module locks: no import there after the first)."""
    global _providers
    if _providers is None:
        _providers = hasattr(lldb.SBTarget, "RegisterScriptedFrameProvider")
        if _providers:
            try:
                importlib.import_module("lldb.plugins.scripted_frame_provider")
            except Exception:  # noqa: BLE001
                _providers = False
    return _providers


# True while StopHook (hooks.py) registers a provider: LLDB 23 runs the
# provider at once, inside the hook, where it must not read input frames'
# registers (provider.py). Survives a re-import of the package.
in_stop_hook = False


class Registrations:
    """What the plugin registered with LLDB in this session, and what it
    said or saw once: read and written by ``registry`` (the provider),
    ``hooks`` (the stop-hook) and ``overrides`` (the command overrides).

    One object for the session, ``registrations`` below: a re-import of the
    package reloads only ``lldb_plugin/__init__.py``, so it survives one as
    ``_routes`` does, and the plugin registers nothing twice.
    """

    def __init__(self) -> None:
        # target key -> the provider's id there (0: none, on purpose).
        self.provider_ids: dict[object, int] = {}
        # Where the hook was added ("dummy", or ("t", target key)) and its
        # stop-hook id there; a target primed from the dummy target has the
        # dummy's hooks, ids and all.
        self.hooked: set[object] = set()
        self.hook_ids: dict[object, int] = {}
        # Targets whose hook starts at the next stop (``overrides.before_connect``).
        self.late: set[object] = set()
        # The dummy target's hook starts at the next stop, for the target a
        # connection makes from it; put back at that stop (``hooks.dummy_hook``).
        self.dummy_late = False
        # The debugger whose commands are overridden (an override's callback
        # is given only the command's words).
        self.debugger: lldb.SBDebugger | None = None
        # The ctypes callbacks LLDB holds where its binding lacks the overrides
        # (``overrides._sb_set_override``): alive as long as the session.
        self.c_callbacks: list[object] = []
        self.said_unsupported = False
        # The broadcaster ``registry`` waits for LLDB's event thread with.
        self.marker: lldb.SBBroadcaster | None = None
        # (target key, pid) of the stops ``hooks.say_if_stop_reasons_lost`` looked at.
        self.first_stops: set[tuple[object, int]] = set()


registrations = Registrations()
