"""Whether LLDB's own Python module works, before the plugin uses it.

Debian's lldb-14 looks for its ``lldb`` package where python3-lldb-14 does
not put it; ``import lldb`` then finds the system's
``/usr/lib/python3/dist-packages/lldb``, a directory with ``_lldb.so`` and no
``__init__.py``: an empty namespace package. LLDB itself prints tracebacks
(``No module named 'lldb.embedded_interpreter'``) and every SB class is
missing. The plugin cannot work there, and the user can repair it: this says
so in one line, with the directory that holds the real package.
"""

from __future__ import annotations

import glob
import os
import re

__all__ = ["broken_lldb_module"]

_LIBLLDB = re.compile(r"(\S*/liblldb(?:-(\d+))?\.so[.\d]*)$")


def broken_lldb_module() -> str | None:
    """None when ``import lldb`` gives LLDB's SB API, else the line to print."""
    try:
        import lldb
        if hasattr(lldb, "SBDebugger") and hasattr(lldb, "SBCommandReturnObject"):
            return None
        found = ", ".join(getattr(lldb, "__path__", None) or [getattr(lldb, "__file__", "?")])
    except Exception as exc:  # noqa: BLE001 - any import failure is the same diagnosis
        found = f"{type(exc).__name__}: {exc}"
    package = _package_dir()
    repair = (f"repair it with PYTHONPATH={package}" if package is not None else
              "repair it by setting PYTHONPATH to the directory that holds LLDB's own 'lldb' "
              "package (with embedded_interpreter.py)")
    return (f"sframe: cannot load: LLDB's own Python module is broken ('import lldb' gives "
            f"no SB API: {found}); {repair}")


def _package_dir() -> str | None:
    """The ``lib/python3.X/{dist,site}-packages`` of the liblldb this process runs."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    for line in lines:
        m = _LIBLLDB.search(line)
        if m is None:
            continue
        real = os.path.realpath(m.group(1))
        roots = [os.path.dirname(os.path.dirname(real))]
        libdir = os.path.dirname(real)
        if m.group(2):
            roots.insert(0, os.path.join(os.path.dirname(libdir), f"llvm-{m.group(2)}"))
        for root in roots:
            pattern = os.path.join(root, "lib", "python3*", "*-packages", "lldb",
                                   "embedded_interpreter.py")
            for hit in sorted(glob.glob(pattern)):
                return os.path.dirname(os.path.dirname(hit))
    return None
