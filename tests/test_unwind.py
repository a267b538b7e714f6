"""The step function on synthetic stacks: every ABI rule and every stop reason.

Each test builds registers, a word-addressed memory and hand-made rows, so a
failure names the rule that broke, with no ELF file or decoder involved.
"""

from __future__ import annotations

import struct

import pytest

from sframe_core.base.abi import AARCH64_BE, AARCH64_LE, AMD64, S390X, Arch
from sframe_core.base.errors import FormatError
from sframe_core.base.rows import SAME, UNDEFINED, CFARule, Row, Rule, RuleKind
from sframe_core.unwind.calls import CALL_WINDOW, ends_with_call
from sframe_core.unwind.step import Frame, Step, Stop, StopReason, step, step_with_row, strip_pac, walk

RSP, RBP, RBX, RIP = 7, 6, 3, 16
X29, X30, SP = 29, 30, 31


class Mem:
    """Memory made of 8-byte words; anything else is unreadable."""

    def __init__(self, words: dict[int, int], big: bool = False) -> None:
        fmt = ">Q" if big else "<Q"
        self.bytes = {addr: struct.pack(fmt, value) for addr, value in words.items()}

    def read(self, address: int, size: int) -> bytes | None:
        data = self.bytes.get(address)
        return data[:size] if data is not None and size <= 8 else None


class Rows:
    """A row source over a list of rows, recording the PCs it was asked for."""

    def __init__(self, *rows: Row) -> None:
        self.rows = rows
        self.asked: list[int] = []

    def row_at(self, pc: int) -> Row | None:
        self.asked.append(pc)
        return next((r for r in self.rows if r.start <= pc < r.end), None)


class Broken:
    def row_at(self, pc: int) -> Row | None:
        raise FormatError("FDE 3: FRE start beyond the function", 0x40)


def row(cfa: CFARule | None, ra: Rule, fp: Rule = SAME, *, start: int = 0x1000,
        end: int = 0x2000, **kw: object) -> Row:
    return Row(start, end, start, cfa, ra, fp, **kw)  # type: ignore[arg-type]


def at(offset: int) -> Rule:
    return Rule(RuleKind.AT_CFA, offset)


def ok(result: Step | Stop) -> Step:
    assert isinstance(result, Step), result
    return result


def stopped(result: Step | Stop, reason: StopReason) -> Stop:
    assert isinstance(result, Stop), result
    assert result.reason is reason, result
    return result


# -- amd64 ------------------------------------------------------------------


def test_amd64_sp_based_cfa() -> None:
    frame = Frame(0x1010, {RSP: 0x7000, RBP: 0x1234}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(RSP, 16), at(-8)), Mem({0x7008: 0x401000}), AMD64))
    assert s.cfa == 0x7010
    assert s.caller.pc == 0x401000
    assert dict(s.caller.regs) == {RSP: 0x7010, RBP: 0x1234}  # FP not saved: unchanged
    assert s.caller.interrupted is False


def test_amd64_fp_based_cfa_with_saved_fp() -> None:
    frame = Frame(0x1010, {RSP: 0x6F00, RBP: 0x7000}, interrupted=True)
    memory = Mem({0x7008: 0x402000, 0x7000: 0x7100})
    s = ok(step_with_row(frame, row(CFARule(RBP, 16), at(-8), at(-16)), memory, AMD64))
    assert (s.cfa, s.caller.pc) == (0x7010, 0x402000)
    assert dict(s.caller.regs) == {RSP: 0x7010, RBP: 0x7100}


def test_amd64_fp_saved_but_unreadable_is_unknown_in_the_caller() -> None:
    """Only the CFA and the RA are essential: a saved register whose slot
    cannot be read is unknown in the caller, and the walk goes on (issue 12)."""
    frame = Frame(0x1010, {RSP: 0x6F00, RBP: 0x7000}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(RBP, 16), at(-8), at(-16)),
                         Mem({0x7008: 0x402000}), AMD64))
    assert s.caller.pc == 0x402000 and dict(s.caller.regs) == {RSP: 0x7010}


