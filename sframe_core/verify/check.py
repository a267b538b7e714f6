"""The engine of ``sframe verify``: does a file's ``.sframe`` say what its
DWARF CFI says, at every PC?

Anyone who strips ``.eh_frame`` and relies on ``.sframe`` trusts the
producer, and the producers are young (see ``format/errata.py``). This
module compares the two sources of rows (``format/section.py`` for SFrame,
``dwarf/cfi.py`` for ``.eh_frame``/``.debug_frame``) function by function
(``compare.py``), gives each function one verdict (``records.VERDICTS``),
and adds structural findings about the section itself and, on request,
whether the Linux kernel's SFrame unwinder would accept it
(``kernel_findings``, on ``format/kernel.py``'s rules). The command
(``cli/verify.py``) only words and walks.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from ..base.abi import Arch
from ..base.errors import FileError, FormatError, SFrameError, foreign_errors
from ..base.rows import Row
from ..dwarf.cfi import CFITable, FDERef
from ..format.elf import ElfSFrame, read_elf
from ..format.errata import correct_cfa
from ..format.kernel import kernel_refusals
from ..format.linked import describe_parts
from ..format.records import FDE
from ..format.rules import fre_rules
from ..format.section import SFrameSection
from ..targets.symbols import SymbolTable
from .compare import compare_rows, unsayable
from .layout import Layout, Namer, Relocatable, namer, read_layout, read_relocatable, section_of
from .records import (
    AGREES,
    CANNOT_SAY,
    CFI_EXPRESSION,
    DISAGREES,
    ERRATUM,
    KNOWN_ENTRY,
    KNOWN_PLT,
    KNOWN_STATIC,
    KNOWN_UNSAYABLE,
    NOT_COVERED,
    OBJ_AMBIGUOUS,
    PLT_GOT_ERRATUM,
    SFRAME_ONLY,
    Finding,
    Function,
    Report,
)

__all__ = ["verify_file", "kernel_findings", "safe_verify", "NothingToCompare", "Unreadable"]

# glibc's crt1.o: start.S (_start) and, in non-PIE executables, static-reloc.c.
_CRT1 = frozenset({"_start", "_dl_relocate_static_pie"})
_PLT_SECTIONS = frozenset({".plt", ".plt.got", ".plt.sec", ".iplt", ".plt.bnd"})


# -- Both sources' rows, function by function ---------------------------------------


class _CFIFunc(NamedTuple):
    """A CFI FDE as compared: in a ``.o``, at its text section's base."""

    start: int
    end: int
    ref: FDERef
    shift: int = 0  # .o files: the base its text section was laid out at


def _cfi_functions(table: CFITable, obj: Relocatable | None) -> list[_CFIFunc]:
    """The CFI's FDE ranges, sorted; ``.debug_frame`` ones under an ``.eh_frame``
    one dropped (the table prefers ``.eh_frame``), as are the address-0 FDEs
    of discarded functions in linked files; in a ``.o``, each at its text
    section's base."""
    refs = list(table.iter_fdes())  # the one parse of the CFI; rows are decoded per function below
    out: list[_CFIFunc] = []
    eh = sorted((r.start, r.end) for r in refs if r.source == "eh_frame")
    eh_starts = [s for s, _ in eh]
    for ref in refs:
        if obj is not None:
            # pc_begin follows the length and CIE pointer words (32-bit DWARF).
            shndx = obj.eh_frame.get(ref.entry.offset + 8) if ref.source == "eh_frame" else None
            shift = obj.bases.get(shndx, 0) if shndx is not None else 0
            out.append(_CFIFunc(ref.start + shift, ref.end + shift, ref, shift))
            continue
        if ref.start == 0:
            continue
        if ref.source != "eh_frame":
            k = bisect.bisect_right(eh_starts, ref.start) - 1
            if k >= 0 and eh[k][0] <= ref.start < eh[k][1]:
                continue
        out.append(_CFIFunc(ref.start, ref.end, ref))
    out.sort(key=lambda c: (c.start, c.end))
    return out


