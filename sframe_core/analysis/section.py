"""The saved-register analysis of an opened SFrame section's functions.

SFrame says where the CFA, the return address and the frame pointer are,
not where a function keeps its caller's callee-saved registers; ``saved.py``
proves that from the function's code. A ``SectionAnalysis`` is the
section's ``analyser`` (``format.section.SavedAnalyser``): the section asks
it for a function's rules as it makes that function's rows, and it
analyses each function once, from the section's code and its SFrame CFA
rules, and keeps the result. The format layer reads no machine code, so
the layer that opens a section with code gives it one
(``ElfSFrame.open(analyser=SectionAnalysis)``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from typing import TYPE_CHECKING

from ..base import settings

if TYPE_CHECKING:
    from ..base.rows import CFARule
    from ..format.records import FDE
    from ..format.section import SFrameSection
    from .records import Analysis, Entry
    from .results import ResultStore

# The analysis itself (saved.py, the decoders) is imported at the first
# function analysed: a debugger opens sections whose rows it may never ask
# for (a module whose symbol file is made), and its start-up pays for the
# imports.

__all__ = ["SectionAnalysis", "analysis_of", "SAVED_CACHE_SIZE"]

# Functions whose analysis is kept (a few KiB each at most).
SAVED_CACHE_SIZE = 1024


class SectionAnalysis:
    """Where the functions of one section keep the callee-saved registers,
    each analysed once from its code and kept (the last ``SAVED_CACHE_SIZE``).

    :param section: the section whose functions are analysed; its ``code``,
        ``pointers`` and ``absolute_tables`` are what the analysis reads.
    :param native: ask the C analysis first (``analysis/native``; None:
        ``SFRAME_NATIVE``, read now).
    """

    def __init__(self, section: SFrameSection, native: bool | None = None) -> None:
        self.section = section
        # Read here, not where the C is imported: that is at the first function.
        self.native = settings.switch("SFRAME_NATIVE") if native is None else native
        # Results kept from other builds of the module (symbol files only).
        self.store: ResultStore | None = None
        # Parts entered by jumps (gcc's NAME.cold), by start: how (parts.py).
        self.entries: dict[int, Entry] = {}
        self._kept: OrderedDict[int, Analysis] = OrderedDict()

    def rules(self, fde: FDE) -> Analysis:
        """Where the function of ``fde`` keeps the callee-saved registers
        (saved.py), analysed once from its code and kept.

        :raises FormatError: the FREs of ``fde`` are corrupt.
        """
        kept = self._kept
        found = kept.get(fde.index)
        if found is not None:
            kept.move_to_end(fde.index)
            return found
        from .saved import Analysis, analyse

        section = self.section
        read = section.code
        code = None
        if read is not None and fde.size > 0:
            try:
                code = read(fde.start, fde.size)
            except OSError:
                code = None
        if plt_entry(section, fde) and fde.start not in self.entries:
            result = _plt_rules(section, fde)
        elif code is None or len(code) != fde.size or fde.is_pcmask:
            result = Analysis((), "no code for the function")
        else:
            cfas = section.fre_cfas(fde)  # the CFA rules the rows have
            starts = [s for s, _ in cfas]

            def cfa_at(pc: int) -> CFARule | None:
                k = bisect_right(starts, pc) - 1
                return cfas[k][1] if k >= 0 else None

            result = analyse(section.arch, code, fde.start, cfa_at, read,
                             section.absolute_tables, section.pointers,
                             self.entries.get(fde.start), self.store, cfas, self.native)
        kept[fde.index] = result
        if len(kept) > SAVED_CACHE_SIZE:
            kept.popitem(last=False)
        return result

    def analysed(self, fde: FDE) -> Analysis | None:
        """``rules(fde)`` where the section's rows carry them, else None."""
        return self.rules(fde) if self.section.wants_saved(fde) else None

    def enter_parts(self, entries: dict[int, Entry]) -> None:
        """Analyse the parts at these starts from these states from now on
        (``parts.py`` proves them for a whole module)."""
        self.entries = dict(entries)
        self._kept.clear()

    def forget(self) -> None:
        """Drop the kept results (a benchmark's or a test's fresh start)."""
        self._kept.clear()


def plt_entry(section: SFrameSection, fde: FDE) -> bool:
    """Whether ``fde`` covers linker-made PLT entries: a PC-mask FDE (SFrame
    has them for PLT stubs alone, ld writes them so), or an FDE that ends
    where one starts and is entered with something pushed (its first row is
    no function entry): ld's first entry of the same PLT, amd64's PLT0,
    which the stubs jump to. (Neither is analysed from code: the C declines
    both, ``native_fdes``.)"""
    if fde.is_pcmask:
        return True
    following = section.find_fde(fde.end)
    if following is None or not following.is_pcmask or following.start != fde.end:
        return False
    from .records import entry_cfa

    # The CFA rule at its start as the analysis reads it (``rules``'s
    # ``cfa_at``: the last row starting there; none when the first starts later).
    at_start = [cfa for start, cfa in section.fre_cfas(fde) if start <= fde.start]
    return not at_start or at_start[-1] != entry_cfa(section.arch)


def _plt_rules(section: SFrameSection, fde: FDE) -> Analysis:
    """A PLT entry's rules: every callee-saved register is its caller's
    (ld's stubs and first entry touch only scratch registers and the
    stack: amd64's r11 at most, aarch64's x16 and x17, s390x's r0 and r1),
    as the twin's ``.eh_frame`` says by naming none of them."""
    from ..base.abi import CALLEE_SAVED
    from ..base.rows import SAME
    from .records import Analysis, Span

    regs = tuple((reg, SAME) for reg in CALLEE_SAVED[section.arch.name.removesuffix("_be")])
    return Analysis((Span(fde.start, fde.end, regs),), "a PLT entry", ())


def analysis_of(section: SFrameSection) -> SectionAnalysis:
    """The section's analysis, given to it now where it has none (a section
    made from bytes, whose ``code`` a caller sets)."""
    found = section.analyser
    if isinstance(found, SectionAnalysis):
        return found
    made = SectionAnalysis(section)
    section.analyser = made
    return made