def test_amd64_fp_through_a_register_that_holds_garbage() -> None:
    """The DRAP epilogue after `pop %rbp`: the row reads the FP at *(rbp - 8)
    and rbp already holds the caller's value (here 1): FP unknown, walk on."""
    frame = Frame(0x1010, {RSP: 0x6FF8, RBP: 1, 10: 0x7000}, interrupted=True)
    fp = Rule(RuleKind.AT_REG, -8, RBP)
    s = ok(step_with_row(frame, row(CFARule(10, 0), at(-8), fp), Mem({0x6FF8: 0x402000}),
                         AMD64))
    assert s.caller.pc == 0x402000 and RBP not in s.caller.regs


def test_amd64_callee_saved_slots_read_or_unknown() -> None:
    frame = Frame(0x1010, {RSP: 0x6FE8, RBX: 5}, interrupted=True)
    regs = ((RBX, at(-24)), (12, at(-16)), (13, SAME), (14, SAME))
    r = row(CFARule(RSP, 24), at(-8))._replace(regs=regs)
    s = ok(step_with_row(frame, r, Mem({0x6FF8: 0x402000, 0x6FE8: 0x77}), AMD64))
    # rbx from its slot; r12's slot unreadable: unknown; r13 unchanged but
    # unknown in this frame: unknown; r14 unknown likewise.
    assert dict(s.caller.regs) == {RBX: 0x77, RSP: 0x7000}
    frame = Frame(0x1010, {RSP: 0x6FE8, 13: 9}, interrupted=True)
    s = ok(step_with_row(frame, r, Mem({0x6FF8: 0x402000, 0x6FE8: 0x77, 0x6FF0: 0x12}), AMD64))
    assert dict(s.caller.regs) == {RBX: 0x77, 12: 0x12, 13: 9, RSP: 0x7000}


def test_amd64_fp_unknown_stays_unknown() -> None:
    frame = Frame(0x1010, {RSP: 0x7000}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(RSP, 8), at(-8)), Mem({0x7000: 0x401000}), AMD64))
    assert dict(s.caller.regs) == {RSP: 0x7008}


# -- aarch64 ----------------------------------------------------------------


@pytest.mark.parametrize("arch", [AARCH64_LE, AARCH64_BE], ids=["le", "be"])
def test_aarch64_ra_in_lr_at_innermost_frame(arch: Arch) -> None:
    frame = Frame(0x1000, {SP: 0x8000, X29: 0x8100, X30: 0x401234}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(SP, 0), SAME), Mem({}, arch.big_endian), arch))
    assert (s.cfa, s.caller.pc) == (0x8000, 0x401234)
    assert dict(s.caller.regs) == {SP: 0x8000, X29: 0x8100, X30: 0x401234}


@pytest.mark.parametrize("arch", [AARCH64_LE, AARCH64_BE], ids=["le", "be"])
def test_aarch64_ra_in_lr_is_unknown_in_a_caller(arch: Arch) -> None:
    frame = Frame(0x1000, {SP: 0x8000, X30: 0x401234}, interrupted=False)
    result = step_with_row(frame, row(CFARule(SP, 16), SAME), Mem({}, arch.big_endian), arch)
    assert stopped(result, StopReason.REGISTER_UNKNOWN).detail == "return address in x30 at pc 0x1000"


@pytest.mark.parametrize("arch", [AARCH64_LE, AARCH64_BE], ids=["le", "be"])
def test_aarch64_ra_and_fp_on_the_stack(arch: Arch) -> None:
    frame = Frame(0x1000, {SP: 0x8000, X29: 0x8000, X30: 0x999}, interrupted=False)
    memory = Mem({0x8008: 0x402468, 0x8000: 0x8200}, arch.big_endian)
    s = ok(step_with_row(frame, row(CFARule(X29, 16), at(-8), at(-16)), memory, arch))
    assert (s.cfa, s.caller.pc) == (0x8010, 0x402468)
    assert dict(s.caller.regs) == {SP: 0x8010, X29: 0x8200, X30: 0x402468}


def test_aarch64_big_endian_reads_big_endian_words() -> None:
    frame = Frame(0x1000, {SP: 0x8000}, interrupted=True)
    little = Mem({0x8008: 0x402468})  # the same number, stored the wrong way round
    s = ok(step_with_row(frame, row(CFARule(SP, 16), at(-8)), little, AARCH64_BE))
    assert s.caller.pc == 0x6824400000000000


