"""DWARF CFI rows: the executor as a specification, then real files.

The first half feeds hand-written instruction lists (pyelftools'
``CallFrameInstruction`` objects, as its parser produces them) through
``decode_instructions`` and ``execute``: no ELF file is involved, so each test
reads as one rule of DWARF §6.4. The second half opens binaries built here
with the host gcc, and the host's libc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from elftools.dwarf.callframe import CallFrameInstruction
from elftools.dwarf.constants import DW_CFA
from elftools.elf.elffile import ELFFile
from helpers import missing

from sframe_core.base.abi import AARCH64_LE, AMD64, Arch
from sframe_core.base.errors import FileError, FormatError
from sframe_core.base.rows import SAME, UNDEFINED, CFARule, Row, Rule, RuleKind
from sframe_core.dwarf.cfi import (
    CFITable,
    CIEInfo,
    DefCfaExpression,
    cfa_from_expression,
    decode_instructions,
    execute,
    rule_from_expression,
)

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")
RSP, RBP, RBX, R12, RIP = 7, 6, 3, 12, 16
X29, X30, SP = 29, 30, 31


def I(op: DW_CFA, *args: Any) -> CallFrameInstruction:  # noqa: E743 - reads like a listing
    return CallFrameInstruction(op, list(args))


# amd64 CIE as gcc emits it: CFA = rsp + 8, RA at CFA - 8 (factored: 1 * -8).
AMD64_CIE = [I(DW_CFA.def_cfa, RSP, 8), I(DW_CFA.offset, RIP, 1)]
# aarch64 CIE: CFA = sp, RA still in x30 (no rule: same value).
AARCH64_CIE = [I(DW_CFA.def_cfa, SP, 0)]


def run(fde: Sequence[CallFrameInstruction], *, arch: Arch = AMD64,
        cie: Sequence[CallFrameInstruction] = AMD64_CIE, code: int = 1, data: int = -8,
        ra: int = RIP, signal: bool = False, start: int = 0x1000, end: int = 0x1040,
        bias: int = 0) -> list[Row]:
    info = CIEInfo(code, data, ra, tuple(decode_instructions(cie, code, data, arch)), signal)
    return execute(info, decode_instructions(fde, code, data, arch), start, end, arch, bias=bias)


def at(rows: list[Row], pc: int) -> Row:
    hits = [row for row in rows if row.start <= pc < row.end]
    assert len(hits) == 1, (hex(pc), rows)
    return hits[0]


def cfa_at(offset: int) -> Rule:
    return Rule(RuleKind.AT_CFA, offset)


# -- DefCfa / Offset / advance ---------------------------------------------------

def test_cie_rules_alone_cover_the_whole_fde() -> None:
    rows = run([])
    assert [(r.start, r.end) for r in rows] == [(0x1000, 0x1040)]
    assert rows[0].cfa == CFARule(RSP, 8)
    assert rows[0].ra == cfa_at(-8)
    # No rule for rbp: gdb's "unspecified" means same value.
    assert rows[0].fp == SAME
    assert rows[0].regs == ()
    assert rows[0].func_start == 0x1000 and rows[0].source == "eh_frame"


def test_rule_takes_effect_after_the_advance() -> None:
    # push %rbp (1 byte); mov %rsp,%rbp (3 bytes); ... : gcc's frame-pointer prologue
    rows = run([
        I(DW_CFA.advance_loc, 1), I(DW_CFA.def_cfa_offset, 16), I(DW_CFA.offset, RBP, 2),
        I(DW_CFA.advance_loc, 3), I(DW_CFA.def_cfa_register, RBP),
    ])
    assert [(r.start, r.end) for r in rows] == [(0x1000, 0x1001), (0x1001, 0x1004),
                                                (0x1004, 0x1040)]
    assert (at(rows, 0x1000).cfa, at(rows, 0x1000).fp) == (CFARule(RSP, 8), SAME)
    assert (at(rows, 0x1001).cfa, at(rows, 0x1001).fp) == (CFARule(RSP, 16), cfa_at(-16))
    assert at(rows, 0x1003).cfa == CFARule(RSP, 16)
    assert at(rows, 0x1004).cfa == CFARule(RBP, 16)
    assert at(rows, 0x1004).fp == cfa_at(-16)


def test_advance_forms_scale_by_code_alignment() -> None:
    rows = run([
        I(DW_CFA.advance_loc1, 2), I(DW_CFA.def_cfa_offset, 16),
        I(DW_CFA.advance_loc2, 1), I(DW_CFA.def_cfa_offset, 32),
        I(DW_CFA.advance_loc4, 1), I(DW_CFA.def_cfa_offset, 48),
    ], arch=AARCH64_LE, cie=AARCH64_CIE, code=4, ra=X30)
    assert [(r.start, r.cfa) for r in rows] == [
        (0x1000, CFARule(SP, 0)), (0x1008, CFARule(SP, 16)), (0x100C, CFARule(SP, 32)),
        (0x1010, CFARule(SP, 48))]


def test_set_loc_and_bias() -> None:
    rows = run([I(DW_CFA.set_loc, 0x1010), I(DW_CFA.def_cfa_offset, 16)], bias=0x7000)
    assert [(r.start, r.end, r.func_start) for r in rows] == [(0x8000, 0x8010, 0x8000),
                                                              (0x8010, 0x8040, 0x8000)]


def test_factored_and_signed_forms() -> None:
    rows = run([
        I(DW_CFA.def_cfa_sf, RSP, -4),  # -4 * -8 = 32
        I(DW_CFA.offset_extended_sf, RBX, 3),  # 3 * -8
        I(DW_CFA.offset_extended, R12, 4),  # 4 * -8
        I(DW_CFA.val_offset, 13, 5),
        I(DW_CFA.advance_loc, 4), I(DW_CFA.def_cfa_offset_sf, -2),  # 16
    ])
    row = rows[0]
    assert row.cfa == CFARule(RSP, 32)
    assert dict(row.regs) == {RBX: cfa_at(-24), R12: cfa_at(-32),
                              13: Rule(RuleKind.CFA_PLUS, -40)}
    assert rows[1].cfa == CFARule(RSP, 16)


def test_gnu_args_size_and_nop_are_ignored() -> None:
    rows = run([I(DW_CFA.advance_loc, 4), I(DW_CFA.GNU_args_size, 16), I(DW_CFA.nop)])
    assert all(row.cfa == CFARule(RSP, 8) and row.regs == () for row in rows)


def test_only_described_registers_are_in_regs() -> None:
    rows = run([I(DW_CFA.same_value, RBX), I(DW_CFA.register, 14, 0), I(DW_CFA.undefined, 15)])
    row = rows[0]
    assert dict(row.regs) == {RBX: SAME, 14: Rule(RuleKind.IN_REG, 0, 0), 15: UNDEFINED}
    # r12 is named nowhere: unknown in the caller, not "same".
    assert row.rule_for(R12, AMD64) == UNDEFINED
    assert not row.outermost


def test_undefined_ra_marks_the_outermost_frame() -> None:
    # _start: .cfi_undefined rip
    rows = run([I(DW_CFA.undefined, RIP)])
    assert rows[0].ra == UNDEFINED and rows[0].outermost
    assert rows[0].cfa == CFARule(RSP, 8)


def test_signal_augmentation_marks_rows() -> None:
    assert all(row.signal for row in run([], signal=True))


def test_register_ra() -> None:
    rows = run([I(DW_CFA.register, RIP, 11)])
    assert rows[0].ra == Rule(RuleKind.IN_REG, 0, 11)


# -- Restore, RememberState / RestoreState ------------------------------------

def test_restore_goes_back_to_the_cie_rule_or_to_none() -> None:
    rows = run([
        I(DW_CFA.offset, RBP, 2), I(DW_CFA.offset, RBX, 3), I(DW_CFA.offset, RIP, 4),
        I(DW_CFA.advance_loc, 8),
        I(DW_CFA.restore, RBP), I(DW_CFA.restore_extended, RBX), I(DW_CFA.restore, RIP),
    ])
    assert rows[0].fp == cfa_at(-16) and rows[0].ra == cfa_at(-32)
    assert dict(rows[0].regs) == {RBX: cfa_at(-24)}
    # rbp and rbx: the CIE says nothing, so no rule (fp reads as same value);
    # rip: the CIE's RA at CFA - 8.
    assert rows[1].fp == SAME and rows[1].regs == () and rows[1].ra == cfa_at(-8)


def test_each_epilogue_starts_from_the_body() -> None:
    # push rbx; push rbp; body; [pop rbp; pop rbx; ret] x 2, the way gcc
    # brackets each epilogue with remember/restore state.
    body = [I(DW_CFA.advance_loc, 1), I(DW_CFA.def_cfa_offset, 16), I(DW_CFA.offset, RBX, 2),
            I(DW_CFA.advance_loc, 1), I(DW_CFA.def_cfa_offset, 24), I(DW_CFA.offset, RBP, 3)]
    epilogue = [I(DW_CFA.remember_state),
                I(DW_CFA.advance_loc, 1), I(DW_CFA.def_cfa_offset, 16), I(DW_CFA.restore, RBP),
                I(DW_CFA.advance_loc, 1), I(DW_CFA.def_cfa_offset, 8), I(DW_CFA.restore, RBX),
                I(DW_CFA.advance_loc, 1), I(DW_CFA.restore_state)]
    rows = run(body + [I(DW_CFA.advance_loc, 8)] + epilogue + [I(DW_CFA.advance_loc, 4)]
               + epilogue)
    # body 0x1002..0x100a; epilogue 1: 0x100b, 0x100c, ret at 0x100c; back to body
    assert at(rows, 0x1005).cfa == CFARule(RSP, 24)
    assert at(rows, 0x100B).cfa == CFARule(RSP, 16) and at(rows, 0x100B).fp == SAME
    assert at(rows, 0x100C).cfa == CFARule(RSP, 8) and at(rows, 0x100C).regs == ()
    body_row = at(rows, 0x1005)
    for pc in (0x100D, 0x1010):  # after epilogue 1, before epilogue 2
        row = at(rows, pc)
        assert (row.cfa, row.fp, row.regs) == (body_row.cfa, body_row.fp, body_row.regs)
    # Epilogue 2 pops from the body's state, not from epilogue 1's end state.
    assert at(rows, 0x1012).cfa == CFARule(RSP, 16)
    assert dict(at(rows, 0x1012).regs) == {RBX: cfa_at(-16)}
    assert at(rows, 0x1013).cfa == CFARule(RSP, 8)
    assert at(rows, 0x1014).cfa == CFARule(RSP, 24)


def test_restore_state_without_remember_is_an_error() -> None:
    with pytest.raises(FormatError, match="no remembered state"):
        run([I(DW_CFA.restore_state)])


def test_location_moving_backwards_is_an_error() -> None:
    with pytest.raises(FormatError, match="backwards"):
        run([I(DW_CFA.advance_loc, 8), I(DW_CFA.set_loc, 0x1004)])


# -- Expressions ---------------------------------------------------------------

BREG7_160 = [0x77, 0xA0, 0x01]  # DW_OP_breg7 (rsp) 160
DEREF = [0x06]
# .plt: rsp + 8 + ((rip & 15) >= 11 ? 8 : 0)
PLT_EXPR = [0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22]


def test_cfa_expression_forms() -> None:
    assert cfa_from_expression(BREG7_160 + DEREF) == CFARule(RSP, 160, deref=True)
    assert cfa_from_expression(BREG7_160) == CFARule(RSP, 160)
    assert cfa_from_expression([0x92, 0x1F, 0x10]) == CFARule(SP, 16)  # bregx sp 16
    assert cfa_from_expression(BREG7_160 + [0x23, 0x08]) == CFARule(RSP, 168)  # plus_uconst
    assert cfa_from_expression(PLT_EXPR) is None
    assert cfa_from_expression(BREG7_160 + DEREF + [0x23, 0x08]) is None  # load then add
    assert cfa_from_expression([0x9C]) is None  # the CFA defined by itself


def test_register_expression_forms() -> None:
    # DW_CFA_expression r3: DW_OP_breg7 128 -> load(rsp + 128)  (__restore_rt)
    assert rule_from_expression([0x77, 0x80, 0x01], val=False) == Rule(RuleKind.AT_REG, 128, RSP)
    # The CFA is pushed first: plus_uconst alone means load(CFA + 16).
    assert rule_from_expression([0x23, 0x10], val=False) == cfa_at(16)
    # A value rule: rbp + 16, and CFA - 8 (lit8; minus).
    assert rule_from_expression([0x76, 0x10], val=True) == Rule(RuleKind.IN_REG, 16, RBP)
    assert rule_from_expression([0x38, 0x1C], val=True) == Rule(RuleKind.CFA_PLUS, -8)
    assert rule_from_expression([0x76, 0x10, 0x06], val=True) == Rule(RuleKind.AT_REG, 16, RBP)
    # Outside the model: unknown, never a guess.
    assert rule_from_expression(PLT_EXPR, val=False) == UNDEFINED
    assert rule_from_expression([0x76, 0x10, 0x06], val=False) == UNDEFINED
    assert rule_from_expression([0xE0], val=True) == UNDEFINED  # DW_OP_lo_user


def test_signal_trampoline_rows() -> None:
    rows = run([
        I(DW_CFA.def_cfa_expression, BREG7_160 + DEREF),
        I(DW_CFA.expression, RBX, [0x77, 0x80, 0x01]),
        I(DW_CFA.expression, RBP, [0x77, 0xF8, 0x00]),  # sleb 120
        I(DW_CFA.expression, RIP, [0x77, 0xA8, 0x01]),
    ], cie=[], signal=True)
    row = rows[0]
    assert row.cfa == CFARule(RSP, 160, deref=True)
    assert row.ra == Rule(RuleKind.AT_REG, 168, RSP)
    assert row.fp == Rule(RuleKind.AT_REG, 120, RSP)
    assert dict(row.regs) == {RBX: Rule(RuleKind.AT_REG, 128, RSP)}
    assert row.signal


def test_plt_expression_gives_no_cfa() -> None:
    rows = run([I(DW_CFA.def_cfa_offset, 16), I(DW_CFA.advance_loc, 6),
                I(DW_CFA.def_cfa_offset, 24), I(DW_CFA.advance_loc, 10),
                I(DW_CFA.def_cfa_expression, PLT_EXPR)], end=0x1030)
    assert [r.cfa for r in rows] == [CFARule(RSP, 16), CFARule(RSP, 24), None]
    assert rows[2].ra == cfa_at(-8)  # the RA rule stands; only the CFA is unknown


def test_offset_change_on_an_expression_cfa_is_unknown() -> None:
    rows = run([I(DW_CFA.def_cfa_expression, BREG7_160 + DEREF), I(DW_CFA.def_cfa_offset, 8),
                I(DW_CFA.advance_loc, 4), I(DW_CFA.def_cfa, RSP, 8)])
    assert rows[0].cfa is None and rows[1].cfa == CFARule(RSP, 8)


def test_decoded_expression_operation() -> None:
    ops = decode_instructions([I(DW_CFA.def_cfa_expression, PLT_EXPR)], 1, -8, AMD64)
    assert ops == [DefCfaExpression(None)]


# -- aarch64 return-address signing ------------------------------------------------

def test_negate_ra_state_toggles_and_is_remembered() -> None:
    # paciasp; stp x29, x30, [sp, -16]!; ...; remember; autiasp (negate);
    # ldp; ret; restore_state; body again.
    rows = run([
        I(DW_CFA.advance_loc, 1), I(DW_CFA.AARCH64_negate_ra_state),
        I(DW_CFA.advance_loc, 1), I(DW_CFA.def_cfa_offset, 16),
        I(DW_CFA.offset, X29, 2), I(DW_CFA.offset, X30, 1),
        I(DW_CFA.advance_loc, 4), I(DW_CFA.remember_state),
        I(DW_CFA.AARCH64_negate_ra_state), I(DW_CFA.restore, X30), I(DW_CFA.restore, X29),
        I(DW_CFA.def_cfa_offset, 0),
        I(DW_CFA.advance_loc, 1), I(DW_CFA.restore_state),
    ], arch=AARCH64_LE, cie=AARCH64_CIE, code=4, ra=X30)
    assert not at(rows, 0x1000).ra_signed and at(rows, 0x1000).ra == SAME
    assert at(rows, 0x1004).ra_signed and at(rows, 0x1004).cfa == CFARule(SP, 0)
    body = at(rows, 0x1008)
    assert body.ra_signed and body.cfa == CFARule(SP, 16)
    assert (body.fp, body.ra) == (cfa_at(-16), cfa_at(-8))
    epilogue = at(rows, 0x1018)
    assert not epilogue.ra_signed and epilogue.ra == SAME and epilogue.fp == SAME
    after = at(rows, 0x101C)
    assert after.ra_signed and after.ra == cfa_at(-8)


def test_window_save_is_not_understood_off_aarch64() -> None:
    rows = run([I(DW_CFA.advance_loc, 4), I(DW_CFA.GNU_window_save)])
    assert rows[0].cfa == CFARule(RSP, 8) and rows[1].cfa is None


# -- Real files ------------------------------------------------------------------

HOST_SRC = r"""
#include <alloca.h>
#include <string.h>
__attribute__((noinline)) int leaf(int n, char *p) { return p[n] + n; }
__attribute__((noinline)) int with_alloca(int n) {
    char *p = alloca(n + 16); memset(p, n, n + 16); return leaf(n, p) + leaf(n + 1, p);
}
__attribute__((noinline)) int loop(int a, int b) {
    int r = 0; for (int i = 0; i < a; i++) r += with_alloca(i + b); return r;
}
int main(int argc, char **argv) { (void)argv; return loop(argc, 3) > 0 ? 0 : 1; }
"""


def _gcc(tmp: Path, name: str, src: str, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        missing("no host gcc (scripts/setup.sh installs it)")
    source = tmp / f"{name}.c"
    source.write_text(src)
    out = tmp / name
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", *flags, "-o", str(out), str(source)],
                   check=True)
    return out


def _symbols(path: Path) -> dict[str, tuple[int, int]]:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        return {sym.name: (sym["st_value"], sym["st_size"]) for sym in table.iter_symbols()
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]}


@pytest.fixture(scope="module")
def host_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gcc(tmp_path_factory.mktemp("cfi"), "alloca", HOST_SRC, "-Wa,--gsframe")


def test_host_binary_rows(host_binary: Path) -> None:
    table = CFITable(host_binary)
    start, size = _symbols(host_binary)["with_alloca"]
    rows = table.fde_rows(start)
    # alloca makes gcc keep a frame pointer: the CFA moves to rbp and back.
    assert CFARule(RBP, 16) in [row.cfa for row in rows]
    assert all(row.fp == cfa_at(-16) for row in rows if row.cfa == CFARule(RBP, 16))
    for pc in range(start, start + size):
        row = table.row_at(pc)
        assert row is not None and row.source == "eh_frame" and row.func_start == start
        assert row.ra == cfa_at(-8) and row.cfa is not None
    assert table.row_at(start).cfa == CFARule(RSP, 8)  # type: ignore[union-attr]
    assert table.arch is AMD64


def test_bias_moves_every_address(host_binary: Path) -> None:
    start, _ = _symbols(host_binary)["loop"]
    plain, moved = CFITable(host_binary), CFITable(host_binary, 0x5555_0000_0000)
    row, biased = plain.row_at(start + 1), moved.row_at(start + 1 + 0x5555_0000_0000)
    assert row is not None and biased is not None
    assert biased.start - row.start == biased.func_start - row.func_start == 0x5555_0000_0000
    assert (biased.cfa, biased.ra, biased.fp) == (row.cfa, row.ra, row.fp)
    assert not moved.has_fde(start + 1)


def test_has_fde(host_binary: Path) -> None:
    table = CFITable(host_binary)
    start, _ = _symbols(host_binary)["leaf"]
    assert table.has_fde(start) and not table.has_fde(0) and not table.has_fde(2**63)
    assert table.row_at(0) is None


def test_debug_frame_and_preference(tmp_path: Path) -> None:
    only_debug = _gcc(tmp_path, "dbg", HOST_SRC, "-g", "-fno-asynchronous-unwind-tables",
                      "-fno-unwind-tables")
    start, _ = _symbols(only_debug)["with_alloca"]
    row = CFITable(only_debug).row_at(start)
    assert row is not None and row.source == "debug_frame" and row.cfa == CFARule(RSP, 8)
    # Both sections: .eh_frame wins.
    both = _gcc(tmp_path, "both", 'asm(".cfi_sections .eh_frame, .debug_frame");\n' + HOST_SRC,
                "-fno-toplevel-reorder")
    with open(both, "rb") as stream:
        assert ELFFile(stream).get_section_by_name(".debug_frame") is not None
    start, _ = _symbols(both)["with_alloca"]
    row = CFITable(both).row_at(start + 1)
    assert row is not None and row.source == "eh_frame"


def test_elffile_source(host_binary: Path) -> None:
    with open(host_binary, "rb") as stream:
        table = CFITable(ELFFile(stream), name="host")
        start, _ = _symbols(host_binary)["leaf"]
        assert table.has_fde(start)
    assert table.row_at(start) is not None  # parsed already: the stream may be closed


def test_file_errors(tmp_path: Path, host_binary: Path) -> None:
    with pytest.raises(FileError, match="nope"):
        CFITable(tmp_path / "nope").has_fde(0)
    text = tmp_path / "text"
    text.write_text("hello")
    with pytest.raises(FileError, match="not an ELF"):
        CFITable(text).has_fde(0)
    # Garbage in .eh_frame: a FormatError naming the file and section.
    broken = tmp_path / "broken"
    data = bytearray(host_binary.read_bytes())
    with open(host_binary, "rb") as stream:
        section = ELFFile(stream).get_section_by_name(".eh_frame")
        offset, size = section["sh_offset"], section["sh_size"]
    data[offset:offset + size] = b"\x10\x00\x00\x00\x00\x00\x00\x00\x01zX" + b"\xff" * (size - 11)
    broken.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"broken: \.eh_frame"):
        CFITable(broken).has_fde(0)


# -- The host's libc ------------------------------------------------------------------

LIBC_PROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
struct ksigaction { void *handler; unsigned long flags; void *restorer; unsigned long mask; };
static void on_usr1(int sig) { (void)sig; }
__attribute__((noinline)) int main(void) {
    Dl_info info;
    void *ret = __builtin_return_address(0);   /* inside __libc_start_call_main */
    signal(SIGUSR1, on_usr1);
    struct ksigaction old;
    syscall(SYS_rt_sigaction, SIGUSR1, NULL, &old, 8);
    if (!dladdr(ret, &info)) return 1;
    printf("%s %lx %lx\n", info.dli_fname, (unsigned long)((char *)ret - (char *)info.dli_fbase),
           (unsigned long)((char *)old.restorer - (char *)info.dli_fbase));
    return 0;
}
"""


