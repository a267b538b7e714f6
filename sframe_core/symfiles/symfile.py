"""A symbol file per module: the module's build-id, its debug information and a
``.debug_frame`` made from its ``.sframe``, cached on disk.

A DWARF consumer given this file (LLDB's ``target symbols add``, gdb's
``add-symbol-file`` or ``debug-file-directory``, elfutils, perf) unwinds the
module with its own unwinder from the SFrame rows, and loses nothing it had:
the file is laid out as ``objcopy --only-keep-debug`` lays out a separate
debug file (every section header kept at its index, so symbol and link
fields stay valid; allocated sections become ``SHT_NOBITS``; notes, symbol
tables and ``.debug_*`` keep their bytes), with the generated
``.debug_frame`` added. When the module's debug information lives in a
separate debug file (found by build-id or ``.gnu_debuglink``), that file is
the one copied, so adding ours never hides the variables, types and line
tables LLDB or gdb would have used. See docs/dwarf.md for why the ELF is
written here rather than by objcopy.

This module is the front: what the file copies and adds, and the cache.
The module's headers are read by ``module_headers``, its debug file found
by ``debug_files``; the CFI the file carries is ``frames``'s (its FDEs made
by ``workers``, in-process or split between processes), the ELF bytes
``elf_writer``'s.

Cache: ``$XDG_CACHE_HOME/sframe-gdb/symbols`` (default ``~/.cache``), one
file per (build-id, hash of the ``.sframe`` bytes, identity of the copied
debug file, generator version); written to a temporary file in the same
directory and renamed into place, so readers (and a second debugger doing
the same at the same time) only ever see whole files. A module without
build-id is keyed by its path, size and modification time instead. The
cache is bounded (unused for 30 days, over 1 GiB: ``symcache.py``).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..base.abi import ARCHES, Arch
from ..base.errors import FileError
from ..base.files import SectionHeader as _Section
from ..base.files import (
    cache_root,
    file_identity,
    is_elf,
    read_within,
)
from ..format import saved_registers
from ..format.elf import read_elf
from ..targets.symbols import DEBUG_ROOTS
from ..version import GENERATOR
from . import cache as symcache
from . import lock as filelock
from .debug_files import build_id_path, crc32_of, debug_source, has_debug_information
from .elfsyms import (
    STUB_WINDOW,
    SYMBOL,
    crt1_stub,
    defined_dynamic,
    executable_sections,
    function_symbols,
    numbered_symbols,
    plt_sections,
    with_dynamic,
)
from .frames import Frames, Plan, fde_ranges, frames_for
from .module_headers import ModuleInfo, read_module

if TYPE_CHECKING:
    from .elf_writer import Layout
    from .workers import Progress

# tempfile (with shutil, random and the compressors shutil imports), the
# ELF and .debug_frame writers (with the SFrame decoder) and the module table are
# imported where a symbol file is written or generated: a debugger's cache
# hit, what every warm start-up pays for, needs none of them.

# ModuleInfo, read_module (module_headers), build_id_path and
# has_debug_information (debug_files) are named here too: callers asking
# for a symbol file ask for them with it.
__all__ = ["SymbolFile", "GENERATOR", "cache_dir", "symbol_file_for", "cached_symbol_file",
           "write_symbol_file", "symbol_file_bytes", "build_id_path", "ModuleInfo", "read_module",
           "maker_of", "has_debug_information", "writes_debug_frame"]



def writes_debug_frame(arch: Arch | None) -> bool:
    """Is a ``.debug_frame`` written for modules of this ABI? Every ABI
    SFrame defines (amd64, aarch64 in either byte order, s390x): the
    adapters ask this instead of keeping lists of their own (whether the
    debugger then reads the file right is theirs to say)."""
    return arch is not None and arch in ARCHES

_SHT_NULL, _SHT_PROGBITS, _SHT_NOTE, _SHT_NOBITS = 0, 1, 7, 8
_SHT_SYMTAB, _SHT_STRTAB = 2, 3
_SHF_ALLOC = 0x2
_PT_NOTE = 4
_ET_REL, _ET_EXEC = 1, 2
_EM_X86_64 = 62


class SymbolFile(NamedTuple):
    """What ``symbol_file_for`` made or found.

    ``path``: the file to give the debugger. ``cached``: reused without
    regenerating. ``debug_source``: the file whose debug information was
    copied in (the module itself, its separate debug file), or None when
    there was none. ``warning``: one line worth showing once (the cache
    directory was not writable and a temporary one was used), or None.
    """

    path: str
    build_id: str | None
    cached: bool
    debug_source: str | None
    warning: str | None = None



# -- writing ------------------------------------------------------------------------


def _layout(module: ModuleInfo, base: ModuleInfo, frames: Frames,
            debuglink: bytes | None = None, symbols: bool = True,
            numbered: bool = False) -> Layout:
    """What the symbol file holds, for ``elf_writer``: ``base``'s sections (the
    module, or its debug file) as ``objcopy --only-keep-debug`` keeps them,
    plus ``frames`` as ``.debug_frame`` and (when there is one) a
    non-allocated ``.eh_frame`` at address 0, and ``debuglink`` as
    ``.gnu_debuglink`` (see ``_debuglink``).

    The ELF and program headers are the module's, so the file describes the
    same layout. ``numbered``: LLDB 14-20's symbol table for a stripped
    module (``_provide_numbered_symbols``).
    """
    from .elf_writer import Layout, Section

    src = base
    sections = list(src.sections)
    names = b""
    if sections:
        strtab = sections[src.shstrndx]
        with open(src.path, "rb") as stream:
            names = read_within(stream, strtab.offset, strtab.size, src.size, ".shstrtab", src.path)
    if not sections:
        # Section headers stripped (PT_GNU_SFRAME found through the program
        # headers): a null section, the notes as sections, the name table.
        sections = [_Section("", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
        names = b"\0"
        for ph in module.phdrs:
            if ph[0] == _PT_NOTE:
                sections.append(_Section(".note", _SHT_NOTE, _SHF_ALLOC, ph[3], ph[2], ph[5], 0, 0,
                                         ph[7] or 4, 0, len(names)))
        names += b".note\0"
        sections.append(_Section(".shstrtab", 3, 0, 0, 0, 0, 0, 0, 1, 0, len(names)))
        names += b".shstrtab\0"
        shstrndx = len(sections) - 1
        src = module
    else:
        shstrndx = src.shstrndx
    own: dict[int, bytes] = {}  # contents written here, by section index

    def provide(name: str, data: bytes, align: int) -> None:
        nonlocal names
        index = next((i for i, sec in enumerate(sections) if i and sec.name == name), None)
        if index is None:
            index = len(sections)
            sections.append(_Section(name, _SHT_PROGBITS, 0, 0, 0, 0, 0, 0, align, 0, len(names)))
            names += name.encode() + b"\0"
        else:
            # Address 0 as well: an .eh_frame's pc-relative addresses are
            # relative to the address it is written for.
            sections[index] = sections[index]._replace(type=_SHT_PROGBITS, flags=0, align=align,
                                                       addr=0)
        own[index] = data

    if not symbols:
        # gdb's file: gdb has the module's own debug information already, and
        # a second copy beside it made it pick blocks from ours (a frame 0
        # inlined into its caller came out as the caller): no copy at all.
        # Nor of a symbol table the module has itself: gdb read its symbols
        # from the module, and read them all again from ours (40,000
        # functions: 0.29 s to the first bt where the twin takes 0.23 s).
        dropped = set()
        if module.section(".symtab") is not None:
            for index, sec in enumerate(sections):
                if sec.type == _SHT_SYMTAB:
                    dropped.add(index)
                    if sec.link != shstrndx and 0 < sec.link < len(sections):
                        dropped.add(sec.link)  # its names
        sections = [sec._replace(type=_SHT_NOBITS)
                    if sec.type != _SHT_NOBITS and (
                        sec.name.startswith((".debug_", ".zdebug_")) or index in dropped)
                    else sec for index, sec in enumerate(sections)]
    provide(".debug_frame", frames.debug, 8)
    if frames.eh:
        provide(".eh_frame", frames.eh, 8)
    if symbols and base.section(".symtab") is None and base.section(".debug_info") is None:
        if numbered:
            _provide_numbered_symbols(sections, module, frames, provide)
        else:
            _provide_function_symbols(sections, frames.debug, module.big_endian, provide,
                                      frames.gap, module)
    elif symbols and frames.gap is not None:
        _provide_gap_symbol(sections, src, module.big_endian, provide, frames.gap)
    if debuglink is not None:
        provide(".gnu_debuglink", debuglink, 4)
    own[shstrndx] = names

    copied: list[Section] = []
    for index, sec in enumerate(sections):
        data = own.get(index)
        if index == 0:
            copied.append(Section(sec))
        elif data is None and (sec.type in (_SHT_NOBITS, _SHT_NULL)
                               or (sec.flags & _SHF_ALLOC and sec.type != _SHT_NOTE)):
            copied.append(Section(sec._replace(
                type=_SHT_NOBITS if sec.type != _SHT_NULL else _SHT_NULL)))
        else:
            copied.append(Section(sec, _chunks(src.path, sec) if data is None else data))
    return Layout(module.ident, module.header, module.phdrs, copied, shstrndx)


def _chunks(path: str, sec: _Section) -> Callable[[], Iterator[bytes]]:
    """A copied section's bytes, read a MiB at a time as the file is written
    (a separate debug file's sections can be gigabytes)."""
    def read() -> Iterator[bytes]:
        with open(path, "rb") as stream:
            stream.seek(sec.offset)
            left = sec.size
            while left:
                chunk = stream.read(min(left, 1 << 20))
                if not chunk:
                    raise FileError(f"{path}: section {sec.name} is truncated")
                yield chunk
                left -= len(chunk)
    return read


def _provide_function_symbols(sections: list[_Section], frame: bytes, big_endian: bool,
                              provide: Callable[[str, bytes, int], None],
                              gap: int | None = None, module: ModuleInfo | None = None) -> None:
    """A stripped module: one function symbol per FDE, which LLDB needs (see
    ``elfsyms``); the FDE at ``gap`` gets the unnamed one (``frames._before_entry``).
    A module that exports symbols (``module``'s ``.dynsym``: a library) has
    them in the table too, and no FDE symbol where one starts (``elfsyms.with_dynamic``)."""
    dynsym = module.section_bytes(".dynsym") if module is not None else b""
    exported = defined_dynamic(dynsym, big_endian)
    spans = fde_ranges(frame, big_endian) or []
    made = function_symbols([(start, end - start) for start, end in spans
                             if start != gap and start not in exported],
                            executable_sections(sections), big_endian, plt_sections(sections))
    if made is None:
        return
    symtab, strtab, count = made
    if gap is not None:
        symtab, strtab, count = _with_gap_symbol(symtab, strtab, count, sections, big_endian, gap)
    if exported and module is not None:
        symtab, strtab, count = with_dynamic(symtab, strtab, count, dynsym,
                                             module.section_bytes(".dynstr"), big_endian)
    _set_symbols(sections, provide, ".symtab", ".strtab", symtab, strtab, count)


def _provide_numbered_symbols(sections: list[_Section], module: ModuleInfo, frames: Frames,
                              provide: Callable[[str, bytes, int], None]) -> None:
    """A stripped module for LLDB 14-20: the symbol table LLDB makes for its
    twin, ``.dynsym`` and the unnamed functions numbered as there
    (``elfsyms.numbered_symbols``); the FDE at ``frames.gap`` gets the
    unnamed one, last (``frames._before_entry``)."""
    spans = fde_ranges(frames.debug, module.big_endian) or []
    dynsym = module.section_bytes(".dynsym")
    dynstr = module.section_bytes(".dynstr")
    relocations = next((sec.size // sec.entsize for name in (".rela.plt", ".rel.plt")
                        if (sec := module.section(name)) is not None and sec.entsize), 0)
    extra = []
    if frames.gap is not None:
        index = next((i for i, addr, span in executable_sections(sections)
                      if addr <= frames.gap < addr + span), 0)
        extra.append((_GAP_NAME, index, frames.gap, 1))
    made = numbered_symbols([(start, end - start) for start, end in spans if start != frames.gap],
                            sections, dynsym, dynstr, relocations, module.big_endian, extra,
                            _crt1_stubs(module))
    if made is not None:
        _set_symbols(sections, provide, ".symtab", ".strtab", *made)


def _crt1_stubs(module: ModuleInfo) -> list[int]:
    """glibc's ``_dl_relocate_static_pie`` in a non-PIE amd64 executable
    (``elfsyms.crt1_stub``), as a list of at most one address."""
    entry = module.header[3]
    if module.elf_type != _ET_EXEC or module.header[1] != _EM_X86_64 or not entry:
        return []
    sec = next((sec for sec in module.sections if sec.type == _SHT_PROGBITS
                and sec.addr <= entry < sec.addr + sec.size), None)
    if sec is None:
        return []
    size = min(STUB_WINDOW, sec.addr + sec.size - entry)
    found = crt1_stub(module.read(sec.offset + entry - sec.addr, size, sec.name), entry)
    return [] if found is None else [found]


def _set_symbols(sections: list[_Section], provide: Callable[[str, bytes, int], None],
                 symtab_name: str, strtab_name: str, symtab: bytes, strtab: bytes,
                 count: int) -> None:
    """``symtab`` (``count`` local symbols first) and ``strtab`` as the file's symbol table."""
    provide(strtab_name, strtab, 1)
    provide(symtab_name, symtab, 8)
    names = {sec.name: i for i, sec in enumerate(sections) if i}
    strtab_index, symtab_index = names[strtab_name], names[symtab_name]
    sections[strtab_index] = sections[strtab_index]._replace(type=_SHT_STRTAB)
    sections[symtab_index] = sections[symtab_index]._replace(type=_SHT_SYMTAB, link=strtab_index,
                                                             info=count, entsize=24)


# The unnamed symbol's name: LLDB strips a symbol's "@VERSION" suffix, which
# here is the whole name, and keeps the symbol with an empty one (shown as
# no name at all by LLDB 21, as the twin shows that pc).
_GAP_NAME = b"@sframe-gdb"


def _with_gap_symbol(symtab: bytes, strtab: bytes, locals_: int, sections: list[_Section],
                     big_endian: bool, gap: int) -> tuple[bytes, bytes, int]:
    """``symtab`` and ``strtab`` with the unnamed one-byte function symbol at
    ``gap`` after the ``locals_`` local symbols (ELF puts locals first)."""
    index = next((i for i, addr, span in executable_sections(sections)
                  if addr <= gap < addr + span), 0)
    entry = struct.pack((">" if big_endian else "<") + SYMBOL, len(strtab), 2, 0, index, gap, 1)
    at = locals_ * 24
    return symtab[:at] + entry + symtab[at:], strtab + _GAP_NAME + b"\0", locals_ + 1


def _provide_gap_symbol(sections: list[_Section], src: ModuleInfo, big_endian: bool,
                        provide: Callable[[str, bytes, int], None], gap: int) -> None:
    """The copied symbol table with the unnamed symbol at ``gap`` (``frames._before_entry``)."""
    index = next((i for i, sec in enumerate(sections) if i and sec.type == _SHT_SYMTAB), None)
    if index is None:
        return
    symsec = sections[index]
    strsec = sections[symsec.link]
    with open(src.path, "rb") as stream:
        symtab = read_within(stream, symsec.offset, symsec.size, src.size, symsec.name, src.path)
        strtab = read_within(stream, strsec.offset, strsec.size, src.size, strsec.name, src.path)
    symtab, strtab, count = _with_gap_symbol(symtab, strtab, symsec.info, sections, big_endian,
                                             gap)
    _set_symbols(sections, provide, symsec.name, strsec.name, symtab, strtab, count)


def _debuglink(plan: Plan) -> bytes | None:
    """The ``.gnu_debuglink`` the symbol file needs so LLDB matches it to a
    module without build-id, or None.

    LLDB's UUID for an ELF file without build-id is the CRC its
    ``.gnu_debuglink`` holds, or else the CRC of the whole file. So the
    symbol file carries the module's own debuglink when the copied sections
    lack one, and for a module with neither build-id nor debuglink a link
    holding the CRC of the module file (under a name no file has), which is
    the module's UUID in LLDB.
    """
    module = plan.module
    if module.build_id is not None or plan.base.section(".gnu_debuglink") is not None:
        return None
    endian = ">" if module.big_endian else "<"
    if module.debuglink is not None:
        name, crc = module.debuglink
    else:
        whole = crc32_of(module.path)
        if whole is None:
            return None
        name, crc = f"{os.path.basename(module.path)}.sframe-gdb", whole
    raw = os.fsencode(name) + b"\0"
    raw += bytes(-len(raw) % 4)
    return raw + struct.pack(endian + "I", crc)


def _plan(path: str, debug_roots: Sequence[str], symbols: bool = True,
          before_entry: bool = False, module: ModuleInfo | None = None,
          numbered: bool = False) -> Plan:
    if module is None or module.path != path:
        module = read_module(path)
    if module.elf_type == _ET_REL:
        raise FileError(f"{path}: a relocatable object (.o): symbol files are made for linked "
                        "executables and libraries")
    base = debug_source(module, debug_roots) or module
    # Numbered names change only a stripped module's file (``_layout``): any
    # other's is the same file, under the same cache entry.
    numbered = (symbols and numbered and base.section(".symtab") is None
                and base.section(".debug_info") is None)
    return Plan(module, base, _sframe_bytes(module), symbols, symbols and before_entry, numbered)


def _sframe_bytes(module: ModuleInfo) -> bytes:
    """The module's ``.sframe`` bytes: from its section header when it has one
    (the headers are read already; a cache hit then needs no pyelftools),
    else through ``read_elf`` (``PT_GNU_SFRAME``)."""
    data = module.section_bytes(".sframe")
    if data:
        return data
    info = read_elf(module.path)
    if not info.has_sframe or info.data is None:
        raise FileError(f"{module.path}: no .sframe section")
    return info.data




def _write_atomically(target: str, plan: Plan, frame: Frames) -> None:
    """Write to a temporary file beside ``target``, then rename it into place."""
    import tempfile

    from .elf_writer import write_elf

    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=filelock.tmp_prefix(target), suffix=".debug", dir=directory)
    try:
        with os.fdopen(fd, "w+b") as out:
            write_elf(out, _layout(plan.module, plan.base, frame, _debuglink(plan), plan.symbols,
                                   plan.numbered))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def symbol_file_bytes(path: str, debug_roots: Sequence[str] = DEBUG_ROOTS, *,
                      jobs: int = 1, store_dir: str | None = None) -> bytes:
    """The symbol file for ``path`` as bytes (tests, and callers who place it themselves);
    ``jobs`` and ``store_dir`` as in ``write_symbol_file``."""
    plan = _plan(path, debug_roots)
    from .elf_writer import elf_bytes

    return elf_bytes(_layout(plan.module, plan.base,
                             frames_for(plan, jobs, _store_file(plan, store_dir)), _debuglink(plan)))


