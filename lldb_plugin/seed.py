"""The module put where ``target create FILE`` finds it.

LLDB before 22 loses a module's addresses when a symbol file replaces its
debug information (``state.keeps_addresses_when_debug_info_is_replaced``);
what serves such a module is a copy of it whose ``.debug_frame`` holds its
SFrame rows (``sframe_core.symfiles.module_copy``), handed to LLDB as the
module itself. ``target create FILE`` (``file FILE``, ``lldb FILE``) finds
an executable in LLDB's shared module list first, by the module's file or
its platform file, before it reads FILE: a module made here from the copy,
with FILE as its platform file (``SBModule(SBModuleSpec)``), is the one the
target then gets. LLDB prints FILE as the current executable and launches
FILE itself (its platform file: ``/proc/PID/exe`` and ``argv[0]`` are FILE);
``target list``, ``image list`` and the "Process N launched:" line name the
copy. A stripped FILE's module is made the same way, from FILE with our
symbol file as its symbol file from the start (``_module_spec``): LLDB then
builds its symbol table with the file's function symbols.

When: before ``target create`` (and ``file``), from the plugin's override
of the command (``overrides``: LLDB's Python binding from 19, its C++
method through ``ctypes`` on 14 and 16; where neither is there, a typed
``target create`` gets nothing and the status line says so), and at import
for the file on LLDB's own command line (``lldb FILE``, the plugin imported
from ``~/.lldbinit``), on every LLDB. 14 and 16 have no locate-module
callback for libraries: there the libraries FILE needs, found as the
dynamic loader finds them (``sframe_core.targets.needed``), are put in the
list with it, under the names the dynamic loader will give them.

LLDB's shared module list checks a module's own file (the copy) for
changes, not FILE: a module made from the copy of an older FILE would be
found for a rebuilt one. So whenever the plugin runs (each override, stop,
``sframe`` command), the copy of a FILE that changed since is marked
changed (its modification time), which makes LLDB drop it from the list at
the next lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import lldb

from sframe_core.base.errors import SFrameError
from sframe_core.base.files import elf_layout, open_elf

from . import locate
from .state import enabled, keeps_addresses_when_debug_info_is_replaced

__all__ = ["seed", "seed_command_line", "refresh", "driver_files", "remake", "stripped",
           "section_names"]

# FILE -> (the module made for it, the copy it is made from or None, FILE's stat then).
_seeded: dict[str, tuple[lldb.SBModule, str | None, tuple[int, int, int]]] = {}


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


def refresh() -> None:
    """Mark the copies of FILEs changed since they were seeded as changed too."""
    for path, (_module, copy, seen) in list(_seeded.items()):
        if _stat(path) == seen:
            continue
        del _seeded[path]
        if copy is None:
            continue  # made from FILE itself: LLDB sees the change
        try:
            later = time.time() + 1
            os.utime(copy, (later, later))
        except OSError:
            pass


def seed(path: str) -> bool:
    """Put the module ``target create PATH`` should get in LLDB's shared
    module list (``_module_spec``), and where LLDB has no locate-module
    callback (14, 16) those of the libraries PATH's own search path finds;
    True when PATH's was put there (or was already)."""
    refresh()
    if not enabled():
        return False  # SFRAME_LLDB_ROUTE=provider: LLDB gets its own files
    path = os.path.abspath(os.path.expanduser(path))
    done = _seed_one(path)
    if not locate.supported() and os.path.isfile(path):
        from sframe_core.targets.needed import needed_libraries
        for library in needed_libraries(path):
            _seed_one(library)
    return done


def _seed_one(path: str) -> bool:
    if path in _seeded:
        return True
    try:
        found = _module_spec(path) if os.path.isfile(path) else None
    except (SFrameError, OSError, ValueError):
        return False  # said once by the stop-hook or 'sframe status', which route it again
    seen = _stat(path)
    if found is None or seen is None:
        return False
    spec, copy = found
    module = lldb.SBModule(spec)
    if not module.IsValid():
        return False
    _seeded[path] = (module, copy, seen)
    if copy is not None:
        locate.note_copy(copy, path, "LLDB found it in its module list, put there by the plugin")
    return True


def _module_spec(path: str) -> tuple[lldb.SBModuleSpec, str | None] | None:
    """The module for ``path`` and the copy it is made from (None: ``path`` itself).

    - Before 22, with debug information: the copy with the SFrame rows, with
      ``path`` as its platform file.
    - Without debug information: ``path`` with our symbol file as its symbol
      file from the start. Added later, LLDB keeps the symbol table it built
      without the file when the module had no symbol file of its own (a
      stripped one: only ``.dynsym``): frames without names, and on 14 and 16
      no unwind plan from the file at all. And a core's modules are served as
      the core loads, where LLDB before 21 runs no stop-hook.
    - Else None (22+ with debug information: the stop-hook adds the file).
    """
    names = section_names(path)
    # Before 22 nothing would serve the module the target then gets (no
    # frame provider; a -g one cannot take its file later): a large one's
    # file is made now, said in one line (``locate._say_making``).
    handed = locate.handed(path, now=not keeps_addresses_when_debug_info_is_replaced())
    if handed is None:
        return None
    made, is_copy = handed
    spec = lldb.SBModuleSpec()
    if is_copy:
        spec.SetFileSpec(lldb.SBFileSpec(made))
        spec.SetPlatformFileSpec(lldb.SBFileSpec(path))
        return spec, made
    if ".debug_info" in names:
        return None  # LLDB 22+: added at the first stop, as it always was
    spec.SetFileSpec(lldb.SBFileSpec(path))
    spec.SetSymbolFileSpec(lldb.SBFileSpec(made))
    return spec, None


