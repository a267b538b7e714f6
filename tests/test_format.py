"""The annotated byte dumps of the format reference (sections 14.1-14.3), decoded
field by field: raw records first, then the rules ``fre_rules`` derives."""

from __future__ import annotations

from helpers.manifest import FDEDef, FREDef, build_section

from sframe_core.base.abi import AARCH64_BE, AARCH64_LE, S390X
from sframe_core.base.rows import CFARule, Rule, RuleKind
from sframe_core.format.dump import dump_text
from sframe_core.format.section import SFrameSection

# 14.2: v3 flex, binutils 2.46, sh_addr 0x402040 (one FDE).
FLEX = bytes.fromhex(
    "e2de"            # magic, little-endian
    "03"              # version 3
    "05"              # flags SORTED | PCREL
    "03"              # ABI amd64
    "00"              # fixed FP offset: none
    "f8"              # fixed RA offset: -8
    "00"              # aux header length
    "01000000"        # 1 FDE
    "05000000"        # 5 FREs
    "21000000"        # FRE sub-section length 33 (5-byte attr + 28 bytes of FREs)
    "00000000"        # FDE offset
    "10000000"        # FRE offset 16 (one 16-byte index entry)
    "a4efffffffffffff"  # start: 0x402040 + 0x1c - 0x105c = 0x401000
    "07000000"        # size 7
    "00000000"        # attribute record at FRE offset 0
    "0500" "00" "01" "00"  # 5 FREs, info 0 (ADDR1, PCINC), info2 1 (FLEX), rep 0
    "00" "04" "3908"  # +0: N=2: CFA ctrl 0x39 (rsp) off 8
    "01" "0a" "3910" "00" "02f0"  # +1: N=5: CFA rsp+16; RA padding; FP *(CFA-16)
    "04" "0a" "3110" "00" "02f0"  # +4: CFA rbp+16; RA padding; FP *(CFA-16)
    "05" "0c" "3110" "1900" "02f0"  # +5: N=6: CFA rbp+16; RA in rbx; FP *(CFA-16)
    "06" "00"         # +6: info 0: RA undefined
)


def test_v3_flex_raw_records() -> None:
    sec = SFrameSection(FLEX, 0x402040)
    hdr = sec.header
    assert (hdr.version, hdr.flags, hdr.abi_arch, hdr.cfa_fixed_ra_offset) == (3, 5, 3, -8)
    assert (hdr.num_fdes, hdr.num_fres, hdr.fre_len, hdr.freoff) == (1, 5, 33, 16)
    fde = sec.get_fde(0)
    assert (fde.start, fde.size, fde.num_fres, fde.flex, fde.signal) == (0x401000, 7, 5, True,
                                                                          False)
    fres = sec.get_fres(fde)
    assert [f.start for f in fres] == [0, 1, 4, 5, 6]
    assert [f.words for f in fres] == [(0x39, 8), (0x39, 16, 0, 2, -16), (0x31, 16, 0, 2, -16),
                                       (0x31, 16, 0x19, 0, 2, -16), ()]
    sec.validate()


def test_v3_flex_rules_and_dump() -> None:
    sec = SFrameSection(FLEX, 0x402040)
    rows = [sec.lookup(0x401000 + k) for k in range(7)]
    assert all(r is not None for r in rows)
    r = [x.rules for x in rows if x is not None]
    assert r[0].cfa == CFARule(7, 8) and r[0].ra_fixed and r[0].ra == Rule(RuleKind.AT_CFA, -8)
    assert r[1].ra_padding and r[1].fp == Rule(RuleKind.AT_CFA, -16)
    assert r[4].cfa == CFARule(6, 16)
    assert r[5].ra == Rule(RuleKind.IN_REG, 0, 3)
    assert r[6].outermost and r[6].cfa is None
    rows_text = [line.rstrip() for line in dump_text(sec).splitlines()[-5:]]
    assert rows_text == [
        "    0000000000401000  sp+8      u         f",
        "    0000000000401001  sp+16     c-16      U",
        "    0000000000401004  fp+16     c-16      U",
        "    0000000000401005  fp+16     c-16      r3+0",
        "    0000000000401006  RA undefined",
    ]


# 14.3: the same function's FDE as written by 2.40 (v1) and 2.45 (v2 PCREL), sh_addr 0x2130.
def v1_v2_section(version: int) -> bytes:
    if version == 1:
        header = bytes.fromhex("e2de" "01" "01" "03" "00" "f8" "00"  # v1, SORTED, amd64, RA -8
                               "01000000" "02000000" "06000000" "00000000" "11000000")
        fde = bytes.fromhex("f0eeffff"    # start 0x2130 - 0x1110 = 0x1020
                            "10000000" "00000000" "02000000"  # size 16, FRE off 0, 2 FREs
                            "00")         # info: ADDR1, PCINC
    else:
        header = bytes.fromhex("e2de" "02" "05" "03" "00" "f8" "00"  # v2, SORTED|PCREL
                               "01000000" "02000000" "06000000" "00000000" "14000000")
        fde = bytes.fromhex("d4eeffff"    # start 0x2130 + 0x1c - 0x112c = 0x1020
                            "10000000" "00000000" "02000000" "00" "00" "0000")
    fres = bytes.fromhex("00" "03" "10"   # +0: SP-based, 1 word: sp+16
                         "06" "03" "18")  # +6: sp+24
    return header + fde + fres