def write_symbol_file(path: str, out: str, debug_roots: Sequence[str] = DEBUG_ROOTS, *,
                      jobs: int = 1, store_dir: str | None = None,
                      debug_file: ModuleInfo | None = None) -> SymbolFile:
    """Write the symbol file for module ``path`` to ``out`` (atomically).

    ``jobs`` > 1: a module of ``PARALLEL_MIN_FDES`` FDEs or more is split
    between that many worker processes (``workers.default_jobs()``: the usable CPUs,
    at most 8); the bytes are the same as with 1. Embedded interpreters
    (LLDB's, gdb's) keep 1, or run ``python -m sframe_core to-dwarf`` as a
    subprocess: that is the out-of-process route, and its output appears
    whole or not at all. ``store_dir``: a directory where the analysis
    results of the module's previous build are kept and this build's left
    (``analysis_store``; ``symbol_file_for`` uses the cache's); the same bytes.
    ``debug_file``: the file whose debug information to copy, instead of the
    one found under ``debug_roots`` (the caller checked it is the module's:
    ``buildid_tree.checked_debug_file``).

    :raises SFrameError: one line naming the file and what is wrong; nothing
        is left at ``out`` then.
    """
    if os.path.exists(out) and os.path.samefile(out, path):
        raise FileError(f"{out}: is the module itself; give another output file")
    plan = _plan(path, debug_roots)
    if debug_file is not None:
        plan = plan._replace(base=debug_file)
    frame = frames_for(plan, jobs, _store_file(plan, store_dir))
    try:
        _write_atomically(out, plan, frame)
    except OSError as exc:
        raise FileError(f"{out}: {exc.strerror or exc}") from None
    return SymbolFile(out, plan.module.build_id, False, _source_name(plan))


