"""Load sframe-gdb into GDB (13 to 18): ``source /path/to/sframe_gdb.py``.

``sframe gdbinit`` prints the line for ``~/.gdbinit``. The adapter itself is
the ``gdb_plugin`` package beside this file. GDB embeds the system's Python,
not the project's virtualenv: ``sframe_core/deps.py`` (the rule both
adapters follow) makes ``sframe_core`` and pyelftools importable, or says in
one line what to install. Sourcing this file again re-registers the unwinder,
the commands and the event handlers (the mode is kept) and does nothing else.
"""

import importlib.util
import os
import sys

import gdb


def _sframe_gdb_warn(text: str) -> None:
    gdb.write(f"warning: sframe: {text}\n", gdb.STDERR)


def _sframe_gdb_ensure(root: str, path: str) -> list[str]:
    """Run ``deps.py`` by path (sframe_core is not importable before it has
    run) and apply its rule; importlib rather than runpy, whose pkgutil
    import costs gdb's start-up a few milliseconds."""
    spec = importlib.util.spec_from_file_location("_sframe_gdb_deps", path)
    if spec is None or spec.loader is None:
        return ["sframe_core"]
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ensure(root)


def _sframe_gdb_load() -> None:
    root = os.path.dirname(os.path.realpath(os.path.abspath(__file__)))
    deps = os.path.join(root, "sframe_core", "deps.py")
    missing = _sframe_gdb_ensure(root, deps) if os.path.isfile(deps) else ["sframe_core"]
    if "pyelftools" in missing:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        _sframe_gdb_warn("cannot import pyelftools; run: python3 -m pip install --user pyelftools "
                         f"(for the Python gdb embeds, {version}: {sys.executable or 'python3'})")
        return
    try:
        from gdb_plugin.plugin import register
    except ImportError as exc:
        _sframe_gdb_warn(f"cannot import the GDB adapter ({exc}); keep sframe_gdb.py next to the "
                         "sframe_core and gdb_plugin directories, or pip install sframe-gdb")
        return
    register()


_sframe_gdb_load()