@pytest.mark.parametrize("key", ["a", "b"])
def test_aarch64_pac_signed_ra_is_stripped(key: str) -> None:
    # Key A and key B sign differently but strip the same way: the signature
    # lives in the bits above the virtual-address size.
    signed = {"a": 0x002A_0000_0040_1234, "b": 0x7F55_0000_0040_1234}[key]
    frame = Frame(0x1000, {SP: 0x8000}, interrupted=True)
    r = row(CFARule(SP, 16), at(-8), at(-16), ra_signed=True)
    s = ok(step_with_row(frame, r, Mem({0x8008: signed, 0x8000: 0}), AARCH64_LE))
    assert s.caller.pc == 0x401234
    assert s.caller.regs[X30] == signed  # the register keeps what the stack held


def test_aarch64_pac_mask_from_the_target() -> None:
    frame = Frame(0x1000, {SP: 0x8000}, interrupted=True)
    r = row(CFARule(SP, 16), at(-8), ra_signed=True)
    s = ok(step_with_row(frame, r, Mem({0x8008: 0x0080_0000_0040_1234}), AARCH64_LE,
                         pac_mask=0x00FF_8000_0000_0000))
    assert s.caller.pc == 0x401234
    assert strip_pac(0xFFFF_0000_0000_1000) == 0x1000


def test_aarch64_unsigned_ra_is_not_stripped() -> None:
    frame = Frame(0x1000, {SP: 0x8000}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(SP, 16), at(-8)), Mem({0x8008: 0x002A_0000_0040_1234}),
                         AARCH64_LE))
    assert s.caller.pc == 0x002A_0000_0040_1234


# -- s390x ------------------------------------------------------------------


def test_s390x_caller_sp_is_cfa_minus_160_and_ra_fp_on_stack() -> None:
    frame = Frame(0x1000, {15: 0x9000, 11: 0x1}, interrupted=True)
    memory = Mem({0x90A0 - 48: 0x80001234, 0x90A0 - 72: 0x9500}, big=True)
    s = ok(step_with_row(frame, row(CFARule(15, 160), at(-48), at(-72)), memory, S390X))
    assert (s.cfa, s.caller.pc) == (0x90A0, 0x80001234)
    assert dict(s.caller.regs) == {15: 0x9000, 11: 0x9500, 14: 0x80001234}


def test_s390x_ra_and_fp_saved_in_registers() -> None:
    # v2's odd words: RA in f0 (DWARF 16), FP in f2 (DWARF 17).
    frame = Frame(0x1000, {15: 0x9000, 16: 0x80004444, 17: 0x9800}, interrupted=True)
    r = row(CFARule(15, 160), Rule(RuleKind.IN_REG, 0, 16), Rule(RuleKind.IN_REG, 0, 17))
    s = ok(step_with_row(frame, r, Mem({}, big=True), S390X))
    assert (s.cfa, s.caller.pc) == (0x90A0, 0x80004444)
    assert dict(s.caller.regs) == {15: 0x9000, 11: 0x9800, 14: 0x80004444}


# -- v3 flexible rules ------------------------------------------------------


def test_flex_register_based_cfa() -> None:
    # DRAP: CFA = r10 + 0 (a realigned stack keeps the old SP in r10).
    frame = Frame(0x1000, {RSP: 0x6000, 10: 0x7000}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(10, 0), at(-8)), Mem({0x6FF8: 0x401000}), AMD64))
    assert (s.cfa, s.caller.pc, s.caller.regs[RSP]) == (0x7000, 0x401000, 0x7000)


def test_flex_dereferenced_cfa() -> None:
    # CFA = *(rbp - 8), RA at CFA - 8, FP at CFA - 16.
    frame = Frame(0x1000, {RSP: 0x6000, RBP: 0x6100}, interrupted=True)
    memory = Mem({0x60F8: 0x7000, 0x6FF8: 0x401000, 0x6FF0: 0x7100})
    s = ok(step_with_row(frame, row(CFARule(RBP, -8, deref=True), at(-8), at(-16)), memory, AMD64))
    assert (s.cfa, s.caller.pc) == (0x7000, 0x401000)
    assert dict(s.caller.regs) == {RSP: 0x7000, RBP: 0x7100}