def _store_file(plan: Plan, directory: str | None) -> str | None:
    """The module's analysis store file in ``directory`` (None: none, or turned off)."""
    from . import analysis_store

    if directory is None or not analysis_store.enabled() or _usable_dir(directory) is None:
        return None
    return analysis_store.store_path(directory, plan.module.path)


def _source_name(plan: Plan) -> str | None:
    return plan.base.path if plan.base.has_debug_info else None


# -- the cache ------------------------------------------------------------------------


def cache_dir() -> str:
    """``$XDG_CACHE_HOME/sframe-gdb/symbols``, ``~/.cache`` when the variable is unset."""
    return os.path.join(cache_root(), "symbols")


def _cache_name(plan: Plan) -> str:
    digest = hashlib.sha256()
    digest.update(f"sframe-gdb symbol file {GENERATOR}\0".encode())
    digest.update(plan.sframe)
    if plan.module.build_id is None:
        # No build-id: the module is what is at this path, this size and age.
        digest.update(file_identity(plan.module.path))
    if plan.base is not plan.module:
        digest.update(file_identity(plan.base.path))
    # A stripped file and its unstripped twin share the build-id and the
    # .sframe, not the symbol file (symbols, debug information): what is
    # copied in is part of the key.
    for sec in plan.base.sections:
        if not sec.flags & _SHF_ALLOC:
            digest.update(f"{sec.name}\0{sec.type}\0{sec.size}\0".encode())
    if not plan.symbols:
        digest.update(b"no function symbols, no debug information\0")
    if plan.before_entry:
        digest.update(b"an unnamed symbol before the entry point\0")
    if plan.numbered:
        digest.update(b"LLDB 14-20's symbol table, its unnamed symbols numbered\0")
    elif _exports(plan):
        digest.update(b"the symbols .dynsym defines\0")
    if _made_symbols(plan):
        # None over a PLT stub (LLDB names them), one at each PLT section's
        # start (.plt.sec one of them): a stripped module's file changed so.
        digest.update(b"PLT stubs left to LLDB's trampoline symbols\0")
    if not saved_registers():
        # Turned off (a control run, or no capstone wanted): the rules differ.
        digest.update(b"no saved-register rules\0")
    prefix = plan.module.build_id or "nobuildid"
    return f"{prefix}-{digest.hexdigest()[:20]}.debug"


