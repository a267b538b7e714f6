"""Render an SFrame section as ``objdump --sframe`` / ``readelf --sframe`` do.

The text is that of binutils 2.46+ (``libsframe/sframe-dump.c``) for every
version, v1 included, so one golden format serves all fixtures; the tests
normalise the known differences of older dumpers. Rendering goes FDE by FDE:
a corrupt FDE is reported where it sits and the dump goes on, so one bad
record never hides the rest (pyelftools' EHABI dumper does the same).

``dump_json`` gives the same content as data, with the decoded rules, for
scripts; its schema is documented in ``docs/cli.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..base.abi import Arch
from ..base.errors import SFrameError
from ..base.rows import CFARule, Rule, RuleKind
from .records import FDE, FRE, SFRAME_F_FDE_FUNC_START_PCREL, SFRAME_F_FDE_SORTED, Header
from .rules import FRERules, fre_rules
from .section import SFrameSection

__all__ = ["dump_lines", "dump_text", "dump_json", "fre_columns", "flag_names",
           "TEXT_OFFSETS_NOTE"]

_FLAG_NAMES = ((SFRAME_F_FDE_SORTED, "SFRAME_F_FDE_SORTED"),
               (0x2, "SFRAME_F_FRAME_POINTER"),
               (SFRAME_F_FDE_FUNC_START_PCREL, "SFRAME_F_FDE_FUNC_START_PCREL"))

TEXT_OFFSETS_NOTE = ("# relocatable object: addresses are offsets in the function's text "
                     "section")

_U64 = (1 << 64) - 1


def _i32(value: int) -> int:
    """C ``%d`` of a u32 field, as the binutils dumper prints it."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def flag_names(hdr: Header) -> list[str]:
    """Flag names in objdump's order; bits it has no name for come last as a number.

    FRAME_POINTER is named for v1 and v2, the versions that define it.
    """
    flags = hdr.flags
    names = []
    for bit, name in _FLAG_NAMES:
        if bit == 0x2 and hdr.version >= 3:
            continue
        if flags & bit:
            names.append(name)
            flags &= ~bit
    if flags:
        names.append(str(flags))
    return names


def _header_lines(hdr: Header, num_fdes: int) -> Iterator[str]:
    yield "  Header :"
    yield ""
    yield f"    Version: SFRAME_VERSION_{hdr.version}"
    names = flag_names(hdr)
    if not names:
        yield "    Flags: NONE"
    for i, name in enumerate(names):
        prefix = "Flags: " if i == 0 else " "
        yield f"{prefix:>11}{name}{',' if i + 1 < len(names) else ''}"
    if hdr.cfa_fixed_fp_offset:
        yield f"    CFA fixed FP offset: {hdr.cfa_fixed_fp_offset}"
    if hdr.cfa_fixed_ra_offset:
        yield f"    CFA fixed RA offset: {hdr.cfa_fixed_ra_offset}"
    yield f"    Num FDEs: {_i32(num_fdes)}"
    yield f"    Num FREs: {_i32(hdr.num_fres)}"


def _reg(arch: Arch, regno: int) -> str:
    # libsframe names only the ABI's SP and FP; everything else is r<N>.
    if regno == arch.sp:
        return "sp"
    if regno == arch.fp:
        return "fp"
    return f"r{regno}"


def _disp(arch: Arch, rule: Rule) -> str:
    """Flex notation: ``r3+0``, ``(fp-8)``, ``c-16`` (CFA-based, never parenthesised)."""
    if rule.kind in (RuleKind.IN_REG, RuleKind.AT_REG) and rule.reg is not None:
        text = f"{_reg(arch, rule.reg)}{rule.offset:+d}"
        return f"({text})" if rule.kind is RuleKind.AT_REG else text
    return f"c{rule.offset:+d}"


def _cfa_text(arch: Arch, cfa: CFARule) -> str:
    text = f"{_reg(arch, cfa.reg)}{cfa.offset:+d}"
    return f"({text})" if cfa.deref else text


def _default_word_text(rule: Rule) -> str:
    if rule.kind is RuleKind.SAME_VALUE:
        return "u"
    if rule.kind is RuleKind.IN_REG:  # s390x v2 odd word: saved in a register
        return f"r{rule.reg}"
    return f"c{rule.offset:+d}"


