"""Finding SFrame (and the presence of DWARF CFI) in ELF files, with pyelftools.

Every pyelftools or OS error is turned into ``FileError`` here, at one choke
point, so callers only ever handle ``SFrameError``.
"""

from __future__ import annotations

import functools
import os
import struct
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from ..base.abi import ELF_MACHINE_NAMES
from ..base.errors import FileError, FormatError, reading_elf
from ..base.files import MAX_SECTION_SIZE, ElfLayout, SectionHeader, elf_layout, open_elf

if TYPE_CHECKING:
    from collections.abc import Callable

    from .linked import Part
    from .section import CodeReader, PointerReader, Region, SavedAnalyser, SFrameSection

    # Makes the saved-register analysis of an opened section's functions (a
    # layer above: ``analysis.section.SectionAnalysis``).
    Analyser = Callable[[SFrameSection], SavedAnalyser]

# The SFrame decoder (records, section, rules) is imported where a section
# is decoded: a debugger whose objfiles all have symbol files reads ELF
# headers here and never decodes one, and its start-up pays for the imports.

__all__ = ["PT_GNU_SFRAME", "SHT_GNU_SFRAME", "ElfSFrame", "LoadSegment", "read_elf", "open_sframe",
           "unwind_gap"]

PT_GNU_SFRAME = 0x6474E554
SHT_GNU_SFRAME = 0x6FFFFFF4
PT_GNU_EH_FRAME = 0x6474E550

# PC-relative relocation types gas puts on FDE start fields in ``.o`` files,
# by e_machine: type -> field width in bytes.
_PCREL_RELOCS: dict[str, dict[int, int]] = {
    "EM_X86_64": {2: 4, 24: 8},  # R_X86_64_PC32, R_X86_64_PC64
    "EM_AARCH64": {261: 4, 260: 8},  # R_AARCH64_PREL32, R_AARCH64_PREL64
    "EM_S390": {5: 4, 23: 8},  # R_390_PC32, R_390_PC64
}
# R_*_RELATIVE (load bias + addend) by e_machine: what a PIE's tables of code
# addresses hold once loaded.
_RELATIVE: dict[str, int] = {"EM_X86_64": 8, "EM_AARCH64": 1027, "EM_S390": 12}
_RELA = struct.Struct("<QQq")
_RELA_BE = struct.Struct(">QQq")
_SHF_ALLOC = 2
_SHT_RELR = 19  # older pyelftools give the number


class LoadSegment(NamedTuple):
    """A PT_LOAD program header: what maps file bytes to addresses."""

    offset: int
    vaddr: int
    filesz: int
    memsz: int
    executable: bool


