"""What gdb was started with (``/proc/self/cmdline``): the few options
that change what the plugin should do, read once.

gdb's Python has no call for its own command line, and these options
matter before anything else could tell: ``-batch`` (no prompt will come, so
a missing symbol file is made before gdb goes on) and an MI interpreter (a
front end reads every record, so the plugin's load line, which the twin's
session does not have, is left out).
"""

from __future__ import annotations

import functools

__all__ = ["batch_mode", "mi_mode", "options"]

# gdb's options that take a value as the next argument (gdb(1); one or two
# dashes, as getopt_long_only reads them).
_VALUED = frozenset({"ex", "iex", "eval-command", "init-eval-command", "x", "ix", "command",
                     "init-command", "p", "pid", "c", "core", "s", "symbols", "e", "exec", "se",
                     "cd", "d", "directory", "D", "data-directory", "l", "i", "interpreter",
                     "tty", "b"})


def options(words: list[str]) -> dict[str, str]:
    """gdb's options in a command line without its argv[0], by name without
    dashes: their values (``-i=mi`` or ``-i mi``), "" for flags. Stops at
    ``--args`` (the program's own arguments follow its name)."""
    found: dict[str, str] = {}
    pending: str | None = None
    for word in words:
        if pending is not None:
            found[pending] = word
            pending = None
            continue
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name, sep, value = word.lstrip("-").partition("=")
        if name == "args":
            break
        if not sep and name in _VALUED:
            pending = name
            continue
        found[name] = value
    return found


@functools.cache
def _own() -> dict[str, str]:
    try:
        with open("/proc/self/cmdline", "rb") as stream:
            words = stream.read().decode("utf-8", "replace").split("\0")[1:]
    except OSError:
        words = []
    return options(words)


def batch_mode() -> bool:
    """Was gdb started with ``-batch`` (or ``-batch-silent``)? Its commands
    then run once, with no prompt where a file a worker made later would be
    attached, and gdb exits: a missing file is made before gdb goes on,
    since the user waits for exactly the answer it gives."""
    found = _own()
    return "batch" in found or "batch-silent" in found


def mi_mode() -> bool:
    """Was gdb started with an MI interpreter (``-i=mi``, ``--interpreter mi3``),
    as IDEs start it?"""
    found = _own()
    return any(found.get(name, "").startswith("mi") for name in ("i", "interpreter"))
