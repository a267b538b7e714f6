"""Every FormatError of records.py / rules.py / section.validate, reached by patching
one field of a real section (fixtures, or the host's 2.40 build for v1).

Each test asserts the exact message (offset included) and the exception type.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.manifest import Entry, find_entry, fixture_path

from sframe_core.base.abi import AMD64
from sframe_core.base.errors import FormatError, SFrameError
from sframe_core.format.records import FDE, FDE_SIZE, FRE
from sframe_core.format.rules import fre_rules
from sframe_core.format.section import SFrameSection


def real(keep: Callable[[Entry], bool]) -> SFrameSection:
    entry = find_entry(keep)
    return SFrameSection(fixture_path(entry, "sframe_bin").read_bytes(), entry["sframe_addr"])


def x86(version: int, program: str = "deep") -> SFrameSection:
    producer = {1: "bu2.40-v1", 2: "bu2.44-v2", 3: "busid-v3"}[version]
    return real(lambda e: e["arch"] == "x86_64" and e["producer_dir"] == producer
                and e["name"] == program and e["kind"] != "obj")


def patched(section: SFrameSection, offset: int, fmt: str, value: int) -> bytearray:
    data = bytearray(section.data)
    struct.pack_into(section.header.endian + fmt, data, offset, value)
    return data


def opening_fails(data: bytes | bytearray, message: str) -> None:
    with pytest.raises(FormatError) as exc:
        SFrameSection(bytes(data))
    assert str(exc.value) == message


def lookup_fails(section: SFrameSection, data: bytearray, pc: int, message: str) -> None:
    """The patched section opens (FDEs are not decoded then); the lookup fails."""
    reopened = SFrameSection(bytes(data), section.address)
    with pytest.raises(FormatError) as exc:
        reopened.lookup(pc)
    assert str(exc.value) == message
    with pytest.raises(FormatError):
        reopened.validate()


# -- header (spec 9.5 items 1-2) -------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_header_errors(version: int) -> None:
    sec = x86(version)
    hdr = sec.header
    size = len(sec.data)
    opening_fails(sec.data[:27], "section is 27 bytes, too short for the 28-byte SFrame header "
                                 "(at offset 0x0)")
    opening_fails(patched(sec, 0, "H", 0xBEEF), "bad magic 0xefbe (expected 0xdee2 in either byte "
                                                "order) (at offset 0x0)")
    opening_fails(patched(sec, 2, "B", 4), "unknown SFrame version 4 (at offset 0x2)")
    mask = {1: 0x3, 2: 0x7, 3: 0x5}[version]
    bad_flag = 0x8 if version < 3 else 0x2  # FRAME_POINTER is gone in v3
    opening_fails(patched(sec, 3, "B", hdr.flags | bad_flag),
                  f"flags {hdr.flags | bad_flag:#x} not valid for SFrame version {version} "
                  f"(valid: {mask:#x}) (at offset 0x3)")
    opening_fails(patched(sec, 4, "B", 7), "unknown ABI/arch 7 (at offset 0x4)")
    opening_fails(patched(sec, 4, "B", 4), "ABI/arch 4 does not match the little-endian magic "
                                           "(at offset 0x4)")
    opening_fails(patched(sec, 0x14, "I", hdr.freoff + 1),
                  f"FDE sub-section offset {hdr.freoff + 1:#x} is past the FRE sub-section offset "
                  f"{hdr.freoff:#x} (at offset 0x14)")
    opening_fails(patched(sec, 8, "I", 0x10000000),
                  f"268435456 FDEs of {FDE_SIZE[version]} bytes at 0x1c do not fit in the "
                  f"{size}-byte section (at offset 0x8)")
    opening_fails(patched(sec, 8, "I", hdr.num_fdes + 1),
                  f"FDE sub-section (ends at {hdr.fre_base + FDE_SIZE[version]:#x}) overlaps the "
                  f"FRE sub-section (starts at {hdr.fre_base:#x}) (at offset 0x18)")
    opening_fails(patched(sec, 0x10, "I", hdr.fre_len + 1),
                  f"FRE sub-section of {hdr.fre_len + 1} bytes at {hdr.fre_base:#x} does not fit "
                  f"in the {size}-byte section (at offset 0x10)")
    opening_fails(sec.data[:-1],
                  f"FRE sub-section of {hdr.fre_len} bytes at {hdr.fre_base:#x} does not fit "
                  f"in the {size - 1}-byte section (at offset 0x10)")
    opening_fails(patched(sec, 0xC, "I", 0xFFFFFFFF),
                  f"4294967295 FREs cannot fit in an FRE sub-section of {hdr.fre_len} bytes "
                  "(at offset 0xc)")


def test_big_endian_abi_mismatch() -> None:
    sec = real(lambda e: e["arch"] == "s390x")
    opening_fails(patched(sec, 4, "B", 2), "ABI/arch 2 does not match the big-endian magic "
                                           "(at offset 0x4)")


def test_opening_does_not_decode_fdes() -> None:
    """An FDE area of garbage still opens; only what touches it fails."""
    sec = x86(2)
    data = bytearray(sec.data)
    hdr = sec.header
    data[hdr.fde_base:hdr.fre_base] = b"\xff" * (hdr.fre_base - hdr.fde_base)
    opened = SFrameSection(bytes(data), sec.address)
    assert opened.num_fdes == hdr.num_fdes
    with pytest.raises(SFrameError):
        for index in range(opened.num_fdes):
            opened.get_fde(index)
    with pytest.raises(FormatError):
        opened.validate()


# -- FDEs (item 3) ------------------------------------------------------------


def middle_fde(sec: SFrameSection, min_fres: int = 2) -> int:
    return next(i for i in range(sec.num_fdes)
                if sec.get_fde(i).num_fres >= min_fres and not sec.get_fde(i).is_pcmask)


def test_fde_index_out_of_range() -> None:
    sec = x86(2)
    with pytest.raises(FormatError) as exc:
        sec.get_fde(sec.num_fdes)
    assert str(exc.value) == f"FDE index {sec.num_fdes} out of range (section has {sec.num_fdes})"


@pytest.mark.parametrize("version", [1, 2, 3])
def test_bad_fre_type(version: int) -> None:
    sec = x86(version)
    i = middle_fde(sec)
    fde = sec.get_fde(i)
    info_at = fde.offset + 16 if version < 3 else fde.fres_offset - 3
    data = bytearray(sec.data)
    data[info_at] = (data[info_at] & 0xF0) | 3
    where = fde.offset + (16 if version < 3 else 0)
    lookup_fails(sec, data, fde.start, f"FDE {i}: bad FRE type 3 (at offset {where:#x})")


@pytest.mark.parametrize("version", [1, 2])
def test_first_fre_outside(version: int) -> None:
    sec = x86(version)
    i = middle_fde(sec)
    fde = sec.get_fde(i)
    bad = sec.header.fre_len + 1
    data = patched(sec, fde.offset + 8, "I", bad)
    lookup_fails(sec, data, fde.start, f"FDE {i}: first FRE at FRE offset {bad:#x} is outside "
                 f"the {sec.header.fre_len}-byte FRE sub-section (at offset {fde.offset + 8:#x})")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_num_fres_too_large(version: int) -> None:
    sec = x86(version)
    i = middle_fde(sec)
    fde = sec.get_fde(i)
    left = sec.header.fre_end - fde.fres_offset
    if version < 3:
        data = patched(sec, fde.offset + 12, "I", 0x7FFFFFFF)
        count, where = 0x7FFFFFFF, fde.offset + 12
    else:
        data = patched(sec, fde.fres_offset - 5, "H", 0xFFFF)
        count, where = 0xFFFF, fde.offset
    lookup_fails(sec, data, fde.start, f"FDE {i}: {count} FREs cannot fit in the {left} bytes "
                 f"left in the FRE sub-section (at offset {where:#x})")


def test_v3_attr_record_outside() -> None:
    sec = x86(3)
    i = middle_fde(sec)
    fde = sec.get_fde(i)
    bad = sec.header.fre_len - 4
    data = patched(sec, fde.offset + 12, "I", bad)
    lookup_fails(sec, data, fde.start, f"FDE {i}: attribute record at FRE offset {bad:#x} is "
                 f"outside the {sec.header.fre_len}-byte FRE sub-section "
                 f"(at offset {fde.offset + 12:#x})")


def test_v3_unknown_fde_type() -> None:
    sec = x86(3)
    i = middle_fde(sec)
    fde = sec.get_fde(i)
    data = patched(sec, fde.fres_offset - 2, "B", 7)
    lookup_fails(sec, data, fde.start, f"FDE {i}: unknown FDE type 7 "
                 f"(at offset {fde.fres_offset - 2:#x})")


# -- FREs (item 3) ------------------------------------------------------------


def fre_of(sec: SFrameSection, index: int, k: int) -> tuple[FDE, FRE]:
    fde = sec.get_fde(index)
    return fde, sec.get_fres(fde)[k]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_fre_errors(version: int) -> None:
    sec = x86(version)
    i = middle_fde(sec)
    fde, fre = fre_of(sec, i, 1)
    addr = 1 << fde.fre_type
    info_at = fre.offset + addr
    pc = fde.start + fre.start
    info = sec.data[info_at]

    data = patched(sec, info_at, "B", info | 0x60)
    lookup_fails(sec, data, pc, f"FDE {i}: FRE 1 has invalid data-word size code 3 "
                 f"(at offset {info_at:#x})")
    data = patched(sec, info_at, "B", (info & ~0x1E) | (4 << 1))
    lookup_fails(sec, data, pc, f"FDE {i}: FRE 1 has 4 data words (at most 3) "
                 f"(at offset {info_at:#x})")
    data = patched(sec, fre.offset, "BHI"[fde.fre_type], 0)
    data[fre.offset - 0] = data[fre.offset]  # start 0 == previous start 0: allowed
    first = sec.get_fres(fde)[0]
    if first.start == 0 and fde.fre_type == 0:
        data = patched(sec, first.offset, "B", fre.start + 1)
        # Look up past FRE 1: a lookup reads start fields only up to its hit.
        lookup_fails(sec, data, fde.end - 1,
                     f"FDE {i}: FRE 1 starts at {fre.start:#x}, before the "
                     f"previous FRE ({fre.start + 1:#x}) (at offset {fre.offset:#x})")
    last_fde = fde
    last = sec.get_fres(last_fde)[-1]
    data = patched(sec, last.offset, "BHI"[fde.fre_type], fde.size + 1)
    lookup_fails(sec, data, fde.start + last.start,
                 f"FDE {i}: FRE {fde.num_fres - 1} starts at {fde.size + 1:#x}, past the "
                 f"function's size {fde.size:#x} (at offset {last.offset:#x})")


def test_fre_runs_past_end() -> None:
    """The last function in the FRE sub-section, its last FRE cut short."""
    sec = x86(2)
    hdr = sec.header
    fde = max(sec.iter_fdes(), key=lambda f: f.fres_offset)
    last = sec.get_fres(fde)[-1]
    k = fde.num_fres - 1
    # Grow the word size of the last FRE: its words now run past fre_end.
    info_at = last.offset + (1 << fde.fre_type)
    data = patched(sec, info_at, "B", (sec.data[info_at] & ~0x60) | 0x40)
    lookup_fails(sec, data, fde.start + last.start,
                 f"FDE {fde.index}: FRE {k} runs past the end of the FRE sub-section "
                 f"(at offset {last.offset:#x})")
    # Or shrink the sub-section so that the FRE's start field is cut.
    cut = last.offset - hdr.fre_base
    data = patched(sec, 0x10, "I", cut)
    data = data[:hdr.fre_base + cut]
    reopened = SFrameSection(bytes(data), sec.address)
    with pytest.raises(FormatError) as exc:
        reopened.get_fres(reopened.get_fde(fde.index))
    # The FRE count no longer fits either; whichever check sees it first names it.
    assert f"FDE {fde.index}: " in str(exc.value)


def test_sorted_flag_violated() -> None:
    sec = x86(2)
    first = sec.get_fde(0)
    data = patched(sec, first.offset, "i", 0x7FFFFFF0)
    reopened = SFrameSection(bytes(data), sec.address)
    with pytest.raises(FormatError) as exc:
        reopened.validate()
    second = reopened.get_fde(1)
    assert str(exc.value) == (f"FDE 1 starts at {second.start:#x}, before FDE 0 "
                              f"({sec.address + 0x7FFFFFF0:#x}), in a section flagged sorted "
                              f"(at offset {second.offset:#x})")


def test_pcmask_rep_size_zero() -> None:
    sec = x86(2)
    fde = next(f for f in sec.iter_fdes() if f.is_pcmask)
    data = patched(sec, fde.offset + 17, "B", 0)
    reopened = SFrameSection(bytes(data), sec.address)
    assert reopened.lookup(fde.start) is None  # no FRE: never a division by zero
    with pytest.raises(FormatError) as exc:
        reopened.validate()
    assert str(exc.value) == (f"FDE {fde.index}: PC-mask FDE with repetition size 0 "
                              f"(at offset {fde.offset:#x})")


def test_header_counts_disagree() -> None:
    sec = x86(3)
    hdr = sec.header
    data = patched(sec, 0xC, "I", hdr.num_fres - 1)
    with pytest.raises(FormatError) as exc:
        SFrameSection(bytes(data), sec.address).validate()
    assert str(exc.value) == (f"header counts {hdr.num_fres - 1} FREs, the FDEs hold "
                              f"{hdr.num_fres} (at offset 0xc)")
    data = bytearray(sec.data) + b"\0"
    struct.pack_into("<I", data, 0x10, hdr.fre_len + 1)
    with pytest.raises(FormatError) as exc:
        SFrameSection(bytes(data), sec.address).validate()
    assert str(exc.value) == (f"FRE sub-section is {hdr.fre_len + 1} bytes, the FDEs' FREs take "
                              f"{hdr.fre_len} (at offset 0x10)")


# -- v3 flexible FDEs (rules.py) --------------------------------------------------


def flex_section() -> tuple[SFrameSection, FDE]:
    sec = x86(3, "realign")
    fde = next(f for f in sec.iter_fdes() if f.flex)
    return sec, fde


def flex_fre(sec: SFrameSection, fde: FDE, words: int) -> FRE:
    return next(f for f in sec.get_fres(fde) if len(f.words) == words)


def test_flex_word_count_invalid() -> None:
    sec, fde = flex_section()
    fre = flex_fre(sec, fde, 2)
    k = sec.get_fres(fde).index(fre)
    info_at = fre.offset + 1
    data = patched(sec, info_at, "B", (sec.data[info_at] & ~0x1E) | (1 << 1))
    lookup_fails(sec, data, fde.start + fre.start, f"FDE {fde.index}: FRE {k} has 1 data words, "
                 f"not valid in a flexible FDE (at offset {info_at:#x})")


def test_flex_cfa_not_register_based() -> None:
    sec, fde = flex_section()
    fre = flex_fre(sec, fde, 2)
    data = patched(sec, fre.offset + 2, "B", 0x02)
    lookup_fails(sec, data, fde.start + fre.start, f"FDE {fde.index}: flexible CFA rule 0x2 is "
                 f"not register-based (at offset {fre.offset:#x})")


def test_flex_reserved_bit() -> None:
    sec, fde = flex_section()
    fre = flex_fre(sec, fde, 5)  # CFA pair, RA padding, FP pair
    data = patched(sec, fre.offset + 5, "B", 0x37)
    lookup_fails(sec, data, fde.start + fre.start, f"FP control word 0x37 has the reserved bit "
                 f"set (at offset {fre.offset:#x})")


def test_flex_fp_without_offset() -> None:
    sec, fde = flex_section()
    fre = flex_fre(sec, fde, 5)
    # RA padding -> an RA rule: its pair eats the FP control word, FP has no offset.
    data = patched(sec, fre.offset + 4, "B", 0x19)
    lookup_fails(sec, data, fde.start + fre.start, f"FDE {fde.index}: FP rule without its offset "
                 f"word (at offset {fre.offset:#x})")


def test_flex_words_left_over() -> None:
    """N=6 after an RA padding word leaves one word over. Patching the count in the
    bytes would make the next FREs misparse first, so the real FRE gets a sixth word."""
    sec, fde = flex_section()
    fre = flex_fre(sec, fde, 5)
    six = fre._replace(words=(*fre.words, 0), info=(fre.info & ~0x1E) | (6 << 1))
    with pytest.raises(FormatError) as exc:
        fre_rules(sec.header, fde, six, sec.arch)
    assert str(exc.value) == (f"FDE {fde.index}: 1 data words left over in a flexible FRE "
                              f"(at offset {fre.offset:#x})")


def test_flex_ra_without_offset() -> None:
    """Unreachable from bytes (N=3 is rejected first); rules.py still guards it."""
    sec, fde = flex_section()
    fre = flex_fre(sec, fde, 2)
    odd = fre._replace(words=(fre.words[0], fre.words[1], 0x19), info=fre.info + 2)
    with pytest.raises(FormatError) as exc:
        fre_rules(sec.header, fde, odd, AMD64)
    assert str(exc.value) == (f"FDE {fde.index}: RA rule without its offset word "
                              f"(at offset {fre.offset:#x})")


def test_host_build_validates(host_sframe_binary: Path, host_sframe_version: int) -> None:
    from sframe_core.format.elf import open_sframe
    section = open_sframe(host_sframe_binary)
    # v1 on Debian 12, v2 on Debian 13: the host readelf's reading of the same file.
    assert section.version == host_sframe_version
    section.validate()
