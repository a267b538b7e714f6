"""An opened ``.sframe`` section: lazy FDE search and FRE lookup.

Opening reads the header and nothing more. A lookup binary-searches the FDE
array in place (reading only the start fields it visits), then decodes the
FREs of that one function; decoded FREs are kept in a small per-section
cache, because a backtrace revisits the same functions.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

from .abi import Arch, arch_for_abi
from .errors import FormatError
from .format import (
    FDE,
    FRE,
    Header,
    decode_fde,
    decode_fres,
    fde_start_field,
    parse_header,
)
from .rows import FRERules, Row, fre_rules

__all__ = ["SFrameSection", "Lookup"]

# Functions whose FREs stay decoded. A deep backtrace touches few distinct
# functions; the bound keeps memory flat whatever the section holds.
FRE_CACHE_SIZE = 512


class Lookup(NamedTuple):
    """The FDE and FRE that apply at a PC, with the row they give."""

    fde: FDE
    fre: FRE
    rules: FRERules
    row: Row


class SFrameSection:
    """One SFrame section at a known address.

    :param data: the section's bytes (trailing bytes past the header's extent
        are ignored: ``PT_GNU_SFRAME``'s ``p_filesz`` can be larger).
    :param address: the address of the section's first byte; FDE starts and
        rows are in this address space (file addresses for ``sh_addr``,
        runtime addresses for ``sh_addr`` plus the load bias).
    :param pcrel: override the PCREL flag (``.o`` files whose relocations
        were applied hold PC-relative start fields without the flag).
    :raises FormatError: the header is not valid.
    """

    def __init__(self, data: bytes | memoryview, address: int = 0, *,
                 pcrel: bool | None = None, name: str = "<sframe>") -> None:
        self.header: Header = parse_header(data)
        self.data = memoryview(data)[: self.header.size]
        self.address = address
        self.name = name
        self._pcrel = pcrel
        arch = arch_for_abi(self.header.abi_arch)
        assert arch is not None  # parse_header checked the ABI
        self.arch: Arch = arch
        self._order: list[int] | None = None  # sorted FDE indices, unsorted sections only
        self._fres: OrderedDict[int, tuple[FRE, ...]] = OrderedDict()

    # -- FDEs ------------------------------------------------------------

    @property
    def num_fdes(self) -> int:
        return self.header.num_fdes

    @property
    def version(self) -> int:
        return self.header.version

    def get_fde(self, index: int) -> FDE:
        return decode_fde(self.data, self.header, index, self.address, self._pcrel)

    def iter_fdes(self) -> Iterator[FDE]:
        for index in range(self.header.num_fdes):
            yield self.get_fde(index)

    def _start(self, index: int) -> int:
        offset, value = fde_start_field(self.data, self.header, index)
        pcrel = self.header.pcrel if self._pcrel is None else self._pcrel
        return self.address + value + (offset if pcrel else 0)

    def _sorted_order(self) -> list[int] | None:
        """None when the FDE array itself is in order; else a sorted index."""
        if self.header.sorted:
            return None
        if self._order is None:
            self._order = sorted(range(self.header.num_fdes), key=self._start)
        return self._order

    def find_fde(self, pc: int) -> FDE | None:
        """The FDE whose ``[start, start + size)`` holds ``pc``, or None."""
        order = self._sorted_order()
        count = self.header.num_fdes
        lo, hi = 0, count
        # Upper-bound search: the first entry starting after pc.
        while lo < hi:
            mid = (lo + hi) // 2
            if self._start(order[mid] if order is not None else mid) <= pc:
                lo = mid + 1
            else:
                hi = mid
        # Step left over zero-size or overlapping neighbours with the same start.
        pos = lo - 1
        checked = 0
        while pos >= 0 and checked < 8:
            fde = self.get_fde(order[pos] if order is not None else pos)
            if fde.start <= pc < fde.end:
                return fde
            if pos == 0 or self._start(order[pos - 1] if order is not None else pos - 1) != fde.start:
                return None
            pos -= 1
            checked += 1
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

    def fre_range(self, fde: FDE, k: int, fres: tuple[FRE, ...], pc: int) -> tuple[int, int]:
        """The PCs ``[start, end)`` FRE ``k`` covers, in the repeat block holding ``pc``."""
        if fde.is_pcmask:
            block = pc - (pc - fde.start) % fde.rep_size if fde.rep_size else fde.start
            end_off = fres[k + 1].start if k + 1 < len(fres) else fde.rep_size
            return block + fres[k].start, min(block + end_off, fde.end)
        end_off = fres[k + 1].start if k + 1 < len(fres) else fde.size
        return fde.start + fres[k].start, fde.start + end_off

    def find_fre(self, fde: FDE, pc: int) -> tuple[int, FRE] | None:
        """(index, FRE) of the last FRE starting at or before ``pc``, or None."""
        if not fde.start <= pc < fde.end:
            return None
        offset = pc - fde.start
        if fde.is_pcmask:
            if fde.rep_size == 0:
                return None
            offset %= fde.rep_size
        fres = self.get_fres(fde)
        found = None
        for k, fre in enumerate(fres):
            if fre.start > offset:
                break
            found = k
        if found is None:
            return None
        return found, fres[found]

    def lookup(self, pc: int) -> Lookup | None:
        """The FDE, FRE and row for ``pc``, or None where no FRE covers it.

        :raises FormatError: the FDE or FREs on the way are corrupt.
        """
        fde = self.find_fde(pc)
        if fde is None:
            return None
        hit = self.find_fre(fde, pc)
        if hit is None:
            return None
        k, fre = hit
        rules = fre_rules(self.header, fde, fre, self.arch)
        start, end = self.fre_range(fde, k, self.get_fres(fde), pc)
        row = Row(start, end, fde.start, rules.cfa, rules.ra, rules.fp,
                  ra_signed=fre.mangled_ra, outermost=rules.outermost,
                  signal=self.header.version == 3 and fde.signal, source="sframe")
        return Lookup(fde, fre, rules, row)

    def row_at(self, pc: int) -> Row | None:
        hit = self.lookup(pc)
        return hit.row if hit else None

    def validate(self) -> None:
        """Decode every FDE and FRE: raises FormatError at the first bad one.

        Costly (the whole section); for ``sframe dump`` and load-time checks
        that users ask for, never on the lookup path.
        """
        previous = None
        for fde in self.iter_fdes():
            if self.header.sorted and previous is not None and fde.start < previous:
                raise FormatError(f"FDE {fde.index} starts at {fde.start:#x}, before FDE "
                                  f"{fde.index - 1} ({previous:#x}), in a section flagged sorted",
                                  fde.offset)
            previous = fde.start
            for fre in self.get_fres(fde):
                fre_rules(self.header, fde, fre, self.arch)