def fre_columns(hdr: Header, fde: FDE, fre: FRE, rules: FRERules,
                arch: Arch) -> tuple[str, str, str] | None:
    """The CFA, FP and RA columns of one dump row; None for ``RA undefined``.

    RA carries its ``[s]`` (PAC-signed) or three-space suffix, as objdump's.
    """
    if rules.outermost or rules.cfa is None:
        return None
    flex = hdr.version == 3 and fde.flex
    cfa = _cfa_text(arch, rules.cfa)
    if flex:
        fp = "u" if rules.fp.kind is RuleKind.SAME_VALUE else _disp(arch, rules.fp)
    else:
        fp = _default_word_text(rules.fp)
    # A padding word wins over the header's fixed offset: objdump prints "U"
    # for it even on amd64, where the RA is nonetheless at CFA-8.
    if rules.ra_padding:
        ra = "U"
    elif rules.ra_fixed:
        ra = "f"
    elif rules.ra.kind is RuleKind.SAME_VALUE:
        ra = "u"
    elif flex:
        ra = _disp(arch, rules.ra)
    else:
        ra = _default_word_text(rules.ra)
    ra += "[s]" if fre.mangled_ra else "   "
    return cfa, fp, ra


def _fde_line(hdr: Header, fde: FDE, arch: Arch) -> str:
    line = (f"    func idx [{fde.index}]: pc = 0x{fde.start & _U64:x}, "
            f"size = {_i32(fde.size)} bytes")
    if hdr.version == 3:
        attrs = ("S" if fde.signal else "") + ("F" if fde.flex else "")
        if attrs:
            line += f', attr = "{attrs}"'
    if arch.name.startswith("aarch64") and fde.pauth_key == 1:
        line += ", pauth = B key"
    return line


def _column_header(fde: FDE) -> str:
    marker = "[m]" if fde.is_pcmask else "   "
    return f"    {'STARTPC':<7}{marker:<8} {'CFA':<10}{'FP':<10}{'RA':<13}"


def _fre_pc(fde: FDE, fre: FRE) -> int:
    return fre.start if fde.is_pcmask else fde.start + fre.start


def _row_line(hdr: Header, fde: FDE, fre: FRE, rules: FRERules, arch: Arch) -> str:
    head = f"    {_fre_pc(fde, fre) & _U64:016x}"
    columns = fre_columns(hdr, fde, fre, rules, arch)
    if columns is None:
        return head + "  RA undefined"
    cfa, fp, ra = columns
    return f"{head}  {cfa:<10}{fp:<10}{ra:<13}"


def dump_lines(section: SFrameSection, errors: list[SFrameError] | None = None, *,
               text_offsets: bool = False) -> Iterator[str]:
    """The dump, line by line, from ``Contents of ...`` to the last row.

    Errors do not stop the dump: each is printed as an ``error:`` line where
    it occurs, appended to ``errors``, and the next FDE is tried. An FDE
    whose own record is corrupt ends the dump only when the FDE array itself
    cannot be trusted (never, today: every FDE is read in isolation).
    """
    hdr = section.header
    arch = section.arch
    yield "Contents of the SFrame section .sframe:"
    if text_offsets:
        yield TEXT_OFFSETS_NOTE
    if section.merged:
        yield f"# {section.merged}"
    yield from _header_lines(hdr, section.num_fdes)
    yield ""
    yield "  Function Index :"
    for index in range(section.num_fdes):
        yield ""
        try:
            fde = section.get_fde(index)
        except SFrameError as exc:
            if errors is not None:
                errors.append(exc)
            yield f"    func idx [{index}]: error: {exc}"
            continue
        yield _fde_line(hdr, fde, arch)
        yield _column_header(fde)
        try:
            fres = section.get_fres(fde)
        except SFrameError as exc:
            if errors is not None:
                errors.append(exc)
            yield f"    error: {exc}"
            continue
        for fre in fres:
            try:
                rules = fre_rules(hdr, fde, fre, arch)
            except SFrameError as exc:
                if errors is not None:
                    errors.append(exc)
                yield f"    {_fre_pc(fde, fre) & _U64:016x}  error: {exc}"
                continue
            yield _row_line(hdr, fde, fre, rules, arch)


def dump_text(section: SFrameSection, *, text_offsets: bool = False) -> str:
    """The whole dump as one string (errors inline, see ``dump_lines``)."""
    return "\n".join(dump_lines(section, text_offsets=text_offsets)) + "\n"