def test_flex_dereferenced_cfa_unreadable() -> None:
    frame = Frame(0x1000, {RSP: 0x6000, RBP: 0x6100}, interrupted=True)
    result = step_with_row(frame, row(CFARule(RBP, -8, deref=True), at(-8)), Mem({}), AMD64)
    assert stopped(result, StopReason.MEMORY).detail == "at 0x60f8"


def test_flex_ra_in_rbx() -> None:
    frame = Frame(0x1000, {RSP: 0x6000, RBX: 0x405555}, interrupted=True)
    s = ok(step_with_row(frame, row(CFARule(RSP, 8), Rule(RuleKind.IN_REG, 0, RBX)), Mem({}),
                         AMD64))
    assert s.caller.pc == 0x405555


def test_flex_ra_at_register_and_other_registers() -> None:
    # RA = *(rbx + 16); rbx restored as CFA + 0 (val_offset); r12 = load(CFA - 24).
    frame = Frame(0x1000, {RSP: 0x6000, RBX: 0x5000}, interrupted=True)
    r = row(CFARule(RSP, 32), Rule(RuleKind.AT_REG, 16, RBX),
            regs=((RBX, Rule(RuleKind.CFA_PLUS, 0)), (12, at(-24))))
    s = ok(step_with_row(frame, r, Mem({0x5010: 0x406666, 0x6008: 0xABC}), AMD64))
    assert s.caller.pc == 0x406666
    assert dict(s.caller.regs) == {RSP: 0x6020, RBX: 0x6020, 12: 0xABC}


# -- stop reasons -----------------------------------------------------------


def test_stop_no_info() -> None:
    result = step(Frame(0x5000, {RSP: 0x7000}, interrupted=True), Rows(), Mem({}), AMD64)
    assert str(stopped(result, StopReason.NO_INFO)) == \
        "no unwind information covers this PC: pc 0x5000"


def test_no_info_with_zero_frame_pointer_is_outermost() -> None:
    """_start clears rbp and has no unwind information: glibc's outermost rule."""
    result = step(Frame(0x5000, {RSP: 0x7000, RBP: 0}), Rows(), Mem({}), AMD64)
    assert str(stopped(result, StopReason.OUTERMOST)) == (
        "outermost frame (return address undefined): no unwind information at pc 0x5000 "
        "and the frame pointer is 0, as at _start")


@pytest.mark.parametrize("r", [row(None, UNDEFINED), row(CFARule(RSP, 8), UNDEFINED),
                               row(CFARule(RSP, 8), at(-8), outermost=True)],
                         ids=["no-cfa", "ra-undefined", "outermost-flag"])
def test_stop_outermost(r: Row) -> None:
    result = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), r, Mem({0x7000: 1}), AMD64)
    assert str(stopped(result, StopReason.OUTERMOST)) == "outermost frame (return address undefined)"


def test_stop_ra_zero() -> None:
    result = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), row(CFARule(RSP, 8), at(-8)),
                           Mem({0x7000: 0}), AMD64)
    stopped(result, StopReason.RA_ZERO)


def test_stop_unknown_rule() -> None:
    result = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), row(None, at(-8)), Mem({}), AMD64)
    assert stopped(result, StopReason.UNKNOWN_RULE).detail == "pc 0x1000 (sframe)"


def test_stop_register_unknown() -> None:
    result = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), row(CFARule(RBP, 16), at(-8)),
                           Mem({}), AMD64)
    assert stopped(result, StopReason.REGISTER_UNKNOWN).detail == "rbp at pc 0x1000"


def test_stop_memory_unreadable() -> None:
    result = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), row(CFARule(RSP, 8), at(-8)),
                           Mem({}), AMD64)
    assert stopped(result, StopReason.MEMORY).detail == "at 0x7000"


