"""DWARF CFI (``.eh_frame``, ``.debug_frame``) as rows of the shared row model.

SFrame does not cover everything a backtrace crosses: libc's hand-written
assembly, the vdso and libraries built without ``--gsframe`` only carry DWARF
CFI. This module turns that CFI into the same ``Row`` objects SFrame gives, so
the unwinder has one step for both.

Decoding is split the way pyelftools' ``callframe.py`` splits it: pyelftools
turns bytes into CIE/FDE records holding raw ``CallFrameInstruction`` lists;
``decode_instructions`` turns those into the typed operations below (with the
alignment factors applied), and ``execute`` runs them into rows. We do not use
``get_decoded()``: it cannot say "this rule does not fit the model", keeps no
RA-signing state, and decodes every row of an FDE into dictionaries we would
then translate again.

A table does not parse a whole section to answer one PC: where the file has
``.eh_frame_hdr`` (gcc and clang have the linker write it for every
dynamically linked file), its binary-search table finds the FDE and
pyelftools parses that FDE alone (``CallFrameInfo._parse_entry_at``, the
method its whole-section parse calls for each entry, so the entries are the
same objects either way).

Only the common DWARF expressions are understood (a register plus an offset,
optionally loaded; the CFA plus an offset). Anything else makes that row's CFA
``None`` or that register ``UNDEFINED``: the unwinder stops there rather than
follow a wrong answer.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import struct
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from io import BytesIO
from typing import Any, BinaryIO, NamedTuple

from ..base.abi import AARCH64_BE, AARCH64_LE, ELF_MACHINE_NAMES, Arch, arch_for_machine
from ..base.errors import FileError, FormatError, foreign_errors, reading_elf
from ..base.files import SHT_NOBITS, ElfLayout
from ..base.rows import SAME, UNDEFINED, CFARule, Row, Rule, RuleKind

__all__ = [
    "DefCfa", "DefCfaOffset", "DefCfaRegister", "DefCfaExpression", "Offset", "ValOffset",
    "Register", "SameValue", "Undefined", "Restore", "RememberState", "RestoreState",
    "Expression", "AdvanceLoc", "SetLoc", "NegateRaState", "Unsupported", "Op",
    "CIEInfo", "decode_instructions", "execute", "cfa_from_expression", "rule_from_expression",
    "arch_for_machine", "CFITable", "ROW_CACHE_SIZE", "read_eh_frame_hdr", "BadHdrError",
    "MAX_OMITTED", "FDERef",
]

# FDEs whose rows stay decoded; as for SFrame FREs, a backtrace revisits few
# functions, and the bound keeps memory flat whatever the file holds.
ROW_CACHE_SIZE = 512


# -- The model's operations ------------------------------------------------
#
# Offsets are in bytes: the data alignment factor is already applied where
# DWARF factors an operand, so tests and callers never see factored values.


class DefCfa(NamedTuple):
    reg: int
    offset: int


class DefCfaOffset(NamedTuple):
    offset: int


class DefCfaRegister(NamedTuple):
    reg: int


class DefCfaExpression(NamedTuple):
    """DW_CFA_def_cfa_expression, already matched: None when it did not fit."""

    cfa: CFARule | None


class Offset(NamedTuple):
    """The caller's ``reg`` is saved at CFA + offset."""

    reg: int
    offset: int


class ValOffset(NamedTuple):
    """The caller's ``reg`` is the value CFA + offset."""

    reg: int
    offset: int


class Register(NamedTuple):
    """The caller's ``reg`` lives in this frame's ``reg2``."""

    reg: int
    reg2: int


class SameValue(NamedTuple):
    reg: int


class Undefined(NamedTuple):
    reg: int


class Restore(NamedTuple):
    """Back to the rule the CIE's initial instructions gave (or to none)."""

    reg: int


class RememberState(NamedTuple):
    pass


class RestoreState(NamedTuple):
    pass


class Expression(NamedTuple):
    """DW_CFA_expression / val_expression, already matched into a rule."""

    reg: int
    rule: Rule


class AdvanceLoc(NamedTuple):
    """Move the location by ``delta`` bytes (code alignment already applied)."""

    delta: int


class SetLoc(NamedTuple):
    """Move the location to a file address."""

    address: int


class NegateRaState(NamedTuple):
    """aarch64: the RA is PAC-signed from here on (or no longer, when toggled back)."""


class Unsupported(NamedTuple):
    """An instruction the model cannot follow: the CFA is unknown from here on."""

    name: str


Op = (DefCfa | DefCfaOffset | DefCfaRegister | DefCfaExpression | Offset | ValOffset | Register
      | SameValue | Undefined | Restore | RememberState | RestoreState | Expression | AdvanceLoc
      | SetLoc | NegateRaState | Unsupported)


@dataclasses.dataclass(frozen=True, slots=True)
class CIEInfo:
    """What an FDE's rows need from its CIE; buildable by hand for tests.

    ``initial`` holds the CIE's initial instructions as operations; ``signal``
    is the 'S' augmentation (the FDE describes a signal trampoline).
    """

    code_alignment: int
    data_alignment: int
    ra_column: int
    initial: tuple[Op, ...] = ()
    signal: bool = False


# -- DWARF expressions -------------------------------------------------------

_DW_OP_deref = 0x06
_DW_OP_const1u, _DW_OP_const1s, _DW_OP_const2u, _DW_OP_const2s = 0x08, 0x09, 0x0A, 0x0B
_DW_OP_const4u, _DW_OP_const4s, _DW_OP_const8u, _DW_OP_const8s = 0x0C, 0x0D, 0x0E, 0x0F
_DW_OP_constu, _DW_OP_consts = 0x10, 0x11
_DW_OP_minus, _DW_OP_plus, _DW_OP_plus_uconst = 0x1C, 0x22, 0x23
_DW_OP_lit0, _DW_OP_lit31 = 0x30, 0x4F
_DW_OP_breg0, _DW_OP_breg31 = 0x70, 0x8F
_DW_OP_bregx = 0x92
_DW_OP_nop = 0x96
_DW_OP_call_frame_cfa = 0x9C

