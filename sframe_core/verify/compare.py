"""SFrame rows against DWARF CFI rows over one function: where they differ,
and whether SFrame could have said what the CFI says.

Both decoders (``format/section.py``, ``dwarf/cfi.py``) give the one row
model (``base/rows.py``), so the comparison is on rows, not on either
format: the CFA, the RA, the FP and RA signing. The walk merges the two
sorted lists interval by interval, so its cost is the number of rows, not
of PCs (only amd64 PLT stubs, whose CFI is a DWARF expression of the PC,
are checked PC by PC).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..base.abi import AMD64, Arch
from ..base.rows import CFARule, Row, RuleKind
from ..format.describe import describe_cfa, describe_rule
from .records import CFI_EXPRESSION, PLT_EXPRESSION

__all__ = ["row_key", "plt_cfa", "unsayable", "compare_rows"]


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


def unsayable(row: Row, arch: Arch, version: int) -> str | None:
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
        why = unsayable(drow, arch, version)
        if why is not None:
            reasons.add(why)
            continue
        return a, f"SFrame: {_rules_text(srow, arch)}; CFI: {_rules_text(drow, arch)}", \
            reasons, compared, only
    return None, "", reasons, compared, only
