"""amd64: what one instruction does to the frame (capstone's x86 details), and
the indirect jumps whose targets the code says (jump tables, computed gotos).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from typing import Any

from .effects import (
    CALLEE_SAVED,
    TABLE_MAX,
    UNKNOWN_OP,
    Base,
    Effect,
    Flow,
    Load,
    SPOp,
    Store,
    _Decoder,
    _imm,
    _new,
    _reaches,
)

__all__ = ["AMD64Decoder", "amd64_jump_tables", "amd64_jump_table", "amd64_computed_goto",
           "X86_NAMES", "X86_ALIASES", "X86_MOVES", "X86_STOPS", "X86_UNSIZED"]


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


X86_NAMES = _amd64_regs()
_NONE: frozenset[int] = frozenset()
_RSP, _RBP = 7, 6
X86_STOPS = {"ud2", "ud1", "ud0", "hlt", "int3"}
# Stores whose extent the operand size does not give (string stores go
# through rdi, a base the analysis never follows, so they need no entry).
X86_UNSIZED = ("xsave", "fxsave", "fnsave", "fsave", "fnstenv", "fstenv", "xsaveopt", "xsavec",
                "xsaves", "vscatter", "vpscatter")


# Instructions that write only their first operand and the flags (or
# nothing but the flags), never SP or a callee-saved register implicitly and
# never a branch (``AMD64Decoder._quick``): those whose text names none of the
# registers the analysis follows change nothing it tracks.
_X86_PLAIN = frozenset((
    "mov movabs movzx movsx movsxd lea nop add sub adc sbb and or xor cmp test neg not inc dec "
    "shl shr sar rol ror imul bt bsf bsr tzcnt lzcnt popcnt bswap "
    "movss movsd movaps movapd movups movupd movdqa movdqu movd movq movhps movlps movhpd movlpd "
    "pxor por pand pandn xorps xorpd andps andpd andnps andnpd orps orpd "
    "addss addsd subss subsd mulss mulsd divss divsd sqrtss sqrtsd minss minsd maxss maxsd "
    "comiss comisd ucomiss ucomisd cvtsi2ss cvtsi2sd cvtss2sd cvtsd2ss cvttss2si cvttsd2si "
    "cvtss2si cvtsd2si cvtdq2pd cvtdq2ps cvtps2pd cvtpd2ps unpcklps unpcklpd unpckhpd shufps shufpd "
    "punpcklbw punpcklwd punpckldq punpcklqdq punpckhqdq pshufd paddd paddq psubd psubq "
    "pcmpeqb pcmpeqd pmovmskb movmskpd movmskps"
).split()) | {f"{op}{cc}" for op in ("cmov", "set") for cc in (
    "o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g")}
# Every spelling of SP, FP and the callee-saved registers (``X86_NAMES``), as
# words of an operand text.
_X86_FOLLOWED = re.compile(r"\b(?:" + "|".join(sorted(X86_NAMES, key=len, reverse=True)) + r")\b")
# Of those, the ones that write no operand (capstone reports ``test byte ptr
# [rsp + 0xf], al`` as a store, so a compare through SP or FP is decoded in detail).
_X86_COMPARES = frozenset("cmp test bt comiss comisd ucomiss ucomisd".split())
# An address through SP or FP (as base or index).
_X86_FRAME = re.compile(r"\[[^\]]*\b[re]?[sb]p\b[^\]]*\]")
# ``MOVE SIZE ptr [rsp|rbp +- DISP], SOURCE``: a store to a frame slot.
X86_MOVES = frozenset("mov movq movd movss movsd movups movaps movupd movapd movdqu movdqa".split())
_X86_SLOT = re.compile(
    r"(byte|word|dword|qword|xmmword) ptr \[(rsp|rbp)(?: ([+-]) (0x[0-9a-f]+|[0-9]+))?\], ")
_X86_SIZES = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "xmmword": 16}
# The callee-saved registers' whole names (a ``mov`` of 8 bytes to one from memory is a load).
_X86_WHOLE = frozenset(("rbx", "r12", "r13", "r14", "r15"))


class AMD64Decoder(_Decoder):
    tracked = CALLEE_SAVED["amd64"]

    def __init__(self) -> None:
        import capstone
        from capstone import x86_const

        super().__init__(capstone.CS_ARCH_X86, capstone.CS_MODE_64, X86_NAMES, x86_const)

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
        memo, one = self._memo, self._lite_effect
        for addr, size, mnem, op_str in self._lite.disasm_lite(code, address):
            pos = addr + size
            # ``_lite_effect``'s reuse of a remembered effect, inlined for most
            # instructions (not a branch: only the address and text move).
            hit = memo.get(code[addr - address:pos - address])
            if hit is not None and hit[3] is None:
                yield _new(Effect, (addr, size, hit[2], None, *hit[4:9], f"{mnem} {op_str}",
                                    *hit[10:]))
            else:
                yield one(code, address, addr, size, mnem, op_str)
        if pos < end:
            yield None

    def _quick(self, addr: int, size: int, mnem: str, op_str: str) -> Effect | None:
        """What ``_effect`` gives an instruction of ``_X86_PLAIN``, from its
        text, where the text settles it: no operand names SP, FP or a
        callee-saved register; or those it names it only reads, writing a
        register or memory the analysis does not follow; or it writes one
        callee-saved register (not loaded whole from memory: a restore);
        or it moves a value to a frame slot at a constant offset from SP or
        FP. Never SP or FP written. Most of real code's distinct encodings
        are such (a PC-relative address, an immediate or a stack offset
        makes every one distinct); ``test_symfile_speed`` holds it to the
        detailed decode of every instruction of real programs. None: decode
        it."""
        if mnem not in _X86_PLAIN:
            return None
        stores: tuple[Store, ...] = ()
        clobbers = _NONE
        if _X86_FOLLOWED.search(op_str) is not None:
            dst, _, src = op_str.partition(", ")
            frame = _X86_FRAME.search(op_str) is not None
            if mnem in _X86_COMPARES:
                if frame:
                    return None
            elif frame and "[" in dst:
                slot = _X86_SLOT.match(op_str) if mnem in X86_MOVES else None
                if slot is None:
                    return None
                width, base, sign, disp = slot.groups()
                offset = 0 if disp is None else int(disp, 0) * (-1 if sign == "-" else 1)
                saved = X86_NAMES.get(src) if width == "qword" and mnem in ("mov", "movq") \
                    else None
                stores = (Store(Base.SP if base == "rsp" else Base.FP, offset, _X86_SIZES[width],
                                saved if saved in self.tracked else None),)
            elif (reg := X86_NAMES.get(dst)) is not None:
                if reg in (_RSP, _RBP) or (mnem in ("mov", "movq") and "[" in src
                                           and dst in _X86_WHOLE):
                    return None
                clobbers = frozenset((reg,))
            # else what is written is a register the analysis does not follow,
            # or memory through another base (not a frame slot: no store)
        return _new(Effect, (addr, size, Flow.FALL, None, stores, (), clobbers, None, None,
                             f"{mnem} {op_str}", None, _NONE, ()))

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
        elif mnem in X86_STOPS:
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
            # A move writes its first operand whatever capstone says (5.0.7
            # reports ``movq qword ptr [rsp + 0x18], xmm0``, 66 0F D6, as a read).
            written = op.access & 2 or op.access == 0 or (op is ops[0] and mnem in X86_MOVES)
            if written and base is not Base.OTHER:
                unsized = mnem.startswith(X86_UNSIZED) or op.size not in (1, 2, 4, 8, 16, 32, 64)
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


# -- jump tables -----------------------------------------------------------------

X86_ALIASES: dict[str, tuple[str, ...]] = {
    **{f"r{x}x": (f"r{x}x", f"e{x}x", f"{x}x", f"{x}l", f"{x}h") for x in "abcd"},
    **{f"r{x}": (f"r{x}", f"e{x}", x, f"{x}l") for x in ("si", "di", "bp", "sp")},
    **{f"r{n}": (f"r{n}", f"r{n}d", f"r{n}w", f"r{n}b") for n in range(8, 16)},
}
_X86_BYTE_REGS = frozenset(names[3] for names in X86_ALIASES.values()) | {"ah", "bh", "ch", "dh"}


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
    number = X86_NAMES.get(base)
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
    for family, names in X86_ALIASES.items():
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
    if len(jump) < 2 or jump[-2] != "jmp" or jump[-1] not in X86_ALIASES:
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
            if b not in X86_ALIASES:
                return None
            want = "movsxd"
        elif want == "movsxd" and text.startswith(f"movsxd {a}, dword ptr [{b} + "):
            rest = text[len(f"movsxd {a}, dword ptr [{b} + "):]
            if not rest.endswith("*4]") or rest[:-3] not in X86_ALIASES:
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
            if reg not in X86_ALIASES[idx] or table is None:
                return None
            try:
                count = int(bound, 0) + 1
            except ValueError:
                return None
            if not 0 < count <= TABLE_MAX:
                return None
            data = read(table, 4 * count)
            if data is None:
                return None
            entries = struct.unpack(f"<{count}i", data)
            return [table + e for e in entries]
        elif idx and want in ("lea", "ja") and text.startswith("movzx ") and all(
                r in X86_ALIASES[idx] for r in text[6:].split(", ")):
            pass  # the index zero-extended from the width the bound was checked at
        elif idx and want in ("lea", "ja") and text.startswith(f"mov {X86_ALIASES[idx][1]}, ") \
                and _family(text.split(", ")[1], 1) is not None:
            idx = _family(text.split(", ")[1], 1) or idx  # a 32-bit copy: the bound is on the source
        else:
            names: tuple[str, ...] = X86_ALIASES[a]
            if b:
                names += X86_ALIASES[b]
            if idx:
                names += X86_ALIASES[idx]
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
    if len(jump) != 2 or jump[0] != "jmp" or jump[1] not in X86_ALIASES:
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
                if base not in X86_ALIASES or index not in X86_ALIASES:
                    return None
                table = _x86_hoisted(effects, base, j, tables or {})
                if table is None:
                    return None
                idx = index
            elif _mentions(text, X86_ALIASES[a]):
                return None
            continue
        names = X86_ALIASES[idx]
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
            if table is None or count > TABLE_MAX:
                return None
            return pointers(table, count)
    return None
