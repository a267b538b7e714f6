"""The shared libraries a program names in its own search path, found as the dynamic loader finds them.

A debugger creates a library's module under the name the dynamic loader
gives it (``link_map``'s ``l_name``: the directory of the search-path entry
it was found in, ``/``, the ``DT_NEEDED`` name). For a debugger that must
be handed a module before it creates it (LLDB before 17 has no
locate-module callback), this gives those names ahead of the run, for the
libraries found through the program's own ``DT_RPATH``/``DT_RUNPATH`` and
``LD_LIBRARY_PATH``, in the dynamic loader's order. The system's
directories and ``ld.so.cache`` are not searched: their libraries are the
distribution's, and a name not found here is simply not handed over.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from ..base.errors import SFrameError
from ..base.files import open_elf

__all__ = ["needed_libraries"]


def _dynamic(path: str) -> tuple[list[str], list[str], list[str]]:
    """(DT_NEEDED names, DT_RPATH entries, DT_RUNPATH entries) of ``path``."""
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    with open_elf(path) as stream:
        for section in ELFFile(stream).iter_sections():
            if not isinstance(section, DynamicSection):
                continue
            for tag in section.iter_tags():
                # pyelftools sets a string tag's value as an attribute named after it.
                values = vars(tag)
                kind = tag.entry.d_tag
                if kind == "DT_NEEDED":
                    needed.append(values["needed"])
                elif kind == "DT_RPATH":
                    rpath += values["rpath"].split(":")
                elif kind == "DT_RUNPATH":
                    runpath += values["runpath"].split(":")
    return needed, rpath, runpath


def _expand(entries: list[str], origin: str) -> list[str]:
    """Search-path entries with ``$ORIGIN`` expanded; entries the loader
    expands otherwise (``$LIB``, ``$PLATFORM``) or that are empty are dropped."""
    out = []
    for entry in entries:
        entry = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        if entry and "$" not in entry:
            out.append(entry)
    return out


def needed_libraries(path: str, env: Mapping[str, str] | None = None,
                     depth: int = 4) -> list[str]:
    """The libraries ``path`` needs (and they need, ``depth`` levels down)
    that its own search path finds, by the names the dynamic loader gives them.

    Unreadable files are skipped: this only says where to look ahead.
    """
    env = os.environ if env is None else env
    library_path = [e for e in env.get("LD_LIBRARY_PATH", "").split(":") if e]
    found: list[str] = []
    seen: set[str] = set()
    todo: list[tuple[str, list[str], int]] = [(path, [], 0)]
    while todo:
        current, inherited, level = todo.pop(0)
        try:
            needed, rpath, runpath = _dynamic(current)
        except (SFrameError, OSError, ValueError, LookupError):
            continue
        origin = os.path.dirname(os.path.realpath(current))
        rpath, runpath = _expand(rpath, origin), _expand(runpath, origin)
        # DT_RPATH (the object's, then its loaders') only where there is no DT_RUNPATH.
        first = [] if runpath else rpath + inherited
        for name in needed:
            if name in seen:
                continue
            seen.add(name)
            where = ([name] if "/" in name else
                     [os.path.join(d, name) for d in (*first, *library_path, *runpath)])
            hit = next((os.path.normpath(p) for p in where if os.path.isfile(p)), None)
            if hit is None:
                continue
            found.append(hit)
            if level + 1 < depth:
                todo.append((hit, first, level + 1))
    return found
