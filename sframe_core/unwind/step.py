"""The unwind step: one frame's registers and a row give the caller's registers.

``step`` is a pure function of its inputs (registers, rows, memory), so the
GDB and LLDB adapters and the core-file walker share it unchanged; it holds
every rule of the ABIs and every sanity check. When a row does not explain
the stack, it stops and says why: a wrong frame is worse than a short
backtrace.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import NamedTuple, Protocol

from ..base.abi import Arch
from ..base.rows import Row, Rule, RuleKind
from .addresses import AddressMap, return_address_problem

__all__ = [
    "Memory", "RowSource", "Frame", "StopReason", "Stop", "Step", "step", "step_with_row",
    "caller_registers", "stop_without_row", "walk", "Caller", "NORMAL_ENDS", "OUTERMOST_ENDS",
    "DEFAULT_PAC_MASK", "MAX_FRAMES", "strip_pac",
]

# Linux user space on aarch64 uses 48-bit virtual addresses (the default
# VA_BITS); everything above bit 47 of a signed return address is PAC
# signature or tag. GDB reads the real mask from the pauth_cmask register.
DEFAULT_PAC_MASK = 0xFFFF_0000_0000_0000
# Deeper than any real stack a user wants printed; bounds a corrupt walk.
MAX_FRAMES = 200_000

_WORD = {False: struct.Struct("<Q"), True: struct.Struct(">Q")}


class Memory(Protocol):
    """Reads target memory; returns None where it cannot (unmapped, not in the core)."""

    def read(self, address: int, size: int) -> bytes | None: ...


class RowSource(Protocol):
    """Gives the row that applies at a PC (a module table, or one section)."""

    def row_at(self, pc: int) -> Row | None: ...


_NO_REGS: Mapping[int, int] = MappingProxyType({})


class Frame(NamedTuple):
    """A frame's known registers, by DWARF number; a missing one is unknown.

    ``pc`` is the frame's PC (for callers, the return address). ``interrupted``
    marks the innermost frame and frames a signal interrupted: their PC is
    the next instruction to run, not a return address, so rows are looked up
    at ``pc`` itself; for other frames at ``pc - 1``, because a call to a
    noreturn function can be the last instruction of its function.
    (A NamedTuple: one is made per frame, on the hot path of every backtrace.)
    """

    pc: int
    regs: Mapping[int, int] = _NO_REGS
    interrupted: bool = False
    cfa: int | None = None  # known once the frame has been stepped from
    row: Row | None = None  # the row this frame was unwound with

    @property
    def lookup_pc(self) -> int:
        return self.pc if self.interrupted else self.pc - 1


class StopReason(enum.Enum):
    NO_INFO = "no unwind information covers this PC"
    OUTERMOST = "outermost frame (return address undefined)"
    RA_ZERO = "outermost frame (return address is 0)"
    UNKNOWN_RULE = "the unwind rules here cannot be expressed"
    REGISTER_UNKNOWN = "a register the rules need is unknown"
    MEMORY = "memory unreadable"
    CFA_NOT_UP = "the CFA did not move up the stack"
    MISALIGNED = "misaligned CFA"
    LOOP = "the stack loops back on itself"
    BAD_RA = "implausible return address"
    DEPTH = "too many frames"
    ERROR = "the unwind information is corrupt"


# The stack really ends here (nothing is wrong with it).
OUTERMOST_ENDS = frozenset((StopReason.OUTERMOST, StopReason.RA_ZERO))
# The normal ends of a walk: the outermost frame, or a PC no unwind
# information covers (a debugger's own unwinders may know more); every other
# reason says the stack or its unwind information looks corrupt.
NORMAL_ENDS = OUTERMOST_ENDS | {StopReason.NO_INFO}


class Stop(NamedTuple):
    reason: StopReason
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value


# ``caller_registers``' answer when there is a caller: (CFA, the caller's PC,
# the caller's registers). A plain tuple, told from a Stop with isinstance: a
# NamedTuple would cost a Python-level call per frame of every backtrace.
Caller = tuple[int, int, dict[int, int]]


class Step(NamedTuple):
    caller: Frame
    cfa: int
    row: Row


def strip_pac(value: int, mask: int = DEFAULT_PAC_MASK) -> int:
    """Remove a pointer-authentication signature from a user-space address."""
    return value & ~mask


class _Unreadable(Exception):
    def __init__(self, address: int) -> None:
        self.address = address


def _load(memory: Memory, address: int, big_endian: bool) -> int:
    """The word at ``address``; raises _Unreadable (the step turns it into a Stop)."""
    data = memory.read(address, 8)
    if data is None or len(data) != 8:
        raise _Unreadable(address)
    return int(_WORD[big_endian].unpack(data)[0])


class _Unknown(Exception):
    def __init__(self, regno: int) -> None:
        self.regno = regno


def _apply(rule: Rule, regno: int, cfa: int, regs: Mapping[int, int], memory: Memory,
           big: bool) -> int | None:
    """The caller's value of ``regno``; None where the rule leaves it unknown."""
    kind = rule.kind
    if kind is RuleKind.SAME_VALUE:
        return regs.get(regno)
    if kind is RuleKind.UNDEFINED:
        return None
    if kind is RuleKind.AT_CFA or kind is RuleKind.CFA_PLUS:
        address = (cfa + rule.offset) & 0xFFFF_FFFF_FFFF_FFFF
    else:
        assert rule.reg is not None
        base = regs.get(rule.reg)
        if base is None:
            raise _Unknown(rule.reg)
        address = (base + rule.offset) & 0xFFFF_FFFF_FFFF_FFFF
    if kind is RuleKind.CFA_PLUS or kind is RuleKind.IN_REG:
        return address
    return _load(memory, address, big)


