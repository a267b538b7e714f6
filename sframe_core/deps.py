"""Where sframe_core and pyelftools come from inside a debugger's embedded Python.

GDB and LLDB run the Python they were built with, not the project's
virtualenv. Both adapters follow this one rule, so that they load the same
code the same way:

1. ``root``, the directory that holds ``sframe_core`` beside the adapter
   (a checkout, or the site-packages pip installed into), goes *first* on
   ``sys.path``: an adapter always runs with the core of its own copy, never
   with another version that happens to be installed.
2. When pyelftools (or ``sframe_core`` itself, or the optional capstone)
   does not import, candidate
   site-packages directories are *appended* with ``site.addsitedir`` (which
   also reads ``.pth`` files, so editable installs work), best first, until
   it does: ``$VIRTUAL_ENV``, the checkout's ``.venv`` (beside ``root`` or one
   level up), the user site, the site directories of the debugger's Python,
   and ``root`` itself. A package the debugger's Python already has wins.

This module imports only the standard library and nothing of sframe_core: a
loader runs it by path (``runpy.run_path``) before sframe_core is importable.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import site
import sys

__all__ = ["ensure", "missing", "python_version"]

# Import names, and what to tell a user to install.
_NEEDED = (("sframe_core", "the sframe_core package"), ("elftools", "pyelftools"))
# Looked for the same way, but the adapters work without it: capstone
# decodes functions for the callee-saved register rules (sframe_core/analysis/saved.py);
# without it those registers are unknown in caller frames, as without the
# analysis.
_OPTIONAL = ("capstone",)


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _importable(name: str) -> bool:
    """Is ``name`` on the path? Found, not imported: pyelftools and capstone
    cost a debugger's start-up a second to import, and are imported only
    where they are used (a warm symbol-file route needs neither)."""
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:  # noqa: BLE001 - whatever an embedded Python raises, the module is unusable
        return False


def _site_dirs(prefix: str) -> list[str]:
    """A virtualenv's site-packages, the one of this Python's version first
    (pyelftools is pure Python, so another 3.x also does)."""
    if not prefix or not os.path.isdir(prefix):
        return []
    found = glob.glob(os.path.join(prefix, "lib", f"python{python_version()}", "site-packages"))
    found += sorted(glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages")))
    return found


def _candidates(root: str) -> list[str]:
    found: list[str] = []
    for venv in (os.environ.get("VIRTUAL_ENV") or "", os.path.join(root, ".venv"),
                 os.path.join(os.path.dirname(root), ".venv")):
        found += _site_dirs(venv)
    try:
        user = site.getusersitepackages()
        if isinstance(user, str):
            found.append(user)
    except Exception:  # noqa: BLE001 - site is optional in embedded Pythons
        pass
    try:
        found += site.getsitepackages()
    except Exception:  # noqa: BLE001
        pass
    found.append(root)  # pip-installed: .pth files of an editable install live here
    seen: list[str] = []
    for path in found:
        if path and os.path.isdir(path) and path not in seen:
            seen.append(path)
    return seen


def missing() -> list[str]:
    """What a user must install, in words; empty when everything imports."""
    return [words for name, words in _NEEDED if not _importable(name)]


def ensure(root: str) -> list[str]:
    """Apply the rule for the adapter whose copy of sframe_core is under
    ``root``; idempotent. Returns ``missing()``."""
    if os.path.isdir(os.path.join(root, "sframe_core")) and root not in sys.path:
        sys.path.insert(0, root)
    if not missing() and _optional_found():
        return []
    for path in _candidates(root):
        # The directory alone first: its ``.pth`` files are read only when
        # what is missing is not in it. An editable install's ``.pth``
        # (sframe-gdb's own, in the checkout's .venv) runs a finder that
        # imports pathlib and urllib: 8 ms of every debugger's start-up for
        # packages the directory itself holds.
        if path not in sys.path:
            sys.path.append(path)
            importlib.invalidate_caches()
            if not missing() and _optional_found():
                return []
        site.addsitedir(path)
        if not missing() and _optional_found():
            return []
    return missing()


def _optional_found() -> bool:
    return all(_importable(name) for name in _OPTIONAL)
