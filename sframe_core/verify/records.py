"""What ``sframe verify`` says about a file: a verdict per function, findings
about the section, and the named reasons behind them.

The words are kept here, beside the records, so that the engine
(``check.py``) and the command's output (``cli/verify.py``) name each case
the same way; everything is an immutable record.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "AGREES", "CANNOT_SAY", "ERRATUM", "DISAGREES", "NOT_COVERED", "SFRAME_ONLY", "VERDICTS",
    "PLT_EXPRESSION", "CFI_EXPRESSION", "OBJ_AMBIGUOUS", "PLT_GOT_ERRATUM", "REASONS",
    "KNOWN_ENTRY", "KNOWN_UNSAYABLE", "KNOWN_PLT", "KNOWN_STATIC",
    "Function", "Finding", "Report",
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

REASONS = {
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
