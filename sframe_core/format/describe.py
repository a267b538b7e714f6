"""Plain words for one unwind row: what ``sframe lookup`` and ``info sframe`` print.

A pure function of a ``Row`` and an ``Arch`` so that rows from ``.eh_frame``
read the same as rows from ``.sframe``; register names are the ABI's (``rsp``,
``x30``, ``r15``), not objdump's ``sp``/``fp`` shorthand, because the reader
is debugging a program, not the section.
"""

from __future__ import annotations

from ..base.abi import CALLEE_SAVED, Arch
from ..base.rows import CFARule, Row, Rule, RuleKind
from .dump import fre_columns
from .section import Lookup, SFrameSection

__all__ = ["describe_row", "describe_cfa", "describe_rule", "lookup_text"]


def _plus(base: str, offset: int) -> str:
    if offset == 0:
        return base
    return f"{base} {'-' if offset < 0 else '+'} {abs(offset)}"


def describe_cfa(cfa: CFARule | None, arch: Arch) -> str:
    if cfa is None:
        return "CFA unknown"
    expr = _plus(arch.reg_name(cfa.reg), cfa.offset)
    return f"CFA = *({expr})" if cfa.deref else f"CFA = {expr}"


def describe_rule(name: str, rule: Rule, arch: Arch, *, is_ra: bool = False) -> str:
    """``RA at CFA - 8``, ``FP not saved``, ``RA in x30 (not saved)``, ``RA in rbx``."""
    kind = rule.kind
    if kind is RuleKind.SAME_VALUE:
        if is_ra and arch.ra_reg is not None:
            return f"{name} in {arch.reg_name(arch.ra_reg)} (not saved)"
        return f"{name} not saved"
    if kind is RuleKind.UNDEFINED:
        return f"{name} undefined"
    if kind is RuleKind.AT_CFA:
        return f"{name} at {_plus('CFA', rule.offset)}"
    if kind is RuleKind.CFA_PLUS:
        return f"{name} = {_plus('CFA', rule.offset)}"
    reg = arch.reg_name(rule.reg) if rule.reg is not None else "?"
    if kind is RuleKind.IN_REG:
        return f"{name} in {reg}" if rule.offset == 0 else f"{name} = {_plus(reg, rule.offset)}"
    return f"{name} at {_plus(reg, rule.offset)}"  # AT_REG


def _names(names: list[str]) -> str:
    """``x19-x28`` for runs of numbered registers, else comma-separated."""
    out: list[str] = []
    run: list[str] = []

    def number(name: str) -> tuple[str, int] | None:
        head = name.rstrip("0123456789")
        return (head, int(name[len(head):])) if head != name and head else None

    def flush() -> None:
        if len(run) > 2:
            out.append(f"{run[0]}-{run[-1]}")
        else:
            out.extend(run)
        run.clear()

    for name in names:
        prev = number(run[-1]) if run else None
        cur = number(name)
        if prev is not None and cur is not None and prev[0] == cur[0] and cur[1] == prev[1] + 1:
            run.append(name)
        else:
            flush()
            run.append(name)
    flush()
    return ", ".join(out)


def describe_row(row: Row, arch: Arch, *, pauth_key: int | None = None) -> str:
    """One line, e.g. ``CFA = rbp + 16; RA at CFA - 8; FP at CFA - 16``.

    ``pauth_key`` (0 = A, 1 = B) names the key of a PAC-signed RA; rows from
    DWARF do not know it, so it is optional.
    """
    if row.outermost:
        return "RA undefined (outermost frame)"
    parts = [describe_cfa(row.cfa, arch)]
    ra = describe_rule("RA", row.ra, arch, is_ra=True)
    if row.ra_signed:
        key = "" if pauth_key is None else f", key {'B' if pauth_key else 'A'}"
        ra += f" (PAC-signed{key})"
    parts.append(ra)
    parts.append(describe_rule("FP", row.fp, arch))
    named = set()
    unchanged: list[str] = []  # still the caller's value here
    for regno, rule in row.regs:
        named.add(regno)
        name = arch.reg_name(regno)
        if rule.kind is RuleKind.SAME_VALUE:
            unchanged.append(name)
        else:
            parts.append(describe_rule(name, rule, arch))
    if unchanged:
        parts.append(f"{_names(unchanged)} unchanged")
    if row.source == "sframe":
        # The callee-saved registers the code analysis tracks (saved.py) and
        # could not place here.
        unknown = [arch.reg_name(r) for r in CALLEE_SAVED.get(arch.name, ()) if r not in named]
        if unknown:
            parts.append(f"{_names(unknown)} unknown")
    if arch.sp_val_offset:
        parts.append(f"caller SP = {_plus('CFA', arch.sp_val_offset)}")
    if row.signal:
        parts.append("signal frame")
    return "; ".join(parts)


def lookup_text(section: SFrameSection, hit: Lookup, *, pc: int) -> list[str]:
    """The lines of ``sframe lookup`` (and of ``info sframe ADDRESS`` in gdb and
    ``sframe lookup`` in lldb): PC, FDE, FRE row, description, notes."""
    fde, fre, rules, row = hit
    attrs = [f"PC type {'mask' if fde.is_pcmask else 'inc'}"]
    if fde.is_pcmask:
        attrs.append(f"rep size {fde.rep_size}")
    attrs.append(f"FRE type addr{1 << fde.fre_type}")
    if section.version == 3 and fde.flex:
        attrs.append("flex")
    if section.version == 3 and fde.signal:
        attrs.append("signal")
    if section.arch.name.startswith("aarch64") and (fde.pauth_key or fre.mangled_ra):
        attrs.append(f"pauth key {'B' if fde.pauth_key else 'A'}")
    columns = fre_columns(section.header, fde, fre, rules, section.arch)
    shown = "RA undefined" if columns is None else \
        f"{columns[0]} {columns[1]} {columns[2].rstrip()}"
    fres = section.get_fres(fde)
    k = next(i for i, f in enumerate(fres) if f.offset == fre.offset)
    # The FRE's own range (the row's can be narrower: saved-register rules
    # change inside an FRE).
    fre_start, fre_end = row.start, row.end
    if not fde.is_pcmask:
        fre_start = fde.start + fre.start
        fre_end = fde.start + fres[k + 1].start if k + 1 < len(fres) else fde.end
    words = ", ".join(str(w) for w in fre.words)
    notes = []
    if row.cfa != rules.cfa:
        notes.append(f"note: the section says {describe_cfa(rules.cfa, section.arch)}, a known "
                     "producer bug corrected here (see sframe_core/format/errata.py)")
    return [
        f"pc 0x{pc:x}",
        f"FDE [{fde.index}]: 0x{fde.start:x}-0x{fde.end:x} ({fde.size} bytes), "
        + ", ".join(attrs),
        f"FRE [{k}]: 0x{fre_start:x}-0x{fre_end:x}, info 0x{fre.info:02x}, words [{words}]"
        f" ({shown})",
        describe_row(row, section.arch, pauth_key=fde.pauth_key if fre.mangled_ra else None),
        *notes,
    ]
