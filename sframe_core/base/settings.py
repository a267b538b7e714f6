"""Every ``SFRAME_*`` environment variable the project reads, in one table,
each read by one rule.

They are read where they apply, at the moment they apply (a test or a
script sets one for the process it starts, and a debugger's worker inherits
the debugger's), but only through this module: a switch is off for ``0``,
``off``, ``no`` or ``false`` (any case) and on for anything else; a number
that is empty, malformed or negative is its default; a choice not in its
list is its default. docs/settings.md is this table (a test holds them
equal).
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["Setting", "SETTINGS", "OFF", "switch", "number", "choice"]

OFF = ("0", "off", "no", "false")


class Setting(NamedTuple):
    """One variable: what it holds, its default and what it is for."""

    name: str
    kind: str  # "switch", "number" or "choice"
    default: str  # as it would be written in the environment ("" for none)
    what: str
    choices: tuple[str, ...] = ()
    tests: bool = False  # meant for tests and benchmarks, not users


SETTINGS = {setting.name: setting for setting in (
    Setting("SFRAME_GDB_SYMBOL_FILES", "choice", "auto",
            "how gdb's sessions start `set sframe symbol-files` (docs/gdb.md)",
            ("auto", "foreground", "off")),
    Setting("SFRAME_LLDB_SYMBOL_FILES", "choice", "auto",
            "`foreground`: LLDB always makes a missing symbol file before it goes on "
            "(docs/lldb.md)", ("auto", "foreground")),
    Setting("SFRAME_LLDB_ROUTE", "choice", "auto",
            "`provider`: LLDB's native route off, the frame provider alone (docs/lldb.md)",
            ("auto", "provider")),
    Setting("SFRAME_CACHE_DAYS", "number", "30",
            "symbol files unused for this many days are pruned (docs/dwarf.md, \"The cache\")"),
    Setting("SFRAME_CACHE_MAX_MB", "number", "1024",
            "the symbol-file cache is pruned to this many megabytes (docs/dwarf.md)"),
    Setting("SFRAME_ANALYSIS_CACHE", "switch", "on",
            "keep saved-register analysis results across builds (docs/dwarf.md)"),
    Setting("SFRAME_NATIVE", "switch", "on",
            "the saved-register analysis and amd64 FDEs in C where a C compiler built them "
            "(docs/dwarf.md, \"Cost\"); read as a section's analysis is made and as a symbol "
            "file asks for the C"),
    Setting("SFRAME_SAVED_REGISTERS", "switch", "on",
            "off: rows carry SFrame's CFA, RA and FP rules alone, no callee-saved register "
            "rules (symbol files get a cache entry of their own); read as a section is opened "
            "(docs/gdb.md)"),
    Setting("SFRAME_STOP_WAIT_SECONDS", "number", "",
            "the longest a stop waits for a nearly done worker (default: 0.5 s, at most half "
            "the debugger's age; 0: never)", tests=True),
    Setting("SFRAME_FOREGROUND_FDES", "number", "",
            "modules of at most this many FDEs get their symbol file before the debugger goes "
            "on, larger ones from a worker (default: by what makes the FDEs)", tests=True),
    Setting("SFRAME_SPLIT_MIN_FDES", "number", "",
            "from how many FDEs a symbol file is split between processes (default: by what "
            "makes the FDEs)", tests=True),
    Setting("SFRAME_NATIVE_FDES", "switch", "on",
            "off: a symbol file's amd64 FDEs made by the Python around the C analysis, not by "
            "`fdes.c` (the tests compare both)", tests=True),
    Setting("SFRAME_TEST_HOLD_STOPPED", "number", "0",
            "`sframe backtrace --pid` holds the process stopped this many seconds", tests=True),
)}


def _raw(name: str) -> str:
    if name not in SETTINGS:
        raise KeyError(f"{name} is not in the settings table")
    return os.environ.get(name, "").strip()


def switch(name: str) -> bool:
    text = _raw(name)
    return (text or SETTINGS[name].default).lower() not in OFF


def number(name: str) -> float | None:
    """The value, or the default (None where the default is computed by
    the caller)."""
    for text in (_raw(name), SETTINGS[name].default):
        try:
            value = float(text)
        except ValueError:
            continue
        if value >= 0:
            return value
    return None


def choice(name: str) -> str:
    text = _raw(name).lower()
    setting = SETTINGS[name]
    return text if text in setting.choices else setting.default
