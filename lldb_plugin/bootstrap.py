"""Make ``sframe_core`` and pyelftools importable from LLDB's own Python.

LLDB embeds the Python it was built against, which is rarely the project's
virtualenv. ``ensure()`` adds, in order: the checkout beside this package
(where ``sframe_core`` lives when the plugin is imported from a checkout),
then the site-packages of ``$VIRTUAL_ENV``, of the checkout's ``.venv`` and of
the user site, with ``site.addsitedir`` (which also honours ``.pth`` files,
so ``pip install -e`` works). Directories are appended, never prepended: what
LLDB's Python already has wins. Nothing here imports ``lldb``.
"""

from __future__ import annotations

import glob
import os
import site
import sys

__all__ = ["ensure", "missing", "CHECKOUT"]

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)


def _importable(name: str) -> bool:
    import importlib
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        return False


def _site_dirs(prefix: str) -> list[str]:
    if not prefix or not os.path.isdir(prefix):
        return []
    found = sorted(glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages")))
    # Prefer the one matching LLDB's Python version, then the others.
    mine = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found.sort(key=lambda d: 0 if f"{os.sep}{mine}{os.sep}" in d else 1)
    return found


def _candidates() -> list[str]:
    dirs: list[str] = []
    dirs += _site_dirs(os.environ.get("VIRTUAL_ENV", ""))
    dirs += _site_dirs(os.path.join(CHECKOUT, ".venv"))
    try:
        user = site.getusersitepackages()
        if isinstance(user, str):
            dirs.append(user)
    except Exception:  # noqa: BLE001
        pass
    return [d for d in dirs if os.path.isdir(d)]


def _preload_rlcompleter() -> None:
    """Import ``rlcompleter`` with ``readline`` hidden, if ``readline`` is LLDB's stub.

    LLDB registers its own built-in ``readline`` module (``lldb_editline``) that
    has no ``set_completer``; ``rlcompleter`` calls it at import time. pyelftools
    imports ``pdb``, and from Python 3.13 on ``pdb`` imports ``rlcompleter``, so
    reading any ELF file failed with ``AttributeError`` (Debian 13). With
    ``readline`` hidden, ``rlcompleter`` imports as on a Python without readline.
    """
    if "rlcompleter" in sys.modules:
        return
    try:
        import readline
    except Exception:  # noqa: BLE001 - no readline: rlcompleter copes by itself
        return
    if hasattr(readline, "set_completer"):
        return
    sys.modules["readline"] = None  # type: ignore[assignment]  # "import readline" raises
    try:
        import rlcompleter  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    finally:
        sys.modules["readline"] = readline


def ensure() -> None:
    """Extend ``sys.path`` until ``sframe_core`` and ``elftools`` import (idempotent)."""
    _preload_rlcompleter()
    if os.path.isdir(os.path.join(CHECKOUT, "sframe_core")) and CHECKOUT not in sys.path:
        sys.path.append(CHECKOUT)
    if _importable("elftools") and _importable("sframe_core"):
        return
    for directory in _candidates():
        if directory not in sys.path:
            site.addsitedir(directory)
        if _importable("elftools") and _importable("sframe_core"):
            return


def missing() -> str | None:
    """None when everything imports, else one line saying what is missing and how to fix it."""
    parts = []
    if not _importable("sframe_core"):
        parts.append("the sframe_core package")
    if not _importable("elftools"):
        parts.append("pyelftools")
    if not parts:
        return None
    return (f"sframe: cannot load: {' and '.join(parts)} not importable from LLDB's Python "
            f"({sys.executable or 'python'} {sys.version.split()[0]}); install with "
            f"'{sys.executable or 'python3'} -m pip install sframe-gdb' or set VIRTUAL_ENV to a "
            f"virtualenv that has it")