class ElfSFrame(NamedTuple):
    """What an ELF file holds for unwinding, read once from its headers.

    ``sframe_address`` is the section's file (link-time) address; ``data``
    its bytes, with relocations applied for ``.o`` files.
    """

    path: str
    machine: str
    big_endian: bool
    elf_type: str  # ET_EXEC, ET_DYN, ET_REL, ET_CORE
    has_eh_frame: bool
    has_debug_frame: bool
    sframe_address: int | None
    data: bytes | None
    from_segment: bool  # found through PT_GNU_SFRAME (section headers gone)
    relocated: bool  # .o relocations were applied: start fields are PC-relative
    segments: tuple[LoadSegment, ...] = ()
    entry: int = 0  # e_entry: where _start is, in executables
    # (file offset, size) of the allocated SHT_RELA sections (.rela.dyn):
    # read only when a table of code addresses is asked for.
    dynamic_relocs: tuple[tuple[int, int], ...] = ()

    def bias_for_mapping(self, start: int, file_offset: int) -> int | None:
        """Load bias given that address ``start`` holds file byte ``file_offset``."""
        for seg in self.segments:
            page = seg.offset & ~0xFFF
            if page <= file_offset < seg.offset + max(seg.filesz, 1):
                return start - (seg.vaddr + file_offset - seg.offset)
        return None

    @property
    def has_sframe(self) -> bool:
        from .records import HEADER_SIZE

        return self.data is not None and len(self.data) >= HEADER_SIZE

    @property
    def is_relocatable(self) -> bool:
        return self.elf_type == "ET_REL"

    def parts(self) -> list[Part]:
        """The SFrame headers of the section as the linker wrote it (``open``
        reads them as one)."""
        from .linked import split_parts

        assert self.data is not None
        return split_parts(self.data, exact=not self.from_segment)

    def open(self, address: int | None = None, *, whole: bool = False,
             analyser: Analyser | None = None) -> SFrameSection | None:
        """The section, at its file address or at ``address`` (runtime).

        ``whole``: for a reader of every function (a symbol file's writer),
        which reads the file's code once rather than once per function
        (``code_reader``). ``analyser``: made for the section, it gives the
        rows the callee-saved registers the functions' code proves
        (``analysis.section.SectionAnalysis``); without one, rows have CFA,
        RA and FP alone."""
        if not self.has_sframe or self.data is None or self.sframe_address is None:
            return None
        from .section import SFrameSection

        base = self.sframe_address if address is None else address
        kept: dict[int, bytes] = {}  # a whole reader's segments, shared with ``regions``
        data: bytes | memoryview = self.data
        note: str | None = None
        try:
            if not self.relocated and self.elf_type in ("ET_EXEC", "ET_DYN"):
                from .linked import read_linked

                linked = read_linked(data, base, exact=not self.from_segment,
                                     code=self.code_ranges(base - self.sframe_address))
                data, note = linked.data, linked.note
            section = SFrameSection(data, base, pcrel=True if self.relocated else None,
                                    name=self.path,
                                    code=self.code_reader(base - self.sframe_address, whole=whole,
                                                          kept=kept))
        except FormatError as exc:
            raise FormatError(f"{self.path}: .sframe: {exc}") from None
        section.merged = note
        if whole and section.code is not None:
            bias = base - self.sframe_address
            section.regions = lambda: self._regions(bias, kept)
        section.absolute_tables = self.elf_type == "ET_EXEC" and base == self.sframe_address
        section.pointers = self.pointer_reader(base - self.sframe_address, whole=whole)
        if analyser is not None:
            section.analyser = analyser(section)
        return section

    def code_ranges(self, bias: int) -> list[tuple[int, int]]:
        """The executable PT_LOAD segments' address ranges once loaded at ``bias``."""
        return [(seg.vaddr + bias, seg.vaddr + bias + seg.memsz)
                for seg in self.segments if seg.executable]

    def pointer_reader(self, bias: int, *, whole: bool = False) -> PointerReader | None:
        """Reads ``count`` 64-bit words at a runtime address as they will be
        once the file is loaded at ``bias``: an executable's as the file holds
        them; a PIE's from its relative relocations where it has one (the file
        holds no final address there), else as the file holds them. None when
        that cannot be known: another relocation on a word, packed (RELR)
        relocations, no section headers. ``whole``: as ``code_reader``'s."""
        read = self.code_reader(bias, whole=whole)
        if read is None:
            return None
        word = ">Q" if self.big_endian else "<Q"
        if self.elf_type == "ET_EXEC":
            if bias:
                return None

            def raw(address: int, count: int) -> list[int] | None:
                data = read(address, 8 * count)
                return None if data is None else [v for (v,) in struct.iter_unpack(word, data)]

            return raw
        relative = _RELATIVE.get(self.machine)
        if self.elf_type != "ET_DYN" or relative is None or not self.dynamic_relocs:
            return None
        path, relocs, rela = self.path, self.dynamic_relocs, _RELA_BE if self.big_endian else _RELA

        @functools.cache
        def relocations() -> dict[int, int | None] | None:
            """Offset -> addend of a relative relocation, or None: another type."""
            table: dict[int, int | None] = {}
            try:
                with open(path, "rb") as stream:
                    for offset, size in relocs:
                        stream.seek(offset)
                        chunk = stream.read(size)
                        for r_offset, r_info, addend in rela.iter_unpack(
                                chunk[:len(chunk) - len(chunk) % rela.size]):
                            table[r_offset] = addend if r_info & 0xFFFFFFFF == relative else None
            except OSError:
                return None
            return table

        def relocated(address: int, count: int) -> list[int] | None:
            table = relocations()
            data = read(address, 8 * count)
            if table is None or data is None:
                return None
            out = []
            for k, (value,) in enumerate(struct.iter_unpack(word, data)):
                at = address - bias + 8 * k
                if at not in table:
                    out.append(value)  # loaded as the file holds it
                    continue
                addend = table[at]
                if addend is None:
                    return None  # a symbol's address: not known here
                out.append(addend + bias)
            return out

        return relocated


    def _regions(self, bias: int, kept: dict[int, bytes]) -> list[Region]:
        """Every PT_LOAD segment's contents, as a whole ``code_reader`` reads them."""
        from .section import Region

        out = []
        for k, seg in enumerate(self.segments):
            contents = kept.get(k)
            if contents is None:
                contents = kept[k] = _read_at(self.path, seg.offset, seg.filesz)
            out.append(Region(seg.vaddr + bias, seg.filesz, contents))
        return out

    def code_reader(self, bias: int, *, whole: bool = False,
                    kept: dict[int, bytes] | None = None) -> CodeReader | None:
        """Reads this file's PT_LOAD contents (code, jump tables) at runtime
        addresses (file address + ``bias``); None for ``.o`` files (every
        section at 0) and files without segments.

        Each read opens the file: a debugger's lookups read a few functions
        of modules it keeps for hours, and hold neither a descriptor nor
        the code. ``whole``: a segment's contents are read the first time
        one of its bytes is asked for and kept by the reader (as big as the
        file's code: for one pass over every function, where an open per
        function was a twentieth of the time)."""
        if self.is_relocatable or not self.segments:
            return None
        path = self.path
        segments = self.segments
        if kept is None:
            kept = {}

        def read(address: int, size: int) -> bytes | None:
            vaddr = address - bias
            for k, seg in enumerate(segments):
                if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
                    at = vaddr - seg.vaddr
                    if whole:
                        contents = kept.get(k)
                        if contents is None:
                            contents = kept[k] = _read_at(path, seg.offset, seg.filesz)
                        data = contents[at:at + size]
                    else:
                        data = _read_at(path, seg.offset + at, size)
                    return data if len(data) == size else None
            return None

        return read