# -- JSON -----------------------------------------------------------------


def rule_json(rule: Rule, arch: Arch) -> dict[str, Any]:
    return {"kind": rule.kind.value, "offset": rule.offset, "reg": rule.reg,
            "reg_name": arch.reg_name(rule.reg) if rule.reg is not None else None}


def cfa_json(cfa: CFARule | None, arch: Arch) -> dict[str, Any] | None:
    if cfa is None:
        return None
    return {"reg": cfa.reg, "reg_name": arch.reg_name(cfa.reg), "offset": cfa.offset,
            "deref": cfa.deref}


def header_json(section: SFrameSection) -> dict[str, Any]:
    hdr = section.header
    return {
        "version": hdr.version, "flags": hdr.flags, "flag_names": flag_names(hdr),
        "abi_arch": hdr.abi_arch, "arch": section.arch.name,
        "endian": "big" if hdr.big_endian else "little",
        "cfa_fixed_fp_offset": hdr.cfa_fixed_fp_offset,
        "cfa_fixed_ra_offset": hdr.cfa_fixed_ra_offset,
        "auxhdr_len": hdr.auxhdr_len, "num_fdes": hdr.num_fdes, "num_fres": hdr.num_fres,
        "fre_len": hdr.fre_len, "fdeoff": hdr.fdeoff, "freoff": hdr.freoff,
    }


def fde_json(section: SFrameSection, fde: FDE) -> dict[str, Any]:
    hdr = section.header
    return {
        "index": fde.index, "offset": fde.offset, "start": fde.start, "end": fde.end,
        "size": fde.size, "fre_type": fde.fre_type,
        "pc_type": "mask" if fde.is_pcmask else "inc", "rep_size": fde.rep_size,
        "pauth_key": ("B" if fde.pauth_key else "A") if section.arch.name.startswith("aarch64")
        else None,
        "signal": hdr.version == 3 and fde.signal,
        "flex": hdr.version == 3 and fde.flex,
        "num_fres": fde.num_fres,
    }


def fre_json(section: SFrameSection, fde: FDE, k: int, fre: FRE,
             rules: FRERules | None) -> dict[str, Any]:
    arch = section.arch
    out: dict[str, Any] = {
        "index": k, "offset": fre.offset, "start_offset": fre.start,
        "address": None if fde.is_pcmask else fde.start + fre.start,
        "info": fre.info, "base": "sp" if fre.base_is_sp else "fp",
        "mangled_ra": fre.mangled_ra, "word_size": fre.word_size, "words": list(fre.words),
    }
    if rules is not None:
        columns = fre_columns(section.header, fde, fre, rules, arch)
        out.update({
            "cfa": cfa_json(rules.cfa, arch), "ra": rule_json(rules.ra, arch),
            "fp": rule_json(rules.fp, arch), "ra_fixed": rules.ra_fixed,
            "ra_padding": rules.ra_padding, "outermost": rules.outermost,
            "text": None if columns is None else
            {"cfa": columns[0], "fp": columns[1], "ra": columns[2].rstrip()},
        })
    return out


def dump_json(section: SFrameSection, *, text_offsets: bool = False) -> dict[str, Any]:
    """Header, FDEs and FREs as plain data; decoding errors are kept, not raised."""
    errors: list[str] = []
    fdes: list[dict[str, Any]] = []
    for index in range(section.num_fdes):
        try:
            fde = section.get_fde(index)
        except SFrameError as exc:
            errors.append(str(exc))
            fdes.append({"index": index, "error": str(exc)})
            continue
        entry = fde_json(section, fde)
        entry["fres"] = fres_out = []
        entry["error"] = None
        try:
            fres = section.get_fres(fde)
        except SFrameError as exc:
            errors.append(str(exc))
            entry["error"] = str(exc)
            fdes.append(entry)
            continue
        for k, fre in enumerate(fres):
            try:
                rules: FRERules | None = fre_rules(section.header, fde, fre, section.arch)
            except SFrameError as exc:
                errors.append(str(exc))
                entry["error"] = str(exc)
                rules = None
            fres_out.append(fre_json(section, fde, k, fre, rules))
        fdes.append(entry)
    return {
        "name": section.name, "address": section.address,
        "addresses": "text-offsets" if text_offsets else "absolute",
        "size": len(section.data),
        "header": header_json(section), "fdes": fdes, "errors": errors,
        "merged": section.merged,
    }