def test_stop_cfa_not_up() -> None:
    below = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), row(CFARule(RSP, -8), at(-8)),
                          Mem({}), AMD64)
    assert stopped(below, StopReason.CFA_NOT_UP).detail == "CFA 0x6ff8 is not above SP 0x7000"
    # Equal is fine for the innermost frame, not for a caller.
    same = row(CFARule(RSP, 0), Rule(RuleKind.IN_REG, 0, RBX))
    ok(step_with_row(Frame(0x1000, {RSP: 0x7000, RBX: 0x401000}, True), same, Mem({}), AMD64))
    stopped(step_with_row(Frame(0x1000, {RSP: 0x7000, RBX: 0x401000}, False), same, Mem({}), AMD64),
            StopReason.CFA_NOT_UP)


def test_stop_misaligned() -> None:
    result = step_with_row(Frame(0x1000, {RSP: 0x7000}, True), row(CFARule(RSP, 12), at(-8)),
                           Mem({}), AMD64)
    assert stopped(result, StopReason.MISALIGNED).detail == "CFA 0x700c"


def test_stop_loop() -> None:
    # A signal-frame row lets CFA == SP; a return address pointing back at
    # the same PC then revisits (pc, CFA).
    rows = Rows(row(CFARule(RSP, 0), at(-8), signal=True))
    items = list(walk(Frame(0x1000, {RSP: 0x7000}, True), rows, Mem({0x6FF8: 0x1000}), AMD64))
    assert [type(i).__name__ for i in items] == ["Frame", "Frame", "Stop"]
    assert stopped(items[-1], StopReason.LOOP).detail == "pc 0x1000, CFA 0x7000 seen before"


def test_stop_depth() -> None:
    # Each frame's RA is the same PC one word further up: an endless chain.
    rows = Rows(row(CFARule(RSP, 8), at(-8)))
    memory = Mem({0x7000 + 8 * i: 0x1001 for i in range(10)})
    items = list(walk(Frame(0x1000, {RSP: 0x7000}, True), rows, memory, AMD64, max_frames=3))
    assert [i.pc for i in items[:-1] if isinstance(i, Frame)] == [0x1000, 0x1001, 0x1001, 0x1001]
    assert str(stopped(items[-1], StopReason.DEPTH)) == "too many frames: 3 frames"


def test_stop_error_from_a_corrupt_table() -> None:
    result = step(Frame(0x1000, {RSP: 0x7000}, True), Broken(), Mem({}), AMD64)
    assert stopped(result, StopReason.ERROR).detail == \
        "FDE 3: FRE start beyond the function (at offset 0x40)"


# -- which PC the rows are looked up at -------------------------------------


def _two_functions() -> Rows:
    # A ends in a call to a noreturn function; its return address is B's first byte.
    a = row(CFARule(RSP, 16), at(-8), start=0x1000, end=0x1010)
    b = row(CFARule(RSP, 8), at(-8), start=0x1010, end=0x1020)
    return Rows(a, b)


def test_caller_frames_are_looked_up_at_pc_minus_one() -> None:
    rows = _two_functions()
    s = ok(step(Frame(0x1010, {RSP: 0x7000}, False), rows, Mem({0x7008: 0x401000}), AMD64))
    assert rows.asked == [0x100F]
    assert s.row is rows.rows[0] and s.cfa == 0x7010


def test_interrupted_frames_are_looked_up_at_pc() -> None:
    rows = _two_functions()
    s = ok(step(Frame(0x1010, {RSP: 0x7000}, True), rows, Mem({0x7000: 0x401000}), AMD64))
    assert rows.asked == [0x1010]
    assert s.row is rows.rows[1] and s.cfa == 0x7008


def test_signal_row_makes_the_caller_interrupted() -> None:
    rows = Rows(row(CFARule(RSP, 8), at(-8), signal=True, start=0x1000, end=0x1010),
                row(CFARule(RSP, 8), at(-8), start=0x2000, end=0x2010),
                row(CFARule(RSP, 8), UNDEFINED, start=0x1FF0, end=0x2000))
    items = list(walk(Frame(0x1008, {RSP: 0x7000}, True), rows,
                      Mem({0x7000: 0x2000, 0x7008: 0x1}), AMD64))
    # The trampoline's caller was interrupted at 0x2000: looked up at 0x2000, not 0x1fff.
    assert rows.asked == [0x1008, 0x2000, 0x0]
    frames = [i for i in items if isinstance(i, Frame)]
    assert [(f.pc, f.interrupted, f.cfa) for f in frames] == \
        [(0x1008, True, 0x7008), (0x2000, True, 0x7010), (0x1, False, None)]
    stopped(items[-1], StopReason.NO_INFO)


