"""``files.elf_layout`` readers against pyelftools, on every fixture and the host's libc.

``read_elf`` takes a linked file's headers with ``struct`` (``elf._read_layout``)
because pyelftools' object per section and per segment was a good part of a
backtrace's start-up; pyelftools stays for ``.o`` files, cores and other
machines. The two must say the same of every file: the whole ``ElfSFrame``,
down to the ``.sframe`` bytes and the dynamic relocation sections.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import FIXTURES

from sframe_core.base.files import elf_layout, open_elf
from sframe_core.format import elf as elfmod

HOST = [Path("/lib/x86_64-linux-gnu/libc.so.6"), Path("/lib64/ld-linux-x86-64.so.2")]


def _elf_files() -> list[Path]:
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as stream:
                if stream.read(4) == b"\x7fELF":
                    found.append(path)
    return found + [p for p in HOST if p.exists()]


def test_every_fixture_reads_the_same_both_ways() -> None:
    files = _elf_files()
    fast = 0
    for path in files:
        name = str(path)
        with open_elf(name) as stream:
            quick = elfmod._read_layout(stream, elf_layout(stream, name), name)
            stream.seek(0)
            full = elfmod._read(ELFFile(stream), name)
        if quick is None:
            assert full.elf_type == "ET_REL", name  # the one kind left to pyelftools here
            continue
        fast += 1
        assert quick == full, name
    # Executables, PIEs, libraries (with and without section headers) of three machines.
    assert fast > 100


@pytest.mark.parametrize("path", [FIXTURES / "x86_64" / "busid-v3" / "deep.noeh",
                                  FIXTURES / "realprogs" / "lua5.4" / "busid-v3"
                                  / "lua5.4.noeh.stripped"], ids=lambda p: p.name)
def test_layout_names_sections_and_segments(path: Path) -> None:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        names = [s.name for s in elf.iter_sections()]
        segments = [(s["p_offset"], s["p_vaddr"], s["p_filesz"], s["p_memsz"], s["p_flags"])
                    for s in elf.iter_segments()]
    with open_elf(path) as stream:
        layout = elf_layout(stream, str(path))
    assert [s.name for s in layout.sections] == names
    assert [(s.offset, s.vaddr, s.filesz, s.memsz, s.flags) for s in layout.segments] == segments
    if names:
        assert layout.section(".text") is not None and layout.section(".nope") is None


def test_whole_code_reader_reads_what_each_read_does() -> None:
    """``code_reader(whole=True)`` (a symbol file's writer: the code read once)
    answers every read as the reader that opens the file per read: every
    function's bytes, a read across a segment's end and one outside all."""
    from helpers.realprogs import LUA

    info = elfmod.read_elf(str(LUA.path("busid-v3", "noeh")))
    per_read, whole = info.code_reader(0x1000), info.code_reader(0x1000, whole=True)
    assert per_read is not None and whole is not None
    section = info.open(0x1000 + info.sframe_address)  # loaded at a bias, as a PIE
    assert section is not None
    for fde in section.iter_fdes():
        assert whole(fde.start, fde.size) == per_read(fde.start, fde.size) is not None
    for seg in info.segments:
        end = seg.vaddr + 0x1000 + seg.filesz
        assert whole(end - 4, 4) == per_read(end - 4, 4) is not None
        assert whole(end - 4, 8) is None and per_read(end - 4, 8) is None
    assert whole(0x10, 4) is None and per_read(0x10, 4) is None
