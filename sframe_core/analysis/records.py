"""The saved-register analysis's records and bounds, apart from the analysis.

Three makers give and take these records: the Python dataflow
(``saved.py``), the same analysis in C (``native/``), and ``parts.py``,
which carries states across the parts of a function. They live here, with
the bounds every maker must share (an analysis in C that went further than
the Python would give other rules), so that none of the three imports
another's private names.
"""

from __future__ import annotations

from typing import NamedTuple

from ..base.abi import Arch
from ..base.rows import CFARule, Rule

__all__ = ["MAX_BYTES", "MAX_INSNS", "RED_ZONE", "ENTRY_CFA", "Regs", "Span", "Reg", "LOST",
           "State", "Exit", "Entry", "Analysis", "Anchor", "anchor", "entry_cfa", "meet",
           "meet_states", "new_record"]

# Bounds on one function's analysis: past them every register is unknown.
MAX_BYTES = 512 * 1024
MAX_INSNS = 60_000
# Below SP, per ABI, the bytes a leaf may use without moving SP (the System
# V amd64 red zone): a slot there still holds its value; one further below
# may be overwritten by a signal handler, so it is no rule.
RED_ZONE = {"amd64": 128}
# The CFA rule at a function's first instruction, per ABI: SP + this.
ENTRY_CFA = {"amd64": 8, "aarch64": 0, "s390x": 160}

# A record from its fields in order, without NamedTuple's Python-level
# ``__new__`` (the analysis makes millions of them).
new_record = tuple.__new__

Regs = tuple[tuple[int, Rule], ...]


class Span(NamedTuple):
    """``regs`` hold for the PCs ``start <= pc < end`` (file or runtime addresses)."""

    start: int
    end: int
    regs: Regs


# One register's state: (CFA offset of a slot holding the caller's value or
# None, the register itself holds the caller's value, the slot is still to be
# restored from: not yet loaded back, so the compiler keeps it intact, another
# register that holds the caller's value or None: s390x leaf functions keep
# r6-r13 in f0-f7).
Reg = tuple[int | None, bool, bool, int | None]
LOST: Reg = (None, False, False, None)


class State(NamedTuple):
    """The dataflow's state at one instruction: the stack and frame pointers
    relative to the CFA, and each tracked register's ``Reg``."""

    sp: int | None  # SP - CFA
    fp: int | None  # FP - CFA
    regs: tuple[Reg, ...]
    alt: int | None = None  # ALT - CFA (a scratch base register saves go through: s390x r14)


# A branch out of the function: (target, the state along it), target None for
# an indirect jump whose table was not read; state None where it is not known
# (an instruction no path reaches, a call, a function not analysed).
Exit = tuple[int | None, State | None]


class Entry(NamedTuple):
    """How a part that is not entered at a function entry is entered (``parts.py``):
    the state every branch into its start carries (met), and the states of the
    indirect jumps whose tables were not read in the functions that branch
    into it (each met into every instruction of the part whose CFA rule fits
    it, as within a function)."""

    state: State
    indirect: tuple[State, ...] = ()


class Analysis(NamedTuple):
    """The result for one function: spans in address order, why it stopped
    early, and its branches out (``Exit``; None: not even those are known,
    the code was not decoded)."""

    spans: tuple[Span, ...]
    note: str = ""
    exits: tuple[Exit, ...] | None = None

    def regs_at(self, pc: int) -> tuple[Regs, int, int]:
        """(rules, lo, hi): the rules at ``pc`` hold for ``lo <= pc < hi``
        (no rules between and around the spans)."""
        spans = self.spans
        lo, hi = 0, len(spans)
        while lo < hi:
            mid = (lo + hi) // 2
            if spans[mid].end <= pc:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(spans):
            span = spans[lo]
            if span.start <= pc:
                return span.regs, span.start, span.end
            return (), (spans[lo - 1].end if lo else 0), span.start
        return (), (spans[-1].end if spans else 0), 1 << 64


def meet_states(a: State, b: State) -> State:
    """Two known states that reach the same place, met: what they disagree on is unknown."""
    if a == b:
        return a
    regs = tuple(ra if ra == rb else ((ra[0] if ra[0] == rb[0] else None), ra[1] and rb[1],
                                      ra[2] and rb[2], ra[3] if ra[3] == rb[3] else None)
                 for ra, rb in zip(a.regs, b.regs, strict=True))
    return new_record(State, (a.sp if a.sp == b.sp else None, a.fp if a.fp == b.fp else None, regs,
                              a.alt if a.alt == b.alt else None))


def meet(a: State | None, b: State | None) -> State | None:
    """Two states that reach the same place, met (None, unknown, absorbs)."""
    return None if a is None or b is None else meet_states(a, b)


# CFA rule -> expected (SP - CFA, FP - CFA); None: the rule says nothing about it.
Anchor = tuple[int | None, int | None]


def anchor(cfa: CFARule | None, arch: Arch) -> Anchor:
    """What SFrame's CFA rule fixes of the dataflow's SP and FP (``Anchor``)."""
    if cfa is None or cfa.deref:
        return (None, None)
    if cfa.reg == arch.sp:
        return (-cfa.offset, None)
    if cfa.reg == arch.fp:
        return (None, -cfa.offset)
    return (None, None)


def entry_cfa(arch: Arch) -> CFARule:
    """The CFA rule at a function's first instruction."""
    return CFARule(arch.sp, ENTRY_CFA[arch.name])
