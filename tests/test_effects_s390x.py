"""The s390x instruction effects (sframe_core.analysis.s390x) on hand-assembled
instructions, and the analysis over a hand-assembled gcc-style function. The
proof on real code is tests/test_saved.py (every PC of the s390x deep fixture
and of bzip2 for s390x against .eh_frame)."""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from sframe_core.analysis.decoders import decoder_for
from sframe_core.analysis.effects import UNKNOWN_OP, Base, Flow, Load, SPOp, Store
from sframe_core.analysis.s390x import s390x_jump_table
from sframe_core.analysis.saved import analyse
from sframe_core.base.abi import S390X
from sframe_core.base.rows import SAME, CFARule, Rule, RuleKind
from sframe_core.format.elf import read_elf

F8, F9, F15 = 24, 28, 31


def effect(hexcode: str, address: int = 0x1000):
    decoder = decoder_for(S390X)
    assert decoder is not None
    found = list(decoder.effects(bytes.fromhex(hexcode), address))
    assert len(found) == 1
    return found[0]


def test_stmg_saves_each_register_of_the_range() -> None:
    eff = effect("eb6ff0300024")  # stmg %r6,%r15,48(%r15)
    regs = [6, 7, 8, 9, 10, None, 12, 13, None, None]  # r11 is SFrame's FP; r14, r15 untracked
    assert eff.stores == tuple(Store(Base.SP, 48 + 8 * k, 8, r) for k, r in enumerate(regs))
    assert eff.flow is Flow.FALL and eff.clobbers == frozenset() and eff.sp is None


def test_lmg_restores_and_leaves_sp_unknown() -> None:
    eff = effect("eb6ff0d00004")  # lmg %r6,%r15,208(%r15)
    assert eff.loads == tuple(Load(r, Base.SP, 208 + 8 * (r - 6), 8) for r in (6, 7, 8, 9, 10, 12, 13))
    assert eff.sp == UNKNOWN_OP and eff.fp == UNKNOWN_OP and eff.alt == UNKNOWN_OP


def test_fprs_saved_through_r14() -> None:
    assert effect("b90400ef").alt == SPOp("sp", 0)  # lgr %r14,%r15
    assert effect("a7ebffd0").alt == SPOp("alt", -48)  # aghi %r14,-48
    assert effect("6080e000").stores == (Store(Base.ALT, 0, 8, F8),)  # std %f8,0(%r14)
    assert effect("6880f0a0").loads == (Load(F8, Base.SP, 160, 8),)  # ld %f8,160(%r15)
    assert effect("e3f0ff60ff71").sp == SPOp("sp", -160)  # lay %r15,-160(%r15)
    assert effect("a7fbff60").sp == SPOp("sp", -160)  # aghi %r15,-160
    assert effect("b90400bf").fp == SPOp("sp", 0)  # lgr %r11,%r15


def test_calls_returns_and_branches() -> None:
    call = effect("c0e500000008")  # brasl %r14,.+16
    assert call.flow is Flow.CALL and call.target == 0x1010
    assert call.stores == (Store(Base.SP, 0, 160),)  # the callee's register save area
    assert call.alt == UNKNOWN_OP and call.clobbers == frozenset()
    assert effect("0de1").flow is Flow.CALL  # basr %r14,%r1
    assert effect("07fe").flow is Flow.RETURN  # br %r14
    assert effect("078e").flow is Flow.FALL  # ber %r14: a conditional return
    assert effect("07f1").flow is Flow.INDIRECT  # br %r1
    assert effect("0707").flow is Flow.FALL  # nopr %r7
    assert effect("a7f40001").flow is Flow.STOP  # j .+2: gcc's __builtin_trap
    cond = effect("a7840010")  # je .+32
    assert cond.flow is Flow.COND and cond.target == 0x1020
    brct = effect("a7760010")  # brct %r7,.+32: a loop counter in r7
    assert brct.flow is Flow.COND and brct.clobbers == frozenset({7})
    # A conditional branch through a register: not modelled, the function is unknown.
    assert effect("0771") is None  # bner %r1