def _read_at(path: str, offset: int, size: int) -> bytes:
    with open(path, "rb") as stream:
        stream.seek(offset)
        return stream.read(size)


def _apply_relocations(elf: Any, section: Any, data: bytearray) -> bool:
    """Apply ``.rela.sframe`` so FDE start fields read as PC-relative values.

    In a ``.o`` every section sits at address 0, so the result is the
    function's offset in its own text section: unambiguous with one text
    section, and said so by ``sframe dump`` otherwise.
    """
    relocs = _PCREL_RELOCS.get(elf["e_machine"], {})
    index = elf.get_section_index(section.name)
    applied = False
    for rel_sec in elf.iter_sections():
        if rel_sec["sh_type"] not in ("SHT_RELA", "SHT_REL") or rel_sec["sh_info"] != index:
            continue
        symtab = elf.get_section(rel_sec["sh_link"])
        endian = ">" if elf.little_endian is False else "<"
        for rel in rel_sec.iter_relocations():
            rtype = rel["r_info_type"]
            width = relocs.get(rtype)
            offset = rel["r_offset"]
            if width is None:
                raise FileError(f"unsupported relocation type {rtype} in {rel_sec.name}")
            if offset + width > len(data):
                raise FileError(f"relocation at {offset:#x} in {rel_sec.name} is outside .sframe")
            sym = symtab.get_symbol(rel["r_info_sym"])
            addend = rel["r_addend"] if rel.is_RELA() else 0
            value = sym["st_value"] + addend - offset  # S + A - P, sections at 0
            fmt = endian + ("i" if width == 4 else "q")
            try:
                struct.pack_into(fmt, data, offset, value)
            except struct.error as exc:
                raise FileError(f"relocation at {offset:#x} does not fit: {exc}") from None
            applied = True
    return applied


