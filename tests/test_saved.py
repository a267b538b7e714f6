"""Callee-saved registers (sframe_core.analysis.saved): the static proof against ``.eh_frame``, every PC.

For every twin fixture (x86_64 v1/v2/v3, aarch64 with and without PAC,
s390x) and every real Debian program build (lua5.4 and bzip2 at -O2, -O2
-fno-omit-frame-pointer and -Os; bzip2 for s390x at -O2), each (PC, register) pair is classified by
``savedcheck``: our rule equals ``.eh_frame``'s, or is unknown, or is one of
the named cases that are right for a reason the check proves. Zero
disagreements; coverage floors per build kind (the share of pairs where
``.eh_frame`` has a rule and ours is the same), measured in this tree and
set just below the measured value so a regression shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FIXTURES, savedcheck
from helpers import realprogs as rp
from helpers.manifest import manifest_params, require

from sframe_core.analysis.section import SectionAnalysis, analysis_of
from sframe_core.base.rows import SAME, Rule, RuleKind
from sframe_core.format import SAVED_REGISTERS_ENV
from sframe_core.format.elf import read_elf

# Coverage floors: gcc -O2 x86-64 code is the target (>= 95%).
FLOORS = {"busid-v3": 0.995, "bu2.40-v1": 0.995, "bu2.44-v2": 0.995, "busid-v3-Os": 0.995,
          "busid-v3-fp": 0.95}


def _twin_exe(entry: dict[str, object]) -> bool:
    return entry["variant"] == "twin" and entry["kind"] != "obj"


@pytest.mark.parametrize("entry", manifest_params(_twin_exe))
def test_twin_fixture_saved_registers_agree(entry: dict[str, object] | None) -> None:
    entry = require(entry)
    path = str(FIXTURES / str(entry["path"]))
    result = savedcheck.check(path)
    assert not result.disagreements, (f"{len(result.disagreements)} disagreements:\n"
                                      + "\n".join(result.disagreements[:10]))
    print(result.summary())
    if entry["arch"] in ("x86_64", "aarch64", "s390x") and entry["name"] in ("deep", "deep-bkey",
                                                                           "deep-nopie"):
        assert result.coverage >= 0.95, result.summary()


REAL = [pytest.param(prog, producer, id=f"{prog.name}-{producer}")
        for prog in rp.PROGRAMS.values() for producer in rp.PRODUCERS]


@pytest.mark.slow
@pytest.mark.parametrize(("prog", "producer"), REAL)
def test_real_program_saved_registers_agree(prog: rp.Program, producer: str) -> None:
    path = prog.path(producer)
    if not path.is_file():
        pytest.fail(f"{path} is missing: run tests/fixtures/build_realprogs.sh")
    _prove(path, FLOORS[producer])


def _prove(path: Path, floor: float) -> None:
    """The static proof on one file: no disagreement, coverage at least ``floor``."""
    result = savedcheck.check(str(path))
    print(result.summary())
    assert not result.disagreements, (f"{len(result.disagreements)} disagreements:\n"
                                      + "\n".join(result.disagreements[:10]))
    assert result.coverage >= floor, result.summary()


S390X_BZIP2 = FIXTURES / "realprogs" / "s390x" / "bzip2" / "bzip2"


def test_s390x_real_program_saved_registers_agree() -> None:
    """bzip2 for s390x at -O2 (binutils sid, static): stmg/std saves, f8-f15
    stored through r14, lmg/ld restores, r6-r13 kept in f0-f7 by leaf
    functions (ldgr/lgdr), jump tables. Measured 99.9%."""
    result = savedcheck.check(str(S390X_BZIP2))
    print(result.summary())
    assert not result.disagreements, (f"{len(result.disagreements)} disagreements:\n"
                                      + "\n".join(result.disagreements[:10]))
    assert result.coverage >= 0.99, result.summary()
    assert result.notes == {"analysed": 68}, result.notes


def _lua(producer: str = "busid-v3") -> str:
    return str(rp.LUA.path(producer))


def test_rows_carry_the_rules_and_the_switch_turns_them_off() -> None:
    """At a PC after the prologue of a real -O2 function, the SFrame row names
    the slots; with the switch off (per section, or by the setting as it is
    opened) it names none."""
    info = read_elf(_lua())
    section = info.open(analyser=SectionAnalysis)
    assert section is not None
    # luaV_execute: pushes r15, r14, r13, r12, rbp, rbx, then sub rsp.
    fde = max(section.iter_fdes(), key=lambda f: f.size)
    pc = fde.start + 0x40
    row = section.row_at(pc)
    assert row is not None
    regs = dict(row.regs)
    assert regs[15] == Rule(RuleKind.AT_CFA, -16) and regs[3] == Rule(RuleKind.AT_CFA, -56)
    assert regs[12] == Rule(RuleKind.AT_CFA, -40)
    assert row.start <= pc < row.end
    entry = section.row_at(fde.start)
    assert entry is not None and dict(entry.regs)[15] == SAME
    off = info.open(analyser=SectionAnalysis)
    assert off is not None
    off.saved_registers = False
    row_off = off.row_at(pc)
    assert row_off is not None and row_off.regs == () and row_off.cfa == row.cfa
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SAVED_REGISTERS_ENV, "0")
        fresh = info.open(analyser=SectionAnalysis)
    assert fresh is not None
    row_fresh = fresh.row_at(pc)
    assert row_fresh is not None and row_fresh.regs == ()


def test_analysis_is_cached_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from sframe_core.analysis import saved

    section = read_elf(_lua()).open(analyser=SectionAnalysis)
    assert section is not None
    analysis = analysis_of(section)
    fde = max(section.iter_fdes(), key=lambda f: f.size)
    first = analysis.rules(fde)
    assert analysis.rules(fde) is first
    assert first.spans and not first.note
    monkeypatch.setattr(saved, "MAX_INSNS", 100)
    analysis.forget()
    bounded = analysis.rules(fde)
    # Past the bound the function is unknown (code not analysed could jump back).
    assert bounded.spans == () and "instructions" in bounded.note
    assert bounded.regs_at(fde.start + 0x40)[0] == ()


def test_no_code_no_rules(tmp_path: Path) -> None:
    """A section opened from bytes alone (no file to read code from) has no rules."""
    from sframe_core.format.section import SFrameSection

    info = read_elf(_lua())
    assert info.data is not None and info.sframe_address is not None
    section = SFrameSection(info.data, info.sframe_address)
    fde = max(section.iter_fdes(), key=lambda f: f.size)
    row = section.row_at(fde.start + 0x40)
    assert row is not None and row.regs == ()


@pytest.mark.gdb
@pytest.mark.slow
def test_backtrace_registers_json_against_eh_frame_rows(tmp_path: Path) -> None:
    """`sframe backtrace --core --json --registers` on a core of the twin: the
    walk with SFrame rows (and the code analysis) against the walk with
    .eh_frame rows, same core: every register both know is equal, and SFrame's
    walk knows nearly every callee-saved register .eh_frame's does."""
    from helpers.oracle import gdb_run, sframe, sframe_json

    program = rp.LUA
    core = tmp_path / "lua.core"
    gdb_run(program.path("busid-v3"), list(program.args), tmp_path, core=core,
            breakpoint="luaD_growstack", pcs=False, timeout=300)
    exe = str(program.path("busid-v3"))
    ours = sframe_json("backtrace", "--core", str(core), "--exe", exe, "--registers")
    theirs = sframe_json("backtrace", "--core", str(core), "--exe", exe, "--registers",
                         "--source", "eh_frame")
    mine, ref = ours["threads"][0]["frames"], theirs["threads"][0]["frames"]
    assert [f["pc"] for f in mine] == [f["pc"] for f in ref]
    assert len(mine) >= rp.MIN_DEPTH
    callee = {"rbx", "r12", "r13", "r14", "r15"}
    known = both = 0
    for a, b in zip(mine[1:], ref[1:], strict=True):
        for name, value in b["registers"].items():
            if name in a["registers"]:
                assert a["registers"][name] == value, (a["index"], a["function"], name)
        for name in callee & set(b["registers"]):
            known += 1
            both += name in a["registers"]
    assert known > 20 and both >= 0.9 * known, (both, known)
    text = sframe("backtrace", "--core", str(core), "--exe", exe, "--registers").stdout
    assert "    " in text and "rbx=0x" in text


