"""The CFI a symbol file carries: the module's SFrame functions as a
``.debug_frame`` (beside a compiler's own, which is kept), the parts of
functions entered by jumps made again once every branch is known, and what
LLDB's versions need besides (an ``.eh_frame`` for the entry function, the
byte before the entry point).

The FDEs themselves are made by ``workers``, in this process or split
between processes; the file around them is ``symfile``'s.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import TYPE_CHECKING, NamedTuple

from ..base.abi import AMD64
from ..base.errors import FileError, FormatError
from ..format.elf import ElfSFrame, read_elf
from ..targets.symbols import SymbolTable
from .elfsyms import executable_sections
from .workers import (
    Progress,
    attach_store,
    covers,
    encode_fdes,
    encode_in_workers,
    split_min,
    uncovered,
)

if TYPE_CHECKING:
    from ..analysis.parts import Exits
    from ..dwarf.debug_frame import Encoded, Function
    from ..format.section import SFrameSection
    from .module_headers import ModuleInfo

__all__ = ["Plan", "Frames", "frames_for", "fde_ranges"]

_SHF_COMPRESSED = 0x800
_ELFCOMPRESS_ZLIB, _CHDR_SIZE = 1, 24


class Frames(NamedTuple):
    """The CFI a symbol file carries."""

    debug: bytes  # .debug_frame
    eh: bytes = b""  # .eh_frame at address 0 (``_entry_eh_frame``), or none
    gap: int | None = None  # the byte before e_entry, given an FDE here (``_before_entry``)


class Plan(NamedTuple):
    """What a symbol file is made from, and what its cache key hashes."""

    module: ModuleInfo
    base: ModuleInfo
    sframe: bytes
    # A stripped module's FDEs as function symbols, and a copy of the debug
    # information: LLDB needs them (elfsyms); gdb does not (it would show the
    # names where the twin shows "??", and has the debug information).
    symbols: bool = True
    before_entry: bool = False  # LLDB 21's file (``frames._before_entry``)
    # LLDB 14-20's file: a stripped module's symbols numbered as those LLDBs
    # number the twin's (``elfsyms.numbered_symbols``).
    numbered: bool = False


def frames_for(plan: Plan, jobs: int = 1, store_file: str | None = None,
               progress: Progress | None = None) -> Frames:
    """The symbol file's ``.debug_frame``: the SFrame functions as FDEs (and
    its ``.eh_frame``: ``_entry_eh_frame``).

    A compiler's own ``.debug_frame`` (``-g -fno-asynchronous-unwind-tables``,
    in the module or its debug file) knows more than SFrame (callee-saved
    registers): it is kept whole, and FDEs are added only for functions it
    does not cover. ``jobs`` > 1: the FDEs are made by up to that many worker
    processes (``workers.encode_in_workers``), the same bytes. The parts of
    functions entered by jumps (gcc's ``NAME.cold``) are made again once
    every function's branches are known (``_with_parts``). ``store_file``: where the
    analysis results of the module's last build are kept (``analysis_store``):
    read before, written after; the same bytes with it or without.
    ``progress``: told how many FDEs are done as they are (0 as their work begins).
    """
    from ..analysis.section import SectionAnalysis
    from ..dwarf.debug_frame import assemble, encoded, entry_function
    from ..targets.modules import Module

    path = plan.module.path
    info = read_elf(path)
    section = info.open(whole=True, analyser=SectionAnalysis)
    if section is None:
        raise FileError(f"{path}: no .sframe section")
    store = attach_store(section, store_file)
    existing = _existing_frame(plan.base)
    covered = fde_ranges(existing, plan.base.big_endian) if existing else []
    if covered is None:
        existing, covered = b"", []  # unreadable: replaced by ours whole
    try:
        # debug_frame decodes every FDE and FRE, with the checks lookups make.
        extra = []
        # As the gdb adapter does: only amd64's _start is known to be the
        # short, FDE-less entry function everywhere.
        if section.arch.abi_id == AMD64.abi_id:
            span = Module(path, 0, (), elf=info).entry_function()
            if span is not None:
                extra.append(entry_function(*span))
        arch = section.arch
        eh = _entry_eh_frame(plan, info, section, extra)
        gap = _before_entry(plan, info, section, covered) if eh else None
        if gap is not None:
            extra.append(entry_function(gap, gap + 1))
        if progress is not None:
            progress(0, section.num_fdes)  # the FDEs' work begins: its pace is timed from here
        if jobs > 1 and section.num_fdes >= split_min(section):
            items, exits = encode_in_workers(path, section, covered, jobs, store, progress)
        else:
            items, exits = encode_fdes(section, range(section.num_fdes), covered, progress)
        if info.elf_type in ("ET_EXEC", "ET_DYN"):  # a .o's sections all start at 0
            items = _with_parts(section, exits, items, covered,
                                {addr for _, addr, _ in executable_sections(plan.module.sections)})
        items.extend(encoded(uncovered(extra, covered), arch))
        if store is not None:
            store.save()
        return Frames(existing + assemble(items, arch, offset=len(existing)), eh, gap)
    except FormatError as exc:
        text = str(exc)
        raise FormatError(text if text.startswith(f"{path}:") else f"{path}: .sframe: {text}"
                          ) from None


def _with_parts(section: SFrameSection, exits: Exits, items: list[Encoded],
                covered: list[tuple[int, int]], section_starts: set[int]) -> list[Encoded]:
    """``items`` with the FDEs of the parts entered by jumps (gcc's ``NAME.cold``)
    made again, with the rules the module's branches into them prove
    (``analysis/parts.py``): a second pass, once every function's exits are known."""
    from ..analysis.parts import entries
    from ..analysis.section import analysis_of
    from ..dwarf.debug_frame import encoded, functions

    found = entries(section, exits, section_starts)
    if not found:
        return items
    analysis_of(section).enter_parts(found)
    again: dict[tuple[int, int], Encoded] = {}
    for start in sorted(found):
        fde = section.find_fde(start)
        if fde is None:
            continue
        for item in encoded(uncovered(functions(section, fdes=range(fde.index, fde.index + 1)),
                                      covered), section.arch):
            again[(item.start, item.end)] = item
    return [again.get((item.start, item.end), item) for item in items]


def _entry_eh_frame(plan: Plan, info: ElfSFrame, section: SFrameSection,
                    extra: list[Function]) -> bytes:
    """LLDB's file: an ``.eh_frame`` with the FDE of the function at ``e_entry``.

    LLDB unwinds a frame whose pc no symbol covers with ``.eh_frame`` alone
    (``RegisterContextUnwind``: no function, no ``.debug_frame``). An
    expression call (``expr -i false -- f(2)``) returns to the entry point,
    whose pc - 1 is before ``_start``: without this, a ``bt`` stopped inside
    the call ended at ``$__lldb_expr``, where LLDB on the ``.eh_frame`` twin
    shows the frame at the entry point. The FDE is the SFrame one covering
    ``e_entry``, else amd64's FDE-less ``_start`` (``extra``). Only where the
    module has no ``.eh_frame`` of its own (one in ours could stand in for
    it), and not in gdb's file, which needs none.
    """
    if not plan.symbols or info.has_eh_frame or not info.entry \
            or info.elf_type not in ("ET_EXEC", "ET_DYN"):
        return b""
    from ..dwarf.debug_frame import eh_frame, functions

    fde = section.find_fde(info.entry)
    funcs = extra
    if fde is not None:
        funcs = [f for f in functions(section, fdes=range(fde.index, fde.index + 1))
                 if f.start <= info.entry < f.end]
    if not funcs:
        return b""
    return eh_frame(funcs, section.arch)


def _before_entry(plan: Plan, info: ElfSFrame, section: SFrameSection,
                  covered: list[tuple[int, int]]) -> int | None:
    """LLDB 21's file: the byte before ``e_entry``, to get an unnamed one-byte
    function symbol and an FDE with the entry function's rule; or None.

    LLDB 21 takes no ``.eh_frame`` from a symbol file (its ``SymbolVendorELF``
    merges only the ``.debug_*`` sections and the symbol table into the
    module), and ``RegisterContextUnwind`` looks a caller's pc up at pc - 1:
    when no symbol holds that, ``GetFullUnwindPlanForFrame`` asks no
    ``FuncUnwinders`` (so no ``.debug_frame``), only the module's own
    ``.eh_frame``, and falls back to the architecture's default plan. An
    expression call returns to the entry point, whose pc - 1 is the padding
    before ``_start``: the default plan (CFA = rbp + 16) fails there and the
    frame at the entry point, which LLDB on the twin shows, was dropped. A
    symbol there makes pc - 1 resolve, its FDE gives the frame a CFA and an
    undefined RA, and with no name LLDB 21 shows the frame as the twin does
    (module, no function). Only where nothing covers that byte already (a
    function ending at ``e_entry`` is the twin's frame as it is), and not for
    LLDB 22 and 23, which read the ``.eh_frame`` and show an empty name as
    ``module```.
    """
    gap = info.entry - 1
    if not plan.before_entry or section.find_fde(gap) is not None \
            or covers(covered, [start for start, _ in covered], gap) \
            or not any(addr <= gap < addr + size
                       for _, addr, size in executable_sections(plan.base.sections)):
        return None
    if plan.base.section(".symtab") is None:
        if plan.base.section(".debug_info") is not None:
            return None  # no symbol table to add to (nor one made: a stripped module's)
    elif SymbolTable.from_file(plan.base.path, ()).lookup(gap) is not None:
        return None
    return gap


def _existing_frame(base: ModuleInfo) -> bytes:
    """The compiler's own ``.debug_frame`` in the copied sections, if any
    (uncompressed: a separate debug file's sections usually are compressed)."""
    data = base.section_bytes(".debug_frame")
    sec = base.section(".debug_frame")
    if not data or sec is None:
        return b""
    return _uncompressed(data, base.big_endian) if sec.flags & _SHF_COMPRESSED else data


def _uncompressed(data: bytes, big_endian: bool) -> bytes:
    """An ``SHF_COMPRESSED`` section's bytes, or b"" when they cannot be read
    (not zlib, corrupt): the caller then treats the section as unreadable."""
    if len(data) < _CHDR_SIZE:
        return b""
    kind, _reserved, size, _align = struct.unpack_from((">" if big_endian else "<") + "IIQQ", data)
    if kind != _ELFCOMPRESS_ZLIB:
        return b""  # zstd: not in Python's standard library before 3.14
    try:
        out = zlib.decompressobj()
        raw = out.decompress(data[_CHDR_SIZE:], size + 1)
    except zlib.error:
        return b""
    return raw if len(raw) == size else b""


def fde_ranges(data: bytes, big_endian: bool) -> list[tuple[int, int]] | None:
    """The address ranges a ``.debug_frame``'s FDEs cover, or None if unreadable."""
    from elftools.dwarf.callframe import FDE, CallFrameInfo
    from elftools.dwarf.structs import DWARFStructs

    from ..base.errors import foreign_errors

    structs = DWARFStructs(little_endian=not big_endian, dwarf_format=32, address_size=8)
    try:
        entries = CallFrameInfo(io.BytesIO(data), len(data), 0, structs,
                                for_eh_frame=False).get_entries()
        return sorted((e.header["initial_location"],
                       e.header["initial_location"] + e.header["address_range"])
                      for e in entries if isinstance(e, FDE))
    except foreign_errors():
        return None
