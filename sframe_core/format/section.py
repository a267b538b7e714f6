"""An opened ``.sframe`` section: lazy FDE search and FRE lookup.

Opening reads the header and nothing more. A lookup binary-searches the FDE
array in place (reading only the start fields it visits), then decodes the
FREs of that one function; decoded FREs are kept in a small per-section
cache, because a backtrace revisits the same functions.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol

from ..base.abi import Arch, arch_for_abi
from ..base.errors import FormatError
from ..base.rows import CFARule, Row, Rule
from . import saved_registers as saved_registers_setting
from .errata import correct_cfa
from .records import FDE, FRE, Header, decode_fres, fde_decoder, fde_start_field, fre_finder, parse_header
from .rules import FRERules, fre_rules

__all__ = ["SFrameSection", "Lookup", "CodeReader", "PointerReader", "Region", "SavedRules",
           "SavedAnalyser"]

# Reads ``size`` bytes at an address of the section's address space from the
# file (never from target memory): code, and jump tables; None where the file
# has none.
CodeReader = Callable[[int, int], "bytes | None"]
# ``count`` code addresses stored from a runtime address on, as loaded (elf.py).
PointerReader = Callable[[int, int], "list[int] | None"]


class Region(NamedTuple):
    """A PT_LOAD segment's file contents at its address (``filesz`` bounds
    what it answers, as ``CodeReader`` does; ``contents`` may be shorter,
    in a truncated file)."""

    address: int
    filesz: int
    contents: bytes


# Register number -> its rule: a row's ``regs``.
Regs = tuple[tuple[int, Rule], ...]


class SavedRules(Protocol):
    """Where one function keeps its caller's callee-saved registers, PC by PC:
    what its code proves (``analysis/saved.py``), which SFrame does not say."""

    def regs_at(self, pc: int) -> tuple[Regs, int, int]:
        """(rules, lo, hi): the rules at ``pc``, which hold for ``lo <= pc < hi``."""
        ...


class SavedAnalyser(Protocol):
    """What gives a section's rows their saved-register rules.

    The analysis reads machine code, a layer above the format
    (``analysis/section.py``): the layer that opens a section with its code
    gives it one (``ElfSFrame.open``'s ``analyser``), and a section without
    one has rows of CFA, RA and FP alone. It keeps what it found: the
    section asks again for every row of a function.
    """

    def rules(self, fde: FDE) -> SavedRules:
        """The saved-register rules of the function of ``fde`` (one of this
        section's, with its code: ``SFrameSection.code``)."""
        ...

# A sorted section is searched in place (O(log n) reads of start fields)
# until it has answered this many lookups; then the starts are read into a
# list once, which a backtrace or a debugging session amortises at once.
TABLE_AFTER_LOOKUPS = 32
RULES_CACHE_SIZE = 4096
ROW_CACHE_SIZE = 4096
# Functions whose FREs stay decoded. A deep backtrace touches few distinct
# functions; the bound keeps memory flat whatever the section holds.
FRE_CACHE_SIZE = 512


class Lookup(NamedTuple):
    """The FDE and FRE that apply at a PC, with the row they give."""

    fde: FDE
    fre: FRE
    rules: FRERules
    row: Row


def _new_row(fields: tuple[object, ...]) -> Row:
    """A ``Row`` from all its fields in order, without NamedTuple's Python-level ``__new__``."""
    return tuple.__new__(Row, fields)


class SFrameSection:
    """One SFrame section at a known address.

    :param data: the section's bytes (trailing bytes past the header's extent
        are ignored: ``PT_GNU_SFRAME``'s ``p_filesz`` can be larger).
    :param address: the address of the section's first byte; FDE starts and
        rows are in this address space (file addresses for ``sh_addr``,
        runtime addresses for ``sh_addr`` plus the load bias).
    :param pcrel: override the PCREL flag (``.o`` files whose relocations
        were applied hold PC-relative start fields without the flag).
    :param saved_registers: whether rows get the saved-register rules its
        analyser finds (None: ``SFRAME_SAVED_REGISTERS``, read now:
        ``format.saved_registers``).
    :raises FormatError: the header is not valid.
    """

    def __init__(self, data: bytes | memoryview, address: int = 0, *,
                 pcrel: bool | None = None, name: str = "<sframe>",
                 code: CodeReader | None = None, saved_registers: bool | None = None) -> None:
        self.header: Header = parse_header(data)
        # Bytes index faster than a memoryview; only a longer buffer is viewed.
        self.data: bytes | memoryview = data if isinstance(data, bytes) and \
            len(data) == self.header.size else memoryview(data)[: self.header.size]
        self.address = address
        self.name = name
        self._pcrel = pcrel
        self._decode_fde = fde_decoder(self.header, address, pcrel)
        self._find_fre = fre_finder(self.header)
        arch = arch_for_abi(self.header.abi_arch)
        assert arch is not None  # parse_header checked the ABI
        self.arch: Arch = arch
        self._order: list[int] | None = None  # sorted FDE indices, unsorted sections only
        self._starts: Sequence[int] | None = None  # sorted function starts, built lazily
        self._searches = 0  # in-place searches so far (see _table)
        # FRE meaning by (flex, info, words): real sections repeat a few
        # dozen distinct rows (sp+8, sp+16, fp+16 c-16, ...) endlessly.
        self._rules: dict[tuple[bool, int, tuple[int, ...], int], FRERules] = {}
        self._rows: dict[int, Row | None] = {}
        self._fres: OrderedDict[int, tuple[FRE, ...]] = OrderedDict()
        # Where the functions' code comes from, for the saved-register analysis.
        self.code = code
        self.saved_registers: bool = saved_registers_setting() if saved_registers is None \
            else saved_registers
        # The saved-register analysis of the functions, given by the opener.
        self.analyser: SavedAnalyser | None = None
        # Absolute addresses read from the file are the runtime ones (ET_EXEC).
        self.absolute_tables = False
        # Tables of code addresses (computed gotos), as they are once loaded.
        self.pointers: PointerReader | None = None
        # Not None: these bytes are the file's parts read as one (linked.py), and how.
        self.merged: str | None = None
        # Every segment ``code`` reads from, for a reader of the whole module
        # (a whole-file ``open``): the FDEs made in C read them (symfiles.native_fdes).
        self.regions: Callable[[], list[Region]] | None = None

    # -- FDEs ------------------------------------------------------------

    @property
    def num_fdes(self) -> int:
        return self.header.num_fdes

    @property
    def version(self) -> int:
        return self.header.version

    def get_fde(self, index: int) -> FDE:
        return self._decode_fde(self.data, index)

    def iter_fdes(self) -> Iterator[FDE]:
        for index in range(self.header.num_fdes):
            yield self.get_fde(index)

    def _start(self, index: int) -> int:
        offset, value = fde_start_field(self.data, self.header, index)
        pcrel = self.header.pcrel if self._pcrel is None else self._pcrel
        return self.address + value + (offset if pcrel else 0)

    def _table(self) -> tuple[Sequence[int], list[int] | None]:
        """Sorted function starts (and, unsorted sections only, their FDE indices).

        Built in one C-speed pass over the start fields (``num_fdes`` was
        checked against the section size, so the table is bounded by it);
        lookups then bisect in C. A sorted section builds it only once it
        has answered ``TABLE_AFTER_LOOKUPS`` lookups by searching in place,
        so one question never pays for the whole FDE array.
        """
        if self._starts is None:
            hdr = self.header
            size = hdr.fde_size
            field = 8 if hdr.version == 3 else 4
            fmt = f"{hdr.endian}{'q' if field == 8 else 'i'}{size - field}x"
            area = self.data[hdr.fde_base: hdr.fde_base + hdr.num_fdes * size]
            pcrel = hdr.pcrel if self._pcrel is None else self._pcrel
            base = self.address
            if pcrel:
                first = base + hdr.fde_base
                starts = [first + i * size + v
                          for i, (v,) in enumerate(struct.iter_unpack(fmt, area))]
            else:
                starts = [base + v for (v,) in struct.iter_unpack(fmt, area)]
            order: list[int] | None = None
            if not hdr.sorted:
                order = sorted(range(len(starts)), key=starts.__getitem__)
                starts = [starts[i] for i in order]
            try:
                # Machine integers: a bisection touches a few cache lines,
                # not a pointer and an int object per probe.
                self._starts = array("q", starts)
            except OverflowError:  # a start past 2^63 (corrupt): keep Python ints
                self._starts = starts
            self._order = order
        return self._starts, self._order

    def extents(self) -> list[tuple[int, int]]:
        """(start, size) of every FDE in index order, read in one pass over
        the FDE array (no FDE decoded, so none checked): for a question
        about every function (does each have DWARF CFI too?), where
        decoding each FDE was most of the time."""
        hdr = self.header
        field = 8 if hdr.version == 3 else 4
        fmt = f"{hdr.endian}{'q' if field == 8 else 'i'}I{hdr.fde_size - field - 4}x"
        area = self.data[hdr.fde_base: hdr.fde_base + hdr.num_fdes * hdr.fde_size]
        pcrel = hdr.pcrel if self._pcrel is None else self._pcrel
        first = self.address + (hdr.fde_base if pcrel else 0)
        step = hdr.fde_size if pcrel else 0
        return [(first + i * step + value, size)
                for i, (value, size) in enumerate(struct.iter_unpack(fmt, area))]

    def _search_in_place(self, pc: int) -> int:
        """Index of the last FDE starting at or before ``pc`` (sorted sections)."""
        lo, hi = 0, self.header.num_fdes
        start = self._start
        while lo < hi:
            mid = (lo + hi) // 2
            if start(mid) <= pc:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def next_fde_start(self, pc: int) -> int | None:
        """Where the first function after ``pc`` that has an FDE starts, or None."""
        if self.header.sorted and self._starts is None:
            index = self._search_in_place(pc) + 1
            return self._start(index) if index < self.header.num_fdes else None
        starts, _ = self._table()
        pos = bisect_right(starts, pc)
        return starts[pos] if pos < len(starts) else None

    def find_fde(self, pc: int) -> FDE | None:
        """The FDE whose ``[start, start + size)`` holds ``pc``, or None."""
        starts = self._starts
        if starts is not None and self._order is None:
            # The hot path: bisect, decode one FDE, and it is nearly always it.
            pos = bisect_right(starts, pc) - 1
            if pos >= 0:
                fde = self._decode_fde(self.data, pos)
                if fde[2] <= pc < fde[2] + fde[3]:  # start <= pc < start + size
                    return fde
        return self._find_fde(pc)

    def _find_fde(self, pc: int) -> FDE | None:
        order: list[int] | None = None
        starts = self._starts
        if starts is None and self.header.sorted and self._searches < TABLE_AFTER_LOOKUPS:
            self._searches += 1
            pos = self._search_in_place(pc)
        else:
            starts, order = self._table()
            pos = bisect_right(starts, pc) - 1
        if pos < 0:
            return None
        fde = self.get_fde(pos if order is None else order[pos])
        if fde.start <= pc < fde.end:
            return fde
        # Zero-size or overlapping neighbours with the same start: step left.
        for _ in range(8):
            if pos == 0:
                return None
            before = starts[pos - 1] if starts is not None else self._start(pos - 1)
            if before != fde.start:
                return None
            pos -= 1
            fde = self.get_fde(pos if order is None else order[pos])
            if fde.start <= pc < fde.end:
                return fde
        return None

    # -- FREs ------------------------------------------------------------

    def get_fres(self, fde: FDE) -> tuple[FRE, ...]:
        fres = self._fres.get(fde.index)
        if fres is None:
            fres = decode_fres(self.data, self.header, fde)
            self._fres[fde.index] = fres
            if len(self._fres) > FRE_CACHE_SIZE:
                self._fres.popitem(last=False)
        else:
            self._fres.move_to_end(fde.index)
        return fres

    @staticmethod
    def _fre_offset(fde: FDE, pc: int) -> int | None:
        """``pc`` as an offset from the function (or its repeat block) start."""
        offset = pc - fde.start
        if not 0 <= offset < fde.size:
            return None
        if fde.info & 0x10:  # PC-mask FDE: the offset in its repeat block
            if fde.rep_size == 0:
                return None
            offset %= fde.rep_size
        return offset

    def find_fre(self, fde: FDE, pc: int) -> tuple[int, FRE] | None:
        """(index, FRE) of the last FRE starting at or before ``pc``, or None.

        Reads the start fields up to the hit and decodes only that FRE.
        """
        offset = self._fre_offset(fde, pc)
        if offset is None:
            return None
        hit = self._find_fre(self.data, fde, offset)
        return None if hit is None else (hit[0], hit[1])

    def lookup(self, pc: int) -> Lookup | None:
        """The FDE, FRE and row for ``pc``, or None where no FRE covers it.

        :raises FormatError: the FDE or FREs on the way are corrupt.
        """
        fde = self.find_fde(pc)
        if fde is None:
            return None
        offset = self._fre_offset(fde, pc)
        if offset is None:
            return None
        hit = self._find_fre(self.data, fde, offset)
        if hit is None:
            return None
        _k, fre, following = hit
        rules = self._rules_for(fde, fre)
        if fde.is_pcmask:
            block = pc - offset
            end = block + (following if following is not None else fde.rep_size)
            start, end = block + fre.start, min(end, fde.end)
        else:
            start = fde.start + fre.start
            end = fde.start + (following if following is not None else fde.size)
        return Lookup(fde, fre, rules, self._row(fde, fre, rules, start, end, pc))

    def _rules_for(self, fde: FDE, fre: FRE, flex: bool | None = None) -> FRERules:
        """``fre_rules`` of ``fre``, kept by what they depend on (``flex``:
        ``fde.flex``, for a caller that asks for every FRE of an FDE)."""
        key = (fde.flex if flex is None else flex, fre.info & 0x7F, fre.words, fre.word_size)
        rules = self._rules.get(key)
        if rules is None:
            rules = fre_rules(self.header, fde, fre, self.arch)
            if len(self._rules) >= RULES_CACHE_SIZE:
                self._rules.clear()
            self._rules[key] = rules
        return rules

    @property
    def saves_registers(self) -> bool:
        """Whether this section's rows get the saved-register rules (its
        ``saved_registers``)."""
        return self.saved_registers

    def wants_saved(self, fde: FDE) -> bool:
        """Whether the rows of ``fde`` carry saved-register rules: the section
        has an analyser and code, and its switch is on (a PC-mask FDE's, a
        PLT's stubs, keep every callee-saved register: ``analysis.section``)."""
        return self.analyser is not None and self.code is not None and self.saves_registers

    def _row(self, fde: FDE, fre: FRE, rules: FRERules, start: int, end: int,
             pc: int | None = None) -> Row:
        """The row of ``fre`` for ``[start, end)``; with ``pc``, narrowed to the
        span around it where the saved-register rules (``analyser``) do not change."""
        regs: Regs = ()
        analyser = self.analyser
        if pc is not None and analyser is not None and self.wants_saved(fde):
            regs, lo, hi = analyser.rules(fde).regs_at(pc)
            start, end = max(start, lo), min(end, hi)
        head, tail = self._row_fields(fde, fre, rules)
        return _new_row((start, end, *head, regs, *tail))

    def _row_fields(self, fde: FDE, fre: FRE, rules: FRERules
                    ) -> tuple[tuple[object, ...], tuple[object, ...]]:
        """A row's fields before and after its span and saved-register rules:
        the same for every row of one FRE (``fde_rows`` makes them once)."""
        return ((fde.start, correct_cfa(self.arch, fde, rules.cfa), rules.ra, rules.fp),
                (fre.mangled_ra, rules.outermost, self.header.version == 3 and fde.signal,
                 "sframe"))

    def fde_rows(self, fde: FDE, block: int = 0) -> list[Row]:
        """The rows of one FDE, or of repetition block ``block`` of a PC-mask FDE.

        For converters that need a whole function at once (``sframe_core.dwarf.debug_frame``);
        the same rows ``lookup`` gives PC by PC (split where the saved-register
        rules change), clipped to the FDE's range.

        :raises FormatError: the FREs are corrupt.
        """
        base = fde.start + block * fde.rep_size if fde.is_pcmask else fde.start
        limit = min(base + fde.rep_size, fde.end) if fde.is_pcmask else fde.end
        fres = self.get_fres(fde)
        analyser = self.analyser
        saved = analyser.rules(fde) if fres and analyser is not None and self.wants_saved(fde) \
            else None
        rows: list[Row] = []
        flex = fde.flex
        for k, fre in enumerate(fres):
            start = base + fre.start
            end = min(base + fres[k + 1].start if k + 1 < len(fres) else limit, limit)
            if start >= end:
                continue
            # ``_row``'s fields, made once per FRE: a symbol file asks for
            # every row of every function.
            head, tail = self._row_fields(fde, fre, self._rules_for(fde, fre, flex))
            if saved is None:
                rows.append(_new_row((start, end, *head, (), *tail)))
                continue
            pc = start
            while pc < end:
                regs, lo, hi = saved.regs_at(pc)
                lo, hi = max(pc, lo), min(end, hi)
                rows.append(_new_row((lo, hi, *head, regs, *tail)))
                pc = hi
        return rows

    def fre_cfas(self, fde: FDE) -> list[tuple[int, CFARule | None]]:
        """(start, CFA rule) of each FRE of ``fde``, the rule its rows have
        (errata corrected): what the saved-register analysis takes the
        stack's height from."""
        arch, rules_for, flex = self.arch, self._rules_for, fde.flex
        return [(fde.start + fre.start, correct_cfa(arch, fde, rules_for(fde, fre, flex).cfa))
                for fre in self.get_fres(fde)]

    def row_at(self, pc: int) -> Row | None:
        """The row at ``pc``; rows are kept by PC, as a recursion asks again and again."""
        try:
            return self._rows[pc]
        except KeyError:
            pass
        hit = self.lookup(pc)
        row = hit.row if hit else None
        if len(self._rows) >= ROW_CACHE_SIZE:
            self._rows.clear()
        self._rows[pc] = row
        return row

    def validate(self) -> None:
        """Decode every FDE and FRE: raises FormatError at the first bad one.

        Costly (the whole section); for ``sframe dump`` and load-time checks
        that users ask for, never on the lookup path.
        """
        hdr = self.header
        previous = None
        total_fres = total_bytes = 0
        for fde in self.iter_fdes():
            if hdr.sorted and previous is not None and fde.start < previous:
                raise FormatError(f"FDE {fde.index} starts at {fde.start:#x}, before FDE "
                                  f"{fde.index - 1} ({previous:#x}), in a section flagged sorted",
                                  fde.offset)
            previous = fde.start
            if fde.is_pcmask and fde.rep_size == 0:
                raise FormatError(f"FDE {fde.index}: PC-mask FDE with repetition size 0",
                                  fde.offset)
            fres = self.get_fres(fde)
            for fre in fres:
                fre_rules(hdr, fde, fre, self.arch)
            total_fres += len(fres)
            if fres:
                last = fres[-1]
                end = last.offset + (1 << fde.fre_type) + 1 + len(last.words) * last.word_size
                total_bytes += end - fde.fres_offset
            total_bytes += 5 if hdr.version == 3 else 0
        # Section-wide counts (spec checklist item 4): GNU output is exact.
        if total_fres != hdr.num_fres:
            raise FormatError(f"header counts {hdr.num_fres} FREs, the FDEs hold {total_fres}", 0xC)
        if total_bytes != hdr.fre_len:
            raise FormatError(f"FRE sub-section is {hdr.fre_len} bytes, the FDEs' FREs take "
                              f"{total_bytes}", 0x10)
