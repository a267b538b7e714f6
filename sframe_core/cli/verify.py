"""``sframe verify``: does a file's ``.sframe`` say what its DWARF CFI says, at every PC?

Anyone who strips ``.eh_frame`` and relies on ``.sframe`` trusts the
producer, and the producers are young (see ``errata.py``). This module
compares the two sources of rows (``section.py`` for SFrame, ``cfi.py`` for
``.eh_frame``/``.debug_frame``) function by function, on the CFA, the RA and
the FP, and gives each function one verdict (``VERDICTS``), plus structural
findings about the section itself and, on request, whether the Linux
kernel's SFrame unwinder would accept it (``kernel_findings``).

The walk is linear: each function's SFrame rows (one per FRE) and CFI rows
(one per CFI row) are merged interval by interval, so the cost is the number
of rows, not of PCs (only amd64 PLT stubs, whose CFI is a DWARF expression of
the PC, are checked PC by PC). Everything returned is an immutable record.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from ..base.abi import AMD64, Arch
from ..base.errors import FileError, FormatError, SFrameError, foreign_errors, reading_elf
from ..base.files import is_elf
from ..base.rows import CFARule, Row, RuleKind
from ..dwarf.cfi import CFITable
from ..format.describe import describe_cfa, describe_rule
from ..format.elf import PT_GNU_SFRAME, ElfSFrame, read_elf
from ..format.errata import correct_cfa
from ..format.linked import Part, describe_parts, split_parts
from ..format.records import FDE, FRE_TYPE_ADDR4
from ..format.rules import fre_rules
from ..format.section import SFrameSection
from ..targets.symbols import SymbolTable

__all__ = [
    "AGREES", "CANNOT_SAY", "ERRATUM", "DISAGREES", "NOT_COVERED", "SFRAME_ONLY", "VERDICTS",
    "PLT_EXPRESSION", "CFI_EXPRESSION", "OBJ_AMBIGUOUS", "PLT_GOT_ERRATUM",
    "Function", "Finding", "Report", "verify_file", "compare_rows", "row_key", "plt_cfa",
    "kernel_findings", "report_lines", "report_json", "safe_verify", "walk_elves",
    "NothingToCompare", "Unreadable",
]

# -- Verdicts ----------------------------------------------------------------

AGREES = "agrees"
CANNOT_SAY = "cannot-say"  # differs only where SFrame cannot say it (reason named)
ERRATUM = "erratum"  # a known producer bug, corrected by errata.py
DISAGREES = "DISAGREES"
NOT_COVERED = "not-covered"  # CFI describes code no SFrame FDE covers
SFRAME_ONLY = "sframe-only"  # SFrame describes code no CFI describes
VERDICTS = (AGREES, CANNOT_SAY, ERRATUM, DISAGREES, NOT_COVERED, SFRAME_ONLY)

# -- Named expected differences -------------------------------------------------
#
# ld's .eh_frame FDE for amd64 .plt entries gives the CFA as a DWARF
# expression, rsp + 8 + ((rip & 15) >= 11 ? 8 : 0), which cfi.py reports as
# unknown by design; SFrame says the same with a PC-mask FDE. SFrame's CFA is
# checked against that formula at every PC instead.
PLT_EXPRESSION = "plt-expression"
# Any other CFI rule cfi.py cannot express (a DWARF expression): no row to
# compare with, so nothing can be said against SFrame's.
CFI_EXPRESSION = "cfi-expression"
# In a .o every text section starts at 0 (.text, .text.startup for main), so
# functions from different sections share addresses and neither decoder's
# lookup by address knows which one is meant: such FDEs are not compared.
OBJ_AMBIGUOUS = "obj-ambiguous-address"
# errata.py: ld >= 2.44 writes CFA = SP + 16 for amd64 .plt.got (the lazy
# .plt template after its push), where the code and ld's own .eh_frame say
# SP + 8. The rows compared here are the corrected ones.
PLT_GOT_ERRATUM = "ld-plt-got-cfa"

_REASONS = {
    PLT_EXPRESSION: "the CFI gives the PLT's CFA as a DWARF expression of the PC; SFrame's "
                    "PC-mask FDE gives the same CFA at every PC",
    CFI_EXPRESSION: "the CFI gives a DWARF expression rule here, which SFrame has no form for",
    OBJ_AMBIGUOUS: "relocatable object: its text sections all start at 0 and this FDE shares "
                   "addresses with another section's; not compared",
    PLT_GOT_ERRATUM: "ld >= 2.44 writes CFA = SP + 16 for amd64 .plt.got where SP + 8 is right "
                     "(sframe_core/format/errata.py corrects it)",
}

# Known pieces of code without SFrame (reported, not failed).
KNOWN_ENTRY = "entry"
KNOWN_UNSAYABLE = "unsayable"
KNOWN_PLT = "plt"
KNOWN_STATIC = "static-archive"

# glibc's crt1.o: start.S (_start) and, in non-PIE executables, static-reloc.c.
_CRT1 = frozenset({"_start", "_dl_relocate_static_pie"})
_PLT_SECTIONS = frozenset({".plt", ".plt.got", ".plt.sec", ".iplt", ".plt.bnd"})
_SHF_EXECINSTR = 4


class Function(NamedTuple):
    """One function's verdict.

    ``pc`` is the first PC where something is wrong (DISAGREES, an unexplained
    uncovered piece), else the function's start; ``reasons`` name the
    expected differences (or the known uncovered case); ``detail`` says in
    words what differs (both rules), or what is uncovered.
    """

    start: int
    end: int
    name: str | None
    verdict: str
    pc: int
    reasons: tuple[str, ...] = ()
    detail: str = ""
    known: bool = True  # for NOT_COVERED: a named, expected case

    @property
    def failed(self) -> bool:
        return self.verdict == DISAGREES or (self.verdict == NOT_COVERED and not self.known)


class Finding(NamedTuple):
    """A structural problem of the section, or a reason the kernel would refuse it."""

    kind: str  # unsorted, overlap, fre, fre-end, segment, kernel
    pc: int | None
    name: str | None
    text: str
    fatal: bool = True


class Report(NamedTuple):
    """Everything ``verify_file`` found in one file."""

    path: str
    version: int
    arch: str
    functions: tuple[Function, ...]
    findings: tuple[Finding, ...]
    kernel: tuple[Finding, ...] | None = None  # None: not asked
    # .o files: (base, size, section) of each text section as laid out here;
    # addresses print as section offsets (``.text+0x40``).
    spans: tuple[tuple[int, int, str], ...] = ()

    def where(self, pc: int) -> str:
        """``0x...``, or in a ``.o`` ``SECTION+0x...``."""
        for base, size, sec_name in self.spans:
            if base <= pc <= base + size:
                return f"{sec_name}+{pc - base:#x}"
        return f"{pc:#x}"

    @property
    def failed(self) -> bool:
        return (any(f.failed for f in self.functions) or any(f.fatal for f in self.findings)
                or bool(self.kernel))

    @property
    def status(self) -> int:
        return 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        counts = {verdict: 0 for verdict in VERDICTS}
        for func in self.functions:
            counts[func.verdict] += 1
        counts["not-covered-known"] = sum(1 for f in self.functions
                                          if f.verdict == NOT_COVERED and f.known)
        counts["findings"] = len(self.findings)
        return counts


# -- Comparing rows ----------------------------------------------------------------


def row_key(row: Row) -> tuple[object, ...]:
    """What both sources must agree on: CFA, RA, FP, RA signing."""
    if row.outermost:
        return ("outermost",)
    return (row.cfa, row.ra, row.fp, row.ra_signed)


def plt_cfa(pc: int) -> CFARule:
    """The amd64 lazy PLT entry's CFA, as ld's .eh_frame expression computes it."""
    return CFARule(AMD64.sp, 8 + (8 if (pc & 15) >= 11 else 0))


def _rules_text(row: Row | None, arch: Arch) -> str:
    if row is None:
        return "no row"
    if row.outermost:
        return "RA undefined (outermost frame)"
    ra = describe_rule("RA", row.ra, arch, is_ra=True) + (" (PAC-signed)" if row.ra_signed else "")
    return f"{describe_cfa(row.cfa, arch)}; {ra}; {describe_rule('FP', row.fp, arch)}"


def _unsayable(row: Row, arch: Arch, version: int) -> str | None:
    """Why SFrame ``version`` has no form for ``row`` (a CFI row), or None if it has."""
    cfa = row.cfa
    if cfa is None:
        return CFI_EXPRESSION
    if version < 3:
        if cfa.reg not in (arch.sp, arch.fp) or cfa.deref:
            what = "a loaded CFA" if cfa.deref else f"the CFA on {arch.reg_name(cfa.reg)}"
            return f"SFrame v{version} has no form for {what} (e.g. DRAP stack realignment)"
        for name, rule in (("RA", row.ra), ("FP", row.fp)):
            if rule.kind in (RuleKind.AT_REG, RuleKind.CFA_PLUS) or (
                    rule.kind is RuleKind.IN_REG and arch.abi_id != 4):
                return f"SFrame v{version} has no form for the {name} rule '{rule.kind.value}'"
    if row.fp.kind is RuleKind.UNDEFINED:
        return CFI_EXPRESSION  # an FP rule cfi.py could not read
    return None


def compare_rows(srows: Sequence[Row], drows: Sequence[Row], lo: int, hi: int, arch: Arch,
                 version: int, *, pcmask: bool = False
                 ) -> tuple[int | None, str, set[str], int, int]:
    """Merge two sorted row lists over ``[lo, hi)``.

    Returns (first wrong PC or None, what differs there in words, named
    expected differences met, bytes compared, bytes SFrame alone describes).
    Linear in the number of rows (PC by PC only in a PC-mask FDE whose CFI
    row is an expression).
    """
    bounds = {lo, hi}
    for row in srows:
        bounds.add(min(max(row.start, lo), hi))
        bounds.add(min(max(row.end, lo), hi))
    for row in drows:
        bounds.add(min(max(row.start, lo), hi))
        bounds.add(min(max(row.end, lo), hi))
    points = sorted(bounds)
    reasons: set[str] = set()
    compared = only = 0
    i = j = 0
    for a, b in zip(points, points[1:], strict=False):
        while i < len(srows) and srows[i].end <= a:
            i += 1
        while j < len(drows) and drows[j].end <= a:
            j += 1
        srow = srows[i] if i < len(srows) and srows[i].start <= a else None
        drow = drows[j] if j < len(drows) and drows[j].start <= a else None
        if drow is None:
            if srow is not None:
                only += b - a
            continue
        compared += b - a
        if srow is None:
            return a, f"SFrame has no row; CFI: {_rules_text(drow, arch)}", reasons, compared, only
        if row_key(srow) == row_key(drow):
            continue
        if pcmask and drow.cfa is None and (srow.ra, srow.fp) == (drow.ra, drow.fp) \
                and arch.abi_id == AMD64.abi_id:
            for pc in range(a, b):
                if srow.cfa != plt_cfa(pc):
                    return pc, (f"SFrame: {_rules_text(srow, arch)}; CFI: "
                                f"{describe_cfa(plt_cfa(pc), arch)} (PLT expression)"), \
                        reasons, compared, only
            reasons.add(PLT_EXPRESSION)
            continue
        why = _unsayable(drow, arch, version)
        if why is not None:
            reasons.add(why)
            continue
        return a, f"SFrame: {_rules_text(srow, arch)}; CFI: {_rules_text(drow, arch)}", \
            reasons, compared, only
    return None, "", reasons, compared, only


# -- Reading the file ------------------------------------------------------------------


class _Layout(NamedTuple):
    """What the ELF headers say beyond ``ElfSFrame``: sections, segments, interpreter."""

    sections: tuple[tuple[str, int, int, bool], ...]  # name, address, size, executable
    sframe_section: tuple[int, int] | None  # address, size of .sframe
    sframe_segments: tuple[tuple[int, int], ...]  # PT_GNU_SFRAME (vaddr, memsz)
    exec_segments: tuple[tuple[int, int], ...]  # executable PT_LOAD (vaddr, memsz)
    interp: bool


def _layout(path: str) -> _Layout:
    from elftools.elf.elffile import ELFFile

    from ..base.files import open_elf

    with reading_elf(path), open_elf(path) as stream:
        elf = ELFFile(stream)
        sections = []
        sframe = None
        for sec in elf.iter_sections():
            sections.append((sec.name, sec["sh_addr"], sec["sh_size"],
                             bool(sec["sh_flags"] & _SHF_EXECINSTR)))
            if sec.name == ".sframe":
                sframe = (sec["sh_addr"], sec["sh_size"])
        segs, execs, interp = [], [], False
        for seg in elf.iter_segments():
            kind = seg["p_type"]
            if kind in (PT_GNU_SFRAME, "PT_GNU_SFRAME"):
                segs.append((seg["p_vaddr"], seg["p_memsz"]))
            elif kind == "PT_LOAD" and seg["p_flags"] & 1:
                execs.append((seg["p_vaddr"], seg["p_memsz"]))
            elif kind == "PT_INTERP":
                interp = True
    return _Layout(tuple(sections), sframe, tuple(segs), tuple(execs), interp)


class _CFIFunc(NamedTuple):
    start: int
    end: int
    ref: Any  # cfi.py's FDE reference
    shift: int = 0  # .o files: the base its text section was laid out at


class _Object(NamedTuple):
    """A relocatable object laid out for comparison: each text section at its
    own base (they all start at 0 in the file), so functions of ``.text`` and
    ``.text.startup`` no longer share addresses. FDE start fields are mapped
    to their text section through the relocations on them."""

    bases: dict[int, int]  # section index -> base
    spans: tuple[tuple[int, int, str], ...]  # (base, size, section name)
    sframe: dict[int, int]  # .sframe offset of a start field -> section index
    eh_frame: dict[int, int]  # .eh_frame offset of an FDE's pc_begin -> section index
    symbols: tuple[Any, ...]  # Symbol records at laid-out addresses


_OBJECT_BASE = 0x10000

# A function's name (``f4``, ``f4+0x10``, or its section's: ``.plt``) at an address.
Namer = Callable[[int], "str | None"]


def _object(path: str) -> _Object:
    from elftools.elf.elffile import ELFFile

    from ..base.files import open_elf
    from ..targets.symbols import Symbol

    with reading_elf(path), open_elf(path) as stream:
        elf = ELFFile(stream)
        bases: dict[int, int] = {}
        spans = []
        at = _OBJECT_BASE
        targets: dict[int, str] = {}
        for index, sec in enumerate(elf.iter_sections()):
            if sec["sh_flags"] & _SHF_EXECINSTR and sec["sh_type"] != "SHT_NOBITS":
                bases[index] = at
                spans.append((at, sec["sh_size"], sec.name))
                at += (sec["sh_size"] + 0xFFF) & ~0xFFF or 0x1000
            elif sec.name in (".sframe", ".eh_frame"):
                targets[index] = sec.name
        maps: dict[str, dict[int, int]] = {".sframe": {}, ".eh_frame": {}}
        symbols = []
        other: Any
        for other in elf.iter_sections():
            sec = other  # relocation and symbol sections: pyelftools' subclasses
            if sec["sh_type"] in ("SHT_RELA", "SHT_REL") and sec["sh_info"] in targets:
                symtab: Any = elf.get_section(sec["sh_link"])
                out = maps[targets[sec["sh_info"]]]
                for rel in sec.iter_relocations():
                    out[rel["r_offset"]] = symtab.get_symbol(rel["r_info_sym"])["st_shndx"]
            elif sec["sh_type"] == "SHT_SYMTAB":
                for sym in sec.iter_symbols():
                    shndx = sym["st_shndx"]
                    if (sym["st_info"]["type"] == "STT_FUNC" and isinstance(shndx, int)
                            and shndx in bases and sym["st_size"]):
                        symbols.append(Symbol(bases[shndx] + sym["st_value"], sym["st_size"],
                                              sym.name))
    return _Object(bases, tuple(spans), maps[".sframe"], maps[".eh_frame"], tuple(symbols))


class _ObjectCFI(CFITable):
    """A ``.o``'s CFI from ``.eh_frame`` alone.

    LLVM's assembler writes ``.debug_frame`` beside ``.eh_frame`` when asked for
    SFrame (clang 22 ``-Wa,--gsframe``), with absolute relocations the
    ``.o`` relocation code (elf.py) does not apply; ``.eh_frame`` says the same
    and is what the linked file will carry.
    """

    def _read_section(self, elf: Any, section: Any, source: str) -> list[Any]:
        if source == "debug_frame":
            return []
        return super()._read_section(elf, section, source)


def _cfi_functions(table: CFITable, obj: _Object | None) -> list[_CFIFunc]:
    """The CFI's FDE ranges, sorted; ``.debug_frame`` ones under an ``.eh_frame``
    one dropped (the table prefers ``.eh_frame``), as are the address-0 FDEs
    of discarded functions in linked files; in a ``.o``, each at its text
    section's base."""
    index = table._load()  # the one parse of the CFI; rows are decoded per function below
    out: list[_CFIFunc] = []
    eh = sorted((r.start, r.end) for r in index.fdes if r.source == "eh_frame")
    eh_starts = [s for s, _ in eh]
    for ref in index.fdes:
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
        rows = table._decode(cf.ref)  # by reference: in a .o its address is not unique
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


