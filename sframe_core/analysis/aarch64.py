"""aarch64: what one instruction does to the frame (capstone's arm64 details),
and the jump tables gcc's ``br`` dispatches through.
"""

from __future__ import annotations

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
    _reaches,
)

__all__ = ["AArch64Decoder", "aarch64_jump_table", "aarch64_jump_tables"]


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


class AArch64Decoder(_Decoder):
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
    if table is None or base is None or count is None or not 0 < count <= TABLE_MAX:
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