def test_v1_and_v2_pcrel_give_the_same_function() -> None:
    for version in (1, 2):
        sec = SFrameSection(v1_v2_section(version), 0x2130)
        fde = sec.get_fde(0)
        assert (fde.start, fde.size, fde.num_fres) == (0x1020, 16, 2)
        hit = sec.lookup(0x1027)
        assert hit is not None and hit.rules.cfa == CFARule(7, 24)
        assert hit.row.ra == Rule(RuleKind.AT_CFA, -8) and hit.rules.ra_fixed
        assert (hit.row.start, hit.row.end) == (0x1026, 0x1030)


def test_aarch64_pac_keys_and_big_endian() -> None:
    for arch, key_b in ((AARCH64_LE, False), (AARCH64_LE, True), (AARCH64_BE, True)):
        fres = [FREDef(0, (0,)), FREDef(4, (0,), mangled=True),
                FREDef(8, (16, -8, -16), mangled=True)]
        data = build_section(3, arch.abi_id, [FDEDef(0x400000, 20, fres, pauth_b=key_b)],
                             address=0x410000)
        assert data[:2] == (b"\xde\xe2" if arch.big_endian else b"\xe2\xde")
        sec = SFrameSection(data, 0x410000)
        assert sec.arch is arch
        hit = sec.lookup(0x400008)
        assert hit is not None and hit.fde.pauth_key == int(key_b) and hit.fre.mangled_ra
        assert hit.rules.cfa == CFARule(31, 16)
        assert hit.rules.ra == Rule(RuleKind.AT_CFA, -8)
        assert hit.rules.fp == Rule(RuleKind.AT_CFA, -16)
        text = dump_text(sec)
        assert ("pauth = B key" in text) == key_b
        assert "    0000000000400004  sp+0      u         u[s]" in text
        assert "    0000000000400008  sp+16     c-16      c-8[s]" in text


def test_s390x_cfa_decoding_and_v2_register_words() -> None:
    # Stored CFA word w -> offset w*8 + 160; v2 odd words name registers.
    fres = [FREDef(0, (0,)), FREDef(6, (2, -48, 0x21)), FREDef(10, (1, 0, -72))]
    data = build_section(2, 4, [FDEDef(0x1000, 16, fres)], address=0x2000, flags=0x5)
    sec = SFrameSection(data, 0x2000)
    assert data[:2] == b"\xde\xe2"
    first, second, third = (sec.lookup(0x1000 + k) for k in (0, 6, 10))
    assert first is not None and first.rules.cfa == CFARule(15, 160)
    assert second is not None and second.rules.cfa == CFARule(15, 176)
    assert second.rules.ra == Rule(RuleKind.AT_CFA, -48)
    assert second.rules.fp == Rule(RuleKind.IN_REG, 0, 16)  # 0x21 -> f0 (DWARF 16)
    assert third is not None and third.rules.ra_padding and third.rules.cfa == CFARule(15, 168)
    text = dump_text(sec)
    assert "    0000000000001006  sp+176    r16       c-48" in text
    assert "    000000000000100a  sp+168    c-72      U" in text
    assert S390X.sp_val_offset == -160


def test_s390x_v3_odd_word_is_an_offset() -> None:
    fres = [FREDef(0, (2, -47, 0x21), word_size=1)]
    sec = SFrameSection(build_section(3, 4, [FDEDef(0x1000, 8, fres)]), 0)
    hit = sec.lookup(0x1000)
    assert hit is not None and hit.rules.fp == Rule(RuleKind.AT_CFA, 0x21)
    assert hit.rules.ra == Rule(RuleKind.AT_CFA, -47)


def test_extents_are_the_decoded_fdes() -> None:
    """``extents`` (every FDE's start and size in one pass, for the question
    asked of every function of a module with both SFrame and CFI) gives what
    decoding each FDE gives: every fixture with ``.sframe`` (v1, v2 with and
    without PCREL, v3; amd64, aarch64 little- and big-endian, s390x; ``.o``
    files, whose starts are relocated), at file and at runtime addresses."""
    from helpers import FIXTURES

    from sframe_core.base.errors import SFrameError
    from sframe_core.format.elf import read_elf

    seen = set()
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.read_bytes()[:4] != b"\x7fELF":
            continue
        try:
            info = read_elf(str(path))
        except SFrameError:
            continue
        for address in (None, 0x7F0000000000):
            if info.is_relocatable and address is not None:
                continue
            try:
                section = info.open(address)
            except SFrameError:
                continue
            if section is None:
                continue
            assert section.extents() == [(f.start, f.size) for f in section.iter_fdes()], path
            seen.add((section.version, section.arch.name, info.is_relocatable))
    assert {version for version, _, _ in seen} == {1, 2, 3}
    assert {arch for _, arch, _ in seen} == {"amd64", "aarch64", "s390x"}
    assert any(relocatable for _, _, relocatable in seen)