def _namer(symbols: SymbolTable, layout: _Layout) -> Namer:
    def name(pc: int) -> str | None:
        hit = symbols.lookup(pc)
        if hit is not None:
            return hit[0] if hit[1] == 0 else f"{hit[0]}+{hit[1]:#x}"
        for sec_name, addr, size, executable in layout.sections:
            if executable and addr <= pc < addr + size and addr:
                return sec_name
        return None
    return name


def _section_of(layout: _Layout, pc: int) -> str | None:
    for sec_name, addr, size, executable in layout.sections:
        if executable and addr <= pc < addr + size:
            return sec_name
    return None


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
    table = _ObjectCFI(cfi_path) if info.is_relocatable and info.has_eh_frame \
        and against is None else CFITable(cfi_path)
    layout = _layout(path)
    obj = _object(path) if info.is_relocatable and against is None else None
    if obj is not None:
        symbols = SymbolTable(obj.symbols)
        layout = layout._replace(sections=tuple((name, base, size, True)
                                                for base, size, name in obj.spans))
    else:
        symbols = SymbolTable.from_file(path)
        if against is not None and not symbols.symbols:
            symbols = SymbolTable.from_file(against)
    name = _namer(symbols, layout)
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
                 cfi_funcs: list[_CFIFunc], layout: _Layout, name: Namer, obj: _Object | None
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
                     cf: _CFIFunc, layout: _Layout, label: str | None) -> tuple[str, str] | None:
    """(kind, words) of a known reason for a whole function without SFrame, or None."""
    if not info.is_relocatable and (cf.start == info.entry or label in _CRT1):
        return KNOWN_ENTRY, (f"{label or '_start'} from crt1.o (the entry code, which the C "
                             "library assembles without --gsframe)")
    sec_name = _section_of(layout, cf.start)
    if sec_name in _PLT_SECTIONS:
        return KNOWN_PLT, f"linker-made {sec_name} stubs the linker gave no SFrame FDE"
    try:
        rows = _cfi_rows(table, cf)
    except FormatError:
        rows = []
    for row in rows:
        why = _unsayable(row, section.arch, section.version)
        if why is not None and why != CFI_EXPRESSION:
            return KNOWN_UNSAYABLE, f"gas skips it: {why}"
    if info.elf_type == "ET_EXEC" and not layout.interp:
        return KNOWN_STATIC, ("static link: code from archives assembled without --gsframe "
                              "(e.g. the C library's libc.a)")
    return None


