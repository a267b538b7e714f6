"""The symbol file's ELF writer alone: a hand-made layout in, a file pyelftools
reads back as given (sections, symbols, notes, program headers)."""

from __future__ import annotations

import io
import struct

import pytest
from elftools.elf.elffile import ELFFile

from sframe_core.base.files import SectionHeader
from sframe_core.symfiles.elf_writer import EHDR_SIZE, PHDR_SIZE, Layout, Section, elf_bytes

_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_NOTE, _SHT_NOBITS = 1, 2, 3, 7, 8
_SHF_ALLOC, _SHF_EXECINSTR = 0x2, 0x4
_PT_LOAD, _PT_NOTE = 1, 4
_TEXT, _NOTE_ADDR = 0x401000, 0x400200
_BUILD_ID = bytes(range(20))


def _header(name_offset: int, stype: int, flags: int = 0, addr: int = 0, size: int = 0,
            link: int = 0, info: int = 0, align: int = 1, entsize: int = 0) -> SectionHeader:
    # The name is what a reader gives; the writer writes name_offset.
    return SectionHeader("", stype, flags, addr, 0, size, link, info, align, entsize, name_offset)


def _layout(big_endian: bool = False, padding: int = 0) -> Layout:
    end = ">" if big_endian else "<"
    names = bytearray(b"\0")

    def name(text: str) -> int:
        at = len(names)
        names.extend(text.encode() + b"\0")
        return at

    note = struct.pack(end + "III", 4, len(_BUILD_ID), 3) + b"GNU\0" + _BUILD_ID
    strtab = b"\0main\0"
    symtab = bytes(24) + struct.pack(end + "IBBHQQ", 1, 0x12, 0, 2, _TEXT, 0x20)
    sections = [
        Section(_header(0, 0)),
        Section(_header(name(".note.gnu.build-id"), _SHT_NOTE, _SHF_ALLOC, _NOTE_ADDR,
                        align=4), note),
        Section(_header(name(".text"), _SHT_NOBITS, _SHF_ALLOC | _SHF_EXECINSTR, _TEXT,
                        size=0x100, align=16)),
        Section(_header(name(".debug_frame"), _SHT_PROGBITS, align=8), b"\x01" * 13),
        Section(_header(name(".strtab"), _SHT_STRTAB), strtab),
        Section(_header(name(".symtab"), _SHT_SYMTAB, link=4, info=1, align=8, entsize=24),
                symtab),
    ]
    sections += [Section(_header(name(f".pad{i}"), _SHT_NOBITS, size=1)) for i in range(padding)]
    shstrndx = len(sections)
    at = name(".shstrtab")
    sections.append(Section(_header(at, _SHT_STRTAB), bytes(names)))
    segments = (
        (_PT_LOAD, 5, 0, 0x400000, 0x400000, 0x1000, 0x1000, 0x1000),
        (_PT_LOAD, 5, 0x1000, _TEXT, _TEXT, 0x100, 0x100, 0x1000),
        (_PT_NOTE, 4, 0x200, _NOTE_ADDR, _NOTE_ADDR, len(note), len(note), 4),
    )
    ident = b"\x7fELF" + bytes([2, 2 if big_endian else 1, 1]) + bytes(9)
    header = (2, 62, 1, _TEXT, 0, 0, 0, 64, 56, 3, 64, 0, 0)  # ET_EXEC, x86-64
    return Layout(ident, header, segments, sections, shstrndx)


@pytest.mark.parametrize("big_endian", [False, True])
def test_sections_symbols_notes_and_segments_read_back(big_endian: bool) -> None:
    layout = _layout(big_endian)
    elf = ELFFile(io.BytesIO(elf_bytes(layout)))
    assert elf.little_endian is not big_endian
    assert elf["e_type"] == "ET_EXEC" and elf["e_entry"] == _TEXT
    assert [sec.name for sec in elf.iter_sections()] == [
        "", ".note.gnu.build-id", ".text", ".debug_frame", ".strtab", ".symtab", ".shstrtab"]
    text = elf.get_section_by_name(".text")
    assert text["sh_type"] == "SHT_NOBITS" and text["sh_size"] == 0x100
    assert text["sh_addr"] == _TEXT and text["sh_addralign"] == 16
    frame = elf.get_section_by_name(".debug_frame")
    assert frame.data() == b"\x01" * 13 and frame["sh_offset"] % 8 == 0
    (symbol,) = [s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name]
    assert symbol.name == "main" and symbol["st_value"] == _TEXT and symbol["st_size"] == 0x20
    assert symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_shndx"] == 2
    note = elf.get_section_by_name(".note.gnu.build-id")
    (entry,) = note.iter_notes()
    assert entry["n_type"] == "NT_GNU_BUILD_ID" and entry["n_desc"] == _BUILD_ID.hex()
    assert note["sh_addr"] == _NOTE_ADDR
    segments = list(elf.iter_segments())
    assert [(s["p_type"], s["p_vaddr"], s["p_memsz"], s["p_align"]) for s in segments] == [
        ("PT_LOAD", 0x400000, 0x1000, 0x1000), ("PT_LOAD", _TEXT, 0x100, 0x1000),
        ("PT_NOTE", _NOTE_ADDR, note["sh_size"], 4)]
    # The first segment maps the headers still; the others hold no bytes but
    # the note, which points at the note section's new place.
    assert segments[0]["p_offset"] == 0 and segments[0]["p_filesz"] == EHDR_SIZE + 3 * PHDR_SIZE
    assert segments[1]["p_filesz"] == 0 and segments[1]["p_offset"] % 0x1000 == _TEXT % 0x1000
    assert segments[2]["p_offset"] == elf.get_section_by_name(".note.gnu.build-id")["sh_offset"]
    (segment_note,) = segments[2].iter_notes()
    assert segment_note["n_desc"] == _BUILD_ID.hex()


def test_extended_section_numbering() -> None:
    """At 0xff00 sections or more, the count and the name table's index live in section 0."""
    layout = _layout(padding=0xFF00)
    data = elf_bytes(layout)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    assert (shnum, shstrndx) == (0, 0xFFFF)
    elf = ELFFile(io.BytesIO(data))
    assert elf.num_sections() == len(layout.sections)
    assert elf.get_section(layout.shstrndx).name == ".shstrtab"
    assert elf.get_section(3).name == ".debug_frame"
