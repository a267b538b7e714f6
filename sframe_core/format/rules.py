"""What an SFrame FRE means: its data words read as the rules of a row (spec §7, §8)."""

from __future__ import annotations

from typing import NamedTuple

from ..base.abi import Arch
from ..base.errors import FormatError
from ..base.rows import SAME, UNDEFINED, CFARule, Rule, RuleKind
from .records import FDE, FRE, Header

__all__ = ["FRERules", "fre_rules"]


class FRERules(NamedTuple):
    """What one FRE says, keeping the distinctions ``objdump --sframe`` shows."""

    cfa: CFARule | None  # None only when the RA is undefined
    ra: Rule
    fp: Rule
    ra_fixed: bool  # RA comes from the header's fixed offset (dump: "f")
    ra_padding: bool  # an RA padding word is present (dump: "U")
    outermost: bool


def _s390x_cfa(value: int) -> int:
    return value * 8 + 160


def _default_rule(word: int, arch: Arch, version: int) -> Rule:
    # s390x v2: an odd word names the register the value was saved in.
    if arch.abi_id == 4 and version == 2 and word & 1:
        return Rule(RuleKind.IN_REG, 0, word >> 1)
    return Rule(RuleKind.AT_CFA, word)


def _flex_rule(ctrl: int, offset: int, where: str, fre: FRE) -> Rule:
    reg_p, deref = ctrl & 1, (ctrl >> 1) & 1
    if ctrl & 4:
        raise FormatError(f"{where} control word {ctrl:#x} has the reserved bit set", fre.offset)
    if reg_p:
        return Rule(RuleKind.AT_REG if deref else RuleKind.IN_REG, offset, ctrl >> 3)
    return Rule(RuleKind.AT_CFA if deref else RuleKind.CFA_PLUS, offset)


def fre_rules(hdr: Header, fde: FDE, fre: FRE, arch: Arch) -> FRERules:
    """Interpret an FRE's data words for the section's ABI (spec §7, §8)."""
    words = fre.words
    if not words:
        return FRERules(None, UNDEFINED, SAME, False, False, True)
    fixed_ra = hdr.cfa_fixed_ra_offset
    fixed_fp = hdr.cfa_fixed_fp_offset
    if hdr.version == 3 and fde.flex:
        ctrl = fre.unsigned(0)
        if not ctrl & 1:
            raise FormatError(f"FDE {fde.index}: flexible CFA rule {ctrl:#x} is not register-based",
                              fre.offset)
        offset = words[1]
        if arch.cfa_needs_decode:
            offset = _s390x_cfa(offset)
        cfa = CFARule(ctrl >> 3, offset, bool(ctrl & 2))
        pos = 2
        ra: Rule | None = None
        padding = False
        if pos < len(words):
            ra_ctrl = fre.unsigned(pos)
            if ra_ctrl == 0:
                padding = True
                pos += 1
            else:
                if pos + 1 >= len(words):
                    raise FormatError(f"FDE {fde.index}: RA rule without its offset word", fre.offset)
                ra = _flex_rule(ra_ctrl, words[pos + 1], "RA", fre)
                pos += 2
        fp: Rule | None = None
        if pos < len(words):
            fp_ctrl = fre.unsigned(pos)
            if fp_ctrl == 0 or pos + 1 >= len(words):
                raise FormatError(f"FDE {fde.index}: FP rule without its offset word", fre.offset)
            fp = _flex_rule(fp_ctrl, words[pos + 1], "FP", fre)
            pos += 2
        if pos != len(words):
            raise FormatError(f"FDE {fde.index}: {len(words) - pos} data words left over in a "
                              "flexible FRE", fre.offset)
        ra_fixed = ra is None and fixed_ra != 0
        if ra is None:
            ra = Rule(RuleKind.AT_CFA, fixed_ra) if fixed_ra else SAME
        if fp is None:
            fp = Rule(RuleKind.AT_CFA, fixed_fp) if fixed_fp else SAME
        return FRERules(cfa, ra, fp, ra_fixed, padding, False)

    cfa_offset = words[0]
    if arch.cfa_needs_decode:
        cfa_offset = _s390x_cfa(cfa_offset)
    cfa = CFARule(arch.sp if fre.base_is_sp else arch.fp, cfa_offset)
    padding = False
    if fixed_ra:
        ra = Rule(RuleKind.AT_CFA, fixed_ra)
    elif len(words) >= 2:
        if words[1] == 0:
            # SFRAME_FRE_RA_OFFSET_INVALID: a padding word, "RA not saved".
            padding = True
            ra = SAME
        else:
            ra = _default_rule(words[1], arch, hdr.version)
    else:
        ra = SAME
    fp_index = 1 if fixed_ra else 2
    if fixed_fp:
        fp = Rule(RuleKind.AT_CFA, fixed_fp)
    elif len(words) > fp_index:
        fp = _default_rule(words[fp_index], arch, hdr.version)
    else:
        fp = SAME
    return FRERules(cfa, ra, fp, bool(fixed_ra), padding, False)