def test_storage_operands() -> None:
    assert effect("d207f0a02000").stores == (Store(Base.SP, 160, 8),)  # mvc 160(8,%r15),0(%r2)
    assert effect("e310f0a00020").stores == ()  # cg %r1,160(%r15): read only
    assert effect("e360f0a00004").loads == (Load(6, Base.SP, 160, 8),)  # lg %r6,160(%r15)
    assert effect("5060f0a0").stores == (Store(Base.SP, 160, 4),)  # st %r6: 32 bits, not a save
    assert effect("e361f0a00024").stores == (Store(Base.FRAME, 0, 8, None),)  # stg %r6,160(%r1,%r15)
    # An instruction this module does not know: a store of unknown extent.
    assert effect("dd07f0a01000").stores == (Store(Base.SP, 160, None),)  # trt 160(8,%r15),0(%r1)


def test_register_writes() -> None:
    assert effect("b9860062").clobbers == frozenset({6, 7})  # mlgr %r6,%r2: an even-odd pair
    assert effect("b3c10082").clobbers == frozenset({F8})  # ldgr %f8,%r2
    assert effect("e788f0a00436").clobbers == frozenset(range(F8, F15 + 1))  # vlm %v8,%v24
    assert effect("b9040062").clobbers == frozenset({6})  # lgr %r6,%r2
    assert effect("b9200062").clobbers == frozenset()  # cgr %r6,%r2


# A gcc-style function: stmg; lgr %r14,%r15; lay %r15,-176(%r15); aghi %r14,-8;
# std %f9,0(%r14); brasl; ld %f9,168(%r15); lmg; br %r14.
FUNC = ("eb6ff0300024" "b90400ef" "e3f0ff50ff71" "a7ebfff8" "6090e000" "c0e5deadbeef"
        "6890f0a8" "eb6ff1000004" "07fe")


def test_analysis_of_a_gcc_style_function() -> None:
    start = 0x2000
    code = bytes.fromhex(FUNC)
    # The CFA rules SFrame gives for it: sp+160 until the lay, sp+336 after, sp+160 at the br.
    lay, br = start + 10, start + len(code) - 2

    def cfa_at(pc: int) -> CFARule:
        return CFARule(15, 336 if lay < pc < br else 160)

    result = analyse(S390X, code, start, cfa_at)
    assert not result.note
    at_entry = dict(result.regs_at(start)[0])
    assert at_entry[6] == SAME and at_entry[F9] == SAME
    call = start + 24
    regs = dict(result.regs_at(call)[0])
    assert regs[6] == Rule(RuleKind.AT_CFA, -112) and regs[13] == Rule(RuleKind.AT_CFA, -56)
    assert regs[F9] == Rule(RuleKind.AT_CFA, -168)  # CFA - 160 - 8
    after_restore = dict(result.regs_at(br)[0])
    # Restored; its slot is below SP now (a signal handler may reuse it).
    assert after_restore[F9] == SAME and after_restore[6] == Rule(RuleKind.AT_CFA, -112)


F0, F4 = 16, 18
# A gcc-style leaf: ldgr %f4,%r9; lgr %r9,%r2; ld %f0,0(%r2); lgdr %r9,%f4; br %r14.
LEAF = "b3c10049" "b9040092" "68002000" "b3cd0094" "07fe"