def _saved(rule: Rule, regno: int, cfa: int, regs: Mapping[int, int], memory: Memory,
           big: bool) -> int | None:
    """A saved register's value in the caller, None where it cannot be had.

    Only the CFA and the RA are essential to a step: a register whose slot
    cannot be read (an epilogue that already popped the FP a rule still
    reads through) or whose base register is unknown is unknown in the
    caller, and the walk goes on.
    """
    try:
        return _apply(rule, regno, cfa, regs, memory, big)
    except (_Unreadable, _Unknown):
        return None


def step(frame: Frame, rows: RowSource, memory: Memory, arch: Arch, *,
         pac_mask: int = DEFAULT_PAC_MASK) -> Step | Stop:
    """Compute the caller of ``frame``, or say why there is none."""
    try:
        row = rows.row_at(frame.lookup_pc)
    except Exception as exc:
        from ..base.errors import SFrameError
        if isinstance(exc, SFrameError):
            return Stop(StopReason.ERROR, str(exc))
        raise
    if row is None:
        return stop_without_row(frame.pc, frame.regs, arch)
    return step_with_row(frame, row, memory, arch, pac_mask=pac_mask)


def stop_without_row(pc: int, regs: Mapping[int, int], arch: Arch) -> Stop:
    """Why the walk ends at a frame no row covers.

    On amd64 and aarch64 a frame pointer of 0 is how glibc and libgcc
    recognise ``_start``, which clears rbp/x29 and has no unwind information
    of its own: the outermost frame (``Arch.fp_zero_outermost``). Anything
    else is a frame nothing describes.
    """
    if arch.fp_zero_outermost and regs.get(arch.fp) == 0:
        return Stop(StopReason.OUTERMOST, f"no unwind information at pc {pc:#x} and "
                    "the frame pointer is 0, as at _start")
    return Stop(StopReason.NO_INFO, f"pc {pc:#x}")


def step_with_row(frame: Frame, row: Row, memory: Memory, arch: Arch, *,
                  pac_mask: int = DEFAULT_PAC_MASK) -> Step | Stop:
    """``step`` once the row is known (adapters that found it themselves)."""
    result = caller_registers(row, frame.pc, frame.regs, frame.interrupted, memory, arch,
                              pac_mask)
    if isinstance(result, Stop):
        return result
    cfa, ra, caller_regs = result
    return Step(Frame(ra, caller_regs, row.signal), cfa, row)


_MASK = 0xFFFF_FFFF_FFFF_FFFF
_AT_CFA = RuleKind.AT_CFA
_SAME = RuleKind.SAME_VALUE
_UNDEF = RuleKind.UNDEFINED


