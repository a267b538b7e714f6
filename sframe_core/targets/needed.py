"""The shared libraries a program needs, found as the dynamic loader finds them.

A debugger creates a library's module under the name the dynamic loader
gives it (``link_map``'s ``l_name``: the directory of the search-path entry
it was found in, ``/``, the ``DT_NEEDED`` name; for a library found through
``ld.so.cache``, the cache's path). For a debugger that must be handed a
module before it creates it (LLDB before 17 has no locate-module callback),
this gives those names ahead of the run, in the dynamic loader's order: the
program's own ``DT_RPATH``, ``LD_LIBRARY_PATH``, ``DT_RUNPATH``, then
``ld.so.cache`` and the system's directories (a library installed in
``/usr/local/lib`` and ``ldconfig``'d is found as ld.so finds it). Libraries
a program ``dlopen``s are not named anywhere ahead: not here either.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from functools import lru_cache
from typing import NamedTuple

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.segments import InterpSegment

from ..base.errors import SFrameError
from ..base.files import open_elf

__all__ = ["needed_libraries"]


# The dynamic loader's cache (glibc 2.32+: the "new" format, alone or after
# the old one) and the directories it searches after it (Debian's multiarch
# ones first: what ``ld.so --help`` lists as the system search path).
LD_SO_CACHE = "/etc/ld.so.cache"
_NEW_MAGIC = b"glibc-ld.so.cache1.1"
_OLD_MAGIC = b"ld.so-1.7.0"
_MULTIARCH = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu",
              "EM_S390": "s390x-linux-gnu", "EM_386": "i386-linux-gnu"}


class _Object(NamedTuple):
    """What the search reads of one ELF file, once."""

    machine: tuple[str, int]  # e_machine, ELF class
    interpreter: str | None  # PT_INTERP
    needed: tuple[str, ...]  # DT_NEEDED
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


def _read(path: str) -> _Object | None:
    """``path``'s ``_Object``, or None when it is no readable ELF file."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return _read_at(path, (found.st_mtime_ns, found.st_size, found.st_ino))


@lru_cache(maxsize=256)
def _read_at(path: str, stamp: tuple[int, int, int]) -> _Object | None:
    """``_read`` for the file as ``stamp`` saw it: a program and its
    libraries are looked at again at each ``target create``."""
    del stamp
    try:
        with open_elf(path) as stream:
            elf = ELFFile(stream)
            machine = (elf["e_machine"], elf.elfclass)
            try:
                interpreter = next((str(segment.get_interp_name())
                                    for segment in elf.iter_segments()
                                    if isinstance(segment, InterpSegment)), None)
            except (ValueError, LookupError):
                interpreter = None
            try:
                needed, rpath, runpath = _dynamic(elf)
            except (ValueError, LookupError):
                needed, rpath, runpath = [], [], []  # listed, its own needs unknown
    except (SFrameError, OSError, ValueError, LookupError):
        return None
    return _Object(machine, interpreter, tuple(needed), tuple(rpath), tuple(runpath))


def _machine(path: str) -> tuple[str, int] | None:
    """(e_machine, ELF class) of ``path``, or None when it is no readable ELF file."""
    found = _read(path)
    return found.machine if found is not None else None


def system_dirs(machine: str) -> list[str]:
    """The directories the dynamic loader searches last, for ``machine``'s programs."""
    tuple_ = _MULTIARCH.get(machine)
    return ([f"/lib/{tuple_}", f"/usr/lib/{tuple_}"] if tuple_ else []) + ["/lib", "/usr/lib"]


