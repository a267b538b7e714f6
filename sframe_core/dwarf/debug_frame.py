"""DWARF CFI (a ``.debug_frame`` section) that says exactly what SFrame rows say.

Debuggers and tools that never learnt SFrame (LLDB's own unwinder, gdb
without the plugin, elfutils, perf) all read ``.debug_frame``. Each SFrame
function becomes one FDE (a PC-mask FDE: one FDE per repetition block), whose
rows are the SFrame rows, and nothing more:

- The CFA rule, the RA and FP rules, the RA-signing state (aarch64
  ``DW_CFA_AARCH64_negate_ra_state``) and the signal-frame flag come from the
  row; rules for other registers only from ``Row.regs``.
- Never a wrong value: DWARF consumers take a callee-saved register that no
  rule names as "same value as in the callee". SFrame does not say where
  rbx or r12-r15 were saved, so the CIE marks every callee-saved register
  ``DW_CFA_undefined`` (a caller frame shows it as unavailable) unless a row
  carries a rule for it.
- The outermost frame (an FRE without data words) is ``DW_CFA_undefined`` of
  the RA column; its CFA is left as it was, as consumers stop there.

Encoding follows what GCC and gas write, so that every consumer's
well-trodden paths are used: CIE version 1, code alignment 1, data alignment
-8; a ``z`` augmentation with empty data only where ``S`` (signal frame) or
``B`` (aarch64 B key, as GCC and LLVM mark it) is needed. Forms without a
factored encoding (offsets that are not multiples of 8, dereferenced CFAs,
registers plus offsets) become DWARF expressions. The round trip through
``sframe_core.dwarf.cfi`` gives back the SFrame rows at every PC
(``tests/test_dwarf.py``).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ..base.abi import AARCH64_BE, AARCH64_LE, AMD64, S390X, Arch
from ..base.errors import FormatError
from ..base.rows import SAME, UNDEFINED, CFARule, Row, Rule, RuleKind
from ..format.records import FDE
from ..format.section import SFrameSection

__all__ = ["CALLEE_SAVED", "MAX_BLOCKS", "debug_frame", "encode_rows", "Function",
           "functions", "entry_function", "encode_functions", "Encoded", "encoded", "assemble", "eh_frame"]

# Registers the psABI makes callee-saved (DWARF numbers), besides the FP and
# RA columns that every row gives a rule for.
CALLEE_SAVED: dict[int, tuple[int, ...]] = {
    AMD64.abi_id: (3, 12, 13, 14, 15),  # rbx, r12-r15
    # x19-x28; d8-d15 are the low halves of v8-v15 (DWARF 64 + n).
    AARCH64_LE.abi_id: tuple(range(19, 29)) + tuple(range(72, 80)),
    AARCH64_BE.abi_id: tuple(range(19, 29)) + tuple(range(72, 80)),
    # r6-r10, r12, r13 (r11 is the FP) and f8-f15 (DWARF 24-31).
    S390X.abi_id: (6, 7, 8, 9, 10, 12, 13) + tuple(range(24, 32)),
}

# A PC-mask FDE becomes one DWARF FDE per repetition block; a corrupt size
# or repetition size must not turn into millions of FDEs.
MAX_BLOCKS = 1 << 16

_DATA_ALIGN = -8
_CODE_ALIGN = 1

# DW_CFA_* opcodes.
_ADVANCE_LOC, _OFFSET, _RESTORE = 0x40, 0x80, 0xC0
_NOP, _ADVANCE_LOC1, _ADVANCE_LOC2, _ADVANCE_LOC4 = 0x00, 0x02, 0x03, 0x04
_OFFSET_EXTENDED, _RESTORE_EXTENDED, _UNDEFINED, _SAME_VALUE, _REGISTER = 0x05, 0x06, 0x07, 0x08, 0x09
_DEF_CFA, _DEF_CFA_REGISTER, _DEF_CFA_OFFSET, _DEF_CFA_EXPRESSION = 0x0C, 0x0D, 0x0E, 0x0F
_EXPRESSION, _OFFSET_EXTENDED_SF, _DEF_CFA_SF, _DEF_CFA_OFFSET_SF = 0x10, 0x11, 0x12, 0x13
_VAL_EXPRESSION = 0x16
_AARCH64_NEGATE_RA_STATE = 0x2D
# DW_OP_* opcodes.
_OP_DEREF, _OP_CONSTS, _OP_PLUS, _OP_BREG0, _OP_BREGX = 0x06, 0x11, 0x22, 0x70, 0x92


def _uleb(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"negative ULEB128 {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _breg(reg: int, offset: int) -> bytes:
    if reg < 32:
        return bytes([_OP_BREG0 + reg]) + _sleb(offset)
    return bytes([_OP_BREGX]) + _uleb(reg) + _sleb(offset)


def _block(expr: bytes) -> bytes:
    return _uleb(len(expr)) + expr


def _cfa_plus(offset: int) -> bytes:
    """An expression for CFA + offset (DWARF pushes the CFA before a register's expression)."""
    return bytes([_OP_CONSTS]) + _sleb(offset) + bytes([_OP_PLUS])


def _rule_ops(reg: int, rule: Rule) -> bytes:
    """The instruction that gives ``reg`` the rule ``rule``."""
    kind, offset = rule.kind, rule.offset
    if kind is RuleKind.SAME_VALUE:
        return bytes([_SAME_VALUE]) + _uleb(reg)
    if kind is RuleKind.UNDEFINED:
        return bytes([_UNDEFINED]) + _uleb(reg)
    if kind is RuleKind.CFA_PLUS:
        # Not DW_CFA_val_offset: LLDB (to 23 at least) skips that opcode
        # without its operands, reading them as instructions; s390x's
        # caller SP (CFA - 160) was lost that way and its walk stopped early.
        return bytes([_VAL_EXPRESSION]) + _uleb(reg) + _block(_cfa_plus(offset))
    if kind is RuleKind.AT_CFA:
        if offset % _DATA_ALIGN == 0:
            factored = offset // _DATA_ALIGN
            if factored >= 0:
                if reg < 64:
                    return bytes([_OFFSET | reg]) + _uleb(factored)
                return bytes([_OFFSET_EXTENDED]) + _uleb(reg) + _uleb(factored)
            return bytes([_OFFSET_EXTENDED_SF]) + _uleb(reg) + _sleb(factored)
        return bytes([_EXPRESSION]) + _uleb(reg) + _block(_cfa_plus(offset))
    assert rule.reg is not None
    if kind is RuleKind.IN_REG:
        if offset == 0:
            return bytes([_REGISTER]) + _uleb(reg) + _uleb(rule.reg)
        return bytes([_VAL_EXPRESSION]) + _uleb(reg) + _block(_breg(rule.reg, offset))
    assert kind is RuleKind.AT_REG
    return bytes([_EXPRESSION]) + _uleb(reg) + _block(_breg(rule.reg, offset))


def _cfa_ops(new: CFARule, old: CFARule | None) -> bytes:
    if new.deref:
        return bytes([_DEF_CFA_EXPRESSION]) + _block(_breg(new.reg, new.offset) + bytes([_OP_DEREF]))
    if old is not None and not old.deref:
        if old.reg == new.reg and new.offset >= 0:
            return bytes([_DEF_CFA_OFFSET]) + _uleb(new.offset)
        if old.offset == new.offset:
            return bytes([_DEF_CFA_REGISTER]) + _uleb(new.reg)
    if new.offset >= 0:
        return bytes([_DEF_CFA]) + _uleb(new.reg) + _uleb(new.offset)
    if new.offset % _DATA_ALIGN == 0:
        return bytes([_DEF_CFA_SF]) + _uleb(new.reg) + _sleb(new.offset // _DATA_ALIGN)
    return bytes([_DEF_CFA_EXPRESSION]) + _block(_breg(new.reg, new.offset))


def _advance(delta: int, big_endian: bool) -> bytes:
    endian = ">" if big_endian else "<"
    if delta < 0x40:
        return bytes([_ADVANCE_LOC | delta])
    if delta < 0x100:
        return bytes([_ADVANCE_LOC1, delta])
    if delta < 0x10000:
        return bytes([_ADVANCE_LOC2]) + struct.pack(endian + "H", delta)
    return bytes([_ADVANCE_LOC4]) + struct.pack(endian + "I", delta)


class _CIE(NamedTuple):
    """What an FDE's program starts from: the CIE's initial rules."""

    cfa: CFARule
    rules: dict[int, Rule]


def _initial(arch: Arch) -> _CIE:
    # The caller's SP is the CFA plus the ABI's offset (s390x keeps a
    # 160-byte register save area); said explicitly where it is not 0, as
    # consumers assume SP = CFA.
    rules = {reg: UNDEFINED for reg in CALLEE_SAVED[arch.abi_id]}
    if arch.sp_val_offset:
        rules[arch.sp] = Rule(RuleKind.CFA_PLUS, arch.sp_val_offset)
    return _CIE(CFARule(arch.sp, -arch.sp_val_offset), rules)


def _cie_program(arch: Arch) -> bytes:
    cie = _initial(arch)
    out = bytearray(_cfa_ops(cie.cfa, None))
    for reg, rule in sorted(cie.rules.items()):
        out += _rule_ops(reg, rule)
    return bytes(out)


def _wanted(row: Row, arch: Arch, cie: _CIE) -> tuple[CFARule | None, dict[int, Rule]]:
    rules = dict(cie.rules)
    for reg, rule in row.regs:
        rules[reg] = rule
    outermost = row.outermost or row.ra.kind is RuleKind.UNDEFINED
    rules[arch.ra] = UNDEFINED if outermost else row.ra
    rules[arch.fp] = row.fp
    return (None if outermost else row.cfa), rules


def encode_rows(rows: Iterable[Row], arch: Arch, start: int) -> bytes:
    """The instructions of one FDE starting at ``start`` whose rows are ``rows``.

    ``rows`` are sorted and contiguous from ``start``; each FDE starts from
    the CIE's state, so FDEs stand alone.

    :raises FormatError: a row this encoding cannot say (a CFA rule missing
        outside the outermost frame, a signed RA off aarch64).
    """
    cie = _initial(arch)
    cfa: CFARule | None = cie.cfa
    current: dict[int, Rule | None] = dict(cie.rules)
    current[arch.ra] = current[arch.fp] = None  # always said in the first row
    signed = False
    pac = arch.abi_id in (AARCH64_LE.abi_id, AARCH64_BE.abi_id)
    loc = start
    out = bytearray()
    for row in rows:
        if row.start < loc:
            raise FormatError(f"rows out of order at {row.start:#x}")
        if row.start > loc:
            out += _advance(row.start - loc, arch.big_endian)
            loc = row.start
        new_cfa, rules = _wanted(row, arch, cie)
        if new_cfa is None and rules[arch.ra] is not UNDEFINED:
            raise FormatError(f"row at {row.start:#x} has no CFA rule")
        if new_cfa is not None and new_cfa != cfa:
            out += _cfa_ops(new_cfa, cfa)
            cfa = new_cfa
        if rules == current:
            regs: Iterable[int] = ()
        else:
            regs = sorted(set(current) | set(rules))
        for reg in regs:
            rule = rules.get(reg)
            if rule == current.get(reg) and reg in current:
                continue
            if rule is None:
                out += bytes([_RESTORE_EXTENDED]) + _uleb(reg)
                current.pop(reg, None)
                continue
            # Said again, never DW_CFA_restore: LLDB restores a register to the
            # rule of the FDE's first row (its FDE instructions included), not
            # the CIE's, and a same_value there became a wrong value in a caller.
            out += _rule_ops(reg, rule)
            current[reg] = rule
        if row.ra_signed != signed:
            if not pac:
                raise FormatError(f"row at {row.start:#x}: signed RA on {arch.name}")
            out.append(_AARCH64_NEGATE_RA_STATE)
            signed = row.ra_signed
    return bytes(out)


class Function(NamedTuple):
    """One DWARF FDE to write: a function, or one repetition block of one."""

    start: int
    end: int
    rows: list[Row]
    signal: bool
    b_key: bool


def functions(section: SFrameSection,
              rows_for: Callable[[FDE, int], list[Row]] | None = None,
              fdes: range | None = None) -> Iterator[Function]:
    """Every function of ``section`` with its rows, in FDE order.

    ``rows_for(fde, block)`` gives an FDE's rows (default: the SFrame rows;
    callers with more knowledge, such as saved-register rules, pass their own).
    ``fdes``: only the FDEs of these indices (a worker's share of a module).

    :raises FormatError: an FDE or its FREs are corrupt.
    """
    get_rows = rows_for or section.fde_rows
    pac = section.arch.abi_id in (AARCH64_LE.abi_id, AARCH64_BE.abi_id)
    for fde in (section.iter_fdes() if fdes is None else map(section.get_fde, fdes)):
        if fde.size == 0 or fde.num_fres == 0:
            continue
        blocks = 1
        if fde.is_pcmask:
            if fde.rep_size == 0:
                raise FormatError(f"FDE {fde.index}: PC-mask FDE with repetition size 0", fde.offset)
            blocks = -(-fde.size // fde.rep_size)
            if blocks > MAX_BLOCKS:
                raise FormatError(f"FDE {fde.index}: PC-mask FDE with {blocks} repetition blocks "
                                  f"(more than {MAX_BLOCKS})", fde.offset)
        # A PC-mask FDE ends where the next FDE starts: ld 2.40 (Debian 12) sizes
        # .plt.sec's past the section's end, over the first functions of
        # .text, and a consumer given both FDEs for those PCs (LLDB) took
        # the stubs' rules there.
        limit = _pcmask_end(section, fde) if fde.is_pcmask else fde.end
        for block in range(blocks):
            rows = [row if row.end <= limit else row._replace(end=limit)
                    for row in get_rows(fde, block) if row.start < limit]
            if rows:
                yield Function(rows[0].start, rows[-1].end, rows, any(r.signal for r in rows),
                               pac and fde.pauth_key == 1)


def _pcmask_end(section: SFrameSection, fde: FDE) -> int:
    """Where the PC-mask FDE ``fde`` ends: its end, or the start of the FDE
    after it (in the table's order) if that starts within it."""
    if fde.index + 1 >= section.num_fdes:
        return fde.end
    following = section.get_fde(fde.index + 1).start
    return following if fde.start < following < fde.end else fde.end


def entry_function(start: int, end: int) -> Function:
    """An FDE for an executable's entry function (``_start``) that SFrame does not cover.

    Nothing calls ``_start``: its RA is undefined, which is what libc's own
    CFI for it says and how DWARF consumers know to stop there rather than
    unwind into whatever the stack holds. ``start``/``end`` come from
    ``Module.entry_function`` (``e_entry`` up to the next FDE, 64 bytes at most).
    """
    row = Row(start, end, start, None, UNDEFINED, SAME, outermost=True)
    return Function(start, end, [row], False, False)


def debug_frame(section: SFrameSection,
                rows_for: Callable[[FDE, int], list[Row]] | None = None, *,
                extra: Iterable[Function] = ()) -> bytes:
    """The ``.debug_frame`` contents for every function of ``section``.

    Addresses are those ``section`` was opened at: open it at its file
    address (``ElfSFrame.open()``) for a symbol file. ``extra`` adds FDEs
    for code SFrame does not describe (``entry_function``).

    :raises FormatError: the section is corrupt (nothing is returned then).
    """
    return encode_functions(itertools.chain(functions(section, rows_for), extra), section.arch)


def encode_functions(funcs: Iterable[Function], arch: Arch, *, offset: int = 0) -> bytes:
    """A ``.debug_frame`` section holding one FDE per function, CIEs as needed.

    ``offset``: where these bytes will start in the section (after a
    compiler's own entries), as CIE pointers are section offsets.
    """
    return assemble(encoded(funcs, arch), arch, offset=offset)


class Encoded(NamedTuple):
    """One function's FDE but for its CIE pointer: what ``assemble`` lays out.

    Small and position-free, so that worker processes can make these for
    parts of a module and the parent put them in order (``symfile``)."""

    start: int
    end: int
    signal: bool
    b_key: bool
    program: bytes


def encoded(funcs: Iterable[Function], arch: Arch) -> Iterator[Encoded]:
    """Each function's FDE program (``encode_rows``), in order."""
    # Functions repeat a few row shapes (leaf, push-rbp prologue, ...): their
    # programs are encoded once.
    programs: dict[tuple[object, ...], bytes] = {}
    for func in funcs:
        if not 0 <= func.start < func.end <= 1 << 64:
            raise FormatError(f"function at {func.start:#x}-{func.end:#x} is outside the "
                              "64-bit address space")
        shape = tuple((r.start - func.start, r.cfa, r.ra, r.fp, r.regs, r.ra_signed, r.outermost)
                      for r in func.rows)
        program = programs.get(shape)
        if program is None:
            program = encode_rows(func.rows, arch, func.start)
            if len(programs) >= 4096:
                programs.clear()
            programs[shape] = program
        yield Encoded(func.start, func.end, func.signal, func.b_key, program)


def assemble(items: Iterable[Encoded], arch: Arch, *, offset: int = 0) -> bytes:
    """The ``.debug_frame`` bytes of ``items`` in order, each CIE written before
    the first FDE that needs it (``offset`` as in ``encode_functions``)."""
    return _layout(items, arch, offset=offset, eh_address=None)


def eh_frame(funcs: Iterable[Function], arch: Arch, address: int = 0) -> bytes:
    """An ``.eh_frame`` section at file address ``address`` holding ``funcs``.

    For LLDB, which unwinds a pc outside every function symbol (an
    expression's return address, the entry point) from ``.eh_frame`` alone,
    never ``.debug_frame``. As gas writes it: CIEs with augmentation ``zR``
    and pc-relative ``sdata4`` addresses (``sdata8`` when one does not fit),
    entries padded to 8 bytes, a zero terminator. Same rows and programs as
    ``.debug_frame`` (``encode_rows``).
    """
    items = list(encoded(funcs, arch))
    return _layout(items, arch, offset=0, eh_address=address) + bytes(4)


_PE_PCREL_SDATA4, _PE_PCREL_SDATA8 = 0x1B, 0x1C  # DW_EH_PE_pcrel | sdata4, sdata8


def _layout(items: Iterable[Encoded], arch: Arch, *, offset: int,
            eh_address: int | None) -> bytes:
    """``.debug_frame`` (``eh_address`` None) or ``.eh_frame`` entries for ``items``.

    The two differ only in their framing: a CIE id of 0xffffffff or 0, an
    FDE's CIE pointer as a section offset or as the distance back to its
    CIE, absolute 8-byte addresses or pc-relative ones (``zR``)."""
    endian = ">" if arch.big_endian else "<"
    u32, u64 = struct.Struct(endian + "I"), struct.Struct(endian + "Q")
    eh = eh_address is not None
    base = eh_address or 0
    encoding = _PE_PCREL_SDATA4
    if eh:
        items = list(items)
        # pc_begin is relative to its own place (at most the section's size
        # past its address); pc_range is a plain sdata4 too.
        reach = 1 << 31
        if any(not -reach < item.start - base < reach - (1 << 24)
               or item.end - item.start >= reach for item in items):
            encoding = _PE_PCREL_SDATA8
    address = struct.Struct(endian + ("i" if encoding == _PE_PCREL_SDATA4 else "q"))
    out = bytearray()
    cies: dict[tuple[bool, bool], int] = {}

    def pad(entry: bytearray) -> bytes:
        # Entries are padded with DW_CFA_nop to the address size, as GCC does.
        while (len(entry) + 4) % 8:
            entry.append(_NOP)
        return u32.pack(len(entry)) + bytes(entry)

    def cie_for(signal: bool, b_key: bool) -> int:
        key = (signal, b_key)
        if key not in cies:
            flags = (b"S" if signal else b"") + (b"B" if b_key else b"")
            if eh:
                augmentation = b"zR" + flags
            else:
                augmentation = b"z" + flags if flags else b""
            body = bytearray(u32.pack(0 if eh else 0xFFFFFFFF))
            body += bytes([1]) + augmentation + b"\0" + _uleb(_CODE_ALIGN) + _sleb(_DATA_ALIGN)
            body.append(arch.ra)
            if eh:
                body += _uleb(1) + bytes([encoding])
            elif augmentation:
                body += _uleb(0)  # no augmentation data
            body += _cie_program(arch)
            cies[key] = offset + len(out)
            out.extend(pad(body))
        return cies[key]

    for item in items:
        cie = cie_for(item.signal, item.b_key)
        here = offset + len(out) + 4  # where this FDE's CIE pointer is
        if eh:
            body = bytearray(u32.pack(here - cie))
            body += address.pack(item.start - (base + here + 4))
            body += address.pack(item.end - item.start) + _uleb(0)
        else:
            body = bytearray(u32.pack(cie) + u64.pack(item.start) + u64.pack(item.end - item.start))
            if item.signal or item.b_key:
                body += _uleb(0)
        body += item.program
        out.extend(pad(body))
    return bytes(out)
