"""Make ``sframe_core`` and pyelftools importable from LLDB's own Python.

LLDB embeds the Python it was built against, which is rarely the project's
virtualenv. ``ensure()`` applies the rule both adapters share,
``sframe_core/deps.py`` (run by path: ``sframe_core`` is not importable yet),
to the directory that holds this package and ``sframe_core``, after working
around LLDB's ``readline`` stub. Nothing here imports ``lldb``.
"""

from __future__ import annotations

import os
import runpy
import sys

__all__ = ["ensure", "missing", "CHECKOUT"]

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)


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
    """Make ``sframe_core`` and ``elftools`` importable if they can be (idempotent)."""
    global _missing
    _preload_rlcompleter()
    deps = os.path.join(CHECKOUT, "sframe_core", "deps.py")
    _missing = runpy.run_path(deps)["ensure"](CHECKOUT) if os.path.isfile(deps) else [
        "the sframe_core package"]


_missing: list[str] = ["the sframe_core package", "pyelftools"]


def missing() -> str | None:
    """None when everything imports, else one line saying what is missing and how to fix it."""
    if not _missing:
        return None
    return (f"sframe: cannot load: {' and '.join(_missing)} not importable from LLDB's Python "
            f"({sys.executable or 'python'} {sys.version.split()[0]}); install with "
            f"'{sys.executable or 'python3'} -m pip install sframe-gdb' or set VIRTUAL_ENV to a "
            f"virtualenv that has it")
