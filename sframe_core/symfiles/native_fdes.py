"""A symbol file's amd64 FDEs made in C (``analysis/native/fdes.c``), where it was built.

With the saved-register analysis in C, the Python around it is most of a
symbol file's time (an FDE's FREs decoded into records, its rows made and
split at the analysis's spans, the rows encoded, the C's answer made into
Python records, every branch out looked up for ``parts.py``), and LLDB
waits for the whole file of a module with debug information (figures:
docs/dwarf.md, "Cost"). ``fdes.c`` does that work for an FDE in one step, the
Python's way, and hands back its ``.debug_frame`` program and, only where
one of them goes somewhere ``parts.Collector`` keeps, its exits. It
declines what it does not cover (a corrupt record, PC-mask and flexible
FDEs, gcc's ``.cold`` parts, functions the C analysis declines): those are
made by the Python, FDE by FDE, so the bytes and the errors are the same
(``tests/test_native.py``).
"""

from __future__ import annotations

import ctypes
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..analysis import native
from ..analysis.native.protocol import FDE_WORDS, NOMEM, SMALL, ST_DECLINED, ST_DONE, Region, Section
from ..analysis.records import MAX_BYTES, Analysis
from ..analysis.section import SectionAnalysis
from ..base import settings
from ..base.abi import AMD64

if TYPE_CHECKING:
    from ..dwarf.debug_frame import Encoded
    from ..format.section import Region as Segment
    from ..format.section import SFrameSection

__all__ = ["ENV", "Made", "fdes_maker", "serves"]

# Whether symbol files ask the C for their FDEs (tests compare both ways).
ENV = "SFRAME_NATIVE_FDES"


class _Input:
    """The section as the C reads it (``struct sf_section``), holding the
    Python objects its pointers point into: alive as long as this is."""

    __slots__ = ("struct", "_data", "_regions", "_c_regions", "_starts")

    def __init__(self, section: SFrameSection, starts: array[int], regions: list[Segment],
                 analyse: bool) -> None:
        hdr = section.header
        self._data = data = bytes(section.data)
        self._regions = regions
        self._c_regions = (Region * max(1, len(regions)))(
            *(Region(r.address, r.filesz, len(r.contents), r.contents) for r in regions))
        self._starts = starts
        self.struct = Section(data, len(data), hdr.version, hdr.cfa_fixed_ra_offset, hdr.fde_base,
                              hdr.fde_size, hdr.fre_base, hdr.fre_end, hdr.fre_len, hdr.num_fdes,
                              starts.buffer_info()[0], self._c_regions, len(regions), MAX_BYTES,
                              analyse)


# One FDE's answer: None where the C declined it (the Python makes it);
# else its FDE (None: it has no rows) and, where ``parts.Collector`` keeps
# them, the analysis whose exits it adds.
Made = tuple["Encoded | None", "Analysis | None"] | None


def _declined(section: SFrameSection) -> bool:
    """Whether ``section``'s analysis keeps to the Python: parts were given
    entries (``SectionAnalysis.enter_parts``), or it was made without the C."""
    analyser = section.analyser
    return isinstance(analyser, SectionAnalysis) and (bool(analyser.entries)
                                                      or not analyser.native)


def serves(section: SFrameSection) -> bool:
    """Whether the C makes ``section``'s FDEs where a symbol file asks
    (``SFRAME_NATIVE_FDES``; amd64, sorted, no parts given entries, the C
    built; nothing loaded)."""
    return settings.switch(ENV) and section.arch.abi_id == AMD64.abi_id and not section.header.big_endian \
        and section.header.sorted and not _declined(section) and native.built()


def fdes_maker(section: SFrameSection) -> Callable[[range], list[Made]] | None:
    """``make(fdes)``: what the C makes of each FDE of ``fdes``; None where it
    makes none of this section's (not amd64, saved-register rules wanted and
    no code for them, an unsorted section, parts already given entries, no C)."""
    analyse = section.saves_registers and section.code is not None
    if not serves(section) or (analyse and section.regions is None):
        return None
    lib = native.library()
    if lib is None:
        return None
    starts, order = section._table()
    if order is not None or not isinstance(starts, array):
        return None  # unsorted, or a start past 2^63: the Python's
    regions = section.regions() if analyse and section.regions is not None else []
    given = _Input(section, starts, regions, analyse)
    out = array("q", bytes(8 * 4096))
    prog = ctypes.create_string_buffer(1 << 16)
    used = ctypes.c_long()

    def make(fdes: range) -> list[Made]:
        nonlocal out, prog
        from ..dwarf.debug_frame import Encoded

        if len(out) < FDE_WORDS * len(fdes) + 4096:  # the exits that follow are few
            out = array("q", bytes(8 * (FDE_WORDS * len(fdes) + 4096)))
        while True:
            got = lib.sf_amd64_fdes(ctypes.byref(given.struct), fdes.start, fdes.stop,
                                    out.buffer_info()[0], len(out), prog, len(prog),
                                    ctypes.byref(used))
            if got == NOMEM:
                raise MemoryError("sframe: out of memory making FDEs")
            if got != SMALL:
                break
            out = array("q", bytes(16 * len(out)))
            prog = ctypes.create_string_buffer(2 * len(prog))
        words: Sequence[int] = out[:got].tolist()
        programs = prog.raw[:used.value]
        made: list[Made] = []
        pos = 0
        for _ in fdes:
            status, start, end, signal, at, size, extra = words[pos:pos + FDE_WORDS]
            pos += FDE_WORDS
            if status == ST_DECLINED:
                made.append(None)
                continue
            item = Encoded(start, end, bool(signal), False, programs[at:at + size]) \
                if status == ST_DONE else None
            analysis = None
            if extra:
                analysis = Analysis((), "", native.exits(words, pos))
                pos += extra
            made.append((item, analysis))
        return made

    return make
