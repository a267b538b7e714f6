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

from .abi import Arch
from .rows import CFARule, Row, Rule, RuleKind

__all__ = [
    "Memory", "RowSource", "Frame", "StopReason", "Stop", "Step", "step", "walk",
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
    DEPTH = "too many frames"
    ERROR = "the unwind information is corrupt"


class Stop(NamedTuple):
    reason: StopReason
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value


class Step(NamedTuple):
    caller: Frame
    cfa: int
    row: Row


def strip_pac(value: int, mask: int = DEFAULT_PAC_MASK) -> int:
    """Remove a pointer-authentication signature from a user-space address."""
    return value & ~mask


def _read_word(memory: Memory, address: int, big_endian: bool) -> int | None:
    if address < 0:
        return None
    data = memory.read(address, 8)
    if data is None or len(data) != 8:
        return None
    return int(_WORD[big_endian].unpack(data)[0])


class _Unreadable(Exception):
    def __init__(self, address: int) -> None:
        self.address = address


class _Unknown(Exception):
    def __init__(self, regno: int) -> None:
        self.regno = regno


def _cfa(rule: CFARule, regs: Mapping[int, int], memory: Memory, big: bool) -> int:
    base = regs.get(rule.reg)
    if base is None:
        raise _Unknown(rule.reg)
    value = (base + rule.offset) & 0xFFFF_FFFF_FFFF_FFFF
    if rule.deref:
        loaded = _read_word(memory, value, big)
        if loaded is None:
            raise _Unreadable(value)
        return loaded
    return value


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
    loaded = _read_word(memory, address, big)
    if loaded is None:
        raise _Unreadable(address)
    return loaded


def step(frame: Frame, rows: RowSource, memory: Memory, arch: Arch, *,
         pac_mask: int = DEFAULT_PAC_MASK) -> Step | Stop:
    """Compute the caller of ``frame``, or say why there is none."""
    try:
        row = rows.row_at(frame.lookup_pc)
    except Exception as exc:  # noqa: BLE001 - a decoder error ends this walk, with its text
        from .errors import SFrameError
        if isinstance(exc, SFrameError):
            return Stop(StopReason.ERROR, str(exc))
        raise
    if row is None:
        if frame.regs.get(arch.fp) == 0:
            # How glibc and libgcc recognise _start, which clears rbp/x29 and
            # has no unwind information of its own.
            return Stop(StopReason.OUTERMOST, f"no unwind information at pc {frame.pc:#x} and "
                        "the frame pointer is 0, as at _start")
        return Stop(StopReason.NO_INFO, f"pc {frame.pc:#x}")
    return step_with_row(frame, row, memory, arch, pac_mask=pac_mask)


def step_with_row(frame: Frame, row: Row, memory: Memory, arch: Arch, *,
                  pac_mask: int = DEFAULT_PAC_MASK) -> Step | Stop:
    """``step`` once the row is known (adapters that found it themselves)."""
    if row.outermost or row.ra.kind is RuleKind.UNDEFINED:
        return Stop(StopReason.OUTERMOST)
    if row.cfa is None:
        return Stop(StopReason.UNKNOWN_RULE, f"pc {frame.pc:#x} ({row.source})")
    regs = frame.regs
    big = arch.big_endian
    try:
        cfa = _cfa(row.cfa, regs, memory, big)
        sp = regs.get(arch.sp)
        if sp is not None:
            if cfa < sp or (cfa == sp and not frame.interrupted):
                return Stop(StopReason.CFA_NOT_UP, f"CFA {cfa:#x} is not above SP {sp:#x}")
        if cfa % 8:
            return Stop(StopReason.MISALIGNED, f"CFA {cfa:#x}")
        ra_reg = arch.ra_reg if arch.ra_reg is not None else arch.ra
        if row.ra.kind is RuleKind.SAME_VALUE and (
                arch.ra_reg is None or not frame.interrupted or ra_reg not in regs):
            # The RA still in its register is only meaningful where that
            # register is the live one: the innermost or an interrupted frame.
            return Stop(StopReason.REGISTER_UNKNOWN,
                        f"return address in {arch.reg_name(ra_reg)} at pc {frame.pc:#x}")
        ra = _apply(row.ra, ra_reg, cfa, regs, memory, big)
        if ra is None:
            return Stop(StopReason.OUTERMOST)
        caller_regs: dict[int, int] = {}
        for regno, rule in row.regs:
            value = _apply(rule, regno, cfa, regs, memory, big)
            if value is not None:
                caller_regs[regno] = value
        fp = _apply(row.fp, arch.fp, cfa, regs, memory, big)
    except _Unreadable as exc:
        return Stop(StopReason.MEMORY, f"at {exc.address:#x}")
    except _Unknown as exc:
        return Stop(StopReason.REGISTER_UNKNOWN, f"{arch.reg_name(exc.regno)} at pc {frame.pc:#x}")
    if fp is not None:
        caller_regs[arch.fp] = fp
    if arch.ra_reg is not None:
        caller_regs[arch.ra_reg] = ra
    if row.ra_signed:
        ra = strip_pac(ra, pac_mask)
    if ra == 0:
        return Stop(StopReason.RA_ZERO)
    caller_regs[arch.sp] = (cfa + arch.sp_val_offset) & 0xFFFF_FFFF_FFFF_FFFF
    caller = Frame(ra, caller_regs, interrupted=row.signal)
    return Step(caller, cfa, row)


def walk(frame: Frame, rows: RowSource, memory: Memory, arch: Arch, *,
         max_frames: int = MAX_FRAMES, pac_mask: int = DEFAULT_PAC_MASK,
         ) -> Iterator[Frame | Stop]:
    """Yield ``frame`` and each caller in turn, then the Stop that ended the walk.

    Each yielded frame carries the CFA and row it was stepped with (None for
    the last). A (pc, CFA) pair seen twice means the walk loops.
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
        yield Frame(current.pc, current.regs, current.interrupted, result.cfa, result.row)
        current = result.caller
    yield current
    yield Stop(StopReason.DEPTH, f"{max_frames} frames")