def _cfi_rows(table: CFITable, cf: _CFIFunc) -> list[Row]:
    """The rows of one CFI FDE, at the addresses it was laid out at."""
    try:
        if not cf.shift:
            return table.fde_rows(cf.start)
        rows = table.fde_rows_of(cf.ref)  # by reference: in a .o its address is not unique
    except FormatError as exc:
        raise FormatError(f"{table.name}: {exc}") from None
    return [r._replace(start=r.start + cf.shift, end=r.end + cf.shift,
                       func_start=r.func_start + cf.shift) for r in rows]


def _clip(rows: Iterable[Row], lo: int, hi: int) -> list[Row]:
    return [row._replace(start=max(row.start, lo), end=min(row.end, hi))
            for row in rows if row.start < hi and row.end > lo]


def _sframe_rows(section: SFrameSection, fde: FDE) -> list[Row]:
    if not fde.is_pcmask:
        return section.fde_rows(fde)
    rows: list[Row] = []
    blocks = -(-fde.size // fde.rep_size) if fde.rep_size else 0
    for block in range(blocks):
        rows += section.fde_rows(fde, block)
    return rows


def _erratum(section: SFrameSection, fde: FDE) -> bool:
    for fre in section.get_fres(fde):
        raw = fre_rules(section.header, fde, fre, section.arch).cfa
        if correct_cfa(section.arch, fde, raw) != raw:
            return True
    return False


# -- One file -----------------------------------------------------------------------


def verify_file(path: str, *, against: str | None = None, kernel: bool = False) -> Report:
    """Verify one file's ``.sframe`` against its CFI (or ``against``'s).

    :raises SFrameError: the file (or ``against``) cannot be read, has no
        ``.sframe``, or has no CFI to compare with; the message names it.
    """
    info = read_elf(path)
    section = info.open()
    if section is None:
        raise NothingToCompare(f"{path}: no .sframe section")
    section.saved_registers = False  # rows of CFA, RA and FP only: what CFI is compared on
    cfi_path = against or path
    if against is not None:
        other = read_elf(against)
        if not (other.has_eh_frame or other.has_debug_frame):
            raise FileError(f"{against}: no .eh_frame or .debug_frame")
    elif not (info.has_eh_frame or info.has_debug_frame):
        raise NothingToCompare(f"{path}: no .eh_frame or .debug_frame to verify against "
                        "(give the debug file with --against FILE)")
    # A .o's CFI from .eh_frame alone: LLVM's assembler writes .debug_frame
    # beside it when asked for SFrame (clang 22 -Wa,--gsframe), with absolute
    # relocations the .o relocation code (format/elf.py) does not apply;
    # .eh_frame says the same and is what the linked file will carry.
    table = CFITable(cfi_path, debug_frame=not (info.is_relocatable and info.has_eh_frame
                                                and against is None))
    layout = read_layout(path)
    obj = read_relocatable(path) if info.is_relocatable and against is None else None
    if obj is not None:
        symbols = SymbolTable(obj.symbols)
        layout = layout._replace(sections=tuple((name, base, size, True)
                                                for base, size, name in obj.spans))
    else:
        symbols = SymbolTable.from_file(path)
        if against is not None and not symbols.symbols:
            symbols = SymbolTable.from_file(against)
    name = namer(symbols, layout)
    try:
        cfi_funcs = _cfi_functions(table, obj)
    except FormatError as exc:
        raise FormatError(f"{cfi_path}: {exc}") from None
    if not cfi_funcs:
        # e.g. section headers stripped: PT_GNU_EH_FRAME is there, .eh_frame cannot be found
        raise NothingToCompare(f"{cfi_path}: no CFI FDE to verify against (without section "
                               "headers .eh_frame cannot be read: give --against FILE)")
    functions, findings = _compare_all(info, section, table, cfi_funcs, layout, name, obj)
    if not info.is_relocatable:
        findings = _linker_findings(info) + findings
        if layout.sframe_section is not None:
            findings += _segment_findings(layout)
        functions = _lost_plt(info, section, functions, layout)
    return Report(path, section.version, section.arch.name, tuple(functions), tuple(findings),
                  tuple(kernel_findings(info, section, layout, name)) if kernel else None,
                  obj.spans if obj is not None else ())


def _structure(section: SFrameSection, fdes: list[FDE], relocatable: bool, unplaced: bool,
               name: Namer) -> Iterator[Finding]:
    """A false SORTED flag (linked files: ld sorts), overlapping FDEs (not in a
    ``.o`` whose FDEs could not all be placed in their sections)."""
    hdr = section.header
    for prev, fde in zip(fdes, fdes[1:], strict=False):
        if hdr.sorted and not relocatable and fde.start < prev.start:
            yield Finding("unsorted", fde.start, name(fde.start),
                          f"FDE {fde.index} starts at {fde.start:#x}, before FDE {prev.index} "
                          f"({prev.start:#x}), but the header says SFRAME_F_FDE_SORTED")
    ordered = sorted(fdes, key=lambda f: (f.start, f.index))
    for prev, fde in zip(ordered, ordered[1:], strict=False):
        if fde.start < prev.end and not unplaced and prev.size and fde.size:
            yield Finding("overlap", fde.start, name(fde.start),
                          f"FDE {fde.index} ({fde.start:#x}-{fde.end:#x}) overlaps FDE "
                          f"{prev.index} ({prev.start:#x}-{prev.end:#x})")


def _compare_all(info: ElfSFrame, section: SFrameSection, table: CFITable,
                 cfi_funcs: list[_CFIFunc], layout: Layout, name: Namer, obj: Relocatable | None
                 ) -> tuple[list[Function], list[Finding]]:
    arch, version = section.arch, section.version
    findings: list[Finding] = []
    fdes: list[FDE] = []
    unplaced = False  # a .o FDE whose text section no relocation names
    for index in range(section.num_fdes):
        try:
            fde = section.get_fde(index)
        except FormatError as exc:
            findings.append(Finding("fde", None, None, f"FDE {index}: {exc}"))
            continue
        if obj is not None:
            shndx = obj.sframe.get(fde.offset)
            unplaced = unplaced or shndx not in obj.bases
            # rows follow fde.start: shifting it lays the function out at its section's base
            fde = fde._replace(start=fde.start + obj.bases.get(shndx, 0) if shndx is not None
                               else fde.start)
        fdes.append(fde)
    findings += _structure(section, fdes, info.is_relocatable, unplaced, name)
    ordered = sorted(fdes, key=lambda f: (f.start, f.index))
    ambiguous: set[int] = set()
    if info.is_relocatable and unplaced:
        for prev, fde in zip(ordered, ordered[1:], strict=False):
            if fde.start < prev.end:
                ambiguous |= {prev.index, fde.index}
        for k, cf in enumerate(cfi_funcs[1:], 1):
            if cf.start < cfi_funcs[k - 1].end:
                ambiguous |= {f.index for f in ordered if f.start < cf.end and cf.start < f.end}
    cfi_starts = [c.start for c in cfi_funcs]
    functions: list[Function] = []
    for fde in ordered:
        functions.append(_verify_fde(section, table, fde, cfi_funcs, cfi_starts,
                                     fde.index in ambiguous, arch, version, name, findings))
    # One verdict per function: a piece of a function SFrame covers in part
    # becomes that function's verdict, unless it already disagrees.
    by_range = {(f.start, f.end): k for k, f in enumerate(functions)}
    for func in _uncovered(info, section, ordered, cfi_funcs, table, layout, name, ambiguous):
        k = by_range.get((func.start, func.end), -1)
        if k < 0:
            functions.append(func)
        elif functions[k].verdict != DISAGREES:
            functions[k] = func._replace(name=functions[k].name)
    functions.sort(key=lambda f: (f.start, f.end))
    return functions, findings


def _verify_fde(section: SFrameSection, table: CFITable, fde: FDE, cfi_funcs: list[_CFIFunc],
                cfi_starts: list[int], ambiguous: bool, arch: Arch, version: int, name: Namer,
                findings: list[Finding]) -> Function:
    label = name(fde.start)
    if ambiguous:
        return Function(fde.start, fde.end, label, CANNOT_SAY, fde.start, (OBJ_AMBIGUOUS,))
    try:
        srows = _sframe_rows(section, fde)
        erratum = _erratum(section, fde)
        fres = section.get_fres(fde)
    except FormatError as exc:
        findings.append(Finding("fre", fde.start, label, str(exc)))
        return Function(fde.start, fde.end, label, DISAGREES, fde.start, (),
                        f"its FREs do not decode: {exc}")
    if not fde.is_pcmask and fres and fres[-1].start >= fde.size > 0:
        findings.append(Finding("fre-end", fde.start + fres[-1].start, label,
                                f"FDE {fde.index}: last FRE starts at offset "
                                f"{fres[-1].start:#x}, at the function's end (size "
                                f"{fde.size:#x})"))
    # The CFI FDEs over [start, end): usually exactly one.
    drows: list[Row] = []
    k = bisect.bisect_right(cfi_starts, fde.start) - 1
    k = max(k, 0)
    while k < len(cfi_funcs) and cfi_funcs[k].start < fde.end:
        cf = cfi_funcs[k]
        if cf.end > fde.start:
            drows += _clip(_cfi_rows(table, cf), max(cf.start, fde.start), min(cf.end, fde.end))
        k += 1
    drows.sort(key=lambda r: r.start)
    bad, detail, reasons, compared, only = compare_rows(
        srows, drows, fde.start, fde.end, arch, version, pcmask=fde.is_pcmask)
    if bad is not None:
        return Function(fde.start, fde.end, label, DISAGREES, bad, tuple(sorted(reasons)), detail)
    if compared == 0 and fde.size > 0:
        return Function(fde.start, fde.end, label, SFRAME_ONLY, fde.start, (),
                        "no CFI describes this code")
    if erratum:
        return Function(fde.start, fde.end, label, ERRATUM, fde.start,
                        (PLT_GOT_ERRATUM, *sorted(reasons)))
    if reasons:
        return Function(fde.start, fde.end, label, CANNOT_SAY, fde.start, tuple(sorted(reasons)))
    return Function(fde.start, fde.end, label, AGREES, fde.start)


def _known_uncovered(info: ElfSFrame, section: SFrameSection, table: CFITable,
                     cf: _CFIFunc, layout: Layout, label: str | None) -> tuple[str, str] | None:
    """(kind, words) of a known reason for a whole function without SFrame, or None."""
    if not info.is_relocatable and (cf.start == info.entry or label in _CRT1):
        return KNOWN_ENTRY, (f"{label or '_start'} from crt1.o (the entry code, which the C "
                             "library assembles without --gsframe)")
    sec_name = section_of(layout, cf.start)
    if sec_name in _PLT_SECTIONS:
        return KNOWN_PLT, f"linker-made {sec_name} stubs the linker gave no SFrame FDE"
    try:
        rows = _cfi_rows(table, cf)
    except FormatError:
        rows = []
    for row in rows:
        why = unsayable(row, section.arch, section.version)
        if why is not None and why != CFI_EXPRESSION:
            return KNOWN_UNSAYABLE, f"gas skips it: {why}"
    if info.elf_type == "ET_EXEC" and not layout.interp:
        return KNOWN_STATIC, ("static link: code from archives assembled without --gsframe "
                              "(e.g. the C library's libc.a)")
    return None


def _uncovered(info: ElfSFrame, section: SFrameSection, ordered: list[FDE],
               cfi_funcs: list[_CFIFunc], table: CFITable, layout: Layout, name: Namer,
               ambiguous: set[int]) -> list[Function]:
    """CFI ranges no SFrame FDE covers: whole functions get their own verdict;
    a piece of a function SFrame covers in part is reported on that function."""
    out: list[Function] = []
    starts = [f.start for f in ordered]
    # Covered intervals, merged, so the sweep below is linear.
    merged: list[list[int]] = []
    for fde in ordered:
        if merged and fde.start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], fde.end)
        else:
            merged.append([fde.start, fde.end])
    m = 0
    for cf in cfi_funcs:
        while m < len(merged) and merged[m][1] <= cf.start:
            m += 1
        pieces = []
        pos = cf.start
        n = m
        while pos < cf.end:
            if n < len(merged) and merged[n][0] <= pos:
                pos = max(pos, merged[n][1])
                n += 1
                continue
            nxt = merged[n][0] if n < len(merged) else cf.end
            stop = min(nxt, cf.end)
            if stop > pos:
                pieces.append((pos, stop))
            pos = stop
        if not pieces:
            continue
        if pieces == [(cf.start, cf.end)]:
            label = name(cf.start)
            if cf.start == info.entry and not info.is_relocatable and (
                    label is None or label.startswith(".")):
                label = "_start"  # s390x's crt1.o gives it no size
            known = _known_uncovered(info, section, table, cf, layout, label)
            if known is not None:
                out.append(Function(cf.start, cf.end, label, NOT_COVERED, cf.start, (known[0],),
                                    known[1], True))
            else:
                out.append(Function(cf.start, cf.end, label, NOT_COVERED, cf.start, (),
                                    "CFI describes it; no SFrame FDE covers it", False))
            continue
        # Part of a function SFrame covers: an FDE cut short (or starting late).
        k = bisect.bisect_right(starts, pieces[0][0]) - 1
        owner = ordered[k] if k >= 0 and ordered[k].start < cf.end else None
        if owner is None:
            owner = next((f for f in ordered if f.start < cf.end and cf.start < f.end), None)
        text = ", ".join(f"{a:#x}-{b:#x}" for a, b in pieces)
        if owner is not None and owner.index in ambiguous:
            continue
        # The owner's verdict (found by its start in _compare_all), or a record of its own.
        out.append(Function(owner.start if owner is not None else pieces[0][0],
                            owner.end if owner is not None else pieces[-1][1],
                            name(cf.start), NOT_COVERED, pieces[0][0], (),
                            f"CFI describes {cf.start:#x}-{cf.end:#x}; no SFrame FDE covers "
                            f"{text}" + (f" (the SFrame FDE at {owner.start:#x} ends at "
                                         f"{owner.end:#x})" if owner is not None else ""),
                            False))
    return out