_FIXED_CONSTS = {
    _DW_OP_const1u: "B", _DW_OP_const1s: "b", _DW_OP_const2u: "H", _DW_OP_const2s: "h",
    _DW_OP_const4u: "I", _DW_OP_const4s: "i", _DW_OP_const8u: "Q", _DW_OP_const8s: "q",
}


class _Expr(NamedTuple):
    """A symbolic stack value: base + offset, loaded when ``deref``.

    ``base`` is ``"cfa"``, ``"const"`` or a register number. Only values of
    this shape are tracked, which is exactly what rows can express.
    """

    base: int | str
    offset: int
    deref: bool = False


def _leb(data: bytes, pos: int, signed: bool) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise IndexError("LEB128 runs past the expression")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if signed and byte & 0x40:
        result -= 1 << shift
    return result, pos


def _evaluate(block: Iterable[int], initial: list[_Expr], big_endian: bool) -> _Expr | None:
    """Run an expression on symbolic values; None for anything outside the model."""
    data = bytes(block)
    stack = list(initial)
    pos = 0
    endian = ">" if big_endian else "<"
    try:
        while pos < len(data):
            op = data[pos]
            pos += 1
            if _DW_OP_breg0 <= op <= _DW_OP_breg31:
                offset, pos = _leb(data, pos, True)
                stack.append(_Expr(op - _DW_OP_breg0, offset))
            elif op == _DW_OP_bregx:
                reg, pos = _leb(data, pos, False)
                offset, pos = _leb(data, pos, True)
                stack.append(_Expr(reg, offset))
            elif op == _DW_OP_call_frame_cfa:
                stack.append(_Expr("cfa", 0))
            elif _DW_OP_lit0 <= op <= _DW_OP_lit31:
                stack.append(_Expr("const", op - _DW_OP_lit0))
            elif op in (_DW_OP_constu, _DW_OP_consts):
                value, pos = _leb(data, pos, op == _DW_OP_consts)
                stack.append(_Expr("const", value))
            elif op in _FIXED_CONSTS:
                fmt = struct.Struct(endian + _FIXED_CONSTS[op])
                (value,) = fmt.unpack_from(data, pos)
                pos += fmt.size
                stack.append(_Expr("const", value))
            elif op == _DW_OP_plus_uconst:
                value, pos = _leb(data, pos, False)
                top = stack.pop()
                if top.deref:
                    return None
                stack.append(top._replace(offset=top.offset + value))
            elif op in (_DW_OP_plus, _DW_OP_minus):
                # Only "value +/- constant" stays a base plus an offset.
                right, left = stack.pop(), stack.pop()
                if right.deref or left.deref:
                    return None
                if right.base == "const":
                    delta = right.offset if op == _DW_OP_plus else -right.offset
                    stack.append(left._replace(offset=left.offset + delta))
                elif op == _DW_OP_plus and left.base == "const":
                    stack.append(right._replace(offset=right.offset + left.offset))
                else:
                    return None
            elif op == _DW_OP_deref:
                top = stack.pop()
                if top.deref or top.base == "const":
                    return None
                stack.append(top._replace(deref=True))
            elif op == _DW_OP_nop:
                continue
            else:
                return None
    except (IndexError, struct.error):
        return None
    return stack[-1] if stack else None


def cfa_from_expression(block: Iterable[int], big_endian: bool = False) -> CFARule | None:
    """The CFA a DW_CFA_def_cfa_expression computes, if a ``CFARule`` can say it.

    The forms that fit are ``DW_OP_breg<N> off`` and ``DW_OP_breg<N> off;
    DW_OP_deref`` (signal trampolines: the CFA is loaded from the ucontext).
    The amd64 PLT's ``rsp + 8 + ((rip & 15) >= 11 ? 8 : 0)`` does not fit.
    """
    value = _evaluate(block, [], big_endian)
    if value is None or not isinstance(value.base, int):
        return None
    return CFARule(value.base, value.offset, value.deref)


def rule_from_expression(block: Iterable[int], val: bool, big_endian: bool = False) -> Rule:
    """The rule a DW_CFA_expression (``val`` False) or val_expression gives.

    DWARF pushes the CFA before running either, so ``DW_OP_plus_uconst 8``
    alone means CFA + 8. Unknown forms give ``UNDEFINED``, never a guess.
    """
    value = _evaluate(block, [_Expr("cfa", 0)], big_endian)
    if value is None or value.base == "const":
        return UNDEFINED
    # An address rule (expression) loads once; a value rule (val_expression)
    # loads only if the expression itself ended in DW_OP_deref.
    load = value.deref if val else True
    if not val and value.deref:
        return UNDEFINED  # would be load(load(...)): not a row rule
    if value.base == "cfa":
        return Rule(RuleKind.AT_CFA if load else RuleKind.CFA_PLUS, value.offset)
    assert isinstance(value.base, int)
    return Rule(RuleKind.AT_REG if load else RuleKind.IN_REG, value.offset, value.base)


# -- From pyelftools' raw instructions to operations -------------------------