def _uncovered(info: ElfSFrame, section: SFrameSection, ordered: list[FDE],
               cfi_funcs: list[_CFIFunc], table: CFITable, layout: _Layout, name: Namer,
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


def _parts(info: ElfSFrame) -> list[Part]:
    """The SFrame headers of the section as the linker wrote it (``info.open``
    reads them as one)."""
    assert info.data is not None
    return split_parts(info.data, exact=not info.from_segment)


def _linker_findings(info: ElfSFrame) -> list[Finding]:
    """What a linker that does not merge ``.sframe`` leaves (a linked file):
    several headers one after the other, and no SFRAME_F_FDE_SORTED."""
    parts = _parts(info)
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
              layout: _Layout) -> list[Function]:
    """PLT stubs without FDEs in a section ld merged (one header, sorted, a
    PT_GNU_SFRAME) that has no FDE for any PLT stub: ld gives its PLTs FDEs
    when it merges, so they were lost (ld 2.47.50 with --gc-sections), not
    left out by design as gold, lld and mold do."""
    parts = _parts(info)
    if len(parts) > 1 or not parts[0].header.sorted or not layout.sframe_segments:
        return functions
    if any(_section_of(layout, fde.start) in _PLT_SECTIONS for fde in section.iter_fdes()):
        return functions
    return [f._replace(known=False, detail=(
                f"{_section_of(layout, f.start)} stubs ({f.start:#x}-{f.end:#x}) lost their "
                "SFrame FDE: ld gives its PLT stubs FDEs when it merges .sframe, and this "
                "output has none for any PLT (ld 2.47.50 with --gc-sections)"))
            if f.verdict == NOT_COVERED and f.reasons == (KNOWN_PLT,) else f
            for f in functions]