def test_walk_yields_each_frame_with_its_cfa_and_row() -> None:
    a = row(CFARule(RSP, 16), at(-8), start=0x1000, end=0x1100)
    main = row(CFARule(RSP, 8), UNDEFINED, start=0x2000, end=0x2100, source="eh_frame")
    rows = Rows(a, main)
    items = list(walk(Frame(0x1004, {RSP: 0x7000}, True), rows, Mem({0x7008: 0x2005}), AMD64))
    frames = [i for i in items if isinstance(i, Frame)]
    assert [(f.pc, f.cfa, f.row) for f in frames] == [(0x1004, 0x7010, a), (0x2005, None, None)]
    stopped(items[-1], StopReason.OUTERMOST)


# -- implausible return addresses (sframe_core.unwind.addresses) ------------------------


def test_return_address_problems() -> None:
    from sframe_core.base.abi import AMD64, S390X
    from sframe_core.unwind.addresses import AddressMap, Region, regions_from_maps, return_address_problem

    maps = regions_from_maps(
        "555555554000-555555555000 r--p 00000000 08:01 42 /bin/prog\n"
        "555555555000-555555556000 r-xp 00001000 08:01 42 /bin/prog\n"
        "555555559000-55555557a000 rw-p 00000000 00:00 0 [heap]\n"
        "7ffff7e00000-7ffff7e10000 rw-p 00000000 00:00 0\n"
        "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]\n")
    space = AddressMap(maps, complete=True)
    assert return_address_problem(0x555555555123, AMD64, space) is None
    assert return_address_problem(0x7fffffffe663, AMD64, space) == (
        "0x7fffffffe663 is in [stack], which is not executable")
    assert return_address_problem(0x555555559005, AMD64, space) == (
        "0x555555559005 is in [heap], which is not executable")
    assert return_address_problem(0x7ffff7e00008, AMD64, space) == (
        "0x7ffff7e00008 is in the mapping 0x7ffff7e00000-0x7ffff7e10000, which is not executable")
    assert return_address_problem(0x200000000, AMD64, space) == "0x200000000 is in no mapping"
    assert return_address_problem(0x18, AMD64, space) == (
        "0x18 is below 0x1000, where nothing is ever mapped")
    assert return_address_problem(0x0123456789abcdef, AMD64, space) == (
        "0x123456789abcdef is not a canonical user-space address (amd64: below 0x800000000000)")
    # Without a map only the arithmetic: an unknown place may hold code (JIT).
    assert return_address_problem(0x200000000, AMD64, AddressMap()) is None
    assert return_address_problem(0x18, AMD64) is not None
    assert return_address_problem(0x0123456789abcdef, S390X) is None
    # Regions that overlap: one that may be executable wins (a module's code
    # that a core left out is still code).
    both = AddressMap([Region(0x1000, 0x9000, False), Region(0x2000, 0x3000, None, "/lib/x.so")],
                      complete=True)
    assert return_address_problem(0x2100, AMD64, both) is None
    assert return_address_problem(0x4100, AMD64, both) is not None
    # Regions looked up one at a time (a debugger), each asked once per page.
    asked: list[int] = []

    def find(address: int) -> Region | None:
        asked.append(address)
        return Region(address & ~0xFFF, (address & ~0xFFF) + 0x1000, False, "[stack]")
    lazy = AddressMap([Region(0x400000, 0x401000, True)], find=find)
    assert return_address_problem(0x400010, AMD64, lazy) is None
    assert return_address_problem(0x7ffd0010, AMD64, lazy) is not None
    assert return_address_problem(0x7ffd0020, AMD64, lazy) is not None
    assert asked == [0x7ffd0010]
    # The same regions for the next walk: asked anew (the process may have
    # mapped something since); without ``find``, nothing is asked.
    again = lazy.with_find(find)
    assert return_address_problem(0x400010, AMD64, again) is None
    assert return_address_problem(0x7ffd0030, AMD64, again) is not None
    assert asked == [0x7ffd0010, 0x7ffd0030]
    assert return_address_problem(0x7ffd0030, AMD64, lazy.with_find(None)) is None
    assert asked == [0x7ffd0010, 0x7ffd0030]