def decode_instructions(instructions: Iterable[Any], code_alignment: int, data_alignment: int,
                        arch: Arch) -> list[Op]:
    """Turn ``CallFrameInstruction(opcode, args)`` objects into operations.

    Factors are applied here so that executing needs no CIE fields.
    :raises FormatError: an opcode pyelftools parsed but this module does not know.
    """
    from elftools.dwarf.constants import DW_CFA

    ops: list[Op] = []
    for ins in instructions:
        opcode, args = ins.opcode, ins.args
        match opcode:
            case DW_CFA.nop | DW_CFA.GNU_args_size:
                continue
            case DW_CFA.advance_loc | DW_CFA.advance_loc1 | DW_CFA.advance_loc2 \
                    | DW_CFA.advance_loc4:
                ops.append(AdvanceLoc(args[0] * code_alignment))
            case DW_CFA.set_loc:
                ops.append(SetLoc(args[0]))
            case DW_CFA.def_cfa:
                ops.append(DefCfa(args[0], args[1]))
            case DW_CFA.def_cfa_sf:
                ops.append(DefCfa(args[0], args[1] * data_alignment))
            case DW_CFA.def_cfa_register:
                ops.append(DefCfaRegister(args[0]))
            case DW_CFA.def_cfa_offset:
                ops.append(DefCfaOffset(args[0]))
            case DW_CFA.def_cfa_offset_sf:
                ops.append(DefCfaOffset(args[0] * data_alignment))
            case DW_CFA.def_cfa_expression:
                ops.append(DefCfaExpression(cfa_from_expression(args[0], arch.big_endian)))
            case DW_CFA.offset | DW_CFA.offset_extended | DW_CFA.offset_extended_sf:
                ops.append(Offset(args[0], args[1] * data_alignment))
            case DW_CFA.val_offset | DW_CFA.val_offset_sf:
                ops.append(ValOffset(args[0], args[1] * data_alignment))
            case DW_CFA.register:
                ops.append(Register(args[0], args[1]))
            case DW_CFA.same_value:
                ops.append(SameValue(args[0]))
            case DW_CFA.undefined:
                ops.append(Undefined(args[0]))
            case DW_CFA.restore | DW_CFA.restore_extended:
                ops.append(Restore(args[0]))
            case DW_CFA.remember_state:
                ops.append(RememberState())
            case DW_CFA.restore_state:
                ops.append(RestoreState())
            case DW_CFA.expression:
                ops.append(Expression(args[0], rule_from_expression(args[1], False,
                                                                    arch.big_endian)))
            case DW_CFA.val_expression:
                ops.append(Expression(args[0], rule_from_expression(args[1], True,
                                                                    arch.big_endian)))
            case DW_CFA.AARCH64_negate_ra_state:
                # The same opcode is SPARC's DW_CFA_GNU_window_save.
                if arch.abi_id in (AARCH64_BE.abi_id, AARCH64_LE.abi_id):
                    ops.append(NegateRaState())
                else:
                    ops.append(Unsupported("DW_CFA_GNU_window_save"))
            case _:
                raise FormatError(f"unknown CFI opcode {int(opcode):#04x}")
    return ops


# -- Executing operations into rows --------------------------------------------

class _State(NamedTuple):
    cfa: CFARule | None
    rules: dict[int, Rule]
    ra_signed: bool


def _initial_rules(cie: CIEInfo) -> _State:
    state = _State(None, {}, False)
    for op in cie.initial:
        if isinstance(op, AdvanceLoc | SetLoc | RememberState | RestoreState | Restore):
            continue  # meaningless before the first row
        state = _apply(op, state, None)
    return state


def _apply(op: Op, state: _State, initial: _State | None) -> _State:
    """One rule-changing operation; location and state-stack ops are the caller's."""
    cfa, rules, signed = state
    match op:
        case DefCfa(reg, offset):
            cfa = CFARule(reg, offset)
        case DefCfaOffset(offset):
            # Only meaningful on a register CFA; on an expression CFA (or an
            # unknown one) DWARF says nothing sensible.
            cfa = cfa._replace(offset=offset) if cfa is not None and not cfa.deref else None
        case DefCfaRegister(reg):
            cfa = cfa._replace(reg=reg) if cfa is not None and not cfa.deref else None
        case DefCfaExpression(rule):
            cfa = rule
        case Offset(reg, offset):
            rules = {**rules, reg: Rule(RuleKind.AT_CFA, offset)}
        case ValOffset(reg, offset):
            rules = {**rules, reg: Rule(RuleKind.CFA_PLUS, offset)}
        case Register(reg, reg2):
            rules = {**rules, reg: Rule(RuleKind.IN_REG, 0, reg2)}
        case SameValue(reg):
            rules = {**rules, reg: SAME}
        case Undefined(reg):
            rules = {**rules, reg: UNDEFINED}
        case Expression(reg, rule):
            rules = {**rules, reg: rule}
        case Restore(reg):
            rules = dict(rules)
            if initial is not None and reg in initial.rules:
                rules[reg] = initial.rules[reg]
            else:
                rules.pop(reg, None)
        case NegateRaState():
            signed = not signed
        case Unsupported():
            cfa = None
        case _:
            raise AssertionError(f"not a rule operation: {op!r}")
    return _State(cfa, rules, signed)


def execute(cie: CIEInfo, ops: Sequence[Op], start: int, end: int, arch: Arch, *,
            func_start: int | None = None, bias: int = 0,
            source: str = "eh_frame") -> list[Row]:
    """Run a CIE's initial instructions and an FDE's operations into rows.

    ``start``/``end`` are the FDE's file addresses; rows come out at those plus
    ``bias``. A rule takes effect at the location after the advance that
    follows it, i.e. after the instruction it describes. Rules with no DWARF
    rule follow gdb (``dwarf2_frame_default_init_reg`` and its treatment of
    unspecified registers): the RA column and the FP are "same value",
    everything else is left out of ``regs`` (unknown in the caller).

    :raises FormatError: the location moves backwards, or RestoreState has
        nothing to restore.
    """
    initial = _initial_rules(cie)
    state = initial
    stack: list[_State] = []
    rows: list[Row] = []
    loc = start

    def emit(upto: int) -> None:
        upto = min(upto, end)
        if upto > loc:
            rows.append(_row(state, loc + bias, upto + bias, start + bias if func_start is None
                             else func_start, cie, arch, source))

    for op in ops:
        if isinstance(op, AdvanceLoc | SetLoc):
            new = loc + op.delta if isinstance(op, AdvanceLoc) else op.address
            if new < loc:
                raise FormatError(f"CFI location moves backwards from {loc:#x} to {new:#x}")
            emit(new)
            loc = new
        elif isinstance(op, RememberState):
            stack.append(state)
        elif isinstance(op, RestoreState):
            if not stack:
                raise FormatError(f"DW_CFA_restore_state at {loc:#x} with no remembered state")
            state = stack.pop()
        else:
            state = _apply(op, state, initial)
    emit(end)
    return rows


def _row(state: _State, start: int, end: int, func_start: int, cie: CIEInfo, arch: Arch,
         source: str) -> Row:
    ra = state.rules.get(cie.ra_column, SAME)
    fp = state.rules.get(arch.fp, SAME)
    regs = tuple(sorted((reg, rule) for reg, rule in state.rules.items()
                        if reg not in (cie.ra_column, arch.fp)))
    return Row(start, end, func_start, state.cfa, ra, fp, regs=regs, ra_signed=state.ra_signed,
               outermost=ra.kind is RuleKind.UNDEFINED, signal=cie.signal, source=source)