def read_elf(path: str | os.PathLike[str]) -> ElfSFrame:
    """Read what unwinding needs from an ELF file.

    :raises FileError: the file is missing, unreadable, not a regular file,
        not ELF, or its headers claim more than the file holds.
    """
    name = os.fspath(path)
    with reading_elf(name), open_elf(name) as stream:
        fast = _read_layout(stream, elf_layout(stream, name), name)
        if fast is not None:
            return fast
        from elftools.elf.elffile import ELFFile

        stream.seek(0)
        return _read(ELFFile(stream), name)


_E_TYPES = {2: "ET_EXEC", 3: "ET_DYN"}
_SHT_RELA, _SHT_REL, _SHT_NOBITS, _PT_LOAD = 4, 9, 8, 1


def _read_layout(stream: BinaryIO, layout: ElfLayout, name: str) -> ElfSFrame | None:
    """``_read`` from the headers alone (``files.elf_layout``), for the linked
    files of the machines we unwind: what every module of a backtrace costs,
    without pyelftools' object per section and per segment. None where
    ``_read`` must do it (``.o`` files, whose ``.sframe`` needs relocating;
    cores; other machines, named as pyelftools names them; a compressed
    ``.sframe``). The two give equal results (tests/test_elf_layout.py)."""
    e_type = _E_TYPES.get(layout.e_type)
    machine = ELF_MACHINE_NAMES.get(layout.machine)
    if e_type is None or machine is None:
        return None
    if layout.sections and not any(section.name for section in layout.sections):
        return None  # no usable name table: pyelftools' reading of it decides
    has_eh = has_debug = False
    address: int | None = None
    data: bytes | None = None
    from_segment = False
    sframe: SectionHeader | None = None
    relocs: list[tuple[int, int]] = []
    in_place = False
    for section in layout.sections:
        kind = section.type
        if kind == _SHT_RELA and section.flags & _SHF_ALLOC and section.entsize == _RELA.size:
            relocs.append((section.offset, section.size))
        elif kind == _SHT_RELR or (kind == _SHT_REL and section.flags & _SHF_ALLOC):
            in_place = True
        if section.name == ".eh_frame" and section.size > 0:
            has_eh = True
        elif section.name == ".debug_frame" and section.size > 0:
            has_debug = True
        elif section.name == ".sframe" and kind != _SHT_NOBITS:
            sframe = section
    if sframe is not None:
        _check_sframe_size(name, sframe.size)
        address = sframe.addr
        data = layout.data(stream, sframe)
        if data is None:
            return None  # compressed: pyelftools decompresses it
    elif not layout.sections:
        for segment in layout.segments:
            if segment.type == PT_GNU_SFRAME:
                address = segment.vaddr
                _check_sframe_size(name, segment.filesz)
                stream.seek(segment.offset)
                data = _segment_sframe(stream.read(segment.filesz))
                from_segment = True
            elif segment.type == PT_GNU_EH_FRAME and segment.memsz > 0:
                has_eh = True
    segments = tuple(LoadSegment(seg.offset, seg.vaddr, seg.filesz, seg.memsz, bool(seg.flags & 1))
                     for seg in layout.segments if seg.type == _PT_LOAD)
    return ElfSFrame(name, machine, layout.big_endian, e_type, has_eh, has_debug, address, data,
                     from_segment, False, segments, layout.entry, () if in_place else tuple(relocs))


def _check_sframe_size(name: str, size: int) -> None:
    if size > MAX_SECTION_SIZE:
        raise FileError(f"{name}: .sframe claims {size} bytes, more than any SFrame section "
                        f"(limit {MAX_SECTION_SIZE >> 20} MiB)")