def test_register_kept_in_an_fpr() -> None:
    save = effect("b3c10049")  # ldgr %f4,%r9
    assert save.moves == ((F4, 9),) and save.others == frozenset({F4})
    back = effect("b3cd0094")  # lgdr %r9,%f4
    assert back.moves == ((9, F4),) and back.clobbers == frozenset({9}) and not back.others
    assert effect("c0e500000008").others == frozenset(range(16, 24))  # a call: f0-f7
    start = 0x3000
    result = analyse(S390X, bytes.fromhex(LEAF), start, lambda pc: CFARule(15, 160))
    assert dict(result.regs_at(start)[0])[9] == SAME
    # From the copy on "in f4", as gcc's .cfi_register says (the decoder takes
    # ldgr's source as written too).
    assert dict(result.regs_at(start + 4)[0])[9] == Rule(RuleKind.IN_REG, 0, F4)
    assert dict(result.regs_at(start + 8)[0])[9] == Rule(RuleKind.IN_REG, 0, F4)
    assert dict(result.regs_at(start + 12)[0])[9] == Rule(RuleKind.IN_REG, 0, F4)
    assert dict(result.regs_at(start + 16)[0])[9] == SAME  # back from f4
    # f4 overwritten while it holds r9: unknown from there on.
    clobbered = analyse(S390X, bytes.fromhex("b3c10049" "b9040092" "68402000" "b3cd0094" "07fe"),
                        start, lambda pc: CFARule(15, 160))
    assert 9 not in dict(clobbered.regs_at(start + 12)[0])
    assert 9 not in dict(clobbered.regs_at(start + 16)[0])


def test_jump_table_of_bzip2() -> None:
    """BZ2_decompress's switch: clfi %r1,39 ... jle L; L: risbg; larl; lg; b."""
    path = FIXTURES / "realprogs" / "s390x" / "bzip2" / "bzip2"
    section = read_elf(str(path)).open()
    assert section is not None and section.code is not None
    fde = next(f for f in section.iter_fdes() if f.start == 0x1009048)
    decoder = decoder_for(S390X)
    assert decoder is not None
    effects = list(decoder.effects(section.code(fde.start, fde.size) or b"", fde.start))
    sites = [i for i, e in enumerate(effects) if e is not None and e.flow is Flow.INDIRECT]
    assert len(sites) == 1
    targets = s390x_jump_table(effects, sites[0], section.code)  # type: ignore[arg-type]
    assert targets is not None and len(targets) == 40
    starts = {e.address for e in effects if e is not None}
    assert all(t in starts for t in targets)


@pytest.mark.parametrize("hexcode", ["eb6ff0300024", "07fe"])
def test_truncated_code_is_undecodable(hexcode: str) -> None:
    decoder = decoder_for(S390X)
    assert decoder is not None
    assert list(decoder.effects(bytes.fromhex(hexcode)[:-1], 0x1000))[-1] is None


def test_lookup_says_where_each_register_is() -> None:
    """`sframe lookup` on the .noeh file: the code analysis's rules in words."""
    from helpers.oracle import sframe

    path = str(FIXTURES / "realprogs" / "s390x" / "bzip2" / "bzip2.noeh")
    body = sframe("lookup", path, "0x1003de2").stdout.splitlines()[-1]  # in BZ2_blockSort
    assert body == ("CFA = r15 + 384; RA at CFA - 48; FP at CFA - 72; r6 at CFA - 112; "
                    "r7 at CFA - 104; r8 at CFA - 96; r9 at CFA - 88; r10 at CFA - 80; "
                    "r12 at CFA - 64; r13 at CFA - 56; f8 at CFA - 176; f10 at CFA - 168; "
                    "f12, f14, f9, f11, f13, f15 unchanged; caller SP = CFA - 160")
    entry = sframe("lookup", path, "0x1003bc0").stdout.splitlines()[-1]
    assert "r6-r10, r12, r13, f8, f10, f12, f14, f9, f11, f13, f15 unchanged" in entry
    # mainGtU, a leaf: gcc keeps r9 in f4 (and r11, SFrame's FP, in f0).
    leaf = sframe("lookup", path, "0x1002392").stdout.splitlines()[-1]
    assert leaf == ("CFA = r15 + 160; RA in r14 (not saved); FP in f0; r9 in f4; r6-r8, r10, "
                    "r12, r13, f8, f10, f12, f14, f9, f11, f13, f15 unchanged; caller SP = CFA - 160")
