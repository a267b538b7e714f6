"""The row model shared by SFrame, DWARF CFI, the analysis and the unwinder.

A row says, for a range of PCs, how to find the caller's CFA, return address
and frame pointer (and, from DWARF, other registers). The unwinder only ever
sees rows, so SFrame and ``.eh_frame`` rows go through the same step; this is
the same split as pyelftools' ``CFARule``/``RegisterRule`` table.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from .abi import Arch

__all__ = ["RuleKind", "Rule", "CFARule", "Row", "SAME", "UNDEFINED"]


class RuleKind(enum.Enum):
    """How a caller's register value is found (DWARF's register rules)."""

    SAME_VALUE = "same"  # the caller's value is this frame's value
    UNDEFINED = "undefined"  # unknown; for the RA column: the outermost frame
    AT_CFA = "at_cfa"  # load(CFA + offset)      DW_CFA_offset
    CFA_PLUS = "cfa_plus"  # CFA + offset        DW_CFA_val_offset
    IN_REG = "in_reg"  # R[reg] + offset         DW_CFA_register
    AT_REG = "at_reg"  # load(R[reg] + offset)   DW_CFA_expression (breg; deref)

    # Members are singletons compared by identity: hashed by it too, in C,
    # where Enum's own hash runs Python code (a symbol file hashes every
    # row's rules: the encoder keeps one program per shape of rows).
    __hash__ = object.__hash__


class Rule(NamedTuple):
    kind: RuleKind
    offset: int = 0
    reg: int | None = None


SAME = Rule(RuleKind.SAME_VALUE)
UNDEFINED = Rule(RuleKind.UNDEFINED)


class CFARule(NamedTuple):
    """CFA = R[reg] + offset, loaded from memory when ``deref``."""

    reg: int
    offset: int
    deref: bool = False


class Row(NamedTuple):
    """Unwind rules for the PCs ``start <= pc < end``.

    Addresses are in the address space the table was opened with (file
    addresses unless a bias was applied). ``cfa`` is None when the source
    holds a rule this model cannot express: the unwinder then stops rather
    than guess. ``regs`` holds rules for registers other than RA and FP;
    registers named nowhere are unknown in the caller.
    """

    start: int
    end: int
    func_start: int
    cfa: CFARule | None
    ra: Rule
    fp: Rule
    regs: tuple[tuple[int, Rule], ...] = ()
    ra_signed: bool = False  # aarch64: the RA is PAC-signed here
    outermost: bool = False  # RA undefined: nothing calls this frame
    signal: bool = False  # the function is a signal trampoline
    source: str = "sframe"

    def rule_for(self, regno: int, arch: Arch) -> Rule:
        if regno == arch.ra:
            return self.ra
        if regno == arch.fp:
            return self.fp
        for number, rule in self.regs:
            if number == regno:
                return rule
        return UNDEFINED