def _segment_findings(layout: _Layout) -> list[Finding]:
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


def kernel_findings(info: ElfSFrame, section: SFrameSection, layout: _Layout, name: Namer
                    ) -> list[Finding]:
    """Why Linux's SFrame unwinder (kernel/unwind/sframe.c) would refuse the section.

    The kernel reads the section through PT_GNU_SFRAME and drops all of it at
    its first bad entry, so each rule is reported once, at its first
    offender (docs/verify.md lists the kernel functions each check follows).
    """
    parts = _parts(info) if not info.is_relocatable else [Part(0, section.header)]
    hdr = parts[0].header  # as written: info.open merges concatenated parts
    out: list[Finding] = []

    def refuse(kind: str, pc: int | None, text: str) -> None:
        if all(f.kind != f"kernel-{kind}" for f in out):
            out.append(Finding(f"kernel-{kind}", pc, name(pc) if pc is not None else None,
                               f"kernel: {text}"))

    if len(parts) > 1:
        refuse("concatenated", None, f"{describe_parts(parts)}: sframe_read_header reads the "
                                     f"first header's {hdr.num_fdes} FDEs only")
    if hdr.version != 3:
        refuse("version", None, f"SFrame version {hdr.version}: sframe_read_header accepts only "
                                "version 3")
    if not hdr.sorted:
        refuse("sorted", None, "SFRAME_F_FDE_SORTED is not set (sframe_read_header)")
    if not hdr.pcrel:
        refuse("pcrel", None, "SFRAME_F_FDE_FUNC_START_PCREL is not set (sframe_read_header)")
    if hdr.auxhdr_len:
        refuse("auxhdr", None, f"auxiliary header of {hdr.auxhdr_len} bytes (sframe_read_header)")
    if not hdr.num_fdes or not hdr.num_fres:
        refuse("empty", None, "no FDEs or no FREs (sframe_read_header)")
    if info.is_relocatable:
        refuse("relocatable", None, "a relocatable object: the kernel reads only loaded files")
        return out
    if not layout.sframe_segments:
        refuse("segment", None, "no PT_GNU_SFRAME program header: the kernel finds the section "
                                "only through it")
    text = layout.exec_segments
    fixed_ra = hdr.cfa_fixed_ra_offset != 0
    previous: int | None = None
    for index in range(hdr.num_fdes):
        try:
            fde = section.get_fde(index)
        except FormatError as exc:
            refuse("fde", None, f"FDE {index}: {exc}")
            continue
        if previous is not None and fde.start < previous:
            refuse("order", fde.start, f"FDE {index} starts before FDE {index - 1}: the binary "
                                       "search fails (__find_fde)")
        previous = fde.start
        if not any(lo <= fde.start <= lo + size for lo, size in text):
            refuse("text", fde.start, f"FDE {index} at {fde.start:#x} is outside executable text "
                                      "(__read_fde)")
        if hdr.version == 3 and fde.flex:
            refuse("flex", fde.start, f"FDE {index} is a flexible FDE, which the kernel does not "
                                      "read yet (__read_fre)")
        if fde.info & 0x40 or fde.info2 & 0xE0 or fde.fre_type > FRE_TYPE_ADDR4:
            refuse("reserved", fde.start, f"FDE {index}: reserved bits set (info {fde.info:#04x},"
                                          f" info2 {fde.info2:#04x})")
        try:
            fres = section.get_fres(fde)
        except FormatError as exc:
            refuse("fre", fde.start, f"FDE {index}: {exc} (__read_fre)")
            continue
        last = -1
        for k, fre in enumerate(fres):
            pc = fde.start + fre.start
            if not fde.is_pcmask and fre.start > fde.size:
                refuse("fre-end", pc, f"FDE {index} FRE {k} starts past its function (__read_fre)")
            if fre.start <= last:
                refuse("fre-order", pc, f"FDE {index} FRE {k} does not start after FRE {k - 1} "
                                        f"(offset {fre.start:#x}): FREs must strictly increase "
                                        "(__find_fre)")
            last = fre.start
            count = len(fre.words)
            allowed = (0, 1, 2) if fixed_ra else (0, 2, 3)
            if not (hdr.version == 3 and fde.flex) and count not in allowed:
                why = (" (the CFA alone: __read_fre wants an RA word when the header has no "
                       "fixed RA offset)") if count == 1 else " (__read_fre)"
                refuse("words", pc, f"FDE {index} FRE {k} has {count} data words, the kernel "
                                    f"reads {allowed[0]}, {allowed[1]} or {allowed[2]}{why}")
    return out


