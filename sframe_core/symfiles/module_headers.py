"""A module's ELF headers with its build-id and ``.gnu_debuglink``: what a
symbol file is planned from, and all a cache hit reads.

The headers are ``base/files.py``'s ``elf_layout``, the one reader of ELF
headers with ``struct`` (bounds-checked against the file, its checks and
messages the ones every command gives; no pyelftools: microseconds); this
adds what a symbol file needs of them.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from ..base.abi import ELF_MACHINE_NAMES, Arch, arch_for_machine
from ..base.errors import FileError
from ..base.files import ElfLayout, elf_layout, notes_build_id, open_regular, read_within
from ..base.files import SectionHeader as _Section

__all__ = ["ModuleInfo", "read_module"]

_SHT_NOTE, _SHT_NOBITS = 7, 8
_PT_NOTE = 4
_DEBUG_INFO = (".debug_info", ".zdebug_info")


class ModuleInfo(NamedTuple):
    """A 64-bit ELF file's headers (``layout``), read once, with its build-id
    and debuglink."""

    path: str
    layout: ElfLayout
    build_id: str | None
    debuglink: tuple[str, int] | None  # (name, crc32)

    @property
    def big_endian(self) -> bool:
        return self.layout.big_endian

    @property
    def ident(self) -> bytes:
        return self.layout.ident

    @property
    def header(self) -> tuple[int, ...]:
        """e_type .. e_shstrndx, as the file holds them."""
        return self.layout.header

    @property
    def phdrs(self) -> tuple[tuple[int, ...], ...]:
        """The program headers, p_type .. p_align."""
        return self.layout.program_headers

    @property
    def sections(self) -> tuple[_Section, ...]:
        return self.layout.sections

    @property
    def shstrndx(self) -> int:
        return self.layout.shstrndx

    @property
    def size(self) -> int:
        return self.layout.size

    @property
    def elf_type(self) -> int:
        return self.layout.e_type

    def section(self, name: str) -> _Section | None:
        for sec in self.sections:
            if sec.name == name:
                return sec
        return None

    def read(self, offset: int, size: int, what: str) -> bytes:
        """``size`` bytes of the file at ``offset`` (``what`` names them in
        the error a range outside the file gives)."""
        try:
            with open(self.path, "rb") as stream:
                return read_within(stream, offset, size, self.size, what, self.path)
        except OSError as exc:
            raise FileError(f"{self.path}: {exc.strerror or exc}") from None

    def section_bytes(self, name: str) -> bytes:
        """Section ``name``'s bytes as the file holds them (b"" when it has no
        such section, or one without contents)."""
        sec = self.section(name)
        if sec is None or sec.type == _SHT_NOBITS or not sec.size:
            return b""
        return self.read(sec.offset, sec.size, name)

    @property
    def arch(self) -> Arch | None:
        """The module's ABI, where SFrame defines one for its machine."""
        return arch_for_machine(ELF_MACHINE_NAMES.get(self.layout.machine, ""), self.big_endian)

    @property
    def has_debug_info(self) -> bool:
        return any(sec.name in _DEBUG_INFO and sec.type != _SHT_NOBITS and sec.size
                   for sec in self.sections)


def read_module(path: str) -> ModuleInfo:
    """The headers of ``path`` (a 64-bit ELF file) and its build-id and debuglink.

    :raises FileError: not readable, not a 64-bit ELF file, or malformed (as
        ``elf_layout`` says), or without the section name table its section
        headers need (the symbol file copies them).
    """
    stream = open_regular(path)
    try:
        with stream:
            layout = elf_layout(stream, path)
            if not layout.wide:
                raise FileError(f"{path}: not a 64-bit ELF file")
            sections, size = layout.sections, layout.size
            if sections and not 0 < layout.shstrndx < len(sections):
                raise FileError(f"{path}: malformed ELF file: no section name table")
            endian = ">" if layout.big_endian else "<"
            build_id = None
            for sec in sections:
                if sec.type == _SHT_NOTE and sec.size <= 1 << 20:
                    build_id = notes_build_id(
                        read_within(stream, sec.offset, sec.size, size, sec.name, path), endian)
                    if build_id:
                        break
            if build_id is None and not sections:
                for ph in layout.program_headers:
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
    return ModuleInfo(path, layout, build_id, debuglink)