# lldb's options that take a value (``lldb --help``); -f/--file names the program.
_VALUED = frozenset({"-a", "--arch", "-c", "--core", "-o", "--one-line", "-O",
                     "--one-line-before-file", "-s", "--source", "-S", "--source-before-file",
                     "-k", "--one-line-on-crash", "-K", "--source-on-crash", "-n",
                     "--attach-name", "-p", "--attach-pid", "-l", "--script-language",
                     "-R", "--repl-language", "-f", "--file", "--capture-path"})


def driver_files(argv: Sequence[str]) -> list[str]:
    """The program ``lldb ARGS`` creates its target from (``lldb FILE``,
    ``lldb -f FILE``, ``lldb -- FILE ARGS``), as a list of at most one."""
    words = list(argv)
    while words:
        word = words.pop(0)
        if word == "--":
            return words[:1]
        name = word.split("=", 1)[0]
        if name in ("-f", "--file"):
            if "=" in word:
                return [word.split("=", 1)[1]]
            return words[:1]
        if word.startswith("-") and len(word) > 1:
            if name in _VALUED and "=" not in word and words:
                words.pop(0)
            continue
        return [word]
    return []


def seed_command_line() -> None:
    """Seed the program on LLDB's own command line (the import from ``~/.lldbinit``
    comes before the target ``lldb FILE`` creates)."""
    try:
        with open("/proc/self/cmdline", "rb") as stream:
            argv = [a.decode(errors="replace") for a in stream.read().split(b"\0")[:-1]]
    except OSError:
        return
    # The driver may run under the dynamic loader (``ld.so .../lldb ARGS``).
    at = next((i for i, a in enumerate(argv) if os.path.basename(a).startswith("lldb")), None)
    if at is None:
        return
    for path in driver_files(argv[at + 1:]):
        seed(path)


def section_names(path: str) -> set[str]:
    """The names of the sections with contents of the module at ``path``."""
    with open_elf(path) as stream:
        layout = elf_layout(stream, path)
    return {s.name for s in layout.sections if s.size}


def stripped(path: str) -> bool:
    """Has the module at ``path`` neither a symbol table nor debug information
    (``strip --strip-all``): LLDB names its functions only from our file's?"""
    return not section_names(path) & {".symtab", ".debug_info"}


def remake(target: lldb.SBTarget, files: dict[str, str]) -> set[str]:
    """Give the stripped modules of ``target`` at ``files``' paths their
    symbol files (``files``: path -> symbol file) as LLDB makes them anew;
    the paths it did.

    A module's symbol table is built once, when the target is created: a
    symbol file added to a stripped module later is read for its CFI, not
    for its function symbols (``Module::SetSymbolFileFileSpec`` clears the
    table of the symbol file it replaces, and a stripped module had none),
    so its frames have no names (the plugin imported after ``target
    create``). Before a process exists nothing holds the module but the
    target and LLDB's shared module list: every module is taken out of the
    target, those modules dropped from the list
    (``SBDebugger.MemoryPressureDetected``: the modules no one holds), made
    again with the symbol file from the start (``SBModule(SBModuleSpec)``),
    and all put back in their order (the first stays the executable): the
    modules from the first of them on. Observed on 14, 16, 19, 20, 21, 22
    and 23. The caller holds no SBModule of them. A module LLDB still holds
    elsewhere comes back as it was (not in the result). Not done where a
    breakpoint has a location in a module to take out: an address
    breakpoint (``-a ADDR -s MODULE``, all a stripped module has) then finds
    no location in the module made again (its address was the old
    module's section's), and a breakpoint is worth more than names."""
    if not files or target.GetProcess().IsValid():
        return set()
    paths = [target.GetModuleAtIndex(i).GetFileSpec().fullpath
             for i in range(target.GetNumModules())]
    first = next((i for i, path in enumerate(paths) if path in files), None)
    if first is None or _breakpoints_in(target, set(paths[first:])):
        return set()
    kept = [target.GetModuleAtIndex(i) if path not in files else None
            for i, path in enumerate(paths)][first:]
    while target.GetNumModules() > first:
        if not target.RemoveModule(target.GetModuleAtIndex(first)):
            break
    lldb.SBDebugger.MemoryPressureDetected()
    done = set()
    for path, module in zip(paths[first:], kept, strict=True):
        if module is None:
            spec = lldb.SBModuleSpec()
            spec.SetFileSpec(lldb.SBFileSpec(path))
            spec.SetSymbolFileSpec(lldb.SBFileSpec(files[path]))
            module = lldb.SBModule(spec)
            if os.path.realpath(module.GetSymbolFileSpec().fullpath or "") == \
                    os.path.realpath(files[path]):
                done.add(path)
        if module.IsValid():
            target.AddModule(module)
    return done


def _breakpoints_in(target: lldb.SBTarget, paths: set[str | None]) -> bool:
    """Has a breakpoint of ``target`` a location in a module at one of ``paths``?"""
    for i in range(target.GetNumBreakpoints()):
        breakpoint = target.GetBreakpointAtIndex(i)
        for j in range(breakpoint.GetNumLocations()):
            module = breakpoint.GetLocationAtIndex(j).GetAddress().GetModule()
            if module.IsValid() and module.GetFileSpec().fullpath in paths:
                return True
    return False