# -- Tables from ELF files -----------------------------------------------------

class FDERef(NamedTuple):
    """One FDE of a ``CFITable``: its range and, once parsed, its entry.

    ``CFITable.fde_rows_of`` decodes it by reference, for a caller to whom an
    address does not name one FDE (a ``.o``, whose text sections all start
    at 0).
    """

    start: int  # file address
    end: int
    source: str  # "eh_frame" or "debug_frame"
    entry: Any  # pyelftools FDE (its ``offset`` in the section); None: not parsed


class _Index(NamedTuple):
    starts: list[int]
    fdes: list[FDERef]


class _HdrIndex:
    """``.eh_frame_hdr``'s search table, checked against ``.eh_frame``.

    ``starts`` (file addresses) and ``offsets`` (into ``.eh_frame``) are
    parallel, sorted by (start, offset): the order the full read gives FDEs
    of equal start. ``cfi`` parses one entry at a time, on demand;
    ``spans`` reads an FDE's range alone (``fde_span``), which is all that
    ``has_fde`` needs.
    """

    def __init__(self, starts: list[int], offsets: list[int], spans: _Spans,
                 make_cfi: Any) -> None:
        self.starts, self.offsets, self.spans = starts, offsets, spans
        self._make_cfi = make_cfi
        self._cfi: Any = None
        self.sized: frozenset[int] | None = None  # ``CFITable._sized_starts``

    @property
    def cfi(self) -> Any:
        """pyelftools' CallFrameInfo over the ``.eh_frame`` bytes, made at first use."""
        if self._cfi is None:
            self._cfi = self._make_cfi()
        return self._cfi


class _Spans:
    """(start, size) of ``.eh_frame`` FDEs from their header words alone
    (``fde_span``), with each CIE's pointer encoding read once."""

    def __init__(self, data: bytes, address: int, big_endian: bool, wide: bool) -> None:
        self.data, self.address, self.big_endian, self.wide = data, address, big_endian, wide
        self._encodings: dict[int, int | None] = {}

    def __call__(self, offset: int) -> tuple[int, int] | None:
        return fde_span(self.data, offset, self.address, self.big_endian, self.wide,
                        self._encodings)

    def many(self, offsets: Iterable[int]) -> list[tuple[int, int] | None]:
        return fde_spans(self.data, offsets, self.address, self.big_endian, self.wide,
                         self._encodings)


class BadHdrError(Exception):
    """``.eh_frame_hdr`` cannot be trusted: the table is read in full instead."""


# DW_EH_PE_* value formats (low nibble) and applications (high bits) that an
# ``.eh_frame_hdr`` header field may use here; anything else (indirect,
# aligned, textrel, funcrel) is refused, and the whole section read instead.
_EH_PE_FORMATS = {0x02: "H", 0x03: "I", 0x04: "Q", 0x0A: "h", 0x0B: "i", 0x0C: "q"}
_EH_PE_ABS, _EH_PE_PCREL, _EH_PE_DATAREL = 0x00, 0x10, 0x30
_ET_REL = 1
# The one table encoding libgcc's binary search takes (unwind-dw2-fde-dip.c).
_EH_PE_DATAREL_SDATA4 = 0x3B
_HDR_VERSION = 1
# FDEs the table may leave out (parsed when the table is read); more, and
# the whole section is read instead.
MAX_OMITTED = 1024


def _value_format(enc: int, wide: bool) -> str | None:
    """The ``struct`` code of a DW_EH_PE value format (absptr: the address
    size), or None for one this reader does not take (LEB128, signed or not)."""
    return _EH_PE_FORMATS.get(enc & 0x0F, ("Q" if wide else "I") if enc & 0x0F == 0 else None)


def _address_mask(wide: bool) -> int:
    return (1 << 64) - 1 if wide else (1 << 32) - 1


def _encoded(data: bytes, pos: int, enc: int, endian: str, address: int, hdr_address: int,
             wide: bool) -> tuple[int, int]:
    """One DW_EH_PE-encoded header value at ``pos`` -> (value, next pos).

    :raises BadHdrError: an encoding this reader does not take, or no room.
    """
    fmt = _value_format(enc, wide)
    application = enc & 0x70
    if fmt is None or enc & 0x80 or application not in (_EH_PE_ABS, _EH_PE_PCREL,
                                                           _EH_PE_DATAREL):
        raise BadHdrError(f"encoding {enc:#04x} not supported")
    layout = struct.Struct(endian + fmt)
    if pos + layout.size > len(data):
        raise BadHdrError("truncated header")
    (value,) = layout.unpack_from(data, pos)
    if application == _EH_PE_PCREL:
        value += address + pos
    elif application == _EH_PE_DATAREL:
        value += hdr_address
    return value & _address_mask(wide), pos + layout.size


def _cie_encoding(data: bytes, cie: int, endian: str, wide: bool) -> int | None:
    """The pointer encoding (DW_EH_PE_*) a CIE gives its FDEs' addresses;
    None where this reader does not take the CIE (pyelftools then reads it)."""
    try:
        (length,) = struct.unpack_from(endian + "I", data, cie)
        if length in (0, 0xFFFFFFFF) or int.from_bytes(data[cie + 4:cie + 8], "little"):
            return None  # not a 32-bit CIE (a 64-bit one: leave it to pyelftools)
        end = cie + 4 + length
        version = data[cie + 8]
        nul = data.index(b"\0", cie + 9, end)
        augmentation = data[cie + 9:nul]
        pos = nul + 1
        if version >= 4:
            pos += 2  # address_size, segment_selector_size
        _, pos = _leb(data, pos, False)  # code alignment
        _, pos = _leb(data, pos, True)  # data alignment
        if version == 1:
            pos += 1
        else:
            _, pos = _leb(data, pos, False)
        if not augmentation.startswith(b"z"):
            return 0x00 if not augmentation else None  # absptr; "eh" and others: pyelftools
        _, pos = _leb(data, pos, False)
        for letter in augmentation[1:]:
            if letter == ord("R"):
                return data[pos] if pos < end else None
            if letter == ord("L"):
                pos += 1
            elif letter == ord("P"):
                fmt = _value_format(data[pos], wide)
                if fmt is None:
                    return None
                pos += 1 + struct.calcsize(fmt)
            elif letter not in b"SBG":
                return None
        return 0x00  # no 'R': absptr
    except (IndexError, ValueError, struct.error):
        return None


