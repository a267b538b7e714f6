"""What one machine instruction does to the frame: SP, FP, callee-saved registers, stack slots.

The saved-register analysis (``saved.py``) runs over these records, never
over raw instructions, so it holds no ISA knowledge. Instructions are decoded
with capstone (its Python binding is pure ctypes with a bundled library, so
it loads in gdb's and lldb's embedded Pythons too). Anything this module
does not recognise is described by what capstone says it writes, and writes
the analysis cannot place (memory through SP with an unknown offset, SP set
from something it cannot follow) are reported as such: the analysis then
forgets what they may have destroyed. An instruction capstone cannot decode
ends the analysis of the function.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..base.abi import Arch

__all__ = ["Flow", "Base", "Store", "Load", "Effect", "decoder_for", "capstone_available",
           "CALLEE_SAVED", "amd64_jump_table", "aarch64_jump_table", "aarch64_jump_tables"]


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


# Callee-saved registers other than the FP, by DWARF number.
CALLEE_SAVED: dict[str, tuple[int, ...]] = {
    "amd64": (3, 12, 13, 14, 15),  # rbx, r12-r15 (rbp is SFrame's FP)
    "aarch64": tuple(range(19, 29)) + tuple(range(72, 80)),  # x19-x28, d8-d15 (v8-v15)
    "s390x": tuple(range(6, 11)) + (12, 13) + tuple(range(24, 32)),  # r6-r13 but r11, f8-f15
}


def capstone_available() -> bool:
    try:
        import capstone  # noqa: F401
    except Exception:  # noqa: BLE001 - a missing or broken binding only turns the analysis off
        return False
    return True


_DECODERS: dict[str, _Decoder | None] = {}
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


def decoder_for(arch: Arch) -> _Decoder | None:
    """A decoder for the ABI, or None (no capstone, or an ABI without one);
    one per ABI, made on first use."""
    if arch.name in _DECODERS:
        return _DECODERS[arch.name]
    decoder: _Decoder | None = None
    if capstone_available():
        if arch.name == "amd64":
            decoder = _AMD64()
        elif arch.name == "aarch64":
            decoder = _AArch64()
        elif arch.name == "s390x":
            from .s390x import S390X  # its own module: s390x has no capstone access data

            decoder = S390X()
    _DECODERS[arch.name] = decoder
    return decoder


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
        seen before, else decoded in detail once and remembered.

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
        found = None
        for insn in self._cs.disasm(key, addr, 1):
            found = insn
        if found is None or found.size != size:  # pragma: no cover - capstone decodes bytes alike
            found = next(self._cs.disasm(code[off:], addr, 1))
        eff = self._effect(found)
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = eff
        if target is not None and eff is not None and eff.target == target:
            self._branches[shape] = eff
        return eff

    def effects(self, code: bytes, address: int) -> Iterator[Effect | None]:
        """Effects of the instructions from ``address`` on; None where decoding fails."""
        raise NotImplementedError


# -- amd64 ---------------------------------------------------------------------

def _amd64_regs() -> dict[str, int]:
    names: dict[str, int] = {}
    for full, num, low in (("rbx", 3, ("ebx", "bx", "bl", "bh")), ("rbp", 6, ("ebp", "bp", "bpl")),
                           ("rsp", 7, ("esp", "sp", "spl"))):
        names[full] = num
        for alias in low:
            names[alias] = num
    for number in range(12, 16):
        for suffix in ("", "d", "w", "b"):
            names[f"r{number}{suffix}"] = number
    return names


_X86_NAMES = _amd64_regs()
_RSP, _RBP = 7, 6
_X86_STOPS = {"ud2", "ud1", "ud0", "hlt", "int3"}
# Stores whose extent the operand size does not give (string stores go
# through rdi, a base the analysis never follows, so they need no entry).
_X86_UNSIZED = ("xsave", "fxsave", "fnsave", "fsave", "fnstenv", "fstenv", "xsaveopt", "xsavec",
                "xsaves", "vscatter", "vpscatter")


class _AMD64(_Decoder):
    tracked = CALLEE_SAVED["amd64"]

    def __init__(self) -> None:
        import capstone
        from capstone import x86_const

        super().__init__(capstone.CS_ARCH_X86, capstone.CS_MODE_64, _X86_NAMES, x86_const)

    def _base(self, insn: Any, mem: Any) -> tuple[Base, int]:
        base = self._num(insn, mem.base)
        if mem.segment != 0:
            return Base.OTHER, 0
        if base in (_RSP, _RBP):
            kind = Base.SP if base == _RSP else Base.FP
            if mem.index != 0:
                return Base.FRAME, 0
            return kind, mem.disp
        if mem.base == 0 and mem.index != 0 and self._num(insn, mem.index) in (_RSP, _RBP):
            return Base.FRAME, 0
        return Base.OTHER, 0

    def effects(self, code: bytes, address: int) -> Iterator[Effect | None]:
        end = address + len(code)
        pos = address
        one = self._lite_effect
        for addr, size, mnem, op_str in self._lite.disasm_lite(code, address):
            pos = addr + size
            yield one(code, address, addr, size, mnem, op_str)
        if pos < end:
            yield None

    def _effect(self, insn: Any) -> Effect:
        c = self._c
        mnem = insn.mnemonic
        addr, size = insn.address, insn.size
        ops = insn.operands
        groups = set(insn.groups)
        _, written = insn.regs_access()
        writes = {n for n in (self._num(insn, r) for r in written) if n is not None}
        for op in ops:
            if op.type == c.X86_OP_REG and op.access & 2:
                n = self._num(insn, op.reg)
                if n is not None:
                    writes.add(n)
        tracked = self.tracked
        # Control flow.
        flow, target = Flow.FALL, None
        if 1 in groups or 2 in groups:  # CS_GRP_JUMP, CS_GRP_CALL
            imm = ops[0].imm if len(ops) == 1 and ops[0].type == c.X86_OP_IMM else None
            if 2 in groups:
                flow, target = Flow.CALL, imm
            elif imm is None:
                flow = Flow.INDIRECT
            elif mnem.startswith("jmp"):
                flow, target = Flow.JUMP, imm
            else:
                flow, target = Flow.COND, imm
        elif 3 in groups or 5 in groups:  # ret, iret
            flow = Flow.RETURN
        elif mnem in _X86_STOPS:
            flow = Flow.STOP
        text = f"{mnem} {insn.op_str}"
        # The stack-pointer idioms, exactly.
        if mnem == "push":
            reg = self._num(insn, ops[0].reg) if ops[0].type == c.X86_OP_REG else None
            full = ops[0].size == 8
            stores = (Store(Base.SP, -8, 8, reg if full and reg in tracked else None),)
            # push of a memory operand reads through its base: not a write.
            return Effect(addr, size, flow, target, stores, (), frozenset(), SPOp("sp", -8),
                          None, text)
        if mnem == "pop":
            if ops[0].type != c.X86_OP_REG:
                return self._generic(insn, c, flow, target, writes, text)
            reg = self._num(insn, ops[0].reg)
            loads = (Load(reg, Base.SP, 0, 8),) if reg in tracked and ops[0].size == 8 else ()
            clobbers = frozenset(writes & set(tracked)) - {ld.reg for ld in loads}
            fp = UNKNOWN_OP if reg == _RBP else None
            return Effect(addr, size, flow, target, (), loads, clobbers, SPOp("sp", 8), fp, text)
        if flow is Flow.CALL:
            # The return address goes to SP - 8; the callee pops it and keeps
            # the callee-saved registers (SysV ABI), so only SP - 8 changes.
            return Effect(addr, size, flow, target, (Store(Base.SP, -8, 8),), (), frozenset(),
                          None, None, text)
        if flow is Flow.RETURN or flow is Flow.INDIRECT or flow is Flow.JUMP or flow is Flow.COND:
            return Effect(addr, size, flow, target, (), (), frozenset(), None, None, text)
        if mnem == "leave":
            return Effect(addr, size, flow, target, (), (), frozenset(), SPOp("fp", 8), UNKNOWN_OP,
                          text)
        return self._generic(insn, c, flow, target, writes, text)

    def _generic(self, insn: Any, c: Any, flow: Flow, target: int | None, writes: set[int],
                 text: str) -> Effect:
        mnem = insn.mnemonic
        ops = insn.operands
        tracked = self.tracked
        stores: list[Store] = []
        loads: list[Load] = []
        mems = [op for op in ops if op.type == c.X86_OP_MEM]
        is_mov = mnem in ("mov", "movq") and len(ops) == 2
        for op in mems:
            base, disp = self._base(insn, op.mem)
            if mnem == "lea" or mnem.startswith(("nop", "prefetch")):
                continue
            written = op.access & 2 or op.access == 0
            if written and base is not Base.OTHER:
                unsized = mnem.startswith(_X86_UNSIZED) or op.size not in (1, 2, 4, 8, 16, 32, 64)
                reg = None
                if is_mov and ops[1].type == c.X86_OP_REG and op.size == 8:
                    n = self._num(insn, ops[1].reg)
                    reg = n if n in tracked else None
                stores.append(Store(base, disp, None if unsized else op.size, reg))
        if is_mov and ops[0].type == c.X86_OP_REG and ops[1].type == c.X86_OP_MEM and ops[0].size == 8:
            n = self._num(insn, ops[0].reg)
            base, disp = self._base(insn, ops[1].mem)
            if n in tracked:
                loads.append(Load(n, base, disp, 8))
        sp: SPOp | None = None
        fp: SPOp | None = None
        if _RSP in writes:
            sp = self._pointer_op(insn, c, _RSP)
        if _RBP in writes:
            fp = self._pointer_op(insn, c, _RBP)
        clobbers = frozenset(writes & set(tracked)) - {ld.reg for ld in loads}
        return Effect(insn.address, insn.size, flow, target, tuple(stores), tuple(loads), clobbers,
                      sp, fp, text)

    def _pointer_op(self, insn: Any, c: Any, dest: int) -> SPOp:
        """rsp/rbp = rsp/rbp + constant, for the forms compilers use; else unknown."""
        mnem = insn.mnemonic
        ops = insn.operands
        if len(ops) != 2 or ops[0].type != c.X86_OP_REG or self._num(insn, ops[0].reg) != dest \
                or ops[0].size != 8:
            return UNKNOWN_OP
        src = ops[1]
        name = {_RSP: "sp", _RBP: "fp"}
        if mnem in ("add", "sub") and src.type == c.X86_OP_IMM:
            return SPOp(name[dest], src.imm if mnem == "add" else -src.imm)
        if mnem == "mov" and src.type == c.X86_OP_REG and src.size == 8:
            n = self._num(insn, src.reg)
            if n in name:
                return SPOp(name[n], 0)
        if mnem == "lea" and src.type == c.X86_OP_MEM:
            mem = src.mem
            n = self._num(insn, mem.base)
            if n in name and mem.index == 0 and mem.segment == 0:
                return SPOp(name[n], mem.disp)
        return UNKNOWN_OP


# -- aarch64 -------------------------------------------------------------------

def _aarch64_regs() -> dict[str, int]:
    names: dict[str, int] = {"sp": 31, "wsp": 31, "fp": 29, "x29": 29, "w29": 29, "lr": 30,
                             "x30": 30, "w30": 30}
    for n in range(0, 29):
        names[f"x{n}"] = n
        names[f"w{n}"] = n
    for n in range(32):
        for prefix in ("b", "h", "s", "d", "q", "v", "z"):
            names[f"{prefix}{n}"] = 64 + n
    return names


_A64_NAMES = _aarch64_regs()
_A64_SP, _A64_FP = 31, 29
# Instructions whose first register operand is read, not written.
_A64_READ_FIRST = ("st", "cmp", "cmn", "tst", "fcmp", "fcmpe", "ccmp", "ccmn", "fccmp", "fccmpe",
                   "cbz", "cbnz", "tbz", "tbnz", "br", "blr", "ret", "prfm", "prfum", "msr", "dc",
                   "ic", "at", "tlbi", "sys", "hint", "nop", "bti")
# Instructions that may write any of their register operands (loads, atomics).
_A64_WRITE_ALL = ("ld", "swp", "cas")
_A64_STOPS = {"brk", "udf", "hlt"}


class _AArch64(_Decoder):
    tracked = CALLEE_SAVED["aarch64"]

    def __init__(self) -> None:
        import capstone
        from capstone import arm64_const

        super().__init__(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM, _A64_NAMES, arm64_const)

    def effects(self, code: bytes, address: int) -> Iterator[Effect | None]:
        # Fixed-width: decode word by word so one bad word does not hide the rest.
        # (capstone stops at an undecodable word: one None, then on after it.)
        one = self._lite_effect
        off = 0
        usable = len(code) - len(code) % 4
        while off < usable:
            for addr, size, mnem, op_str in self._lite.disasm_lite(code[off:usable], address + off):
                yield one(code, address, addr, size, mnem, op_str)
                off += size
            if off < usable:
                yield None
                off += 4

    def _effect(self, insn: Any) -> Effect:
        c = self._c
        mnem = insn.mnemonic
        addr, size = insn.address, insn.size
        ops = insn.operands
        text = f"{mnem} {insn.op_str}"
        tracked = self.tracked
        reg_ops = [self._num(insn, op.reg) for op in ops if op.type == c.ARM64_OP_REG]
        try:
            _, written = insn.regs_access()
        except Exception:  # noqa: BLE001 - no access data: assume every register operand is written
            written = [op.reg for op in ops if op.type == c.ARM64_OP_REG]
        writes = {n for n in (self._num(insn, r) for r in written) if n is not None}
        base_mnem = mnem.split(".")[0]
        reads_first = base_mnem.startswith(_A64_READ_FIRST)
        is_load = base_mnem.startswith("ld")
        if base_mnem.startswith(_A64_WRITE_ALL):
            writes.update(n for n in reg_ops if n is not None)
        elif reg_ops and not reads_first and reg_ops[0] is not None:
            writes.add(reg_ops[0])
        if base_mnem.startswith("st") and "x" in base_mnem[2:5] and reg_ops:
            # stxr/stlxr/stxp: the first operand receives the status.
            if reg_ops[0] is not None:
                writes.add(reg_ops[0])
        # Control flow.
        flow, target = Flow.FALL, None
        imms = [op.imm for op in ops if op.type == c.ARM64_OP_IMM]
        if base_mnem == "b" and mnem == "b":
            flow, target = Flow.JUMP, imms[-1] if imms else None
        elif base_mnem == "b" or base_mnem in ("cbz", "cbnz", "tbz", "tbnz"):
            flow, target = Flow.COND, imms[-1] if imms else None
        elif base_mnem in ("bl", "blr", "blraa", "blrab", "blraaz", "blrabz"):
            flow, target = Flow.CALL, (imms[-1] if base_mnem == "bl" and imms else None)
        elif base_mnem in ("br", "braa", "brab", "braaz", "brabz"):
            flow = Flow.INDIRECT
        elif base_mnem in ("ret", "retaa", "retab", "eret"):
            flow = Flow.RETURN
        elif base_mnem in _A64_STOPS:
            flow = Flow.STOP
        if flow is Flow.JUMP and target is None:
            flow = Flow.INDIRECT
        if flow is Flow.CALL:
            # x30 gets the return address; the callee keeps x19-x28, d8-d15 and SP.
            return Effect(addr, size, flow, target, (), (), frozenset(), None, None, text)
        if flow is not Flow.FALL and flow is not Flow.STOP:
            return Effect(addr, size, flow, target, (), (), frozenset(), None, None, text)
        stores: list[Store] = []
        loads: list[Load] = []
        sp: SPOp | None = None
        fp: SPOp | None = None
        mems = [op for op in ops if op.type == c.ARM64_OP_MEM]
        post_index = bool(getattr(insn, "post_index", False))
        writeback = bool(insn.writeback)
        if mems:
            mem = mems[0].mem
            base_num = self._num(insn, mem.base)
            index = mem.index != 0
            if base_num in (_A64_SP, _A64_FP):
                base = Base.SP if base_num == _A64_SP else Base.FP
                disp = 0 if post_index else mem.disp
                if index:
                    base, disp = Base.FRAME, 0
            else:
                base, disp = Base.OTHER, 0
            data = [op for op in ops if op.type == c.ARM64_OP_REG]
            if base_mnem.startswith("st") and "x" in base_mnem[2:5]:
                data = data[1:]
            width = 0
            names = [insn.reg_name(op.reg) for op in data]
            sizes = [_a64_size(n) for n in names]
            if base_mnem.startswith(("st", "ld")) and all(s is not None for s in sizes) and sizes:
                width = sum(s for s in sizes if s is not None)
            if base_mnem.startswith("st"):
                if base is not Base.OTHER:
                    pair_like = base_mnem in ("stp", "stnp", "str", "stur")
                    if pair_like and width:
                        at = disp
                        for op, s in zip(data, sizes, strict=True):
                            assert s is not None
                            num = self._num(insn, op.reg)
                            whole = num in tracked and (s == 8 or (s == 16 and num is not None
                                                                    and num >= 64))
                            stores.append(Store(base, at, s, num if whole else None))
                            at += s
                    else:
                        stores.append(Store(base, disp, None))
            elif is_load and base_mnem in ("ldp", "ldnp", "ldr", "ldur") and width \
                    and base is not Base.FRAME:
                at = disp
                for op, s in zip(data, sizes, strict=True):
                    assert s is not None
                    num = self._num(insn, op.reg)
                    if num in tracked and s == 8:
                        loads.append(Load(num, base, at, 8))
                    at += s
            if writeback and base_num in (_A64_SP, _A64_FP) and not index:
                name = "sp" if base_num == _A64_SP else "fp"
                if post_index:
                    step = imms[-1] if imms else None
                else:
                    step = mem.disp
                op_ = SPOp(name, step) if step is not None else UNKNOWN_OP
                if base_num == _A64_SP:
                    sp = op_
                else:
                    fp = op_
        if _A64_SP in writes and sp is None:
            sp = self._pointer_op(insn, c, _A64_SP, base_mnem)
        if _A64_FP in writes and fp is None:
            fp = self._pointer_op(insn, c, _A64_FP, base_mnem)
        clobbers = frozenset(writes & set(tracked)) - {ld.reg for ld in loads}
        return Effect(addr, size, flow, target, tuple(stores), tuple(loads), clobbers, sp, fp, text)

    def _pointer_op(self, insn: Any, c: Any, dest: int, mnem: str) -> SPOp:
        ops = insn.operands
        if not ops or ops[0].type != c.ARM64_OP_REG or self._num(insn, ops[0].reg) != dest:
            return UNKNOWN_OP
        if insn.reg_name(ops[0].reg) not in ("sp", "x29", "fp"):
            return UNKNOWN_OP
        name = {_A64_SP: "sp", _A64_FP: "fp"}
        if mnem == "mov" and len(ops) == 2 and ops[1].type == c.ARM64_OP_REG:
            n = self._num(insn, ops[1].reg)
            if n in name and insn.reg_name(ops[1].reg) in ("sp", "x29", "fp"):
                return SPOp(name[n], 0)
        if mnem in ("add", "sub") and len(ops) == 3 and ops[1].type == c.ARM64_OP_REG \
                and ops[2].type == c.ARM64_OP_IMM:
            n = self._num(insn, ops[1].reg)
            shift = ops[2].shift
            if n in name and insn.reg_name(ops[1].reg) in ("sp", "x29", "fp") and (
                    shift.type == 0 or (shift.type == 1 and shift.value in (0, 12))):
                imm = ops[2].imm << (shift.value if shift.type == 1 else 0)
                return SPOp(name[n], imm if mnem == "add" else -imm)
        return UNKNOWN_OP


def _a64_size(name: str) -> int | None:
    if name.startswith(("x", "d")) or name in ("fp", "lr", "xzr"):
        return 8
    if name.startswith(("w", "s")) or name == "wzr":
        return 4
    if name.startswith("q"):
        return 16
    if name.startswith("h"):
        return 2
    if name.startswith("b"):
        return 1
    return None


# -- jump tables -----------------------------------------------------------------

_X86_ALIASES: dict[str, tuple[str, ...]] = {
    **{f"r{x}x": (f"r{x}x", f"e{x}x", f"{x}x", f"{x}l", f"{x}h") for x in "abcd"},
    **{f"r{x}": (f"r{x}", f"e{x}", x, f"{x}l") for x in ("si", "di", "bp", "sp")},
    **{f"r{n}": (f"r{n}", f"r{n}d", f"r{n}w", f"r{n}b") for n in range(8, 16)},
}
_X86_BYTE_REGS = frozenset(names[3] for names in _X86_ALIASES.values()) | {"ah", "bh", "ch", "dh"}
_TABLE_MAX = 4096


def _rip_lea(eff: Effect, reg: str) -> int | None:
    """The address ``lea reg, [rip + 0x...]`` at ``eff`` loads, else None."""
    prefix = f"lea {reg}, [rip + 0x"
    if not (eff.text.startswith(prefix) and eff.text.endswith("]")):
        return None
    return eff.address + eff.size + int(eff.text[len(prefix):-1], 16)


def _x86_hoisted(effects: list[Effect], base: str, use: int,
                 tables: dict[int, list[int]]) -> int | None:
    """The table address ``base`` holds at ``effects[use]`` when ``lea base,
    [rip + T]`` set it before, out of the straight-line code (hoisted out of a
    loop, kept across calls in a callee-saved register): every path to
    ``use`` from the entry (the caller's value), from any other write of
    ``base`` (capstone's register-write lists: an epilogue's ``pop``, a
    ``lea`` of another table, arithmetic) or from an indirect jump whose
    targets ``tables`` does not give passes through a ``lea`` of that T."""
    number = _X86_NAMES.get(base)
    if number not in CALLEE_SAVED["amd64"]:
        return None
    values: dict[int, int] = {}  # index of a lea -> its address
    bad = [0]
    for k, eff in enumerate(effects):
        if number in eff.clobbers or any(ld.reg == number for ld in eff.loads):
            address = _rip_lea(eff, base)
            if address is not None:
                values[k] = address
            else:
                bad.append(k)
    for value in sorted(set(values.values())):
        kills = {k for k, v in values.items() if v == value}
        if not _reaches(effects, bad + [k for k in values if k not in kills], kills, use, tables):
            return value
    return None


def amd64_jump_tables(effects: list[Effect], sites: list[int], leaders: set[int],
                      read: Callable[[int, int], bytes | None],
                      pointers: Callable[[int, int], list[int] | None] | None,
                      ) -> dict[int, list[int]]:
    """Site -> targets for every indirect jump in ``sites`` that is a jump
    table (:func:`amd64_jump_table`) or a computed goto
    (:func:`amd64_computed_goto`). Twice: the second time the first round's
    tables are known ways through their jumps when a table base set out of
    the block is traced back (:func:`_x86_hoisted`)."""
    found: dict[int, list[int]] = {}
    for _ in range(2):
        known = found
        found = {}
        for i in sites:
            targets = amd64_jump_table(effects, i, leaders, read, known)
            if targets is None and pointers is not None:
                targets = amd64_computed_goto(effects, i, leaders, pointers, known)
            if targets is not None:
                found[i] = targets
        if found == known:
            break
    return found


def _family(name: str, width: int) -> str | None:
    """The 64-bit register whose alias of rank ``width`` (0: 64-bit, 1: 32-bit) is ``name``."""
    for family, names in _X86_ALIASES.items():
        if names[width] == name:
            return family
    return None


def _mentions(text: str, regs: tuple[str, ...]) -> bool:
    words = set(text.replace(",", " ").replace("[", " ").replace("]", " ").replace("*", " ")
                .replace("+", " ").replace("-", " ").split())
    return any(r in words for r in regs)


def amd64_jump_table(effects: list[Effect], i: int, leaders: set[int],
                     read: Callable[[int, int], bytes | None],
                     tables: dict[int, list[int]] | None = None) -> list[int] | None:
    """Targets of the jump table that the indirect jump ``effects[i]`` dispatches
    through, for gcc's position-independent form; None when it is not that form
    (the caller then assumes any target).

        cmp  eI, N ; ja default ; lea rB, [rip + T] ; [movzx eI, Il | mov eI, eJ] ;
        movsxd rA, dword ptr [rB + rI*4] ; add rA, rB ; jmp rA

    with other instructions in between that neither name rA, rB, rI nor are
    branch targets. The index may be compared at any width and zero-extended
    after; the lea may be anywhere when rB is a callee-saved register that
    holds T on every path to the jump (:func:`_x86_hoisted`, through the
    indirect jumps whose ``tables`` are known). The N + 1 entries are read
    from the file.
    """
    jump = effects[i].text.split()
    if len(jump) < 2 or jump[-2] != "jmp" or jump[-1] not in _X86_ALIASES:
        return None
    a = jump[-1]
    want = "add"
    b = idx = ""
    table: int | None = None
    j = i - 1
    lowest = max(0, i - 32)
    while j >= lowest:
        eff = effects[j]
        if effects[j + 1].address in leaders or eff.flow not in (Flow.FALL, Flow.COND):
            return None
        text = eff.text
        if want == "add" and text.startswith(f"add {a}, "):
            b = text.split(", ")[1]
            if b not in _X86_ALIASES:
                return None
            want = "movsxd"
        elif want == "movsxd" and text.startswith(f"movsxd {a}, dword ptr [{b} + "):
            rest = text[len(f"movsxd {a}, dword ptr [{b} + "):]
            if not rest.endswith("*4]") or rest[:-3] not in _X86_ALIASES:
                return None
            idx = rest[:-3]
            want = "lea"
            hoisted = _x86_hoisted(effects, b, j, tables or {})
            if hoisted is not None:
                table, want = hoisted, "ja"
        elif want in ("lea", "ja", "cmp") and (address := _rip_lea(eff, b)) is not None:
            if want != "lea" and address != table:
                return None
            table = address  # (a hoisted T set again here, the same: nothing changes)
            if want == "lea":
                want = "ja"
        elif want == "ja" and text.startswith("ja "):
            want = "cmp"
        elif want == "cmp" and text.startswith("cmp "):
            reg, _, bound = text[4:].partition(", ")
            if reg not in _X86_ALIASES[idx] or table is None:
                return None
            try:
                count = int(bound, 0) + 1
            except ValueError:
                return None
            if not 0 < count <= _TABLE_MAX:
                return None
            data = read(table, 4 * count)
            if data is None:
                return None
            entries = struct.unpack(f"<{count}i", data)
            return [table + e for e in entries]
        elif idx and want in ("lea", "ja") and text.startswith("movzx ") and all(
                r in _X86_ALIASES[idx] for r in text[6:].split(", ")):
            pass  # the index zero-extended from the width the bound was checked at
        elif idx and want in ("lea", "ja") and text.startswith(f"mov {_X86_ALIASES[idx][1]}, ") \
                and _family(text.split(", ")[1], 1) is not None:
            idx = _family(text.split(", ")[1], 1) or idx  # a 32-bit copy: the bound is on the source
        else:
            names: tuple[str, ...] = _X86_ALIASES[a]
            if b:
                names += _X86_ALIASES[b]
            if idx:
                names += _X86_ALIASES[idx]
            if want in ("ja", "cmp") or _mentions(text, names):
                return None
        j -= 1
    return None


def amd64_computed_goto(effects: list[Effect], i: int, leaders: set[int],
                        pointers: Callable[[int, int], list[int] | None],
                        tables: dict[int, list[int]] | None = None) -> list[int] | None:
    """Targets of a computed goto (gcc's labels-as-values dispatch,
    ``goto *table[op & MASK]``), or None when ``effects[i]`` is not exactly:

        and eI, MASK | movzx eI, <byte> ; mov rA, qword ptr [rB + rI*8] ; jmp rA

    in straight-line code, with other instructions in between that do not
    name rI (after the mask) or rA (after the load), and rB a callee-saved
    register that holds T from ``lea rB, [rip + T]`` (:func:`_x86_hoisted`). MASK + 1
    (or 256) entries are read through ``pointers``, which gives what the
    table will hold once loaded: a PIE's entries come from its relative
    relocations. The entries past the table's end are whatever follows it:
    more targets than the real ones, never fewer (an unknown entry makes the
    whole table unknown)."""
    jump = effects[i].text.split()
    if len(jump) != 2 or jump[0] != "jmp" or jump[1] not in _X86_ALIASES:
        return None
    a = jump[1]
    idx = ""
    table: int | None = None
    for j in range(i - 1, max(-1, i - 33), -1):
        eff = effects[j]
        if effects[j + 1].address in leaders or eff.flow not in (Flow.FALL, Flow.COND):
            return None
        text = eff.text
        if not idx:
            prefix = f"mov {a}, qword ptr ["
            if text.startswith(prefix) and text.endswith("*8]"):
                base, _, index = text[len(prefix):-3].partition(" + ")
                if base not in _X86_ALIASES or index not in _X86_ALIASES:
                    return None
                table = _x86_hoisted(effects, base, j, tables or {})
                if table is None:
                    return None
                idx = index
            elif _mentions(text, _X86_ALIASES[a]):
                return None
            continue
        names = _X86_ALIASES[idx]
        mnem, _, ops = text.partition(" ")
        dst, _, src = ops.partition(", ")
        count = None
        if mnem == "and" and dst in names[:2]:
            mask = _imm(src)
            if mask is None or mask < 0 or mask & (mask + 1):
                return None
            count = mask + 1
        elif mnem == "movzx" and dst in names[:2] and (
                src.startswith("byte ptr ") or src in _X86_BYTE_REGS):
            count = 256
        elif _mentions(text, names):
            return None
        if count is not None:
            if table is None or count > _TABLE_MAX:
                return None
            return pointers(table, count)
    return None


def _imm(text: str) -> int | None:
    text = text.strip().lstrip("#")
    try:
        return int(text, 0)
    except ValueError:
        return None


def _a64_split(text: str) -> tuple[str, list[str]]:
    """Mnemonic and operands of capstone's text; a memory operand stays one
    operand (``[x1, w0, uxtw #1]``)."""
    mnem, _, rest = text.strip().partition(" ")
    ops: list[str] = []
    depth, cur = 0, ""
    for ch in rest:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            ops.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        ops.append(cur.strip())
    return mnem, ops


def _a64_reg(name: str) -> int | None:
    """x0-x30 / w0-w30 -> 0-30; anything else (sp, zr, vector, immediates) -> None."""
    if len(name) >= 2 and name[0] in "xw" and name[1:].isdigit() and int(name[1:]) <= 30:
        return int(name[1:])
    return {"fp": 29, "lr": 30}.get(name)


def _a64_dests(text: str) -> set[int]:
    """General registers (0-30) an instruction may write, from its text:
    over-approximated (a register operand of an instruction not known to only
    read its first operand counts as written)."""
    mnem, ops = _a64_split(text)
    base = mnem.split(".")[0]
    out: set[int] = set()
    if base in ("svc", "hvc", "smc"):
        out.add(0)  # the call's result (Linux keeps the other registers)
    regs = [_a64_reg(op) for op in ops if not op.startswith("[")]
    for k, op in enumerate(ops):  # base register write-back: [xN, #i]! or [xN], #i
        if op.startswith("[") and (op.endswith("!") or k + 1 < len(ops)):
            n = _a64_reg(op.strip("[]!").split(",")[0].strip())
            if n is not None:
                out.add(n)
    if base.startswith(_A64_WRITE_ALL):
        out.update(n for n in regs if n is not None)
    elif base.startswith("st") and "x" in base[2:5]:
        if regs and regs[0] is not None:
            out.add(regs[0])
    elif not base.startswith(_A64_READ_FIRST) and ops and not ops[0].startswith(("[", "#")):
        if regs and regs[0] is not None:
            out.add(regs[0])
    return out


# ``ldr* wE, [xT, wI, uxtw #s]`` -> entry width for the load mnemonic and shift
_A64_ENTRY = {("ldrb", ""): 1, ("ldrb", "#0"): 1, ("ldrh", "#1"): 2, ("ldr", "#2"): 4}
_A64_EXTEND = {"sxtb": (1, True), "uxtb": (1, False), "sxth": (2, True), "uxth": (2, False),
               "sxtw": (4, True), "uxtw": (4, False)}
_A64_CALLEE = tuple(range(19, 29))


def _a64_index(mem: str) -> tuple[int, int, bool, str] | None:
    """``[xT, wI, uxtw #s]`` / ``[xT, xI, lsl #s]`` / ``[xT, xI]`` ->
    (T, I, I is 32-bit, shift text) or None."""
    parts = [p.strip() for p in mem.strip("[]").split(",")]
    if len(parts) < 2 or not parts[0].startswith("x"):
        return None
    table, index = _a64_reg(parts[0]), _a64_reg(parts[1])
    if table is None or index is None or table == index:
        return None
    wide = parts[1].startswith("x")
    if len(parts) == 2:
        return table, index, not wide, ""
    ext, _, shift = parts[2].partition(" ")
    if (wide and ext != "lsl") or (not wide and ext != "uxtw") or len(parts) != 3:
        return None
    return table, index, not wide, shift


def _a64_bound(text: str, index: int, narrow: bool) -> int | None:
    """Entries an index is limited to by ``and I, S, #2^k-1`` / ``ubfx I, S, #l, #k``
    / ``uxtb wI, wS`` (the instruction that wrote it), else None."""
    mnem, ops = _a64_split(text)
    if not ops or _a64_reg(ops[0]) != index or (ops[0].startswith("x") and narrow):
        return None
    if mnem == "and" and len(ops) == 3 and ops[1][0] in "xw":
        mask = _imm(ops[2])
        if mask is not None and mask >= 0 and mask & (mask + 1) == 0:
            return mask + 1
    if mnem == "ubfx" and len(ops) == 4:
        width = _imm(ops[3])
        return 1 << width if width is not None and 0 <= width <= 16 else None
    if mnem == "uxtb" and len(ops) == 2:
        return 256
    return None


def _a64_compare(effects: list[Effect], k: int, index: int, narrow: bool,
                 taken: bool) -> int | None:
    """Entries allowed by ``cmp I, #N`` at ``k - 1`` and the conditional branch at
    ``k``: the table is reached when the branch is ``taken`` (b.ls / b.lo) or
    when it falls through (b.hi / b.hs)."""
    if k < 1:
        return None
    mnem, _ = _a64_split(effects[k].text)
    cmp, ops = _a64_split(effects[k - 1].text)
    if cmp != "cmp" or len(ops) != 2 or _a64_reg(ops[0]) != index:
        return None
    if narrow is False and not ops[0].startswith("x"):
        return None  # a 32-bit compare says nothing of a 64-bit index's high half
    bound = _imm(ops[1])
    if bound is None or bound < 0:
        return None
    inclusive = {"b.ls": True, "b.lo": False, "b.cc": False} if taken else \
        {"b.hi": True, "b.hs": False, "b.cs": False}
    if mnem not in inclusive:
        return None
    return bound + 1 if inclusive[mnem] else bound


def _a64_hoisted(effects: list[Effect], reg: int, use: int,
                 leaders: dict[int, list[int]]) -> int | None:
    """The address ``reg`` holds at ``effects[use]`` when it was set out of the
    block (a table base hoisted out of a loop, kept across calls when callee-saved):
    some ``adrp reg, P ; add reg, reg, #O`` pairs all give it, and no path
    reaches ``use`` from the entry (the caller's value), from another write of
    ``reg`` (an epilogue's restore, a pair with another value) or from an
    indirect jump without passing through one of those pairs."""
    if reg > 28 or reg in (16, 17, 18):  # FP, LR, IP0/IP1 (veneers), platform register
        return None
    pairs: dict[int, int] = {}  # index of the add -> address
    halves: set[int] = set()  # their adrp
    bad = [0]
    writers = [k for k, eff in enumerate(effects) if reg in _a64_dests(eff.text)]
    for k in writers:
        found = _a64_pair(effects, k, reg, leaders)
        if found is not None:
            pairs[k], first = found
            halves.add(first)
    bad += [k for k in writers if k not in pairs and k not in halves]
    if reg not in _A64_CALLEE:  # a call may change it
        bad += [k for k, eff in enumerate(effects) if eff.flow is Flow.CALL]
    for value in sorted(set(pairs.values())):
        kills = {k for k, v in pairs.items() if v == value}
        if not _reaches(effects, bad + [k for k in pairs if k not in kills], kills, use):
            return value
    return None


def _a64_pair(effects: list[Effect], k: int, reg: int,
              leaders: dict[int, list[int]]) -> tuple[int, int] | None:
    """(address, index of the adrp) when ``effects[k]`` is ``add reg, reg, #O``
    completing an ``adrp reg, P`` earlier in the same straight-line code (no
    branch into it, no other write of ``reg`` in between)."""
    mnem, ops = _a64_split(effects[k].text)
    low = _imm(ops[2]) if mnem == "add" and len(ops) == 3 else None
    if low is None or _a64_reg(ops[0]) != reg or _a64_reg(ops[1]) != reg:
        return None
    j = k - 1
    while j >= max(0, k - 16):
        if effects[j + 1].address in leaders or effects[j].flow not in (Flow.FALL, Flow.COND):
            return None
        if reg in _a64_dests(effects[j].text):
            m0, o0 = _a64_split(effects[j].text)
            page = _imm(o0[1]) if m0 == "adrp" and len(o0) == 2 else None
            return None if page is None else (page + low, j)
        j -= 1
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
        todo.extend([0] if k == 0 else _a64_successors(effects, k, at))
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
            todo.extend(_a64_successors(effects, k, at))
    return False


def _a64_successors(effects: list[Effect], k: int, at: dict[int, int]) -> list[int]:
    eff = effects[k]
    out = []
    if eff.flow in (Flow.FALL, Flow.COND, Flow.CALL) and k + 1 < len(effects):
        out.append(k + 1)
    if eff.flow in (Flow.JUMP, Flow.COND) and eff.target in at:
        out.append(at[eff.target])
    return out


def aarch64_jump_table(effects: list[Effect], i: int, leaders: dict[int, list[int]],
                       read: Callable[[int, int], bytes | None],
                       absolute: bool = False) -> list[int] | None:
    """Targets of the jump table that ``br`` at ``effects[i]`` dispatches
    through, for gcc's aarch64 forms; None when it is not exactly one of them
    (the caller then assumes any target). Relative tables (switch):

        ldrb|ldrh|ldr wE, [xT, wI, uxtw #s] ; adr xB, #BASE ;
        add xA, xB, wE, sxtb|uxtb|sxth|uxth|sxtw|uxtw #2 ; br xA

    targets BASE + 4 * entry; absolute tables (``goto *table[i]``, only with
    ``absolute``: a non-PIE executable, whose entries are final in the file):

        ldr xA, [xT, xI, lsl #3] ; br xA

    The index is bounded by ``cmp I, #N`` and ``b.hi`` falling into the
    straight-line block, by a ``b.ls`` that is the only way into it, or by
    the ``and I, S, #2^k-1`` / ``ubfx`` / ``uxtb`` that wrote it; the table
    address is ``adrp xT, P ; add xT, xT, #O`` in the block, or the only write
    that reaches the block (:func:`_a64_hoisted`). Every
    instruction in between may do anything but write A, B, E, T or I.
    ``leaders`` maps each direct branch target to the branches that go there;
    a block is taken as straight-line when none of them enters it
    (:func:`aarch64_jump_tables` adds the resolved tables' targets).
    """
    mnem, ops = _a64_split(effects[i].text)
    if mnem != "br" or len(ops) != 1 or _a64_reg(ops[0]) is None:
        return None
    want = {_a64_reg(ops[0]): "target"}
    width = 0
    signed = False
    base: int | None = None
    table: int | None = None
    table_reg = index = use = -1
    narrow = True
    hopped = False
    count: int | None = None
    j = i - 1
    lowest = max(0, i - 64)
    while True:
        if j < lowest:
            if count is not None and set(want) <= {table_reg}:
                break
            return None
        eff = effects[j]
        entered = effects[j + 1].address in leaders
        if entered or eff.flow not in (Flow.FALL, Flow.COND):
            # The top of the straight-line block that ends at the jump: on
            # into the one branch that enters it (nothing falls into it).
            if count is not None and set(want) <= {table_reg}:
                break  # T from before the block: _a64_hoisted
            if hopped or not entered or eff.flow in (Flow.FALL, Flow.COND, Flow.CALL):
                return None
            sources = leaders.get(effects[j + 1].address, [])
            if len(sources) != 1 or effects[sources[0]].flow is not Flow.COND:
                return None
            k = sources[0]
            if index in want and count is None:
                count = _a64_compare(effects, k, index, narrow, True)
                if count is None:
                    return None
                want.pop(index)
            hopped = True
            j = k - 1
            lowest = max(0, j - 64)
            continue
        if eff.flow is Flow.COND and index in want and count is None:
            found = _a64_compare(effects, j, index, narrow, False)
            if found is not None:
                count = found
                want.pop(index)
        written = _a64_dests(eff.text) & set(want)
        for reg in written:
            role = want.pop(reg)
            m, o = _a64_split(eff.text)
            if role == "target" and m == "add" and len(o) == 4 and o[3].endswith(" #2") \
                    and _a64_reg(o[0]) == reg and o[1].startswith("x") and o[2].startswith("w"):
                ext = o[3][:-3]
                if ext not in _A64_EXTEND or _a64_reg(o[1]) is None or _a64_reg(o[2]) is None:
                    return None
                width, signed = _A64_EXTEND[ext]
                want[_a64_reg(o[1])] = "adr"
                want[_a64_reg(o[2])] = "entry"
            elif role == "target" and absolute and m == "ldr" and len(o) == 2 \
                    and o[0].startswith("x") and (mem := _a64_index(o[1])) is not None \
                    and not mem[2] and mem[3] == "#3":
                width, base, use = 8, 0, j
                table_reg, index, narrow = mem[0], mem[1], False
                want[table_reg] = "table"
                want[index] = "index"
            elif role == "adr" and m == "adr" and len(o) == 2:
                base = _imm(o[1])
            elif role == "entry" and len(o) == 2 and o[0].startswith("w") \
                    and (mem := _a64_index(o[1])) is not None and mem[2] \
                    and _A64_ENTRY.get((m, mem[3])) == width:
                table_reg, index, use = mem[0], mem[1], j
                want[table_reg] = "table"
                want[index] = "index"
            elif role == "table" and (pair := _a64_pair(effects, j, reg, leaders)) is not None:
                table = pair[0]  # T no longer wanted: its adrp further up is fine
            elif role == "index" and count is None and (
                    found := _a64_bound(eff.text, reg, narrow)) is not None:
                count = found
            else:
                return None
        if not want:
            break
        j -= 1
    if "adr" in want.values() or "entry" in want.values() or "target" in want.values():
        return None
    if table_reg in want:
        table = _a64_hoisted(effects, table_reg, use, leaders)
    if table is None or base is None or count is None or not 0 < count <= _TABLE_MAX:
        return None
    data = read(table, width * count)
    if data is None:
        return None
    if width == 8:
        return list(struct.unpack(f"<{count}Q", data))
    fmt = {1: "b", 2: "h", 4: "i"}[width]
    entries = struct.unpack(f"<{count}{fmt if signed else fmt.upper()}", data)
    return [base + 4 * entry for entry in entries]


def aarch64_jump_tables(effects: list[Effect], sites: list[int], leaders: dict[int, list[int]],
                        read: Callable[[int, int], bytes | None],
                        absolute: bool = False) -> dict[int, list[int]]:
    """:func:`aarch64_jump_table` for every site in ``sites``, twice: the second
    time the first round's targets count as ways into blocks too (a dispatch
    block that some table jumps into is not straight-line). Site -> targets."""
    first: dict[int, list[int]] = {}
    for i in sites:
        found = aarch64_jump_table(effects, i, leaders, read, absolute)
        if found is not None:
            first[i] = found
    if not first:
        return first
    more = {target: list(branches) for target, branches in leaders.items()}
    for i, targets in first.items():
        for target in set(targets):
            more.setdefault(target, []).append(i)
    out: dict[int, list[int]] = {}
    for i in first:
        found = aarch64_jump_table(effects, i, more, read, absolute)
        if found is not None:
            out[i] = found
    return out