@pytest.fixture(scope="module")
def libc_probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int]:
    """Offsets in libc of main's return address and of the signal restorer."""
    if not LIBC.exists():
        missing(f"{LIBC} not present on this host")
    probe = _gcc(tmp_path_factory.mktemp("libc"), "probe", LIBC_PROBE, "-ldl")
    out = subprocess.run([str(probe)], check=True, capture_output=True, text=True).stdout.split()
    assert os.path.realpath(out[0]) == os.path.realpath(LIBC), out
    return int(out[1], 16), int(out[2], 16)


@pytest.fixture(scope="module")
def libc_table() -> CFITable:
    if not LIBC.exists():
        missing(f"{LIBC} not present on this host")
    table = CFITable(LIBC, 0x7F00_0000_0000)
    t0 = time.perf_counter()
    table.has_fde(0)
    print(f"libc CFI parse: {time.perf_counter() - t0:.2f}s")
    return table


def test_libc_abort(libc_table: CFITable) -> None:
    start, size = _symbols(LIBC)["abort"]
    rows = libc_table.fde_rows(libc_table.bias + start)
    assert rows and rows[0].func_start == libc_table.bias + start
    assert rows[0].cfa == CFARule(RSP, 8) and rows[0].ra == cfa_at(-8)
    assert all(row.cfa is not None and row.cfa.reg == RSP for row in rows)
    assert libc_table.row_at(libc_table.bias + start + size - 1) is not None


def test_libc_start_call_main(libc_table: CFITable, libc_probe: tuple[int, int]) -> None:
    ret, _ = libc_probe
    row = libc_table.row_at(libc_table.bias + ret)
    assert row is not None and row.cfa is not None and row.cfa.reg == RSP
    assert row.ra == cfa_at(-8) and not row.outermost
    # A static function of its own: not __libc_start_main's FDE.
    assert row.func_start != libc_table.bias + _symbols(LIBC)["__libc_start_main"][0]


def test_libc_signal_restorer(libc_table: CFITable, libc_probe: tuple[int, int]) -> None:
    _, restorer = libc_probe
    row = libc_table.row_at(libc_table.bias + restorer)
    assert row is not None and row.signal
    assert row.cfa == CFARule(RSP, 160, deref=True)  # the ucontext's saved rsp
    assert row.ra == Rule(RuleKind.AT_REG, 168, RSP)  # uc_mcontext.rip
    assert row.fp == Rule(RuleKind.AT_REG, 120, RSP)
    assert dict(row.regs)[RBX] == Rule(RuleKind.AT_REG, 128, RSP)