def fde_span(data: bytes, offset: int, address: int, big_endian: bool, wide: bool,
             encodings: dict[int, int | None] | None = None) -> tuple[int, int] | None:
    """(initial location, address range) of the ``.eh_frame`` FDE at ``offset``
    (the section at ``address``), from its header alone: what pyelftools'
    full parse of the entry gives for them, without parsing its instructions
    or building its objects. None where this reader does not take the FDE
    or its CIE (64-bit lengths, indirect or relative-to-text encodings,
    augmentations it does not know): the caller parses it then.
    ``encodings``: CIE offset -> its encoding, kept across calls."""
    endian = ">" if big_endian else "<"
    try:
        (length, pointer) = struct.unpack_from(endian + "II", data, offset)
        if length in (0, 0xFFFFFFFF) or pointer == 0 or pointer > offset + 4:
            return None
        cie = offset + 4 - pointer
        if encodings is None:
            enc = _cie_encoding(data, cie, endian, wide)
        elif cie in encodings:
            enc = encodings[cie]
        else:
            enc = encodings[cie] = _cie_encoding(data, cie, endian, wide)
        if enc is None:
            return None
        fmt = _value_format(enc, wide)
        if fmt is None or enc & 0x80 or enc & 0x70 not in (_EH_PE_ABS, _EH_PE_PCREL):
            return None
        field = struct.Struct(endian + fmt)
        pos = offset + 8
        if pos + 2 * field.size > offset + 4 + length:
            return None
        (start,) = field.unpack_from(data, pos)
        (size,) = field.unpack_from(data, pos + field.size)
    except struct.error:
        return None
    if enc & 0x70 == _EH_PE_PCREL:
        start += address + pos
    return start & _address_mask(wide), size


_PCREL_SDATA4 = 0x1B  # what GNU as gives every FDE of .eh_frame ("zR", DW_EH_PE_pcrel|sdata4)


def fde_spans(data: bytes, offsets: Iterable[int], address: int, big_endian: bool, wide: bool,
              encodings: dict[int, int | None]) -> list[tuple[int, int] | None]:
    """``fde_span`` of each offset: an FDE whose CIE gives ``DW_EH_PE_pcrel |
    sdata4`` (nearly all) read with one unpack, any other by ``fde_span``."""
    endian = ">" if big_endian else "<"
    head = struct.Struct(endian + "IIii")  # length, CIE pointer, pc_begin, pc_range
    mask = _address_mask(wide)
    out: list[tuple[int, int] | None] = []
    for offset in offsets:
        try:
            length, pointer, begin, size = head.unpack_from(data, offset)
        except struct.error:
            out.append(None)
            continue
        cie = offset + 4 - pointer
        enc = encodings.get(cie, -1) if 0 < pointer <= offset + 4 else None
        if enc == _PCREL_SDATA4 and 12 <= length != 0xFFFFFFFF:
            out.append(((begin + address + offset + 8) & mask, size))
        else:
            out.append(fde_span(data, offset, address, big_endian, wide, encodings))
    return out


def _fde_offsets(data: bytes, endian: str) -> list[int]:
    """The offsets of every FDE in ``.eh_frame`` bytes, from the length and
    CIE-id words alone (no instruction is parsed): what the search table must
    list, one entry each.

    :raises BadHdrError: an entry runs past the section.
    """
    word, dword = struct.Struct(endian + "I"), struct.Struct(endian + "Q")
    pair = struct.Struct(endian + "II")  # length, CIE id (0) or pointer (an FDE)
    unpack_pair, unpack_word = pair.unpack_from, word.unpack_from
    out: list[int] = []
    append = out.append
    pos, size = 0, len(data)
    while pos < size:
        if pos + 8 <= size:
            length, ident = unpack_pair(data, pos)
            if 4 <= length < 0xFFFFFFF0 and pos + 4 + length <= size:
                # The common entry, 32-bit: its CIE id or pointer read with the length.
                if ident:
                    append(pos)
                pos += 4 + length
                continue
        if pos + 4 > size:
            raise BadHdrError(f".eh_frame entry at offset {pos:#x} is truncated")
        (length,) = unpack_word(data, pos)
        if length == 0:  # a terminator (pyelftools reads on past it, as we do)
            pos += 4
            continue
        if length == 0xFFFFFFFF:
            if pos + 12 > size:
                raise BadHdrError(f".eh_frame entry at offset {pos:#x} is truncated")
            (length,) = dword.unpack_from(data, pos + 4)
            id_at, id_size, end = pos + 12, 8, pos + 12 + length
        else:
            id_at, id_size, end = pos + 4, 4, pos + 4 + length
        if length < id_size or end > size:
            raise BadHdrError(f".eh_frame entry at offset {pos:#x} runs past the section")
        if int.from_bytes(data[id_at:id_at + id_size], "little" if endian == "<" else "big"):
            append(pos)
        pos = end
    return out


