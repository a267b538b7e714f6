"""What one s390x (z/Architecture) instruction does to the frame, for ``saved.py``.

capstone decodes the instructions (operand fields, lengths) but, up to
capstone 5, says nothing about which registers or storage operands an
s390x instruction writes. This module says it from the mnemonic, the
conservative way round where it matters:

- a storage operand based on r15 (SP) or r11 (FP) is a store when the
  mnemonic is one of the architecture's storing instructions (``st*``,
  ``mv*``, the storage-and-immediate / storage-to-storage logical forms,
  compare-and-swap, interlocked-access, decimal, vector stores ...); a
  mnemonic this module does not know is a store of unknown extent, so an
  instruction it misreads can only make registers unknown;
- every register operand of an instruction is written unless it is one of
  the instructions known to only read their registers (stores, compares,
  tests, branches); even-odd pair instructions also write the odd register;
  over-stating writes only loses rules.

Save idioms gcc emits: ``stmg %r6,%r15,48(%r15)`` / ``stg`` for GPRs,
``std %f8,D(%r15)`` for FPRs; restores ``lmg`` / ``lg`` / ``ld``; the frame is
allocated with ``aghi`` / ``agfi`` / ``lay`` / ``la`` on r15 and r11 is the
frame pointer (``lgr %r11,%r15``). A call (``brasl``/``bras``/``basr``/``bas``)
keeps r6-r13, f8-f15 and r15 (the ELF ABI) and may write the callee's
160-byte register save area at 0..160(%r15). ``br %r14`` returns.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

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
)

__all__ = ["S390XDecoder", "s390x_jump_table"]

_SP, _FP, _RA = 15, 11, 14
# DWARF numbers of f0..f15 (the s390x ELF ABI's odd order: f0 f2 f4 f6 f1 f3 ...).
_FPR_DWARF = {n: 16 + i for i, n in enumerate((0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15))}
_DWARF_FPR = {d: n for n, d in _FPR_DWARF.items()}
# Call-clobbered FPRs f0-f7: gcc keeps r6-r13 there in leaf functions (ldgr/lgdr).
_HOLDERS = frozenset(_FPR_DWARF[n] for n in range(8))
# Registers the analysis follows as pointers into the frame.
_POINTERS = {_SP: "sp", _FP: "fp", _RA: "alt"}
# The callee's register save area: what a call may write below the caller's SP + 160.
_SAVE_AREA = 160

# Stores of a register operand: mnemonic -> bytes per register.
_REG_STORES = {"st": 4, "sty": 4, "stg": 8, "sth": 2, "sthy": 2, "stc": 1, "stcy": 1, "std": 8,
               "stdy": 8, "ste": 4, "stey": 4, "strv": 4, "strvg": 8, "strvh": 2, "stfh": 4,
               "sthh": 2, "stch": 1, "stoc": 4, "stocg": 8, "stocfh": 4, "stcm": 4, "stcmy": 4,
               "stcmh": 4, "stpq": 16, "stm": 4, "stmy": 4, "stmg": 8, "stmh": 4, "stam": 4,
               "stamy": 4, "ntstg": 8}
# Stores whose register is kept whole (a save): 8 bytes, not conditional, not byte-reversed.
_SAVES = ("stg", "std", "stdy", "stmg")
_MULTIPLE = ("stm", "stmy", "stmg", "stmh", "stam", "stamy", "lm", "lmy", "lmg", "lmh", "lam",
             "lamy")
# Other storing instructions with a fixed extent at their first storage operand.
_MEM_STORES = {"mvi": 1, "mviy": 1, "mvhhi": 2, "mvhi": 4, "mvghi": 8, "ni": 1, "niy": 1, "oi": 1,
               "oiy": 1, "xi": 1, "xiy": 1, "asi": 4, "alsi": 4, "agsi": 8, "algsi": 8, "ts": 1,
               "cs": 4, "csy": 4, "csg": 8, "cds": 8, "cdsy": 8, "cdsg": 16, "laa": 4, "laag": 8,
               "laal": 4, "laalg": 8, "lan": 4, "lang": 8, "lao": 4, "laog": 8, "lax": 4,
               "laxg": 8, "cvd": 8, "cvdy": 8, "cvdg": 16, "stck": 8, "stckf": 8, "stcke": 16,
               "stfpc": 4, "vst": 16, "vstrl": 16, "vsteb": 1, "vsteh": 2, "vstef": 4,
               "vsteg": 8, "vstbr": 16, "vster": 16, "vstebrh": 2, "vstebrf": 4, "vstebrg": 8,
               "pka": 16, "pku": 16}
# Storage-to-storage forms whose first operand's length capstone gives (mvc 0(8,%r15),...).
_SS_STORES = ("mvc", "mvcin", "mvn", "mvz", "mvo", "xc", "nc", "oc", "tr", "ed", "edmk", "pack",
              "unpk", "unpka", "unpku", "zap", "ap", "sp", "mp", "dp", "srp", "mvcp", "mvcs",
              "mvcdk", "mvcsk", "mvck")
# Families that store with an extent this module does not work out.
_STORE_PREFIXES = ("st", "mv", "vst", "vsce", "vupkz", "tbegin", "cs", "cds", "cvd", "laa", "lan",
                   "lao", "lax", "czdt", "czxt", "cpdt", "cpxt", "ntst", "plo")
# Instructions that read their register operands and write none of them.
_READ_ONLY = frozenset({
    "c", "cy", "cg", "cgf", "ch", "chy", "cgh", "cr", "cgr", "cgfr", "cl", "cly", "clg", "clgf",
    "clr", "clgr", "clgfr", "chi", "cghi", "cfi", "cgfi", "clfi", "clgfi", "crl", "cgrl", "cgfrl",
    "clrl", "clgrl", "clgfrl", "chrl", "cghrl", "clhrl", "clghrl", "clc", "cli", "cliy", "chhsi",
    "chsi", "cghsi", "clhhsi", "clfhsi", "clghsi", "clm", "clmy", "clmh", "chf", "clhf", "chhr",
    "chlr", "clhhr", "clhlr", "cih", "clih", "cdbr", "cebr", "cxbr", "cdb", "ceb", "kdbr", "kebr",
    "kxbr", "kdb", "keb", "wfcdb", "wfkdb", "wfcsb", "wfksb",
    "tm", "tmy", "tmll", "tmlh", "tmhl", "tmhh", "tml", "tmh", "tcdb", "tceb", "tcxb",
    "pfd", "pfdrl", "niai", "ppa", "bpp", "bprp", "svc",
} | set(_REG_STORES))
# Loads and copies that write their first operand only.
# (Not ldgr: taking its source as written too makes the rule "in fN" from
# the copy on, as gcc's .cfi_register says.)
_FIRST_ONLY = frozenset({"lgr", "lr", "lgdr", "ldr", "ler", "lgfr", "llgfr", "llgcr",
                         "llghr", "lgbr", "lghr", "lg", "l", "ly", "ld", "ldy", "lgf", "llgf",
                         "lghi", "lhi", "la", "lay", "larl"})
# Instructions whose register operand R names an even-odd pair (R and R + 1 written).
_PAIRS = frozenset({"m", "mr", "mfy", "mg", "mgrk", "mlgr", "mlg", "mlr", "ml", "dr", "d", "dlr", "dl",
                    "dlgr", "dlg", "dsgr", "dsg", "dsgfr", "dsgf", "cds", "cdsy", "cdsg", "lpq",
                    "lpd", "lpdg", "mvcle", "mvclu", "mvcl", "clcl", "clcle", "clclu", "cksm",
                    "cu12", "cu14", "cu21", "cu24", "cu41", "cu42", "cuutf", "cutfu", "cmpsc",
                    "tre", "trte", "trtre", "kimd", "klmd", "km", "kmc", "kmac", "kmf", "kmo",
                    "kmctr", "kma", "kdsa", "prno", "ppno", "dfltcc", "sortl", "srst", "srstu",
                    "mvst", "clst", "cuse", "trtt", "trto", "trot", "troo"})
# Relative branches on condition: mnemonic prefixes (jle, jgne, brc, brcl take their mask apart).
_COND_PREFIXES = ("crj", "cgrj", "cij", "cgij", "clrj", "clgrj", "clij", "clgij", "brct", "brxh",
                  "brxle")


class _Mem(NamedTuple):
    """A storage operand D(X,B) (or D(L,B)): registers as ('r', n), None for 0."""

    base: tuple[str, int] | None
    idx: tuple[str, int] | None
    disp: int
    length: int


def _reg(name: str) -> tuple[str, int] | None:
    """('r', n) / ('f', n) / ('v', n) for a capstone register name ('7', 'r7', '%r7', 'f8', 'v8')."""
    name = name.lstrip("%")
    if name.isdigit():
        return "r", int(name)
    if len(name) > 1 and name[0] in "rfv" and name[1:].isdigit():
        return name[0], int(name[1:])
    return None


class S390XDecoder(_Decoder):
    """Effects of s390x instructions (tracked: r6-r10, r12, r13, f8-f15; r11 is SFrame's FP)."""

    tracked = CALLEE_SAVED["s390x"]
    # ``j .+2`` (a target inside the jump itself) is a trap, not a jump.
    shaped_branches = False

    def __init__(self) -> None:
        import importlib

        import capstone

        # capstone 6 renamed the architecture SystemZ (and its constants' module).
        arch = getattr(capstone, "CS_ARCH_SYSTEMZ", None)
        prefix = "SYSTEMZ_OP_" if arch is not None else "SYSZ_OP_"
        if arch is None:
            arch = capstone.CS_ARCH_SYSZ
        consts = importlib.import_module("capstone." + ("systemz_const" if prefix == "SYSTEMZ_OP_"
                                                         else "sysz_const"))
        super().__init__(arch, capstone.CS_MODE_BIG_ENDIAN, {}, consts)
        self._op_reg = getattr(consts, prefix + "REG")
        self._op_imm = getattr(consts, prefix + "IMM")
        self._op_mem = getattr(consts, prefix + "MEM")
        self._tracked = frozenset(self.tracked)
        self._gpr_names: dict[int, tuple[str, int] | None] = {}

    def effects(self, code: bytes, address: int) -> Iterator[Effect | None]:
        # capstone stops at an instruction it cannot decode; the length is in
        # the first two bits, so one bad instruction is one None and decoding
        # goes on after it.
        off = 0
        one = self._lite_effect
        while off + 2 <= len(code):
            for addr, size, mnem, op_str in self._lite.disasm_lite(code[off:], address + off):
                yield one(code, address, addr, size, mnem, op_str)
                off += size
            if off + 2 <= len(code):
                yield None
                off += (2, 4, 4, 6)[code[off] >> 6]
        if off < len(code):
            yield None

    def _name(self, insn: Any, reg: int) -> tuple[str, int] | None:
        try:
            return self._gpr_names[reg]
        except KeyError:
            found = self._gpr_names[reg] = _reg(insn.reg_name(reg) or "")
            return found

    def _dwarf(self, kind: str, n: int) -> int | None:
        if kind == "r":
            return n
        if kind in "fv" and n < 16:  # f0-f15 are the leftmost halves of v0-v15
            return _FPR_DWARF[n]
        return None

    def _effect(self, insn: Any) -> Effect | None:
        mnem: str = insn.mnemonic
        addr, size = insn.address, insn.size
        text = f"{mnem} {insn.op_str}"
        regs: list[tuple[str, int]] = []
        imms: list[int] = []
        mems: list[_Mem] = []
        for op in insn.operands:
            if op.type == self._op_reg:
                found = self._name(insn, op.reg)
                if found is not None:
                    regs.append(found)
            elif op.type == self._op_imm:
                imms.append(op.imm)
            elif op.type == self._op_mem:
                mem = op.mem
                mems.append(_Mem(self._name(insn, mem.base) if mem.base else None,
                                 self._name(insn, mem.index) if mem.index else None,
                                 mem.disp, getattr(mem, "length", 0)))
        flow = self._flow(mnem, regs, imms, mems, addr, size)
        if flow is None:
            return None
        kind, target = flow
        if kind is Flow.CALL:
            # The callee keeps r6-r13, f8-f15 and r15 and may write its register
            # save area, 0..160 above this SP; r14 (and r0-r5) are not tracked.
            return Effect(addr, size, kind, target, (Store(Base.SP, 0, _SAVE_AREA),), (),
                          frozenset(), None, None, text, UNKNOWN_OP, _HOLDERS)
        written = self._written(mnem, regs)
        stores = tuple(self._stores(mnem, regs, mems))
        loads = tuple(self._loads(mnem, regs, mems))
        if mnem in ("ex", "exrl"):
            # The target instruction, with a length from a register: it may
            # write any register and anything in the frame.
            written |= set(self.tracked) | {_SP, _FP, _RA} | _HOLDERS
            stores += (Store(Base.FRAME, 0, None),)
        sp = self._pointer_op(mnem, regs, imms, mems, _SP) if _SP in written else None
        fp = self._pointer_op(mnem, regs, imms, mems, _FP) if _FP in written else None
        alt = self._pointer_op(mnem, regs, imms, mems, _RA) if _RA in written else None
        clobbers = frozenset((written & self._tracked) - {ld.reg for ld in loads})
        moves: tuple[tuple[int, int], ...] = ()
        if mnem in ("ldgr", "lgdr") and len(regs) == 2:  # a GPR to an FPR, or back
            dst, src = self._dwarf(*regs[0]), self._dwarf(*regs[1])
            if dst is not None and src is not None:
                moves = ((dst, src),)
        return Effect(addr, size, kind, target, stores, loads, clobbers, sp, fp, text, alt,
                      frozenset(written & _HOLDERS), moves)

    # -- control flow ------------------------------------------------------------

    def _flow(self, mnem: str, regs: list[tuple[str, int]], imms: list[int], mems: list[_Mem],
              addr: int, size: int) -> tuple[Flow, int | None] | None:
        """(flow, target); None for a branch whose successors cannot be modelled
        (a conditional branch through a register: the function is then unknown)."""
        if mnem in ("brasl", "bras"):
            return Flow.CALL, imms[-1] if imms else None
        if mnem in ("basr", "bas", "balr", "bal"):
            # basr R1,0 only loads the address of the next instruction.
            if mnem in ("basr", "balr") and len(regs) == 2 and regs[1] == ("r", 0):
                return Flow.FALL, None
            return Flow.CALL, None
        if mnem in ("bsm", "bassm", "bakr", "bsa", "bsg"):
            return None  # mode-switching branches: not in code this analysis follows
        if mnem in ("brc", "brcl", "bcr", "bc"):
            mask = imms[0] if imms else None
            if mask == 0:
                return Flow.FALL, None  # nop, nopr, jnop
            if mask != 15:
                if mnem in ("brc", "brcl"):
                    return self._relative(Flow.COND, imms, addr, size)
                if mnem == "bcr" and regs == [("r", _RA)]:
                    return Flow.FALL, None  # a conditional return: the other way falls through
                return None
            mnem = {"brc": "j", "brcl": "jg", "bcr": "br", "bc": "b"}[mnem]
        if mnem in ("bctr", "bctgr"):
            # bctgr R1,0 counts down without branching; with R2 it is conditional.
            return (Flow.FALL, None) if len(regs) == 2 and regs[1] == ("r", 0) else None
        if mnem in ("j", "jg"):
            return self._relative(Flow.JUMP, imms, addr, size)
        if mnem.startswith("j"):
            return self._relative(Flow.COND, imms, addr, size)
        if mnem.startswith(_COND_PREFIXES):
            return self._relative(Flow.COND, imms, addr, size)
        if mnem == "br":
            return (Flow.RETURN if regs == [("r", _RA)] else Flow.INDIRECT), None
        if mnem == "b" and mems:
            return Flow.INDIRECT, None
        if mnem.startswith("b") and mnem.endswith("r") and len(regs) == 1 and not imms \
                and not mems and mnem not in ("bsr", "bakr", "basr", "bassm", "bsm"):
            # ber/bner/bhr ... %r14: a conditional return
            return (Flow.FALL, None) if regs == [("r", _RA)] else None
        if mnem.startswith("b") and mems and mnem not in ("bpp", "bprp"):
            return None  # be/bne ... D(X,B): a conditional indirect branch
        if mnem.startswith(("crb", "cgrb", "cib", "cgib", "clrb", "clgrb", "clib", "clgib")):
            return None  # compare and branch to D(B)
        return Flow.FALL, None

    @staticmethod
    def _relative(kind: Flow, imms: list[int], addr: int, size: int) -> tuple[Flow, int | None] | None:
        if not imms:
            return None
        target = imms[-1]
        if addr < target < addr + size:
            # gcc's __builtin_trap: `j .+2` runs into the halfword 0x0001, an
            # illegal instruction.
            return (Flow.STOP, None) if kind is Flow.JUMP else (Flow.FALL, None)
        return kind, target

    # -- registers -----------------------------------------------------------------

    def _written(self, mnem: str, regs: list[tuple[str, int]]) -> set[int]:
        if mnem in _READ_ONLY or mnem.startswith(("j", "b", "crt", "cgrt", "cit", "cgit", "clrt",
                                                   "clgrt", "clfit", "clgit", "crj", "cgrj", "cij",
                                                   "cgij", "clrj", "clgrj", "clij", "clgij")):
            if mnem.startswith(("brct", "brx", "bct")) and regs:
                return self._regs_of(mnem, regs[:1])  # the counter (brx*: and R1 + 1)
            if mnem.startswith(("bas", "bsm", "bakr")) and regs:
                return self._regs_of(mnem, regs[:1])
            return set()
        if mnem in _FIRST_ONLY and regs:
            return self._regs_of(mnem, regs[:1])
        if mnem in _MULTIPLE or mnem.startswith("vlm"):
            # lmg R1,R3: R1 through R3, wrapping round after r15.
            if len(regs) < 2 or regs[0][0] != regs[1][0]:
                return self._regs_of(mnem, regs) | set(self.tracked) | {_SP, _FP}
            kind, first, last = regs[0][0], regs[0][1], regs[1][1]
            if kind == "v":  # vlm V1,V3: V1 through V3 of 32, no wrap
                numbers = range(first, last + 1) if last >= first else range(32)
            else:
                numbers = range(first, first + (last - first) % 16 + 1)
            return {d for n in numbers if (d := self._dwarf(kind, n % 16 if kind == "r" else n))
                    is not None}
        return self._regs_of(mnem, regs)

    def _regs_of(self, mnem: str, regs: list[tuple[str, int]]) -> set[int]:
        out: set[int] = set()
        pair = mnem in _PAIRS or mnem.startswith(("km", "cu"))
        # Extended (128-bit) floating point: FPR pairs n, n + 2.
        extended = "x" in mnem[1:]
        for kind, n in regs:
            for m in (n, n + 1 if pair and kind == "r" else None,
                      n + 2 if extended and kind in "fv" else None):
                if m is not None and m < 16:
                    d = self._dwarf(kind, m)
                    if d is not None:
                        out.add(d)
        return out

    def _pointer_op(self, mnem: str, regs: list[tuple[str, int]], imms: list[int],
                    mems: list[_Mem], dest: int) -> SPOp:
        """r15/r11/r14 = r15/r11/r14 + constant, for the forms gcc uses; else unknown.
        (gcc points r14 below the register save area to store f8-f15 through it.)"""
        name = _POINTERS
        if not regs or regs[0] != ("r", dest):
            return UNKNOWN_OP
        if mnem in ("aghi", "agfi") and len(regs) == 1 and imms:
            return SPOp(name[dest], imms[0])
        if mnem == "aghik" and len(regs) == 2 and regs[1][0] == "r" and regs[1][1] in name and imms:
            return SPOp(name[regs[1][1]], imms[0])
        if mnem in ("slgfi", "algfi") and len(regs) == 1 and imms:
            return SPOp(name[dest], -imms[0] if mnem == "slgfi" else imms[0])
        if mnem == "lgr" and len(regs) == 2 and regs[1][0] == "r" and regs[1][1] in name:
            return SPOp(name[regs[1][1]], 0)
        if mnem in ("la", "lay") and len(regs) == 1 and len(mems) == 1:
            mem = mems[0]
            if mem.base is not None and mem.base[0] == "r" and mem.base[1] in name \
                    and mem.idx is None:
                return SPOp(name[mem.base[1]], mem.disp)
        return UNKNOWN_OP

    # -- storage -------------------------------------------------------------------

    @staticmethod
    def _place(mem: _Mem) -> tuple[Base, int]:
        frame = {("r", _SP): Base.SP, ("r", _FP): Base.FP, ("r", _RA): Base.ALT}
        kind = frame.get(mem.base) if mem.base is not None else None
        if kind is not None:
            return (Base.FRAME, 0) if mem.idx is not None else (kind, mem.disp)
        if mem.idx is not None and mem.idx in frame:
            return Base.FRAME, 0
        return Base.OTHER, 0

    def _stores(self, mnem: str, regs: list[tuple[str, int]],
                mems: list[_Mem]) -> Iterator[Store]:
        if not mems or mnem in ("la", "lay", "larl") or mnem.startswith(("pfd", "bpp", "bprp")):
            return
        base, disp = self._place(mems[0])
        if base is Base.OTHER:
            return
        if mnem in _REG_STORES:
            width = _REG_STORES[mnem]
            if mnem in _MULTIPLE:
                if len(regs) < 2 or regs[0][0] != regs[1][0]:
                    yield Store(base, disp, None)
                    return
                first, last = regs[0][1], regs[1][1]
                at = disp
                for k in range((last - first) % 16 + 1):
                    n = self._dwarf(regs[0][0], (first + k) % 16) if mnem == "stmg" \
                        and base is not Base.FRAME else None
                    yield Store(base, at, width, n if n in self._tracked else None)
                    at += width
                return
            n = self._dwarf(*regs[0]) if regs else None
            saved = n if mnem in _SAVES and n in self._tracked and base is not Base.FRAME else None
            yield Store(base, disp, width, saved)
            return
        if mnem in _MEM_STORES:
            yield Store(base, disp, _MEM_STORES[mnem])
            return
        if mnem in _SS_STORES:
            length = mems[0].length
            yield Store(base, disp, length if length > 0 else None)
            return
        if mnem.startswith(_STORE_PREFIXES) or not self._reads_only(mnem):
            yield Store(base, disp, None)

    @staticmethod
    def _reads_only(mnem: str) -> bool:
        """The storage operand is only read: loads, arithmetic, compares, tests.
        Everything else with a storage operand (an instruction this module does
        not know) is taken as a store of unknown extent."""
        if mnem in _READ_ONLY:
            return True
        if mnem.startswith(("vl", "vgef", "vgeg")) and not mnem.startswith("vlvg"):
            return True
        return mnem.startswith(("l", "a", "s", "c", "m", "d", "n", "o", "x", "i", "k", "t", "e",
                                "wf", "vl")) and not mnem.startswith(
            ("st", "sp", "srp", "mv", "ni", "oi", "xi", "nc", "oc", "xc", "cs", "cds", "cvd", "ts",
             "tr", "tb", "ed", "ex", "asi", "agsi", "alsi", "algsi", "laa", "lan", "lao", "lax",
             "mp", "dp"))

    def _loads(self, mnem: str, regs: list[tuple[str, int]],
               mems: list[_Mem]) -> Iterator[Load]:
        if not mems or mnem not in ("lg", "ld", "ldy", "lmg") or not regs:
            return
        base, disp = self._place(mems[0])
        if base not in (Base.SP, Base.FP):
            return
        if mnem == "lmg":
            if len(regs) < 2 or regs[0][0] != "r" or regs[1][0] != "r":
                return
            first, last = regs[0][1], regs[1][1]
            for k in range((last - first) % 16 + 1):
                n = (first + k) % 16
                if n in self._tracked:
                    yield Load(n, base, disp + 8 * k, 8)
            return
        dest = self._dwarf(*regs[0])
        if dest in self._tracked and (mnem == "lg") == (regs[0][0] == "r"):
            yield Load(dest, base, disp, 8)


# -- jump tables -------------------------------------------------------------------

_MEM_RE = re.compile(r"^(-?(?:0x)?[0-9a-f]+)\((?:%r(\d+), )?%r(\d+)\)$")


def _operands(text: str) -> tuple[str, list[str]]:
    """('lg', ['%r1', '0(%r1, %r2)']) for 'lg %r1, 0(%r1, %r2)'."""
    mnem, _, rest = text.partition(" ")
    out: list[str] = []
    depth = 0
    word = ""
    for ch in rest:
        if ch == "," and depth == 0:
            out.append(word.strip())
            word = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        word += ch
    if word.strip():
        out.append(word.strip())
    return mnem, out


def _gpr(word: str) -> int | None:
    return int(word[2:]) if word.startswith("%r") and word[2:].isdigit() else None


# Instructions that keep the condition code (loads, stores, address arithmetic).
_KEEP_CC = frozenset({"l", "ly", "lg", "lgf", "llgf", "llgc", "llgh", "llc", "llh", "lh", "lhy",
                      "lgh", "lb", "lgb", "lgr", "lr", "lgfr", "llgfr", "lhi", "lghi", "la", "lay",
                      "larl", "lrl", "lgrl", "st", "sty", "stg", "sth", "sthy", "stc", "stcy", "std",
                      "stdy", "ld", "ldy", "ldgr", "lgdr", "mvhi", "mvghi", "mvhhi", "mvi", "mvc",
                      "sllg", "srlg", "sllk", "srlk", "strl", "stgrl"})
_TAKEN_LE = ("jle", "jnh", "jgle", "jgnh", "clijle", "clijnh", "clgijle", "clgijnh")
_RETURN_GT = ("bhr",)  # bhr %r14: a return taken when above the bound
_TAKEN_GT = ("jh", "jgh", "clijh", "clgijh")


def _names(text: str, reg: int | None) -> bool:
    return reg is not None and re.search(rf"%r{reg}\b", text) is not None


def _bound(effects: list[Effect], k: int, index: int, leaders: dict[int, list[int]]) -> int | None:
    """N when ``effects[k]`` is a conditional branch on ``clfi|clgfi %rI,N``
    before it with only loads and stores between (or a ``clij|clgij
    %rI,N,...``): the unsigned compare of (at least) the low 32 bits of rI with N."""
    mnem, ops = _operands(effects[k].text)
    if mnem.startswith(("clij", "clgij")):
        return _imm(ops[1]) if len(ops) == 3 and _gpr(ops[0]) == index else None
    j = k - 1
    # gcc schedules loads and stores (which keep the condition code) between.
    while j >= 0 and effects[j].flow is Flow.FALL and effects[j + 1].address not in leaders \
            and _operands(effects[j].text)[0] in _KEEP_CC and not _names(effects[j].text, index):
        j -= 1
    if j < 0 or effects[j + 1].address in leaders:
        return None
    cmp, cops = _operands(effects[j].text)
    if cmp in ("clfi", "clgfi") and len(cops) == 2 and _gpr(cops[0]) == index:
        return _imm(cops[1])
    return None


_CALL_CLOBBERED = frozenset({0, 1, 2, 3, 4, 5, 14})
_Sym = tuple[str, int, int]  # ("idx", I, 0) | ("tab", T, 0) | ("ent", T, I)


def _sym(sym: dict[int, _Sym], reg: int, effects: list[Effect],
         leaders: dict[int, list[int]]) -> _Sym | None:
    if reg in sym:
        return sym[reg]
    table = _single_larl(effects, reg, leaders)
    return None if table is None else ("tab", table, 0)


def _single_larl(effects: list[Effect], reg: int, leaders: dict[int, list[int]]) -> int | None:
    """T when callee-saved ``reg`` (r11 too) is written by exactly one instruction of the
    function, ``larl %rREG,T`` (a table base hoisted out of a loop), besides
    the epilogue's restores (lmg/lg followed only by loads up to a return)."""
    if reg not in CALLEE_SAVED["s390x"] and reg != _FP:
        return None
    found: int | None = None
    for k, eff in enumerate(effects):
        if reg not in eff.clobbers and not any(ld.reg == reg for ld in eff.loads) and not (
                reg == _FP and eff.fp is not None):
            continue
        if _operands(eff.text)[0] in ("lmg", "lg") and _falls_to_return(effects, k + 1, leaders):
            continue
        mnem, ops = _operands(eff.text)
        if found is not None or mnem != "larl" or len(ops) != 2 or _gpr(ops[0]) != reg:
            return None
        found = _imm(ops[1])
    return found


def _falls_to_return(effects: list[Effect], k: int, leaders: dict[int, list[int]]) -> bool:
    while k < len(effects) and effects[k].address not in leaders:
        eff = effects[k]
        if eff.flow is Flow.RETURN or (eff.flow is Flow.JUMP and eff.target is not None and not (
                effects[0].address <= eff.target < effects[-1].address + effects[-1].size)):
            return True  # br %r14, or a tail call (jg out of the function)
        if eff.flow is not Flow.FALL or _operands(eff.text)[0] not in ("ld", "ldy", "lg", "lmg"):
            return False
        k += 1
    return False


def s390x_jump_table(effects: list[Effect], i: int,
                     read: Callable[[int, int], bytes | None]) -> list[int] | None:
    """Targets of the jump table that ``b 0(%rX,%rY)`` at ``effects[i]``
    dispatches through, for gcc's s390x form; None when it is not exactly that:

        clfi %rI,N ; jh DEFAULT            (falls into L)  and/or
        clfi %rI,N ; jle L | jnh L         (the only branches to L)
     L: risbg %rA,%rI,S,0xbc,3 (S >= 29) | sllg %rA,%rI,3 ;
        larl %rT,T (or %rT a callee-saved register set once, to T) ;
        lg %rE,0(%rA,%rT) ; b 0(%rE,%rT)

    in any order inside L (up to 8 instructions, none a branch target), with
    any register operand order and T loaded into two registers or copied
    (``lgr``); any other instruction that names a register of the block
    cancels what the block knows about it. (``clij %rI,N,...`` may stand for
    the compare and branch.) Between the ``jh`` and L only instructions that
    are no branch targets and do not name rI. A call (``brasl``) may fall into
    L when rI is call-clobbered: gcc dispatches on it there only after a call
    that does not return. The N + 1 entries are 8-byte offsets from T, read
    from the file; reading more (a masked index) only adds targets. The
    compare bounds the low 32 bits: with ``sllg`` gcc has proven the high
    bits 0 (else the program would jump through garbage).
    """
    leaders: dict[int, list[int]] = {}
    for k, eff in enumerate(effects):
        if eff.target is not None and eff.flow is not Flow.CALL:
            leaders.setdefault(eff.target, []).append(k)
    mnem, ops = _operands(effects[i].text)
    m = _MEM_RE.match(ops[0]) if mnem == "b" and len(ops) == 1 else None
    if m is None or _imm(m.group(1)) != 0 or m.group(2) is None or m.group(2) == m.group(3):
        return None
    # L starts at the scaling of the index, at most 8 instructions up.
    start: int | None = None
    for j in range(i - 1, max(-1, i - 9), -1):
        mnem, ops = _operands(effects[j].text)
        if mnem in ("risbg", "sllg") and len(ops) >= 3 and _imm(ops[-1]) == 3 and (
                mnem == "sllg" or (len(ops) == 5 and _imm(ops[3]) == 0xBC
                                   and (_imm(ops[2]) or 0) >= 29)):
            start = j
            break
    if start is None:
        return None
    # Symbolic execution of L.
    sym: dict[int, _Sym] = {}
    index_reg: int | None = None
    for j in range(start, i):
        eff = effects[j]
        if (j > start and eff.address in leaders) or eff.flow is not Flow.FALL:
            return None
        mnem, ops = _operands(eff.text)
        dest = _gpr(ops[0]) if ops else None
        value: _Sym | None = None
        if j == start:
            index_reg = _gpr(ops[1])
            value = ("idx", index_reg or 0, 0)
            if index_reg is None:
                return None
        elif mnem == "larl" and len(ops) == 2 and _imm(ops[1]) is not None:
            value = ("tab", _imm(ops[1]) or 0, 0)
        elif mnem == "lgr" and len(ops) == 2 and _gpr(ops[1]) in sym:
            value = sym[_gpr(ops[1]) or 0]
        elif mnem == "lg" and len(ops) == 2 and (mm := _MEM_RE.match(ops[1])) is not None \
                and _imm(mm.group(1)) == 0 and mm.group(2) is not None:
            pair = [_sym(sym, int(mm.group(g)), effects, leaders) for g in (2, 3)]
            kinds = sorted(p for p in pair if p is not None)
            if len(kinds) == 2 and kinds[0][0] == "idx" and kinds[1][0] == "tab":
                value = ("ent", kinds[1][1], kinds[0][1])
        if value is not None and dest is not None:
            sym[dest] = value  # the forms above write their first operand only
        else:
            for reg in list(sym):
                if _names(eff.text, reg):
                    del sym[reg]
    pair = [_sym(sym, int(m.group(g)), effects, leaders) for g in (2, 3)]
    kinds = sorted(p for p in pair if p is not None)
    if len(kinds) != 2 or kinds[0][0] != "ent" or kinds[1][0] != "tab" \
            or kinds[0][1] != kinds[1][1] or kinds[0][2] != index_reg or index_reg is None:
        return None
    table = kinds[1][1]
    # L's entry: up from the scaling over instructions that leave rI alone,
    # to a branch target or what does not fall through. Every way in bounds rI.
    entry = start
    while entry > 0 and effects[entry].address not in leaders \
            and effects[entry - 1].flow is Flow.FALL \
            and not _names(effects[entry - 1].text, index_reg) \
            and _operands(effects[entry - 1].text)[0] not in _RETURN_GT:
        entry -= 1
    bound = -1
    for k in leaders.get(effects[entry].address, []):
        n = _bound(effects, k, index_reg, leaders)
        if n is None or _operands(effects[k].text)[0] not in _TAKEN_LE:
            return None
        bound = max(bound, n)
    prev = entry - 1
    if prev >= 0 and _operands(effects[prev].text) == ("bhr", ["%r14"]):
        # clfi %rI,N ; bhr %r14 (return when above N) ; [prologue] ; L
        n = _bound(effects, prev, index_reg, leaders)
        if n is None:
            return None
        bound = max(bound, n)
    elif prev < 0 or effects[prev].flow is Flow.FALL:
        return None  # the index is set just before: no bound seen
    elif effects[prev].flow is Flow.COND:
        n = _bound(effects, prev, index_reg, leaders)
        if n is None or _operands(effects[prev].text)[0] not in _TAKEN_GT:
            return None
        bound = max(bound, n)
    elif effects[prev].flow not in (Flow.JUMP, Flow.RETURN, Flow.INDIRECT, Flow.STOP) and not (
            effects[prev].flow is Flow.CALL and index_reg in _CALL_CLOBBERED):
        return None
    if not 0 <= bound < TABLE_MAX:
        return None
    data = read(table, 8 * (bound + 1))
    if data is None:
        return None
    return [table + e for e in struct.unpack(f">{bound + 1}q", data)]