def test_walk_stops_at_an_implausible_return_address() -> None:
    from sframe_core.unwind.addresses import AddressMap, Region

    row = Row(0x401000, 0x402000, 0x401000, CFARule(AMD64.sp, 8), Rule(RuleKind.AT_CFA, -8), SAME)

    class Rows:
        def row_at(self, pc: int) -> Row | None:
            return row

    class Stack:
        def read(self, address: int, size: int) -> bytes | None:
            words = {0x7ff000: 0x401234, 0x7ff008: 0x7ff103}  # an RA, then a stack address
            value = words.get(address)
            return None if value is None else value.to_bytes(8, "little")

    start = Frame(0x401100, {AMD64.sp: 0x7ff000, AMD64.fp: 0}, interrupted=True)
    space = AddressMap([Region(0x400000, 0x402000, True),
                        Region(0x7fe000, 0x800000, False, "[stack]")], complete=True)
    items = list(walk(start, Rows(), Stack(), AMD64, addresses=space))
    frames = [i for i in items if isinstance(i, Frame)]
    assert [f.pc for f in frames] == [0x401100, 0x401234]
    assert frames[-1].cfa == 0x7ff010 and frames[-1].row == row
    assert items[-1] == Stop(StopReason.BAD_RA, "0x7ff103 is in [stack], which is not executable")
    # Without the address map the walk shows the bad value as a frame.
    assert [i.pc for i in walk(start, Rows(), Stack(), AMD64) if isinstance(i, Frame)][-1] == 0x7ff103



# -- ends_with_call: can a PC be a return address ----------------------------------

@pytest.mark.parametrize("before", [
    "e800000000",  # call rel32
    "ffd0",  # call *%rax
    "41ffd3",  # call *%r11
    "ff5008",  # call *0x8(%rax)
    "ff542410",  # call *0x10(%rsp)
    "41ff542410",  # call *0x10(%r12)
    "ff15e22f0000",  # call *0x2fe2(%rip)
    "ff94d810000000",  # call *0x10(%rax,%rbx,8)
    "41ff94d810000000",  # call *0x10(%r8,%rbx,8)
])
def test_amd64_calls_end_at_the_pc(before: str) -> None:
    code = bytes.fromhex(before.rjust(2 * CALL_WINDOW, "9"))
    assert ends_with_call(code, AMD64)


@pytest.mark.parametrize("before", [
    "9090909090909090",  # nops
    "4889e55541574156",  # mov %rsp,%rbp; push %rbp; push %r15; push %r14
    "90909090909090c3",  # ret
    "909090e900000000",  # jmp rel32
    "909090909090ffe0",  # jmp *%rax
])
def test_amd64_other_instructions_do_not(before: str) -> None:
    assert not ends_with_call(bytes.fromhex(before), AMD64)


@pytest.mark.parametrize("word", [
    0x94000010,  # bl
    0xD63F0100,  # blr x8
    0xD63F091F,  # blraaz x8
    0xD73F0909,  # blraa x8, x9
])
@pytest.mark.parametrize("arch", [AARCH64_LE, AARCH64_BE])
def test_aarch64_calls_end_at_the_pc(word: int, arch: Arch) -> None:
    order = "big" if arch.big_endian else "little"
    code = (0xD503201F).to_bytes(4, order) + word.to_bytes(4, order)
    assert ends_with_call(code, arch)


@pytest.mark.parametrize("word", [0xD503201F, 0xD65F03C0, 0x14000010, 0xD61F0100])  # nop, ret, b, br x8
def test_aarch64_other_instructions_do_not(word: int) -> None:
    assert not ends_with_call((0xD503201F).to_bytes(4, "little") + word.to_bytes(4, "little"),
                              AARCH64_LE)


def test_other_abis_count_every_pc_as_a_return_address() -> None:
    assert ends_with_call(bytes(CALL_WINDOW), S390X)
