"""What one machine instruction does to the frame: the records every ABI's decoder gives.

The saved-register analysis (``saved.py``) runs over these records, never
over raw instructions, so it holds no ISA knowledge. Instructions are decoded
with capstone (its Python binding is pure ctypes with a bundled library, so
it loads in gdb's and lldb's embedded Pythons too) by one module per ABI
(``amd64.py``, ``aarch64.py``, ``s390x.py``; ``decoders.py`` picks one),
which share what is here: the records, the decoder's frame (one detailed
decode per distinct encoding) and the control-flow walk their jump-table
readers use. Anything a decoder does not recognise is described by what
capstone says it writes, and writes the analysis cannot place (memory
through SP with an unknown offset, SP set from something it cannot follow)
are reported as such: the analysis then forgets what they may have
destroyed. An instruction capstone cannot decode ends the analysis of the
function. This module imports none of the decoders.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any, NamedTuple

from ..base.abi import CALLEE_SAVED

__all__ = ["Flow", "Base", "Store", "Load", "SPOp", "UNKNOWN_OP", "Effect", "capstone_available",
           "CALLEE_SAVED", "TABLE_MAX"]


class Flow(enum.Enum):
    FALL = "fall"  # next instruction only
    JUMP = "jump"  # direct jump to ``target``
    COND = "cond"  # ``target`` or the next instruction
    CALL = "call"  # a call that returns to the next instruction
    RETURN = "return"  # leaves the function
    INDIRECT = "indirect"  # jump through a register or memory: a tail call or a table
    STOP = "stop"  # traps (ud2, brk, hlt): no successor


class Base(enum.Enum):
    SP = "sp"
    FP = "fp"
    OTHER = "other"  # a pointer the analysis does not follow
    FRAME = "frame"  # SP or FP with an offset not known statically (an index register)
    ALT = "alt"  # a scratch register the prologue points into the frame (s390x r14)


class Store(NamedTuple):
    """``size`` bytes written at ``base + disp`` (base as it is before the
    instruction); ``reg`` is the tracked register stored whole, if any.
    ``size`` None: an unknown extent from ``disp`` on."""

    base: Base
    disp: int
    size: int | None
    reg: int | None = None


class Load(NamedTuple):
    """Tracked register ``reg`` loaded whole (``size`` bytes) from ``base + disp``."""

    reg: int
    base: Base
    disp: int
    size: int


class SPOp(NamedTuple):
    """New value of SP, FP or ALT: ``from_`` ("sp", "fp", "alt", or "" for unknown) plus ``add``."""

    from_: str
    add: int = 0


UNKNOWN_OP = SPOp("")


class Effect(NamedTuple):
    address: int
    size: int
    flow: Flow
    target: int | None = None
    stores: tuple[Store, ...] = ()
    loads: tuple[Load, ...] = ()
    clobbers: frozenset[int] = frozenset()  # tracked registers written other than by ``loads``
    sp: SPOp | None = None  # None: SP unchanged
    fp: SPOp | None = None  # None: FP unchanged
    text: str = ""
    alt: SPOp | None = None  # None: ALT unchanged (ABIs without one never set it)
    # Untracked registers written that may hold a tracked register's value
    # (s390x f0-f7), and whole-register copies (dst, src) between the two.
    others: frozenset[int] = frozenset()
    moves: tuple[tuple[int, int], ...] = ()




def capstone_available() -> bool:
    try:
        import capstone  # noqa: F401
    except Exception:  # noqa: BLE001 - a missing or broken binding only turns the analysis off
        return False
    return True


# Distinct instruction encodings remembered per decoder (a few hundred bytes
# each); past it the memo starts again.
_MEMO_SIZE = 1 << 16
_WRAP = 1 << 64
# An Effect from its fields in order, without NamedTuple's Python-level __new__.
_new = tuple.__new__


def _bare_target(op_str: str) -> int | None:
    """The address an operand text made of one number prints (``0x401000``,
    ``#0x401000``), as capstone's signed 64-bit value; None for anything else."""
    text = op_str.lstrip("#")
    if not text.startswith("0x") or " " in text:
        return None
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return value - _WRAP if value >= 1 << 63 else value


def _printed(op_str: str, target: int) -> bool:
    """Whether ``target`` (capstone's signed 64-bit value) is the branch target
    printed last in ``op_str`` (``jmp 0x401000``, ``tbz w0, #3, #0x401000``)."""
    text = op_str.rpartition(" ")[2].lstrip("#")
    try:
        value = int(text, 16)
    except ValueError:
        return False
    return -(1 << 63) <= target < 1 << 63 and (value - target) % _WRAP == 0



class _Decoder:
    """Two capstone handles (one with details, for each distinct encoding; one
    without, for every instruction), and register ids -> DWARF numbers."""

    tracked: tuple[int, ...] = ()
    # A direct branch's effect is the same wherever it goes (see _lite_effect).
    shaped_branches = True

    def __init__(self, cs_arch: int, cs_mode: int, names: dict[str, int], consts: Any) -> None:
        import capstone

        self._cs = capstone.Cs(cs_arch, cs_mode)
        self._cs.detail = True
        # Instruction boundaries and text come from a second handle without
        # details (``disasm_lite``: no Python objects per operand); the
        # detailed decode runs once per distinct encoding (see ``_memo``).
        self._lite = capstone.Cs(cs_arch, cs_mode)
        self._c = consts
        self._names = names
        self._ids: dict[int, int | None] = {}
        # Instruction bytes -> the effect they had where first decoded (None:
        # ``_effect`` refused them). Compilers repeat encodings endlessly
        # (push rbx, mov rbp, rsp, ret, the same spills): most instructions of
        # a module are reused from here with their address, text and branch
        # target moved (see ``_lite_effect``), never decoded in detail again.
        self._memo: dict[bytes, Effect | None] = {}
        # (mnemonic, length) -> a direct branch's effect (see ``_lite_effect``).
        self._branches: dict[tuple[str, int], Effect] = {}

    def _num(self, insn: Any, reg: int) -> int | None:
        if reg == 0:
            return None
        try:
            return self._ids[reg]
        except KeyError:
            number = self._ids[reg] = self._names.get(insn.reg_name(reg))
            return number

    def _effect(self, insn: Any) -> Effect | None:
        """What a detailed capstone instruction does (per ISA); None: the
        analysis cannot model it (the function is then unknown)."""
        raise NotImplementedError

    def _lite_effect(self, code: bytes, address: int, addr: int, size: int, mnem: str,
                     op_str: str) -> Effect | None:
        """The effect of the instruction ``disasm_lite`` found at ``addr``
        (``code`` starts at ``address``), from ``_memo`` when its bytes were
        seen before, else read from its text where that settles it
        (``_quick``) or decoded in detail, once, and remembered.

        Exactly what decoding it in detail here gives: an instruction's effect
        depends on its bytes alone except for its address, its text (capstone
        prints PC-relative operands as addresses) and a branch's target, which
        is the address plus a displacement the bytes hold. So a reused effect
        takes this address and this text, and a branch target moved by as much
        as the address, checked against the target printed in this text (a
        form whose target is not address + displacement fails the check and
        is decoded in detail).
        """
        off = addr - address
        key = code[off:off + size]
        memo = self._memo
        try:
            hit = memo[key]
        except KeyError:
            pass
        else:
            if hit is None:
                return None
            target = hit.target
            if target is None or _printed(op_str, target := target + addr - hit.address):
                return _new(Effect, (addr, size, hit[2], target, *hit[4:9], f"{mnem} {op_str}",
                                     *hit[10:]))
        # A direct branch or call (``jne 0x401000``, ``bl #0x401000``: the target
        # is its only operand) does the same as every other of its mnemonic and
        # length but for the target, which its text prints (``shaped_branches``:
        # decoders whose effect of a branch does not depend on where it goes).
        shape = (mnem, size)
        target = _bare_target(op_str) if self.shaped_branches else None
        if target is not None:
            hit = self._branches.get(shape)
            if hit is not None:
                return _new(Effect, (addr, size, hit[2], target, *hit[4:9], f"{mnem} {op_str}",
                                     *hit[10:]))
        eff = self._quick(addr, size, mnem, op_str)
        if eff is None:
            found = None
            for insn in self._cs.disasm(key, addr, 1):
                found = insn
            if found is None or found.size != size:  # pragma: no cover - capstone decodes alike
                found = next(self._cs.disasm(code[off:], addr, 1))
            eff = self._effect(found)
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = eff
        if target is not None and eff is not None and eff.target == target:
            self._branches[shape] = eff
        return eff

    def _quick(self, addr: int, size: int, mnem: str, op_str: str) -> Effect | None:
        """The effect an instruction's text alone proves (per ISA), for one
        that would otherwise be decoded in detail; None: decode it."""
        return None

    def effects(self, code: bytes, address: int) -> Iterator[Effect | None]:
        """Effects of the instructions from ``address`` on; None where decoding fails."""
        raise NotImplementedError

    def lite(self, code: bytes, address: int) -> Iterator[tuple[int, int, str, str]]:
        """(address, size, mnemonic, operands) of the instructions from ``address``
        on, up to the first undecodable one: the boundaries ``effects`` decodes at
        (amd64), without details."""
        return self._lite.disasm_lite(code, address)



# -- shared by the jump-table readers --------------------------------------------

TABLE_MAX = 4096


def _imm(text: str) -> int | None:
    text = text.strip().lstrip("#")
    try:
        return int(text, 0)
    except ValueError:
        return None


def _reaches(effects: list[Effect], sources: list[int], kills: set[int], use: int,
             tables: dict[int, list[int]] | None = None) -> bool:
    """Can control go from after any of ``sources`` (index 0: from the entry
    itself) to ``effects[use]`` without running one of ``kills``? An indirect
    jump on the way counts as reaching it, unless ``tables`` gives its targets
    (indices)."""
    at = {eff.address: k for k, eff in enumerate(effects)}
    lo, hi = effects[0].address, effects[-1].address + effects[-1].size
    todo: list[int] = []
    for k in sources:
        todo.extend([0] if k == 0 else _successors(effects, k, at))
    seen: set[int] = set()
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        if k == use:
            return True
        if effects[k].flow is Flow.INDIRECT:
            targets = (tables or {}).get(k)
            if targets is None or any(lo <= t < hi and t not in at for t in targets):
                return True
            if k not in kills:
                todo.extend(at[t] for t in targets if t in at)
            continue
        if k not in kills:
            todo.extend(_successors(effects, k, at))
    return False


def _successors(effects: list[Effect], k: int, at: dict[int, int]) -> list[int]:
    eff = effects[k]
    out = []
    if eff.flow in (Flow.FALL, Flow.COND, Flow.CALL) and k + 1 < len(effects):
        out.append(k + 1)
    if eff.flow in (Flow.JUMP, Flow.COND) and eff.target in at:
        out.append(at[eff.target])
    return out