def caller_registers(row: Row, pc: int, regs: Mapping[int, int], interrupted: bool,
                     memory: Memory, arch: Arch, pac_mask: int = DEFAULT_PAC_MASK,
                     ) -> Caller | Stop:
    """The step as bare values: (CFA, caller's PC, caller's registers), or a Stop.

    ``step_with_row`` wraps it in records; the GDB adapter calls it directly,
    once per frame of every backtrace, so the usual case (CFA from a register,
    RA and FP at the CFA or unchanged) is written out inline.
    """
    ra_rule = row.ra
    if row.outermost or ra_rule.kind is _UNDEF:
        return Stop(StopReason.OUTERMOST)
    cfa_rule = row.cfa
    if cfa_rule is None:
        return Stop(StopReason.UNKNOWN_RULE, f"pc {pc:#x} ({row.source})")
    big = arch.big_endian
    try:
        base = regs.get(cfa_rule.reg)
        if base is None:
            raise _Unknown(cfa_rule.reg)
        cfa = (base + cfa_rule.offset) & _MASK
        if cfa_rule.deref:
            cfa = _load(memory, cfa, big)
        sp = regs.get(arch.sp)
        if sp is not None and (cfa < sp or (cfa == sp and not interrupted)):
            return Stop(StopReason.CFA_NOT_UP, f"CFA {cfa:#x} is not above SP {sp:#x}")
        if cfa & 7:
            return Stop(StopReason.MISALIGNED, f"CFA {cfa:#x}")
        ra_reg = arch.ra_reg
        if ra_rule.kind is _AT_CFA:
            ra = _load(memory, (cfa + ra_rule.offset) & _MASK, big)
        else:
            column = ra_reg if ra_reg is not None else arch.ra
            if ra_rule.kind is _SAME and (ra_reg is None or not interrupted
                                          or ra_reg not in regs):
                # The RA still in its register is only meaningful where that
                # register is the live one: the innermost or an interrupted frame.
                return Stop(StopReason.REGISTER_UNKNOWN,
                            f"return address in {arch.reg_name(column)} at pc {pc:#x}")
            applied = _apply(ra_rule, column, cfa, regs, memory, big)
            if applied is None:
                return Stop(StopReason.OUTERMOST)
            ra = applied
        caller_regs: dict[int, int] = {}
        for regno, rule in row.regs:
            # The callee-saved rules (saved.py): unchanged, or in a slot at
            # the CFA, inline; anything else through _saved.
            kind = rule.kind
            if kind is _SAME:
                value = regs.get(regno)
            elif kind is _AT_CFA:
                data = memory.read((cfa + rule.offset) & _MASK, 8)
                value = _WORD[big].unpack(data)[0] if data is not None and len(data) == 8 \
                    else None
            else:
                value = _saved(rule, regno, cfa, regs, memory, big)
            if value is not None:
                caller_regs[regno] = value
        fp_rule = row.fp
        fp_reg = arch.fp
        if fp_rule.kind is _SAME:
            fp = regs.get(fp_reg)
        else:
            try:
                fp = (_load(memory, (cfa + fp_rule.offset) & _MASK, big) if fp_rule.kind is _AT_CFA
                      else _apply(fp_rule, fp_reg, cfa, regs, memory, big))
            except (_Unreadable, _Unknown):
                fp = None  # unknown in the caller; the walk goes on (see _saved)
    except _Unreadable as exc:
        return Stop(StopReason.MEMORY, f"at {exc.address:#x}")
    except _Unknown as exc:
        return Stop(StopReason.REGISTER_UNKNOWN, f"{arch.reg_name(exc.regno)} at pc {pc:#x}")
    if fp is not None:
        caller_regs[fp_reg] = fp
    if ra_reg is not None:
        caller_regs[ra_reg] = ra
    if row.ra_signed:
        ra &= ~pac_mask
    if ra == 0:
        return Stop(StopReason.RA_ZERO)
    caller_regs[arch.sp] = (cfa + arch.sp_val_offset) & _MASK
    return cfa, ra, caller_regs


def walk(frame: Frame, rows: RowSource, memory: Memory, arch: Arch, *,
         max_frames: int = MAX_FRAMES, pac_mask: int = DEFAULT_PAC_MASK,
         addresses: AddressMap | None = None) -> Iterator[Frame | Stop]:
    """Yield ``frame`` and each caller in turn, then the Stop that ended the walk.

    Each yielded frame carries the CFA and row it was stepped with (None for
    the last). A (pc, CFA) pair seen twice means the walk loops. With
    ``addresses``, a return address that cannot be one (``addresses.py``)
    ends the walk before it becomes a frame.
    """
    seen: set[tuple[int, int]] = set()
    current = frame
    for _ in range(max_frames):
        result = step(current, rows, memory, arch, pac_mask=pac_mask)
        if isinstance(result, Stop):
            yield current
            yield result
            return
        key = (current.pc, result.cfa)
        if key in seen:
            yield current
            yield Stop(StopReason.LOOP, f"pc {current.pc:#x}, CFA {result.cfa:#x} seen before")
            return
        seen.add(key)
        caller = result.caller
        problem = None if addresses is None or caller.interrupted else return_address_problem(
            caller.pc, arch, addresses)
        yield Frame(current.pc, current.regs, current.interrupted, result.cfa, result.row)
        if problem is not None:
            yield Stop(StopReason.BAD_RA, problem)
            return
        current = caller
    yield current
    yield Stop(StopReason.DEPTH, f"{max_frames} frames")