# -- Findings about the section as written ------------------------------------------


def _linker_findings(info: ElfSFrame) -> list[Finding]:
    """What a linker that does not merge ``.sframe`` leaves (a linked file):
    several headers one after the other, and no SFRAME_F_FDE_SORTED."""
    parts = info.parts()
    first = parts[0].header
    out = []
    if len(parts) > 1:
        total = sum(p.header.num_fdes for p in parts)
        tail = len(info.data or b"") - first.size
        out.append(Finding("concatenated", info.sframe_address, ".sframe",
                           f"{describe_parts(parts)}: the linker did not merge the inputs' "
                           f".sframe sections (gold, lld and mold 1.10 do not); {tail:#x} bytes "
                           f"follow the first header's FRE sub-section, and a reader that stops "
                           f"at the first header (libsframe, readelf, the kernel) sees "
                           f"{first.num_fdes} of the {total} FDEs"))
    if not first.sorted:
        out.append(Finding("sorted-flag", info.sframe_address, ".sframe",
                           "SFRAME_F_FDE_SORTED is not set: libsframe (sframe_find_fre) and the "
                           "kernel refuse the section (ld sets it when it merges .sframe)"))
    return out


def _lost_plt(info: ElfSFrame, section: SFrameSection, functions: list[Function],
              layout: Layout) -> list[Function]:
    """PLT stubs without FDEs in a section ld merged (one header, sorted, a
    PT_GNU_SFRAME) that has no FDE for any PLT stub: ld gives its PLTs FDEs
    when it merges, so they were lost (ld 2.47.50 with --gc-sections), not
    left out by design as gold, lld and mold do."""
    parts = info.parts()
    if len(parts) > 1 or not parts[0].header.sorted or not layout.sframe_segments:
        return functions
    if any(section_of(layout, fde.start) in _PLT_SECTIONS for fde in section.iter_fdes()):
        return functions
    return [f._replace(known=False, detail=(
                f"{section_of(layout, f.start)} stubs ({f.start:#x}-{f.end:#x}) lost their "
                "SFrame FDE: ld gives its PLT stubs FDEs when it merges .sframe, and this "
                "output has none for any PLT (ld 2.47.50 with --gc-sections)"))
            if f.verdict == NOT_COVERED and f.reasons == (KNOWN_PLT,) else f
            for f in functions]