# -- aarch64 real programs -------------------------------------------------------
# lua5.4 and bzip2 cross-built by tests/fixtures/build_realprogs_aarch64.sh (gcc 12
# -O2 -g, static, binutils sid: SFrame v3). Floors just below the measured coverage
# (lua5.4 96.7%, bzip2 95.4%).
A64_REAL = {"lua5.4": 0.96, "bzip2": 0.95}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(A64_REAL))
def test_aarch64_real_program_saved_registers_agree(name: str) -> None:
    path = FIXTURES / "realprogs-aarch64" / name / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: run tests/fixtures/build_realprogs_aarch64.sh")
    _prove(path, A64_REAL[name])


# The .cold parts of lua5.4 (busid-v3) whose first row is not a function entry
# (genlink.cold and luaC_barrierback_.cold start at one: their hot parts push nothing).
LUA_PARTS = {0x7600: "luaD_throw.cold", 0x760F: "reallymarkobject.cold",
             0x7620: "propagatemark.cold", 0x7634: "statement.cold"}


def test_cold_parts_get_the_twins_rules(tmp_path: Path) -> None:
    """gcc's ``NAME.cold`` parts, entered by jumps from their hot parts with the
    callee-saved registers pushed: the symbol file gives them, at every PC,
    the rules the twin's ``.eh_frame`` has for rbx and r12-r15 (a register
    ``.eh_frame`` says nothing of is the caller's own: same value), read back
    from the written ``.debug_frame``; the lazy lookups leave them unknown."""
    from sframe_core.analysis.effects import CALLEE_SAVED
    from sframe_core.dwarf.cfi import CFITable
    from sframe_core.symfiles.symfile import write_symbol_file

    noeh, twin = _lua(), str(rp.LUA.path("busid-v3")).removesuffix(".noeh")
    out = str(tmp_path / "lua.debug")
    write_symbol_file(noeh, out)
    ours, theirs = CFITable(out), CFITable(twin)
    section = read_elf(noeh).open(analyser=SectionAnalysis)
    assert section is not None
    tracked = CALLEE_SAVED["amd64"]
    checked = 0
    for start in LUA_PARTS:
        fde = section.find_fde(start)
        assert fde is not None and fde.start == start
        assert analysis_of(section).rules(fde).note == "the first row is not a function entry"
        mine, eh = ours.fde_rows(start), theirs.fde_rows(start)
        assert (mine[0].start, mine[-1].end) == (eh[0].start, eh[-1].end) == (fde.start, fde.end)
        for pc in range(fde.start, fde.end):
            a = next(r for r in mine if r.start <= pc < r.end)
            b = next(r for r in eh if r.start <= pc < r.end)
            assert a.cfa == b.cfa, hex(pc)
            got, want = dict(a.regs), dict(b.regs)
            for reg in tracked:
                assert got.get(reg, SAME) == want.get(reg, SAME), (LUA_PARTS[start], hex(pc), reg)
                checked += 1
        # At least one register is in a slot there (not merely "same value").
        assert any(rule.kind is RuleKind.AT_CFA for r in mine for _, rule in r.regs)
    assert checked == 5 * (5 + 17 + 10 + 11)