def read_eh_frame_hdr(hdr: bytes, hdr_address: int, eh_frame: bytes, eh_address: int,
                      big_endian: bool, wide: bool) -> tuple[list[int], list[int], list[int]]:
    """``.eh_frame_hdr``'s table as (starts, ``.eh_frame`` offsets), sorted,
    and the offsets of the FDEs it leaves out, after checking it against the
    ``.eh_frame`` it indexes.

    The checks are what make a lookup through the table give exactly what the
    full read gives: the version and encodings libgcc's binary search takes,
    ``eh_frame_ptr`` naming this ``.eh_frame``, a table that fits, sorted
    starts, and entries that are distinct FDEs of the section (the FDE
    offsets come from a walk over the entries' length words, which costs
    microseconds per entry). GNU ld lists one FDE per start: the others of
    that start (functions folded by ``--icf``, 62 of libclang's 49,775) are
    returned to be parsed at once, up to ``MAX_OMITTED`` of them. Each
    entry's start is checked against its FDE when it is parsed.

    :raises BadHdrError: any check fails (the caller reads ``.eh_frame`` whole).
    """
    endian = ">" if big_endian else "<"
    if len(hdr) < 4:
        raise BadHdrError("truncated header")
    version, ptr_enc, count_enc, table_enc = hdr[0], hdr[1], hdr[2], hdr[3]
    if version != _HDR_VERSION:
        raise BadHdrError(f"version {version}, not {_HDR_VERSION}")
    if table_enc != _EH_PE_DATAREL_SDATA4:
        raise BadHdrError(f"table encoding {table_enc:#04x}, not {_EH_PE_DATAREL_SDATA4:#04x}")
    pointer, pos = _encoded(hdr, 4, ptr_enc, endian, hdr_address, hdr_address, wide)
    if pointer != eh_address:
        raise BadHdrError(f"eh_frame_ptr {pointer:#x} is not .eh_frame's address "
                          f"{eh_address:#x}")
    count, pos = _encoded(hdr, pos, count_enc, endian, hdr_address, hdr_address, wide)
    if pos + 8 * count > len(hdr):
        raise BadHdrError(f"{count} table entries do not fit in {len(hdr)} bytes")
    flat = struct.unpack(f"{endian}{2 * count}i", hdr[pos:pos + 8 * count])  # start, fde, ...
    starts = [hdr_address + start for start in flat[0::2]]
    if starts != sorted(starts):
        raise BadHdrError("table not sorted")
    base = hdr_address - eh_address
    offsets = [base + fde for fde in flat[1::2]]
    listed = set(offsets)
    if len(listed) != len(offsets):
        raise BadHdrError("table lists an FDE twice")
    fdes = _fde_offsets(eh_frame, endian)
    strays = listed.difference(fdes)
    if strays:
        raise BadHdrError(f"table entry for offset {min(strays):#x} is not an FDE of .eh_frame")
    omitted = [offset for offset in fdes if offset not in listed]
    if len(omitted) > MAX_OMITTED:
        raise BadHdrError(f"table omits {len(omitted)} of the {len(fdes)} FDEs")
    if len(set(starts)) == len(starts):
        return starts, offsets, omitted  # sorted and distinct: in (start, offset) order already
    ordered = sorted(zip(starts, offsets, strict=True))
    return [start for start, _ in ordered], [offset for _, offset in ordered], omitted