def _segment_sframe(data: bytes) -> bytes:
    """PT_GNU_SFRAME's bytes: p_filesz can exceed the section, so keep what
    the header claims (a bad header is reported, with its offset, when the
    section is opened)."""
    from .records import HEADER_SIZE, parse_header

    if len(data) >= HEADER_SIZE:
        try:
            return data[: parse_header(data).size]
        except FormatError:
            pass
    return data


def _read(elf: Any, name: str) -> ElfSFrame:
    from .records import HEADER_SIZE

    has_eh = has_debug = False
    address: int | None = None
    data: bytes | None = None
    from_segment = relocated = False
    sframe = None
    relocs: list[tuple[int, int]] = []
    in_place = False  # REL or RELR dynamic relocations: addends kept in the words
    for section in elf.iter_sections():
        kind = section["sh_type"]
        if kind == "SHT_RELA" and section["sh_flags"] & _SHF_ALLOC \
                and section["sh_entsize"] == _RELA.size:
            relocs.append((section["sh_offset"], section["sh_size"]))
        elif kind in ("SHT_RELR", _SHT_RELR) or (kind == "SHT_REL"
                                                 and section["sh_flags"] & _SHF_ALLOC):
            in_place = True
        if section.name == ".eh_frame" and section["sh_size"] > 0:
            has_eh = True
        elif section.name == ".debug_frame" and section["sh_size"] > 0:
            has_debug = True
        elif section.name == ".sframe" and kind != "SHT_NOBITS":
            sframe = section
    if sframe is not None:
        _check_sframe_size(name, sframe["sh_size"])
        address = sframe["sh_addr"]
        raw = bytearray(sframe.data())
        if elf["e_type"] == "ET_REL" and len(raw) >= HEADER_SIZE:
            relocated = _apply_relocations(elf, sframe, raw)
        data = bytes(raw)
    elif elf.num_sections() == 0:
        # Section headers stripped: fall back on the program headers.
        for segment in elf.iter_segments():
            ptype = segment["p_type"]
            if ptype == PT_GNU_SFRAME or ptype == "PT_GNU_SFRAME":
                address = segment["p_vaddr"]
                _check_sframe_size(name, segment["p_filesz"])
                data = _segment_sframe(segment.data())
                from_segment = True
            elif ptype in (PT_GNU_EH_FRAME, "PT_GNU_EH_FRAME") and segment["p_memsz"] > 0:
                has_eh = True
    segments = tuple(
        LoadSegment(seg["p_offset"], seg["p_vaddr"], seg["p_filesz"], seg["p_memsz"],
                    bool(seg["p_flags"] & 1))
        for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD")
    machine = elf["e_machine"]
    return ElfSFrame(name, machine, not elf.little_endian, elf["e_type"], has_eh, has_debug,
                     address, data, from_segment, relocated, segments, elf["e_entry"],
                     () if in_place else tuple(relocs))


def unwind_gap(path: str) -> str | None:
    """Why a debugger has nothing but its own guesses for the code of the
    ELF file at ``path`` (no ``.eh_frame``, ``.debug_frame`` or ``.sframe``
    in it), for the status commands; None where it has unwind information,
    or is no loaded file with code, or cannot be read (said elsewhere)."""
    try:
        info = read_elf(path)
    except (FileError, FormatError):
        return None
    if info.has_eh_frame or info.has_debug_frame or info.data is not None:
        return None
    if info.elf_type not in ("ET_EXEC", "ET_DYN") or not any(s.executable for s in info.segments):
        return None
    return ("no unwind information (no .eh_frame, .debug_frame or .sframe in the file): "
            "frames in its code are the debugger's guesses")


def open_sframe(path: str | os.PathLike[str], address: int | None = None, *,
                analyser: Analyser | None = None) -> SFrameSection:
    """The ``.sframe`` section of ``path``, for the CLI and tests (``analyser``:
    as ``ElfSFrame.open``'s).

    :raises FileError: not ELF, or no ``.sframe``.
    :raises FormatError: the section is corrupt.
    """
    info = read_elf(path)
    section = info.open(address, analyser=analyser)
    if section is None:
        raise FileError(f"{info.path}: no .sframe section")
    return section