def _segment_findings(layout: Layout) -> list[Finding]:
    assert layout.sframe_section is not None
    addr, size = layout.sframe_section
    if not layout.sframe_segments:
        return [Finding("segment", addr, ".sframe",
                        "no PT_GNU_SFRAME program header: a loader (the kernel) cannot find "
                        "the section", fatal=False)]
    for vaddr, memsz in layout.sframe_segments:
        if vaddr <= addr and addr + size <= vaddr + memsz:
            if vaddr == addr and memsz > -(-size // 8) * 8:  # more than the alignment's padding
                return [Finding("segment-size", addr, ".sframe",
                                f"PT_GNU_SFRAME ({vaddr:#x}-{vaddr + memsz:#x}) is {memsz - size:#x} "
                                f"bytes longer than the .sframe section ({addr:#x}-{addr + size:#x}): "
                                "ld keeps the size from before its merge (harmless to readers "
                                "that follow the header's counts)", fatal=False)]
            return []
    vaddr, memsz = layout.sframe_segments[0]
    return [Finding("segment", addr, ".sframe",
                    f"PT_GNU_SFRAME ({vaddr:#x}-{vaddr + memsz:#x}) does not cover the .sframe "
                    f"section ({addr:#x}-{addr + size:#x})")]


# -- The kernel's reader ------------------------------------------------------------


def kernel_findings(info: ElfSFrame, section: SFrameSection, layout: Layout, name: Namer
                    ) -> list[Finding]:
    """Why Linux's SFrame unwinder would refuse the section (``format/kernel.py``),
    each reason named at its first offender."""
    return [Finding(f"kernel-{r.kind}", r.pc, name(r.pc) if r.pc is not None else None,
                    f"kernel: {r.text}")
            for r in kernel_refusals(info, section, layout.sframe_segments, layout.exec_segments)]


# -- Files that cannot be verified --------------------------------------------------


class NothingToCompare(FileError):
    """The file has no ``.sframe``, or no CFI to compare it with: nothing to verify."""


class Unreadable(NamedTuple):
    """A file ``verify_file`` could not check, in one line; ``skip``: it has
    nothing to compare (``verify -r`` counts those instead of failing)."""

    text: str
    skip: bool = False


def safe_verify(path: str, against: str | None, kernel: bool) -> Report | Unreadable:
    """``verify_file``, with any failure to read worded in one line (for worker processes)."""
    try:
        return verify_file(path, against=against, kernel=kernel)
    except SFrameError as exc:
        text = str(exc)
        if not (text.startswith(f"{path}:") or (against and text.startswith(against))):
            text = f"{path}: {text}"
        return Unreadable(text, isinstance(exc, NothingToCompare))
    except OSError as exc:
        return Unreadable(f"{path}: {exc.strerror or exc}")
    except foreign_errors() as exc:
        return Unreadable(f"{path}: malformed ELF file: {exc}")