class CFITable:
    """The DWARF CFI of one ELF file, loaded at ``bias``.

    Nothing is read until the first lookup. A linked file with
    ``.eh_frame_hdr`` and no ``.debug_frame`` is then searched through the
    header's table, as libgcc does: one FDE (and its CIE) is parsed per
    looked-up function, so a backtrace through libc costs what it touches,
    not libc's 3,700 FDEs (two thirds of a second). Otherwise, or when the
    header fails a check (``read_eh_frame_hdr``; ``hdr_problem`` says
    which), ``.eh_frame`` and ``.debug_frame`` are parsed once into
    pyelftools' entry lists and their FDE ranges sorted once. Both ways give
    the same FDE, hence the same rows, for every PC. Instructions are
    executed only for the FDE that covers a looked-up PC, and its rows are
    cached. ``.eh_frame`` wins when both sections cover a PC, as it is what
    the running code's unwinder (libgcc) uses.

    :param source: a path, or an open pyelftools ``ELFFile`` whose stream
        stays open until the first lookup.
    :param bias: load bias; every address in and out is a runtime address.
    :param debug_frame: False: ``.eh_frame`` alone, where a ``.debug_frame``
        beside it cannot be read as it stands (LLVM's assembler writes one
        in a ``.o`` with absolute relocations this reader does not apply).
    :raises FileError: (on first use) the file cannot be read or its machine
        has no ABI here.
    :raises FormatError: (on first use) the CFI is malformed.
    """

    def __init__(self, source: str | os.PathLike[str] | Any, bias: int = 0, *,
                 name: str | None = None, debug_frame: bool = True) -> None:
        if isinstance(source, str | os.PathLike):
            self._path: str | None = os.fspath(source)
            self._elf: Any = None
        else:
            self._path = None
            self._elf = source
        self.name = str(name or self._path or getattr(getattr(source, "stream", None), "name",
                                                      "<elf>"))
        self.bias = bias
        self._debug_frame = debug_frame
        self._arch: Arch | None = None
        self._index: _Index | None = None
        self._hdr: _HdrIndex | None = None
        self._opened = False
        # Why ``.eh_frame_hdr`` was not used (None: used, or there is none).
        self.hdr_problem: str | None = None
        self._cies: dict[tuple[str, int], CIEInfo] = {}
        self._rows: OrderedDict[tuple[str, int], list[Row]] = OrderedDict()

    # -- loading -------------------------------------------------------------

    @property
    def arch(self) -> Arch:
        self._open()
        assert self._arch is not None
        return self._arch

    def _open(self) -> None:
        """First use: the header's table when it is usable, else the full read.

        The header path reads the section headers with ``struct``
        (``files.elf_layout``); pyelftools' ``ELFFile`` is built only for
        the full read.
        """
        if self._opened:
            return
        self._opened = True
        if self._path is None:
            self._load()
            return
        from ..base.files import elf_layout, open_elf

        with reading_elf(self.name), open_elf(self._path, self.name) as stream:
            layout = elf_layout(stream, self.name)
            machine = ELF_MACHINE_NAMES.get(layout.machine)
            arch = None if machine is None else arch_for_machine(machine, layout.big_endian)
            if arch is not None:
                self._arch = arch
                self._hdr = self._read_hdr(stream, layout)
                if self._hdr is not None:
                    return
            from elftools.elf.elffile import ELFFile

            stream.seek(0)
            self._index = self._read(ELFFile(stream))

    def _arch_of(self, elf: Any) -> Arch:
        arch = arch_for_machine(elf["e_machine"], not elf.little_endian)
        if arch is None:
            raise FileError(f"{self.name}: no unwinding ABI for {elf['e_machine']}")
        return arch

    def _read_hdr(self, stream: BinaryIO, layout: ElfLayout) -> _HdrIndex | None:
        """The checked ``.eh_frame_hdr`` table, or None: none, or not to be trusted."""
        if layout.e_type == _ET_REL:
            return None
        hdr, eh = layout.section(".eh_frame_hdr"), layout.section(".eh_frame")
        if hdr is None or eh is None or (self._debug_frame
                                         and layout.section(".debug_frame") is not None):
            return None  # with .debug_frame too, the full read merges both
        if SHT_NOBITS in (hdr.type, eh.type) or not eh.size:
            return None
        hdr_data, data = layout.data(stream, hdr), layout.data(stream, eh)
        if hdr_data is None or data is None:
            return None  # compressed: left to pyelftools
        try:
            starts, offsets, omitted = read_eh_frame_hdr(hdr_data, hdr.addr, data, eh.addr,
                                                         layout.big_endian, layout.wide)
        except BadHdrError as exc:
            self.hdr_problem = str(exc)
            return None
        big_endian, wide, address = layout.big_endian, layout.wide, eh.addr

        def make_cfi() -> Any:
            # Imported at the first entry parsed: asking whether there is an
            # FDE (``has_fde``) reads ranges alone, without pyelftools.
            from elftools.dwarf.callframe import CallFrameInfo
            from elftools.dwarf.structs import DWARFStructs

            if not hasattr(CallFrameInfo, "_parse_entry_at"):
                raise BadHdrError("this pyelftools cannot parse one entry alone")

            structs = DWARFStructs(little_endian=not big_endian, dwarf_format=32,
                                   address_size=8 if wide else 4)
            return CallFrameInfo(BytesIO(data), len(data), address, structs, for_eh_frame=True)

        index = _HdrIndex(starts, offsets, _Spans(data, address, big_endian, wide), make_cfi)
        if omitted:
            # Into the index where the full read would have them: by (start, offset).
            try:
                found = [(self._span(index, offset)[0], offset) for offset in omitted]
            except BadHdrError as exc:
                self.hdr_problem = str(exc)
                return None
            except foreign_errors():
                self.hdr_problem = "an FDE the table leaves out cannot be parsed"
                return None
            merged = sorted([*zip(starts, offsets, strict=True), *found])
            index.starts = [start for start, _ in merged]
            index.offsets = [offset for _, offset in merged]
        return index

    @staticmethod
    def _span(hdr: _HdrIndex, offset: int) -> tuple[int, int]:
        """(start, size) of the FDE at ``offset``: from its header words, else
        from pyelftools' parse of the whole entry."""
        found = hdr.spans(offset)
        if found is not None:
            return found
        header = hdr.cfi._parse_entry_at(offset).header
        return header["initial_location"], header["address_range"]

    def _load(self) -> _Index:
        """Every FDE of the file, read once (what ``verify`` walks, and the
        fallback when ``.eh_frame_hdr`` cannot serve)."""
        self._opened = True
        if self._index is not None:
            return self._index
        if self._elf is not None:
            self._index = self._read(self._elf)
            self._elf = None  # the caller owns the stream; we no longer need it
            return self._index
        assert self._path is not None
        from elftools.elf.elffile import ELFFile

        from ..base.files import open_elf

        with reading_elf(self.name), open_elf(self._path, self.name) as stream:
            self._index = self._read(ELFFile(stream))
        return self._index

    def iter_fdes(self) -> Iterator[FDERef]:
        """Every FDE of the file with a size, each parsed, by start
        (``.eh_frame`` first among equal starts); the whole CFI is read
        once, the rows of none (``fde_rows_of``)."""
        return iter(self._load().fdes)

    def _read(self, elf: Any) -> _Index:
        with reading_elf(self.name):
            self._arch = self._arch_of(elf)
            refs: list[FDERef] = []
            for section_name, source in ((".eh_frame", "eh_frame"),
                                         (".debug_frame", "debug_frame")):
                if source == "debug_frame" and not self._debug_frame:
                    continue
                section = elf.get_section_by_name(section_name)
                if section is None or section["sh_type"] == "SHT_NOBITS" \
                        or section.data_size == 0:
                    continue
                try:
                    refs.extend(self._read_section(elf, section, source))
                except foreign_errors() as exc:
                    raise FormatError(f"{self.name}: {section_name}: {exc}") from None
        # eh_frame first among equal starts, so the search below meets it first.
        refs.sort(key=lambda ref: (ref.start, ref.source != "eh_frame"))
        return _Index([ref.start for ref in refs], refs)

    def _read_section(self, elf: Any, section: Any, source: str) -> list[FDERef]:
        """Parse one section's entries with pyelftools.

        ``CallFrameInfo`` is built directly rather than through
        ``ELFFile.get_dwarf_info()``, which would read every ``.debug_*``
        section into memory (and follow ``.gnu_debuglink``) for nothing.
        """
        from elftools.dwarf.callframe import FDE, CallFrameInfo
        from elftools.dwarf.structs import DWARFStructs

        data = section.data()
        if elf["e_type"] == "ET_REL":
            # As for .sframe in elf.py: apply the PC-relative relocations so
            # an FDE's start reads as the offset in its text section.
            from ..format.elf import _apply_relocations

            raw = bytearray(data)
            _apply_relocations(elf, section, raw)
            data = bytes(raw)
        structs = DWARFStructs(little_endian=elf.little_endian, dwarf_format=32,
                               address_size=elf.elfclass // 8)
        cfi = CallFrameInfo(BytesIO(data), len(data), section["sh_addr"], structs,
                            for_eh_frame=source == "eh_frame")
        refs = []
        for entry in cfi.get_entries():
            if not isinstance(entry, FDE):
                continue
            start = entry.header["initial_location"]
            size = entry.header["address_range"]
            if size > 0:
                refs.append(FDERef(start, start + size, source, entry))
        return refs

    # -- lookup --------------------------------------------------------------

    def _find(self, pc: int, *, entry: bool = True) -> FDERef | None:
        """The FDE covering ``pc``; ``entry`` False: its ``entry`` may be None
        (not parsed: ``has_fde`` asks only whether there is one)."""
        addr = pc - self.bias
        self._open()
        if self._index is None and self._hdr is not None:
            try:
                return self._find_in_hdr(self._hdr, addr, entry)
            except BadHdrError as exc:
                self._distrust(exc)
        index = self._load()
        pos = bisect.bisect_right(index.starts, addr) - 1
        # Overlaps are rare (a .debug_frame FDE under an .eh_frame one, or the
        # zero-address FDEs of discarded functions): look left a little, and
        # prefer .eh_frame among the candidates.
        found: FDERef | None = None
        for _ in range(8):
            if pos < 0:
                break
            ref = index.fdes[pos]
            if ref.start <= addr < ref.end:
                if ref.source == "eh_frame":
                    return ref
                found = found or ref
            pos -= 1
        return found

    def _find_in_hdr(self, hdr: _HdrIndex, addr: int, parse: bool = True) -> FDERef | None:
        """``_find`` through the header's table: the same candidates, in the same
        order (FDEs of no size are not candidates there either), each read
        as it is looked at (``parse`` False: its range alone, ``_span``; the
        result's ``entry`` is then None).

        :raises BadHdrError: an entry's start is not its FDE's.
        """
        pos = bisect.bisect_right(hdr.starts, addr) - 1
        looked = 0
        while pos >= 0 and looked < 8:
            start, offset = hdr.starts[pos], hdr.offsets[pos]
            try:
                if parse:
                    entry = hdr.cfi._parse_entry_at(offset)
                    initial, size = entry.header["initial_location"], entry.header["address_range"]
                else:
                    entry = None
                    initial, size = self._span(hdr, offset)
            except foreign_errors() as exc:
                raise FormatError(f"{self.name}: .eh_frame: {exc}") from None
            if initial != start:
                raise BadHdrError(f"table entry {pos} says {start:#x}, its FDE at offset "
                                  f"{offset:#x} {initial:#x}")
            if size > 0:
                looked += 1
                if start <= addr < start + size:
                    return FDERef(start, start + size, "eh_frame", entry)
            pos -= 1
        return None

    def uncovered(self, pcs: Iterable[int]) -> Iterator[int]:
        """The PCs of ``pcs`` that no FDE covers (``has_fde`` false), in order.

        For the question a module with both SFrame and CFI is asked (does
        every SFrame function have CFI?) over all its functions: through the
        header's table, a PC at which a sized FDE starts is covered at the
        cost of a set lookup (a twin's every function), and only the others
        are looked up."""
        starts = self._sized_starts()
        for pc in pcs:
            if (starts is None or pc - self.bias not in starts) and not self.has_fde(pc):
                yield pc

    def _distrust(self, exc: BadHdrError) -> None:
        """A check of the header's table failed on first use: the full read from now on."""
        self.hdr_problem = str(exc)
        self._hdr = None

    def _sized_starts(self) -> frozenset[int] | None:
        """The header table's starts whose FDE has a size (file addresses),
        read once; None off the header's path (or when an entry's start is
        not its FDE's: the full read from then on, as ``_find`` does)."""
        self._open()
        hdr = self._hdr
        if self._index is not None or hdr is None:
            return None
        if hdr.sized is None:
            sized = set()
            try:
                spans = hdr.spans.many(hdr.offsets)
                for start, offset, span in zip(hdr.starts, hdr.offsets, spans, strict=True):
                    initial, size = span if span is not None else self._span(hdr, offset)
                    if initial != start:
                        raise BadHdrError(f"table entry for {start:#x}: its FDE at offset "
                                          f"{offset:#x} says {initial:#x}")
                    if size > 0:
                        sized.add(start)
            except BadHdrError as exc:
                self._distrust(exc)
                return None
            except foreign_errors() as exc:
                raise FormatError(f"{self.name}: .eh_frame: {exc}") from None
            hdr.sized = frozenset(sized)
        return hdr.sized

    def has_fde(self, pc: int) -> bool:
        """Does an ``.eh_frame`` or ``.debug_frame`` FDE cover ``pc``? (Asked of
        every function of a module with both SFrame and CFI: through the
        header's table only the FDEs' ranges are read.)"""
        return self._find(pc, entry=False) is not None

    def fde_rows(self, pc: int) -> list[Row]:
        """Every row of the FDE covering ``pc`` (empty when none does)."""
        ref = self._find(pc)
        if ref is None:
            return []
        key = (ref.source, ref.entry.offset)
        rows = self._rows.get(key)
        if rows is None:
            rows = self._decode(ref)
            self._rows[key] = rows
            if len(self._rows) > ROW_CACHE_SIZE:
                self._rows.popitem(last=False)
        else:
            self._rows.move_to_end(key)
        return rows

    def row_at(self, pc: int) -> Row | None:
        """The row for ``pc``, or None where no FDE (or no row of it) covers it.

        :raises FormatError: the covering FDE's instructions are malformed.
        """
        rows = self.fde_rows(pc)
        if not rows:
            return None
        pos = bisect.bisect_right([row.start for row in rows], pc) - 1
        if pos >= 0 and rows[pos].start <= pc < rows[pos].end:
            return rows[pos]
        return None

    def _cie(self, ref: FDERef) -> CIEInfo:
        cie = ref.entry.cie
        key = (ref.source, cie.offset)
        info = self._cies.get(key)
        if info is None:
            arch = self.arch
            code = cie.header["code_alignment_factor"]
            data = cie.header["data_alignment_factor"]
            augmentation = cie.header.get("augmentation") or b""
            info = CIEInfo(code, data, cie.header["return_address_register"],
                           tuple(decode_instructions(cie.instructions, code, data, arch)),
                           signal=b"S" in augmentation)
            self._cies[key] = info
        return info

    def fde_rows_of(self, ref: FDERef) -> list[Row]:
        """The rows of the FDE ``ref`` (from ``iter_fdes``), decoded each time.

        :raises FormatError: its instructions are malformed.
        """
        return self._decode(ref)

    def _decode(self, ref: FDERef) -> list[Row]:
        where = f"{self.name}: .{ref.source} FDE at offset {ref.entry.offset:#x}"
        try:
            cie = self._cie(ref)
            ops = decode_instructions(ref.entry.instructions, cie.code_alignment,
                                      cie.data_alignment, self.arch)
            return execute(cie, ops, ref.start, ref.end, self.arch, bias=self.bias,
                           source=ref.source)
        except FormatError as exc:
            raise FormatError(f"{where}: {exc}") from None
        except foreign_errors() as exc:
            raise FormatError(f"{where}: {exc}") from None
