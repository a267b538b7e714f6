"""Symbol files for a build-id tree (``sframe to-dwarf --build-id-dir``), the
layout debuginfod's ``-F`` scan and gdb's ``debug-file-directory`` read.

A debuginfod server hands out one debug file per build-id, and a client that
asks for it (gdb, LLDB, eu-stack) uses that file and no other. For a
stripped module whose names, lines and variables live in a separate debug
file (``objcopy --only-keep-debug``, Debian's ``-dbgsym``), the file served
must therefore carry that debug information and the ``.debug_frame`` made
from the module's ``.sframe`` together: this module finds (or checks) the
debug file of each module and decides which modules of a tree need one.
The ELF writing is ``symfile.write_symbol_file``'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

from ..base.errors import FileError, SFrameError
from ..targets.symbols import DEBUG_ROOTS
from .debug_files import build_id_path, crc32_of, debug_file_for
from .module_headers import ModuleInfo, read_module
from .symfile import write_symbol_file

__all__ = ["checked_debug_file", "find_debug_file", "debug_roots", "Job", "Outcome",
           "plan_tree", "make"]

_SHT_NOBITS, _SHT_SYMTAB = 8, 2
_PT_GNU_EH_FRAME, _PT_GNU_SFRAME = 0x6474E550, 0x6474E554


def _has_bytes(module: ModuleInfo, name: str) -> bool:
    sec = module.section(name)
    return sec is not None and sec.type != _SHT_NOBITS and sec.size > 0


def _has_symbols(module: ModuleInfo) -> bool:
    return any(sec.type == _SHT_SYMTAB and sec.size for sec in module.sections)


def checked_debug_file(module: ModuleInfo, path: str) -> ModuleInfo:
    """``path`` read as ``module``'s separate debug file, if it is one.

    It must hold debug information (``.debug_info`` or a symbol table: what
    is copied into the symbol file), and carry the module's build-id (a
    client rejects a file whose build-id is not the module's); for a module
    without build-id, the CRC its ``.gnu_debuglink`` names, when it has one.

    :raises FileError: one line naming the debug file and what is wrong.
    """
    info = read_module(path)
    if not info.has_debug_info and not _has_symbols(info):
        raise FileError(f"{path}: no debug information (.debug_info, .symtab)")
    if module.build_id:
        if info.build_id is None:
            raise FileError(f"{path}: no build-id note ({module.path} has build-id "
                            f"{module.build_id})")
        if info.build_id != module.build_id:
            raise FileError(f"{path}: build-id {info.build_id} is not that of {module.path} "
                            f"({module.build_id})")
    elif module.debuglink is not None:
        if crc32_of(path) != module.debuglink[1]:
            raise FileError(f"{path}: CRC does not match the .gnu_debuglink of {module.path}")
    return info


def debug_roots(dirs: Sequence[str]) -> tuple[str, ...]:
    """Roots to look for debug files under: the given directories (a
    ``.../.build-id`` directory stands for its parent), then ``/usr/lib/debug``."""
    roots = [os.path.dirname(d.rstrip("/")) if os.path.basename(d.rstrip("/")) == ".build-id"
             else d for d in dirs]
    return tuple(dict.fromkeys([*roots, *DEBUG_ROOTS]))


def find_debug_file(module: ModuleInfo, roots: Sequence[str]) -> ModuleInfo | None:
    """The separate debug file of ``module``, or None.

    Where gdb looks (``debug_files.debug_file_for``: by build-id under each root; the
    ``.gnu_debuglink`` name beside the module, in its ``.debug`` directory,
    under each root followed by the module's directory), then the debuglink
    name directly in each root (a flat directory of ``NAME.debug`` files, as
    a build leaves them). A file that is not the module's is passed over.
    """
    found = debug_file_for(module, roots)
    if found is not None or module.debuglink is None:
        return found
    real = os.path.realpath(module.path)
    for root in roots:
        candidate = os.path.join(root, module.debuglink[0])
        if os.path.isfile(candidate) and os.path.realpath(candidate) != real:
            try:
                return checked_debug_file(module, candidate)
            except FileError:
                continue
    return None


class Job(NamedTuple):
    """One module of a tree: where its symbol file goes, from what."""

    module: str
    out: str
    debug_file: str | None  # its separate debug file; None: its own sections
    force: bool = False
    own_debug_info: bool = False  # the module has .debug_info: no client looks this file up


class Outcome(NamedTuple):
    """What became of a ``Job``: ``written``, ``current`` (left as it was) or
    ``failed`` (``text``: the one-line error)."""

    job: Job
    status: str
    text: str = ""


class Tree(NamedTuple):
    jobs: list[Job]
    errors: list[str]  # one line each: modules that cannot get a file
    skipped: int  # ELF files that need none (no .sframe, or an .eh_frame of their own)


def _needs_symbol_file(module: ModuleInfo) -> bool:
    """Has ``.sframe`` and no ``.eh_frame``: the modules a DWARF consumer
    cannot unwind alone. One with an ``.eh_frame`` is left to it (and to the
    debug file its distribution serves); a lone 4-byte terminator, which
    ``-fno-asynchronous-unwind-tables`` builds have, is none."""
    if module.sections:
        eh_frame = module.section(".eh_frame")
        return _has_bytes(module, ".sframe") and (
            eh_frame is None or eh_frame.type == _SHT_NOBITS or eh_frame.size <= 4)
    kinds = {ph[0] for ph in module.phdrs}
    return _PT_GNU_SFRAME in kinds and _PT_GNU_EH_FRAME not in kinds


def plan_tree(paths: Sequence[str], out_root: str, roots: Sequence[str],
              force: bool = False) -> Tree:
    """The jobs for the ELF files ``paths`` (a walked tree): one per build-id.

    Reads only headers, in this process: which modules need a file, their
    build-ids (the second file with a build-id already taken, a copy or a
    hard link, adds nothing) and their debug files.
    """
    jobs: list[Job] = []
    errors: list[str] = []
    skipped = 0
    taken: set[str] = set()
    for path in paths:
        try:
            module = read_module(path)
        except SFrameError as exc:
            errors.append(str(exc))
            continue
        if module.elf_type not in (2, 3) or not _needs_symbol_file(module):
            skipped += 1
            continue
        if not module.build_id:
            errors.append(f"{path}: no build-id note: a build-id tree cannot hold its symbol file")
            continue
        if module.build_id in taken:
            skipped += 1
            continue
        taken.add(module.build_id)
        found = None if module.has_debug_info else find_debug_file(module, roots)
        jobs.append(Job(path, build_id_path(out_root, module.build_id),
                        found.path if found is not None else None, force, module.has_debug_info))
    return Tree(jobs, errors, skipped)


def _current(job: Job) -> bool:
    """Is ``job.out`` there and newer than what it is made from? (A changed
    module or debug file has a newer modification time; ``--force`` remakes
    files after an upgrade of sframe-gdb.)"""
    try:
        made = os.stat(job.out).st_mtime_ns
        sources = [os.stat(job.module).st_mtime_ns]
        if job.debug_file is not None:
            sources.append(os.stat(job.debug_file).st_mtime_ns)
    except OSError:
        return False
    return made >= max(sources)


def make(job: Job) -> Outcome:
    """Write ``job``'s symbol file unless it is current; never raises for a
    bad input (a worker's result: the error is in the ``Outcome``)."""
    if not job.force and _current(job):
        return Outcome(job, "current")
    try:
        module = read_module(job.module)
        debug = checked_debug_file(module, job.debug_file) if job.debug_file else None
        os.makedirs(os.path.dirname(job.out), exist_ok=True)
        write_symbol_file(job.module, job.out, (), debug_file=debug)  # roots: plan_tree's
    except SFrameError as exc:
        return Outcome(job, "failed", str(exc))
    except OSError as exc:
        return Outcome(job, "failed", f"{exc.filename or job.out}: {exc.strerror or exc}")
    return Outcome(job, "written")