def _made_symbols(plan: Plan) -> bool:
    """Does the file of ``plan`` carry a symbol table made here (``_layout``:
    a stripped module's, for LLDB)?"""
    return (plan.symbols and plan.base.section(".symtab") is None
            and plan.base.section(".debug_info") is None)


def _exports(plan: Plan) -> bool:
    """Does the file of ``plan`` carry ``.dynsym``'s defined symbols
    (``_provide_function_symbols``: a stripped module that exports some)?"""
    return _made_symbols(plan) and bool(defined_dynamic(plan.module.section_bytes(".dynsym"),
                                                        plan.module.big_endian))


def _usable_dir(directory: str) -> str | None:
    """``directory``, created if needed, if we can write there; else None."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return directory if os.access(directory, os.W_OK | os.X_OK) else None


def _fallback_dir() -> str | None:
    """A private directory under the system temporary directory, or None.

    Only one we own and that is not a symlink: another user cannot plant
    files there for us to hand to the debugger.
    """
    import tempfile

    directory = os.path.join(tempfile.gettempdir(), f"sframe-gdb-{os.getuid()}", "symbols")
    parent = os.path.dirname(directory)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
        st = os.lstat(parent)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return _usable_dir(directory)


def _cache_target(plan: Plan, cache: str | None) -> tuple[str, str, str | None]:
    """Where the symbol file of ``plan`` lives in the cache: (file, directory,
    warning). An unwritable cache directory falls back to a private temporary
    one, which ``warning`` says."""
    wanted = cache or cache_dir()
    warning = None
    directory = _usable_dir(wanted)
    if directory is None:
        directory = _fallback_dir()
        if directory is None:
            raise FileError(f"{wanted}: cannot write the symbol file cache, nor a temporary one")
        warning = f"{wanted}: not writable; symbol files go to {directory}"
    return os.path.join(directory, _cache_name(plan)), directory, warning


def cached_symbol_file(path: str, *, cache: str | None = None,
                       debug_roots: Iterable[str] = DEBUG_ROOTS,
                       function_symbols: bool = True,
                       before_entry: bool = False,
                       module: ModuleInfo | None = None,
                       numbered_names: bool = False) -> SymbolFile | None:
    """The symbol file for module ``path`` if the cache holds it, else None.

    Costs what a hit of ``symbol_file_for`` costs (the module's headers and a
    hash of its ``.sframe``), never a generation: an adapter asks this first,
    and only on a miss decides whether to generate now or in a worker
    (``symjobs``). ``module``: ``read_module(path)`` if the caller has read
    it already (the headers are then not read twice).

    :raises SFrameError: as ``symbol_file_for``.
    """
    plan = _plan(path, tuple(debug_roots), function_symbols, before_entry, module, numbered_names)
    target, _, warning = _cache_target(plan, cache)
    if not is_elf(target):
        return None
    symcache.touch(target)  # its "last used" time, for pruning
    return SymbolFile(target, plan.module.build_id, True, _source_name(plan), warning)


def maker_of(path: str, *, cache: str | None = None,
             debug_roots: Iterable[str] = DEBUG_ROOTS, function_symbols: bool = True,
             before_entry: bool = False,
             module: ModuleInfo | None = None,
             numbered_names: bool = False) -> tuple[str, int | None]:
    """(the cache entry of module ``path``, the process making it now or None):
    a debugger that finds one follows it rather than starting another
    (``jobs.Job``). The process id is 0 when the maker has not written it yet.

    :raises SFrameError: as ``cached_symbol_file``.
    """
    plan = _plan(path, tuple(debug_roots), function_symbols, before_entry, module, numbered_names)
    target, _, _ = _cache_target(plan, cache)
    return target, filelock.holder(target)


def symbol_file_for(path: str, *, cache: str | None = None,
                    debug_roots: Iterable[str] = DEBUG_ROOTS,
                    function_symbols: bool = True, before_entry: bool = False,
                    jobs: int = 1, module: ModuleInfo | None = None,
                    progress: Progress | None = None,
                    numbered_names: bool = False) -> SymbolFile:
    """The cached symbol file for module ``path``, generated if it is not there yet.

    A cache hit reads the module's headers and hashes its ``.sframe``, nothing
    more. An unwritable cache directory falls back to a private temporary
    directory (said in ``SymbolFile.warning``). ``function_symbols=False``
    (gdb): a stripped module gets no function symbols for its FDEs.
    ``before_entry`` (LLDB 21): the byte before the entry point gets an
    unnamed symbol and an FDE (``frames._before_entry``), a file of its own.
    ``numbered_names`` (LLDB 14-20): a stripped module's symbol table as
    those LLDBs make the twin's (``elfsyms.numbered_symbols``), a file of its
    own. ``jobs``
    as in ``write_symbol_file`` (never above 1 from a debugger's own Python:
    it would fork the debugger; ``symjobs`` runs a worker process instead).
    ``module`` as in ``cached_symbol_file``; ``progress`` as in ``frames.frames_for``.

    :raises SFrameError: one line naming the file and what is wrong (not ELF,
        no ``.sframe``, corrupt ``.sframe``, nowhere to write); nothing is
        written half-way.
    """
    plan = _plan(path, tuple(debug_roots), function_symbols, before_entry, module, numbered_names)
    target, directory, warning = _cache_target(plan, cache)
    if is_elf(target):
        symcache.touch(target)  # its "last used" time, for pruning
        return SymbolFile(target, plan.module.build_id, True, _source_name(plan), warning)
    # One maker per entry across processes (``lock``): another one's file,
    # once it lets go, is this call's cache hit.
    with filelock.holding(target):
        if is_elf(target):
            symcache.touch(target)
            return SymbolFile(target, plan.module.build_id, True, _source_name(plan), warning)
        filelock.remove_leftovers(target)
        frame = frames_for(plan, jobs, _store_file(plan, directory), progress)
        try:
            _write_atomically(target, plan, frame)
        except OSError as exc:
            raise FileError(f"{target}: {exc.strerror or exc}") from None
    try:
        symcache.prune(directory, keep=target)
    except OSError as exc:
        problem = f"{directory}: cannot prune the symbol file cache: {exc.strerror or exc}"
        warning = f"{warning}; {problem}" if warning else problem
    return SymbolFile(target, plan.module.build_id, False, _source_name(plan), warning)
