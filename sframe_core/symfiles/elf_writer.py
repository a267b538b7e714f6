"""A 64-bit ELF file written from a layout: section headers and their bytes,
program headers, the ELF header's fields; bytes out.

Kept apart from what decides the layout (``symfile``: which sections a
symbol file copies, drops or adds) so that it reads no file and knows no
SFrame, and a test builds a file from a hand-made layout and reads it back
(as drgn's test ELF writer is used). The file is laid out as
``objcopy --only-keep-debug`` lays out a separate debug file: every section
keeps its index (symbol and link fields stay valid), sections without bytes
keep their sizes, segments keep their addresses and sizes in memory but hold
no bytes, except the notes and the headers the first segment maps.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO, NamedTuple

from ..base.files import SectionHeader

__all__ = ["Section", "Layout", "write_elf", "elf_bytes", "EHDR_SIZE", "PHDR_SIZE", "SHDR_SIZE"]

EHDR_SIZE, PHDR_SIZE, SHDR_SIZE = 64, 56, 64
_SHT_NULL, _SHT_NOTE = 0, 7
_SHF_ALLOC = 0x2
_PT_LOAD, _PT_NOTE, _PT_PHDR = 1, 4, 6
# At or above this many sections (or this section name table index), ELF
# keeps the number in section 0 instead of the ELF header.
_SHN_LORESERVE, _SHN_XINDEX = 0xFF00, 0xFFFF


# A section's bytes, as the chunks a call yields (each call from the start).
Chunks = Callable[[], Iterable[bytes]]


class Section(NamedTuple):
    """One section: its header (name offset, type, flags, address, link, info,
    alignment, entry size as written; the offset is the writer's) and its
    bytes, or None for one that holds none in the file (the header's size is
    written as it is)."""

    header: SectionHeader
    # A copied section of a large file comes in chunks (``Chunks``), so that
    # writing it needs memory for one chunk, not for the section.
    data: bytes | Chunks | None = None


class Layout(NamedTuple):
    """What ``write_elf`` writes."""

    ident: bytes  # e_ident, 16 bytes (class 64-bit, the byte order in ident[5])
    header: tuple[int, ...]  # e_type .. e_shstrndx as read; the table fields are rewritten
    segments: tuple[tuple[int, ...], ...]  # (p_type, p_flags, p_offset, p_vaddr, p_paddr,
    #                                         p_filesz, p_memsz, p_align)
    sections: Sequence[Section]  # section 0 first (written as zeros)
    shstrndx: int


def _align(value: int, alignment: int) -> int:
    alignment = max(alignment, 1)
    return (value + alignment - 1) // alignment * alignment


def write_elf(out: BinaryIO, layout: Layout) -> None:
    """Write ``layout`` to ``out`` (seekable, empty): the headers, then each
    section's bytes at its alignment in section order, then the section
    headers. A ``PT_NOTE`` segment points at the allocated note section of
    its address."""
    endian = ">" if layout.ident[5] == 2 else "<"
    phdrs = layout.segments
    headers = EHDR_SIZE + len(phdrs) * PHDR_SIZE
    pos = headers
    out.seek(pos)
    placed: list[tuple[int, int]] = []  # (offset, size) per section
    note_at: dict[int, int] = {}  # address -> offset of an allocated note
    for index, (sec, data) in enumerate(layout.sections):
        if index == 0:
            placed.append((0, 0))
            continue
        if data is None:
            placed.append((pos, sec.size))
            continue
        pos = _align(pos, sec.align)
        out.seek(pos)
        if isinstance(data, bytes):
            out.write(data)
            size = len(data)
        else:
            size = 0
            for chunk in data():
                out.write(chunk)
                size += len(chunk)
        if sec.type == _SHT_NOTE and sec.flags & _SHF_ALLOC:
            note_at[sec.addr] = pos
        placed.append((pos, size))
        pos += size
    shoff = _align(pos, 8)
    out.seek(shoff)
    table = bytearray()
    for index, ((offset, size), (sec, _data)) in enumerate(zip(placed, layout.sections,
                                                               strict=True)):
        if index == 0:
            table += bytes(SHDR_SIZE)
            continue
        table += struct.pack(endian + "IIQQQQIIQQ", sec.name_offset, sec.type, sec.flags, sec.addr,
                             offset, size, sec.link, sec.info, sec.align, sec.entsize)
    out.write(table)
    file_end = shoff + len(table)
    out.seek(EHDR_SIZE)
    for ph in phdrs:
        ptype, flags, offset, vaddr, paddr, filesz, memsz, palign = ph
        if ptype == _PT_NOTE and vaddr in note_at:
            offset = note_at[vaddr]
        elif ptype == _PT_PHDR or (ptype == _PT_LOAD and offset == 0 and filesz):
            # The headers are where they were: the first segment still maps them.
            offset, filesz = (EHDR_SIZE, headers - EHDR_SIZE) if ptype == _PT_PHDR \
                else (0, min(filesz, headers))
        else:
            # As objcopy: the segment keeps its addresses and sizes in memory
            # but no bytes; the offset stays congruent to the address when
            # that is inside the file (readers check offsets against the size).
            congruent = vaddr % palign if ptype == _PT_LOAD and palign else 0
            offset, filesz = (congruent if congruent <= file_end else 0), 0
        out.write(struct.pack(endian + "IIQQQQQQ", ptype, flags, offset, vaddr, paddr, filesz,
                              memsz, palign))
    (etype, machine, version, entry, _phoff, _shoff, eflags, _ehsize, _phentsize, _phnum,
     _shentsize, _shnum, _shstrndx) = layout.header
    shnum, shstrndx = len(layout.sections), layout.shstrndx
    out.seek(0)
    out.write(layout.ident)
    out.write(struct.pack(endian + "HHIQQQIHHHHHH", etype, machine, version, entry,
                          EHDR_SIZE if phdrs else 0, shoff, eflags, EHDR_SIZE,
                          PHDR_SIZE if phdrs else 0, len(phdrs), SHDR_SIZE,
                          shnum if shnum < _SHN_LORESERVE else 0,
                          shstrndx if shstrndx < _SHN_LORESERVE else _SHN_XINDEX))
    if shnum >= _SHN_LORESERVE or shstrndx >= _SHN_LORESERVE:
        # Extended numbering: the real count and index live in section 0.
        out.seek(shoff)
        out.write(struct.pack(endian + "IIQQQQIIQQ", 0, 0, 0, 0, 0,
                              shnum if shnum >= _SHN_LORESERVE else 0,
                              shstrndx if shstrndx >= _SHN_LORESERVE else 0, 0, 0, 0))


def elf_bytes(layout: Layout) -> bytes:
    """``write_elf``'s file as bytes."""
    buffer = io.BytesIO()
    write_elf(buffer, layout)
    return buffer.getvalue()