# -- Output -------------------------------------------------------------------------


def _verdict_words(func: Function, report: Report) -> str:
    reasons = ", ".join(_REASONS.get(r, r) for r in func.reasons)
    if func.verdict == AGREES:
        return "agrees"
    if func.verdict == CANNOT_SAY:
        return f"differs only where SFrame cannot say it: {reasons}"
    if func.verdict == ERRATUM:
        return f"known producer erratum: {reasons}"
    if func.verdict == DISAGREES:
        return f"DISAGREES: {func.detail}"
    if func.verdict == NOT_COVERED:
        where = f"{report.where(func.start)}-{report.where(func.end)}"
        if func.known:
            return f"not covered ({where}, known: {func.detail})"
        return f"not covered: {func.detail}"
    return f"SFrame only ({report.where(func.start)}-{report.where(func.end)}): {func.detail}"


def report_lines(report: Report, *, verbose: bool = False) -> list[str]:
    """binutils style: ``FILE: 0xPC FUNCTION: what``, one line per finding, then a summary."""
    lines = []
    static = [f for f in report.functions if f.verdict == NOT_COVERED and f.known
              and f.reasons == (KNOWN_STATIC,)]
    for func in report.functions:
        if (func.verdict == AGREES or func.reasons == (KNOWN_STATIC,)) and not verbose:
            continue
        lines.append(f"{report.path}: {report.where(func.pc)} {func.name or '??'}: "
                     f"{_verdict_words(func, report)}")
    if static and not verbose:
        size = sum(f.end - f.start for f in static)
        lines.append(f"{report.path}: {static[0].start:#x} {static[0].name or '??'}: not covered "
                     f"(known: {static[0].detail}): {len(static)} functions, {size} bytes "
                     "(-v lists them)")
    for finding in (*report.findings, *(report.kernel or ())):
        where = (f"{report.where(finding.pc)} {finding.name or '??'}: "
                 if finding.pc is not None else "")
        severity = "" if finding.fatal else "warning: "
        lines.append(f"{report.path}: {where}{severity}{finding.text}")
    c = report.counts()
    summary = (f"{report.path}: SFrame v{report.version} {report.arch}: "
               f"{len(report.functions)} functions: {c[AGREES]} agree, "
               f"{c[CANNOT_SAY]} differ only where SFrame cannot say it, "
               f"{c[ERRATUM]} known errata, {c[DISAGREES]} DISAGREE, "
               f"{c[NOT_COVERED]} not covered ({c['not-covered-known']} known), "
               f"{c[SFRAME_ONLY]} SFrame only; {c['findings']} structural findings")
    if report.kernel is not None:
        summary += "; kernel: " + ("accepts" if not report.kernel
                                   else f"rejects ({len(report.kernel)} reasons)")
    lines.append(summary + (": FAIL" if report.failed else ": OK"))
    return lines


def _finding_json(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "pc": f.pc, "name": f.name, "text": f.text, "fatal": f.fatal}


def report_json(report: Report) -> dict[str, Any]:
    """The same content as ``report_lines``, as data (schema in docs/verify.md)."""
    return {
        "file": report.path,
        "version": report.version,
        "arch": report.arch,
        "status": report.status,
        "counts": report.counts(),
        "functions": [{"start": f.start, "end": f.end, "name": f.name, "verdict": f.verdict,
                       "pc": f.pc, "reasons": list(f.reasons), "known": f.known,
                       "detail": f.detail, "where": report.where(f.pc),
                       "text": _verdict_words(f, report)}
                      for f in report.functions],
        "findings": [_finding_json(f) for f in report.findings],
        "kernel": None if report.kernel is None else {
            "accepts": not report.kernel, "reasons": [_finding_json(f) for f in report.kernel]},
    }


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


def walk_elves(directory: str) -> list[str]:
    """Every regular ELF file under ``directory`` (symlinks not followed), sorted."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for entry in sorted(files):
            path = os.path.join(root, entry)
            if not os.path.islink(path) and os.path.isfile(path) and is_elf(path):
                found.append(path)
    return found