@lru_cache(maxsize=4)
def _cache_entries(path: str, stamp: tuple[int, int]) -> dict[str, list[str]]:
    """name -> paths, in the cache's order (``stamp``: its mtime and size, so a
    new ``ldconfig`` is read anew). A file that is not such a cache, or is cut
    short, gives what could be read of it: this only says where to look ahead."""
    del stamp
    try:
        with open(path, "rb") as stream:
            data = stream.read(64 << 20)
    except OSError:
        return {}
    start = 0
    if data.startswith(_OLD_MAGIC):
        if len(data) < 16:
            return {}
        (old_count,) = struct.unpack_from("<I", data, 12)
        start = (16 + 12 * old_count + 7) & ~7
    if data[start:start + len(_NEW_MAGIC)] != _NEW_MAGIC or len(data) < start + 48:
        return {}
    (count,) = struct.unpack_from("<I", data, start + 20)
    entries: dict[str, list[str]] = {}

    def string(offset: int) -> str | None:
        at = start + offset
        end = data.find(b"\0", at)
        return data[at:end].decode("utf-8", "surrogateescape") if 0 <= at < end else None

    for index in range(min(count, (len(data) - start - 48) // 24)):
        _flags, key, value, _os, hwcap = struct.unpack_from("<iIIIQ", data, start + 48 + 24 * index)
        if hwcap:
            continue  # a glibc-hwcaps subdirectory: which one ld.so takes depends on the CPU
        name, where = string(key), string(value)
        if name and where:
            entries.setdefault(name, []).append(where)
    return entries


def cache_lookup(name: str, machine: tuple[str, int], cache: str = LD_SO_CACHE) -> str | None:
    """The path ``cache`` gives ``name`` for a program of ``machine`` (e_machine, class)."""
    try:
        found = os.stat(cache)
    except OSError:
        return None
    for candidate in _cache_entries(cache, (found.st_mtime_ns, found.st_size)).get(name, []):
        if _machine(candidate) == machine:
            return candidate
    return None


def _dynamic(elf: ELFFile) -> tuple[list[str], list[str], list[str]]:
    """(DT_NEEDED names, DT_RPATH entries, DT_RUNPATH entries) of ``elf``."""
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for section in elf.iter_sections():
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


def needed_libraries(path: str, env: Mapping[str, str] | None = None, depth: int = 4,
                     cache: str | None = LD_SO_CACHE, system: bool = True) -> list[str]:
    """The libraries ``path`` needs (and they need, ``depth`` levels down),
    by the names the dynamic loader gives them; ``cache`` None or ``system``
    False: only those the program's own search path finds.

    Unreadable files are skipped: this only says where to look ahead.
    """
    env = os.environ if env is None else env
    program = _read(path)
    if program is None:
        return []
    machine = program.machine
    last = system_dirs(machine[0]) if system else []
    library_path = [e for e in env.get("LD_LIBRARY_PATH", "").split(":") if e]
    found: list[str] = []
    seen: set[str] = set()
    interpreter = program.interpreter
    if interpreter:
        # A DT_NEEDED of the loader's own name (libc's) is the loader itself,
        # already loaded under its PT_INTERP name: not searched for.
        seen.add(os.path.basename(interpreter))
        if system and os.path.isfile(interpreter):
            found.append(interpreter)
    todo: list[tuple[str, list[str], int]] = [(path, [], 0)]
    while todo:
        current, inherited, level = todo.pop(0)
        read = _read(current)
        if read is None:
            continue
        origin = os.path.dirname(os.path.realpath(current))
        rpath, runpath = _expand(list(read.rpath), origin), _expand(list(read.runpath), origin)
        # DT_RPATH (the object's, then its loaders') only where there is no DT_RUNPATH.
        first = [] if runpath else rpath + inherited
        for name in read.needed:
            if name in seen:
                continue
            seen.add(name)
            where = ([name] if "/" in name else
                     [os.path.join(d, name) for d in (*first, *library_path, *runpath)])
            hit = next((os.path.normpath(p) for p in where
                        if os.path.isfile(p) and _machine(p) == machine), None)
            if hit is None and "/" not in name:
                hit = cache_lookup(name, machine, cache) if cache else None
                hit = hit or next((p for p in (os.path.join(d, name) for d in last)
                                   if os.path.isfile(p) and _machine(p) == machine), None)
            if hit is None:
                continue
            found.append(hit)
            if level + 1 < depth:
                todo.append((hit, first, level + 1))
    return found
