"""A module's ELF headers, read once with ``struct`` and bounds-checked against
its size, with its build-id and ``.gnu_debuglink``: what a symbol file is
planned from, and all a cache hit reads (no pyelftools: microseconds).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from ..base.abi import ELF_MACHINE_NAMES, Arch, arch_for_machine
from ..base.errors import FileError
from ..base.files import SectionHeader as _Section
from ..base.files import named_sections, notes_build_id, read_within, section_rows, segment_rows

__all__ = ["ModuleInfo", "read_module"]

_SHT_NULL, _SHT_NOTE, _SHT_NOBITS = 0, 7, 8
_EHDR_SIZE, _PHDR_SIZE, _SHDR_SIZE = 64, 56, 64  # ELF64's
_PT_NOTE = 4
_DEBUG_INFO = (".debug_info", ".zdebug_info")


class ModuleInfo(NamedTuple):
    """An ELF file's headers, read once, bounds-checked against its size."""

    path: str
    big_endian: bool
    ident: bytes
    header: tuple[int, ...]  # e_type .. e_shstrndx, as unpacked
    phdrs: tuple[tuple[int, ...], ...]
    sections: tuple[_Section, ...]
    shstrndx: int
    size: int
    build_id: str | None
    debuglink: tuple[str, int] | None  # (name, crc32)

    @property
    def elf_type(self) -> int:
        return self.header[0]

    def section(self, name: str) -> _Section | None:
        for sec in self.sections:
            if sec.name == name:
                return sec
        return None

    @property
    def arch(self) -> Arch | None:
        """The module's ABI, where SFrame defines one for its machine."""
        return arch_for_machine(ELF_MACHINE_NAMES.get(self.header[1], ""), self.big_endian)

    @property
    def has_debug_info(self) -> bool:
        return any(sec.name in _DEBUG_INFO and sec.type != _SHT_NOBITS and sec.size
                   for sec in self.sections)


def read_module(path: str) -> ModuleInfo:
    """The headers of ``path`` (a 64-bit ELF file) and its build-id and debuglink.

    :raises FileError: not readable, not a 64-bit ELF file, or malformed.
    """
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            ident = stream.read(16)
            if len(ident) < 16 or ident[:4] != b"\x7fELF":
                raise FileError(f"{path}: not an ELF file")
            if ident[4] != 2:
                raise FileError(f"{path}: not a 64-bit ELF file")
            if ident[5] not in (1, 2):
                raise FileError(f"{path}: malformed ELF file: bad data encoding {ident[5]}")
            endian = ">" if ident[5] == 2 else "<"
            raw = read_within(stream, 16, _EHDR_SIZE - 16, size, "the ELF header", path)
            header = struct.unpack(endian + "HHIQQQIHHHHHH", raw)
            (_etype, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize,
             phnum, shentsize, shnum, shstrndx) = header
            phdrs: list[tuple[int, ...]] = []
            if phnum:
                if phentsize != _PHDR_SIZE:
                    raise FileError(f"{path}: malformed ELF file: program header size {phentsize}")
                phdrs = segment_rows(read_within(stream, phoff, phnum * _PHDR_SIZE, size,
                                                 "the program headers", path), endian)
            rows: list[tuple[int, ...]] = []
            if shoff:
                if shentsize != _SHDR_SIZE:
                    raise FileError(f"{path}: malformed ELF file: section header size {shentsize}")
                (first,) = section_rows(read_within(stream, shoff, _SHDR_SIZE, size,
                                                    "the section headers", path), endian)
                if shnum == 0:
                    shnum = first[5]  # extended numbering: the count is in section 0
                if shstrndx == 0xFFFF:
                    shstrndx = first[6]
                rows = section_rows(read_within(stream, shoff, shnum * _SHDR_SIZE, size,
                                                "the section headers", path), endian)
            names = b""
            if rows:
                if not 0 < shstrndx < len(rows):
                    raise FileError(f"{path}: malformed ELF file: no section name table")
                strtab = rows[shstrndx]
                names = read_within(stream, strtab[4], strtab[5], size, "the section name table",
                                    path)
            sections = named_sections(rows, names)
            for sec in sections:
                if sec.type not in (_SHT_NOBITS, _SHT_NULL) and sec.offset + sec.size > size:
                    raise FileError(f"{path}: malformed ELF file: section {sec.name} lies outside "
                                    "the file")
            build_id = None
            for sec in sections:
                if sec.type == _SHT_NOTE and sec.size <= 1 << 20:
                    build_id = notes_build_id(
                        read_within(stream, sec.offset, sec.size, size, sec.name, path), endian)
                    if build_id:
                        break
            if build_id is None and not sections:
                for ph in phdrs:
                    if ph[0] == _PT_NOTE and ph[5] <= 1 << 20:
                        build_id = notes_build_id(read_within(stream, ph[2], ph[5], size,
                                                              "a PT_NOTE segment", path), endian)
                        if build_id:
                            break
            debuglink = None
            for sec in sections:
                if sec.name == ".gnu_debuglink" and 8 <= sec.size <= 4096:
                    data = read_within(stream, sec.offset, sec.size, size, sec.name, path)
                    name_end = data.find(b"\0")
                    if name_end > 0 and len(data) >= ((name_end + 4) & ~3) + 4:
                        (crc,) = struct.unpack_from(endian + "I", data, (name_end + 4) & ~3)
                        debuglink = (os.fsdecode(data[:name_end]), crc)
    except OSError as exc:
        raise FileError(f"{path}: {exc.strerror or exc}") from None
    return ModuleInfo(path, endian == ">", ident, header, tuple(phdrs), sections,
                      shstrndx, size, build_id, debuglink)
