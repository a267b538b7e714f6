"""``sframe verify`` on real producers' output and on planted defects.

Every twin fixture and real program (binutils 2.40 v1, 2.44 v2, sid v3;
x86-64, aarch64 with PAC, s390x) verifies with exit 0 and exactly the named
differences its toolchain produces; copies of real binaries with one defect
patched into their ``.sframe`` bytes (a CFA offset, an FP offset, an FDE cut
short, FDEs out of order under the SORTED flag, an FDE on the wrong function)
each fail with the function and the first wrong PC named.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import FIXTURES, ROOT, need, no_section_headers
from helpers.manifest import manifest_params, require
from helpers.realprogs import builds

from sframe_core.cli.commands import main
from sframe_core.cli.verify import report_json, report_lines
from sframe_core.format.elf import read_elf
from sframe_core.format.records import FDE, FRE
from sframe_core.format.section import SFrameSection
from sframe_core.verify.check import verify_file
from sframe_core.verify.records import (
    AGREES,
    CANNOT_SAY,
    ERRATUM,
    KNOWN_ENTRY,
    KNOWN_PLT,
    KNOWN_STATIC,
    KNOWN_UNSAYABLE,
    NOT_COVERED,
    PLT_EXPRESSION,
    PLT_GOT_ERRATUM,
    Report,
)

ARCHES = ("x86_64", "aarch64", "s390x")
REAL_PROGRAMS = [str(program.path(producer)) for program, producer in builds()] + [
    str(FIXTURES / "realprogs" / "s390x" / "bzip2" / "bzip2"),
    str(FIXTURES / "realprogs-aarch64" / "lua5.4" / "lua5.4"),
    str(FIXTURES / "realprogs-aarch64" / "bzip2" / "bzip2"),
]

Named = tuple[str | None, str, tuple[str, ...]]


def _sections(path: str) -> dict[str, int]:
    with open(path, "rb") as stream:
        return {sec.name: sec["sh_size"] for sec in ELFFile(stream).iter_sections()}


def expected_named(path: str, arch: str, version: int, kind: str) -> Counter[Named]:
    """What each toolchain is known to produce: the functions that do not simply
    agree, as (name, verdict, reasons), derived from how the file was made."""
    names = _sections(path)
    out: Counter[Named] = Counter()
    if kind == "obj":
        return out
    out[("_start", NOT_COVERED, (KNOWN_ENTRY,))] += 1
    if arch == "aarch64" or path.endswith("nopie"):  # glibc's static-reloc.o (s390x: none)
        out[("_dl_relocate_static_pie", NOT_COVERED, (KNOWN_ENTRY,))] += 1
    if kind == "so":
        del out[("_start", NOT_COVERED, (KNOWN_ENTRY,))]
    if names.get(".plt", 0) > 16 and arch == "x86_64":  # entries past PLT0: the expression
        out[(".plt", CANNOT_SAY, (PLT_EXPRESSION,))] += 1
    if ".plt.got" in names:
        out[(".plt.got", *((NOT_COVERED, (KNOWN_PLT,)) if version == 1
                           else (ERRATUM, (PLT_GOT_ERRATUM,))))] += 1
    if Path(path).name == "realign" and version < 3:
        out[("realign_fn", NOT_COVERED, (KNOWN_UNSAYABLE,))] += 1
    if arch == "aarch64" and version < 3:
        out[("__longjmp", NOT_COVERED, (KNOWN_UNSAYABLE,))] += 1  # CFA on x0
    return out


def check_clean(report: Report, arch: str, kind: str) -> None:
    assert report.status == 0, "\n".join(report_lines(report))
    # ld's PT_GNU_SFRAME keeps the section's size from before its merge: a note.
    assert all(f.kind == "segment-size" and not f.fatal for f in report.findings), report.findings
    named: Counter[Named] = Counter()
    static = 0
    for func in report.functions:
        if func.verdict == AGREES:
            continue
        if func.reasons == (KNOWN_STATIC,):
            static += 1
            continue
        named[(func.name, func.verdict, func.reasons)] += 1
    if kind == "obj":
        # Every function compared in its own text section: nothing to name.
        assert not named and {f.name for f in report.functions} >= {"main", "f1"}
        assert report.where(next(f.start for f in report.functions if f.name == "main")) \
            == ".text.startup+0x0"
        return
    assert named == expected_named(report.path, arch, report.version, kind)
    # The static ones are the C library's: hundreds, and never the program's.
    assert (static > 100) == (arch != "x86_64"), static
    assert sum(f.verdict == AGREES for f in report.functions) >= 3


def _twin(entry: dict[str, object]) -> bool:
    return entry["variant"] == "twin" and entry["arch"] in ARCHES


@pytest.mark.parametrize("entry", manifest_params(_twin))
def test_twin_fixture_verifies(entry: dict[str, object] | None,
                               capsys: pytest.CaptureFixture[str]) -> None:
    entry = require(entry)
    path = str(FIXTURES / str(entry["path"]))
    report = verify_file(path)
    check_clean(report, str(entry["arch"]), str(entry["kind"]))
    assert main(["verify", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == report_lines(report) and out[-1].endswith(": OK")


@pytest.mark.parametrize("path", REAL_PROGRAMS, ids=lambda p: str(Path(p).relative_to(FIXTURES)))
def test_real_program_verifies(path: str) -> None:
    need(Path(path))
    arch = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_S390": "s390x"}[
        read_elf(path).machine]
    check_clean(verify_file(path), arch, "exe")


def test_noeh_against_twin(capsys: pytest.CaptureFixture[str]) -> None:
    """CFI elsewhere: the stripped file checked against the twin's .eh_frame."""
    twin = FIXTURES / "x86_64" / "busid-v3" / "deep"
    stripped = need(FIXTURES / "x86_64" / "busid-v3" / "deep.noeh.stripped")
    assert main(["verify", str(stripped)]) == 2
    err = capsys.readouterr().err
    assert err == (f"sframe: {stripped}: no .eh_frame or .debug_frame to verify against "
                   "(give the debug file with --against FILE)\n")
    assert main(["verify", str(stripped), "--against", str(twin)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"{stripped}: SFrame v3 amd64: 12 functions: 9 agree, ")
    assert f"{stripped}: 0x11b0 _start: not covered (0x11b0-0x11d2, known: _start from crt1.o " \
        "(the entry code, which the C library assembles without --gsframe))" in out


# -- planted defects ----------------------------------------------------------------


def sframe_offset(path: Path) -> int:
    with open(path, "rb") as stream:
        section = ELFFile(stream).get_section_by_name(".sframe")
        assert section is not None
        return int(section["sh_offset"])


def planted(tmp_path: Path, source: Path, edits: list[tuple[int, bytes]], name: str) -> Path:
    """A copy of ``source`` with ``edits`` (section offset, new bytes) in its .sframe."""
    data = bytearray(source.read_bytes())
    base = sframe_offset(source)
    for offset, raw in edits:
        data[base + offset: base + offset + len(raw)] = raw
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


DEEP_V3 = FIXTURES / "x86_64" / "busid-v3" / "deep"
DEEP_V1 = FIXTURES / "x86_64" / "bu2.40-v1" / "deep"


def _fde(path: Path, name: str) -> tuple[SFrameSection, FDE]:
    from sframe_core.targets.symbols import SymbolTable

    section = read_elf(path).open()
    assert section is not None
    symbols = SymbolTable.from_file(str(path))
    for fde in section.iter_fdes():
        if symbols.lookup(fde.start) == (name, 0):
            return section, fde
    raise AssertionError(f"no FDE for {name} in {path}")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def _word_at(fde: FDE, fre: FRE, k: int) -> int:
    return fre.offset + (1 << fde.fre_type) + 1 + k * fre.word_size


@pytest.mark.parametrize("source", [DEEP_V3, DEEP_V1], ids=["v3", "v1"])
def test_wrong_cfa_offset(tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need(source)
    section, fde = _fde(source, "f4")
    fre = section.get_fres(fde)[1]
    assert fre.words == (96,) and fre.start == 4
    bad = planted(tmp_path, source, [(_word_at(fde, fre, 0), struct.pack("<b", 104))], "cfa")
    status, out, err = _run(["verify", str(bad)], capsys)
    pc = fde.start + 4
    assert (status, err) == (1, "")
    assert f"{bad}: {pc:#x} f4: DISAGREES: SFrame: CFA = rsp + 104; RA at CFA - 8; FP not " \
        "saved; CFI: CFA = rsp + 96; RA at CFA - 8; FP not saved" in out
    # The one structural finding: ld's PT_GNU_SFRAME longer than the section (a note).
    assert " 1 DISAGREE, " in out[-1] and out[-1].endswith("1 structural findings: FAIL")


def test_wrong_fp_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section, fde = _fde(need(DEEP_V3), "f2")
    fre = section.get_fres(fde)[2]
    assert fre.words == (16, -16) and fre.start == 4 and not fre.base_is_sp
    bad = planted(tmp_path, DEEP_V3, [(_word_at(fde, fre, 1), struct.pack("<b", -24))], "fp")
    status, out, _ = _run(["verify", str(bad)], capsys)
    pc = fde.start + 4
    assert status == 1
    assert f"{bad}: {pc:#x} f2: DISAGREES: SFrame: CFA = rbp + 16; RA at CFA - 8; FP at " \
        "CFA - 24; CFI: CFA = rbp + 16; RA at CFA - 8; FP at CFA - 16" in out


def test_relocatable_object_defect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In a .o, main (.text.startup+0) and f1 (.text+0x1d0) are told apart by the
    relocations on their FDEs: a wrong CFA in main is main's, at its section offset."""
    obj = need(FIXTURES / "x86_64" / "busid-v3" / "deep.o")
    info = read_elf(obj)
    section = info.open()
    assert section is not None and info.is_relocatable
    # main is the FDE whose start field is relocated against .text.startup.
    with open(obj, "rb") as stream:
        elf = ELFFile(stream)
        startup = elf.get_section_index(".text.startup")
        rela = elf.get_section_by_name(".rela.sframe")
        symtab = elf.get_section(rela["sh_link"])
        field = next(r["r_offset"] for r in rela.iter_relocations()
                     if symtab.get_symbol(r["r_info_sym"])["st_shndx"] == startup)
    fde = next(f for f in section.iter_fdes() if f.offset == field)
    k, fre = next((k, f) for k, f in enumerate(section.get_fres(fde)) if f.words[0] == 16)
    bad = planted(tmp_path, obj, [(_word_at(fde, fre, 0), struct.pack("<b", 40))], "bad.o")
    status, out, _ = _run(["verify", str(bad)], capsys)
    assert status == 1
    assert f"{bad}: .text.startup+{fre.start:#x} main: DISAGREES: SFrame: CFA = rsp + 40; RA at " \
        "CFA - 8; FP not saved; CFI: CFA = rsp + 16; RA at CFA - 8; FP not saved" in out
    assert out[-1].endswith("7 agree, 0 differ only where SFrame cannot say it, 0 known errata, "
                            "1 DISAGREE, 0 not covered (0 known), 0 SFrame only; 0 structural "
                            "findings: FAIL")


def test_fde_cut_short(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section, fde = _fde(need(DEEP_V3), "f1")
    assert fde.size == 49
    # 47: the last FRE (at 46) still inside, the function's last 2 bytes not.
    bad = planted(tmp_path, DEEP_V3, [(fde.offset + 8, struct.pack("<I", 47))], "short")
    status, out, _ = _run(["verify", str(bad)], capsys)
    start = fde.start
    assert status == 1
    assert (f"{bad}: {start + 47:#x} f1: not covered: CFI describes {start:#x}-{start + 49:#x}; "
            f"no SFrame FDE covers {start + 47:#x}-{start + 49:#x} (the SFrame FDE at "
            f"{start:#x} ends at {start + 47:#x})") in out
    # One verdict for f1: the uncovered piece, not also "agrees".
    assert out[-1].endswith(": 12 functions: 8 agree, 1 differ only where SFrame cannot say "
                            "it, 1 known errata, 0 DISAGREE, 2 not covered (1 known), 0 SFrame "
                            "only; 1 structural findings: FAIL")  # the PT_GNU_SFRAME note


def test_fre_past_its_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section, fde = _fde(need(DEEP_V3), "f2")
    fre = section.get_fres(fde)[4]
    assert (fre.start, fde.size) == (96, 108)
    bad = planted(tmp_path, DEEP_V3, [(fre.offset, bytes([120]))], "past")
    status, out, _ = _run(["verify", str(bad)], capsys)
    error = (f"FDE {fde.index}: FRE 4 starts at 0x78, past the function's size 0x6c (at offset "
             f"{fre.offset:#x})")
    assert status == 1
    assert f"{bad}: {fde.start:#x} f2: DISAGREES: its FREs do not decode: {error}" in out
    assert f"{bad}: {fde.start:#x} f2: {error}" in out


def test_pt_gnu_sframe_not_covering(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(need(DEEP_V3).read_bytes())
    with open(DEEP_V3, "rb") as stream:
        elf = ELFFile(stream)
        sframe = elf.get_section_by_name(".sframe")
        addr, size = sframe["sh_addr"], sframe["sh_size"]
        k = next(i for i, seg in enumerate(elf.iter_segments())
                 if seg["p_type"] in (0x6474E554, "PT_GNU_SFRAME"))
        at = elf["e_phoff"] + k * elf["e_phentsize"]
    struct.pack_into("<QQ", data, at + 32, 8, 8)  # p_filesz, p_memsz: 8 bytes only
    bad = tmp_path / "segment"
    bad.write_bytes(bytes(data))
    status, out, _ = _run(["verify", str(bad)], capsys)
    assert status == 1
    assert f"{bad}: {addr:#x} .sframe: PT_GNU_SFRAME ({addr:#x}-{addr + 8:#x}) does not cover " \
        f"the .sframe section ({addr:#x}-{addr + size:#x})" in out


def _v3_start_field(section: SFrameSection, index: int, start: int) -> tuple[int, bytes]:
    """The start field of v3 FDE ``index`` saying ``start`` (PC-relative to the field)."""
    offset = section.header.fde_base + index * 16
    return offset, struct.pack("<q", start - section.address - offset)


def test_fdes_out_of_order_flagged_sorted(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    section, f2 = _fde(need(DEEP_V3), "f2")
    _, f1 = _fde(DEEP_V3, "f1")
    i, j = f2.index, f1.index
    assert j == i + 1
    base = section.header.fde_base
    data = section.data
    rec_i, rec_j = bytes(data[base + i * 16: base + i * 16 + 16]), \
        bytes(data[base + j * 16: base + j * 16 + 16])
    # Swap the two records, then make each start field say its function again.
    edits = [(base + i * 16, rec_j), (base + j * 16, rec_i),
             _v3_start_field(section, i, f1.start), _v3_start_field(section, j, f2.start)]
    bad = planted(tmp_path, DEEP_V3, edits, "unsorted")
    status, out, _ = _run(["verify", str(bad)], capsys)
    assert status == 1
    assert (f"{bad}: {f2.start:#x} f2: FDE {j} starts at {f2.start:#x}, before FDE {i} "
            f"({f1.start:#x}), but the header says SFRAME_F_FDE_SORTED") in out
    # Nothing else is wrong: every function's rows still agree.
    assert out[-1].endswith("0 DISAGREE, 1 not covered (1 known), 0 SFrame only; 2 structural "
                            "findings: FAIL")  # and the PT_GNU_SFRAME note


def test_fde_for_the_wrong_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section, f1 = _fde(need(DEEP_V3), "f1")
    _, f2 = _fde(DEEP_V3, "f2")
    bad = planted(tmp_path, DEEP_V3, [_v3_start_field(section, f1.index, f2.start)], "wrong")
    status, out, _ = _run(["verify", str(bad)], capsys)
    s1, s2 = f1.start, f2.start
    assert status == 1
    # f1's rows on f2's code: wrong from f2's second byte (after its push).
    assert f"{bad}: {s2 + 1:#x} f2: DISAGREES: SFrame: CFA = rsp + 8; RA at CFA - 8; FP not " \
        "saved; CFI: CFA = rsp + 16; RA at CFA - 8; FP at CFA - 16" in out
    assert f"{bad}: {s1:#x} f1: not covered: CFI describes it; no SFrame FDE covers it" in out
    assert any(line.startswith(f"{bad}: {s2:#x} f2: FDE ") and " overlaps FDE " in line
               for line in out)


def test_kernel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What Linux's SFrame reader refuses (kernel/unwind/sframe.c, see docs/verify.md)."""
    status, out, _ = _run(["verify", "--kernel", str(need(DEEP_V3))], capsys)
    assert status == 0 and out[-1].endswith("; kernel: accepts: OK")
    v2 = need(FIXTURES / "x86_64" / "bu2.44-v2" / "deep")
    status, out, _ = _run(["verify", "--kernel", str(v2)], capsys)
    assert status == 1
    assert out[-3:-1] == [
        f"{v2}: kernel: SFrame version 2: sframe_read_header accepts only version 3",
        f"{v2}: kernel: SFRAME_F_FDE_FUNC_START_PCREL is not set (sframe_read_header)"]
    realign = need(FIXTURES / "x86_64" / "busid-v3" / "realign")
    status, out, _ = _run(["verify", "--kernel", str(realign)], capsys)
    assert status == 1
    assert f"{realign}: 0x1180 realign_fn: kernel: FDE 5 is a flexible FDE, which the kernel " \
        "does not read yet (__read_fre)" in out
    # FREs must strictly increase: give f4's third FRE the second one's start.
    section, fde = _fde(DEEP_V3, "f4")
    fre = section.get_fres(fde)[2]
    bad = planted(tmp_path, DEEP_V3, [(fre.offset, bytes([4]))], "dup")
    status, out, _ = _run(["verify", "--kernel", str(bad)], capsys)
    pc = fde.start + 4
    assert status == 1
    assert f"{bad}: {pc:#x} f4+0x4: kernel: FDE {fde.index} FRE 2 does not start after FRE 1 " \
        "(offset 0x4): FREs must strictly increase (__find_fre)" in out


# -- bad input, JSON, directories -------------------------------------------------------


def test_unreadable_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file\n")
    truncated = tmp_path / "truncated"
    truncated.write_bytes(need(DEEP_V3).read_bytes()[:4096])
    missing_file = tmp_path / "missing"
    for path, error in ((text, "not an ELF file"), (missing_file, "No such file or directory"),
                        (tmp_path, "not a regular file (a directory)")):
        status, out, err = _run(["verify", str(path)], capsys)
        assert (status, out, err) == (2, [], f"sframe: {path}: {error}\n")
    status, out, err = _run(["verify", str(truncated)], capsys)
    assert status == 2 and out == [] and err.count("\n") == 1
    assert err.startswith(f"sframe: {truncated}: ") and "past the end of the 4096-byte file" in err


def test_no_section_headers_needs_against(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Found through PT_GNU_SFRAME, .sframe is checked against the twin's CFI."""
    bare = no_section_headers(need(DEEP_V3), tmp_path / "bare")
    status, out, err = _run(["verify", str(bare)], capsys)
    assert (status, out) == (2, [])
    assert err == (f"sframe: {bare}: no CFI FDE to verify against (without section headers "
                   ".eh_frame cannot be read: give --against FILE)\n")
    status, out, _ = _run(["verify", str(bare), "--against", str(DEEP_V3)], capsys)
    assert status == 0 and out[-1].endswith("0 DISAGREE, 1 not covered (1 known), 0 SFrame "
                                            "only; 0 structural findings: OK")


def test_json_matches_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section, fde = _fde(need(DEEP_V3), "f4")
    fre = section.get_fres(fde)[1]
    bad = planted(tmp_path, DEEP_V3, [(_word_at(fde, fre, 0), struct.pack("<b", 104))], "cfa")
    for path in (bad, DEEP_V3, FIXTURES / "aarch64" / "busid-v3" / "deep"):
        status, text, _ = _run(["verify", "--kernel", str(path)], capsys)
        jstatus, out, _ = _run(["verify", "--kernel", "--json", str(path)], capsys)
        data = json.loads("\n".join(out))
        assert jstatus == status == data["status"]
        (entry,) = data["files"]
        assert entry == report_json(verify_file(str(path), kernel=True))
        for func in entry["functions"]:
            line = f"{path}: {func['pc']:#x} {func['name']}: {func['text']}"
            shown = func["verdict"] != AGREES and func["reasons"] != [KNOWN_STATIC]
            assert (line in text) == shown, line
        for finding in entry["kernel"]["reasons"]:
            assert any(line.endswith(finding["text"]) for line in text)
        assert entry["counts"]["DISAGREES"] == (path == bad)


def test_recursive_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    (tree / "lib").mkdir(parents=True)
    shutil.copy(need(DEEP_V3), tree / "good")
    shutil.copy(FIXTURES / "x86_64" / "busid-v3" / "libsf.so", tree / "lib" / "libsf.so")
    shutil.copy(FIXTURES / "x86_64" / "busid-v3" / "deep.noeh", tree / "deep.noeh")
    (tree / "README").write_text("not ELF\n")
    section, fde = _fde(DEEP_V3, "f4")
    fre = section.get_fres(fde)[1]
    planted(tree, DEEP_V3, [(_word_at(fde, fre, 0), struct.pack("<b", 104))], "bad")
    status, out, err = _run(["verify", "-r", "-j", "2", str(tree)], capsys)
    assert (status, err) == (1, "")
    assert out[-1] == ("sframe verify: 3 files verified: 2 OK, 1 FAIL; 0 unreadable; 1 skipped "
                       "(no .sframe, or no CFI to compare)")
    assert [line.split(":")[0] for line in out if line.endswith((": OK", ": FAIL"))] == [
        str(tree / "bad"), str(tree / "good"), str(tree / "lib" / "libsf.so")]
    # A truncated ELF file in the tree cannot be read: exit 2, one line for it.
    (tree / "broken").write_bytes(DEEP_V3.read_bytes()[:4096])
    status, out, err = _run(["verify", "-r", str(tree)], capsys)
    assert status == 2 and err.count("\n") == 1 and err.startswith(f"sframe: {tree / 'broken'}: ")


def test_recursive_progress_only_on_a_terminal(tmp_path: Path) -> None:
    """stderr a terminal: a progress line; not one (test_recursive_mix): nothing."""
    for name in ("a", "b"):
        shutil.copy(need(DEEP_V3), tmp_path / name)
    leader, follower = pty.openpty()
    try:
        run = subprocess.run([sys.executable, "-m", "sframe_core", "verify", "-r", "-j", "2",
                              str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=follower,
                             text=True, timeout=120)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
    assert run.returncode == 0, run.stdout
    assert b"\r[1/2] " in shown and b"\r[2/2] " in shown
    assert run.stdout.splitlines()[-1] == ("sframe verify: 2 files verified: 2 OK, 0 FAIL; "
                                           "0 unreadable; 0 skipped (no .sframe, or no CFI to "
                                           "compare)")
