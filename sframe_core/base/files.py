"""Opening the files users and processes name, before any parser trusts them.

Two promises live here. A path that is not a regular file (a FIFO, a
device, a socket) is refused without reading a byte: reading a FIFO blocks
forever and ``/dev/zero`` never ends. And an ELF file's headers are checked
against the file's size before pyelftools reads or allocates anything from
them: a section header claiming 2^63 bytes would otherwise be an
``OverflowError`` deep in pyelftools, and one claiming 4 GiB a 4 GiB
allocation. The checks read the headers with ``struct``, so they cost
microseconds and need no parser.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import BinaryIO, NamedTuple

from .errors import FileError, NotELFError

__all__ = ["MAX_SECTION_SIZE", "open_regular", "read_regular", "check_elf_layout", "open_elf",
           "ElfLayout", "SectionHeader", "SegmentHeader", "elf_layout", "notes_build_id",
           "file_kind", "cache_root", "file_identity", "read_within", "is_elf", "section_rows",
           "segment_rows", "named_sections"]

# No real .sframe section comes near this (a 100 MB browser library carries a
# few MB); anything larger is a lie in a header or not a section at all.
MAX_SECTION_SIZE = 256 << 20

SHT_NULL, SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 0, 2, 4, 8, 9, 11
ET_CORE = 4
PN_XNUM = 0xFFFF
SHN_XINDEX = 0xFFFF

# Per ELF class (1: 32-bit, 2: 64-bit): header size, and the entry sizes the
# ELF specification fixes for each table.
_EHSIZE = {1: 52, 2: 64}
_PHENTSIZE = {1: 32, 2: 56}
_SHENTSIZE = {1: 40, 2: 64}
_ENTSIZE = {
    1: {SHT_SYMTAB: 16, SHT_DYNSYM: 16, SHT_RELA: 12, SHT_REL: 8},
    2: {SHT_SYMTAB: 24, SHT_DYNSYM: 24, SHT_RELA: 24, SHT_REL: 16},
}
_TABLE_NAMES = {SHT_SYMTAB: "symbol table", SHT_DYNSYM: "dynamic symbol table",
                SHT_RELA: "relocation section", SHT_REL: "relocation section"}
# (e_type, e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx)
_EHDR = {1: "16xH10xII6xHHHHH", 2: "16xH14xQQ6xHHHHH"}
# The whole header after e_ident: e_type, e_machine, e_version, e_entry,
# e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize,
# e_shnum, e_shstrndx.
_EHDR_FULL = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
# (sh_name, sh_type, sh_offset, sh_size, sh_link, sh_info, sh_entsize)
_SHDR = {1: "II8xIIII4xI", 2: "II16xQQII8xQ"}
# (p_type, p_offset, p_filesz)
_PHDR = {1: "II8xI12x", 2: "I4xQ16xQ16x"}


def file_kind(mode: int) -> str:
    """What a non-regular file is, in the words ``ls -l`` users know."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(label: str, mode: int) -> FileError:
    kind = file_kind(mode)
    what = kind if kind.startswith("not ") else f"not a regular file ({kind})"
    return FileError(f"{label}: {what}")


def open_regular(path: str | os.PathLike[str], label: str | None = None) -> BinaryIO:
    """Open ``path`` for reading if, and only if, it is a regular file.

    ``stat`` first, so a FIFO or device is never opened (opening some devices
    has effects); then ``O_NONBLOCK`` and ``fstat`` on what was opened, so a
    file swapped for a FIFO in between cannot block us either.

    :raises FileError: missing, unreadable, or not a regular file.
    """
    name = os.fspath(path)
    label = name if label is None else label
    try:
        mode = os.stat(name).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(label, mode)
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FileError(f"{label}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(label, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes.

    :raises FileError: as ``open_regular``, or the file is larger than
        ``limit`` (``what`` names what it was supposed to be).
    """
    name = os.fspath(path)
    with open_regular(name) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limit:
            raise FileError(f"{name}: {size} bytes, larger than any {what} "
                            f"(limit {limit >> 20} MiB)")
        try:
            data = stream.read(limit + 1)  # the file may have grown since fstat
        except OSError as exc:
            raise FileError(f"{name}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileError(f"{name}: larger than any {what} (limit {limit >> 20} MiB)")
    return data


def _read_at(stream: BinaryIO, offset: int, size: int) -> bytes:
    stream.seek(offset)
    return stream.read(size)


def read_within(stream: BinaryIO, offset: int, size: int, limit: int, what: str, path: str) -> bytes:
    """``size`` bytes at ``offset`` of ``stream``, a file of ``limit`` bytes
    (``what`` and ``path`` name them when they are not all there).

    :raises FileError: the bytes lie outside the file, or it is shorter now.
    """
    if offset < 0 or size < 0 or offset + size > limit:
        raise FileError(f"{path}: malformed ELF file: {what} lies outside the file")
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise FileError(f"{path}: malformed ELF file: {what} is truncated")
    return data


class _Checked(NamedTuple):
    """What ``check_elf_layout`` read, for ``elf_layout`` to decode without
    reading it again."""

    cls: int
    end: str  # the ``struct`` byte order
    header: bytes  # the ELF header, e_ident included
    sections: bytes  # the section header table (empty for a core, or none)
    segments: bytes  # the program header table (empty for a core, or none)
    shstrndx: int  # extended numbering resolved
    size: int
    strtab: bytes  # the section name table, where it is sound


def check_elf_layout(stream: BinaryIO, label: str) -> None:
    """Check an ELF file's header tables against its size, before parsing.

    Every program header and every section with file bytes must lie inside
    the file; table entry sizes must be the ELF class's own (a symbol table
    with ``sh_entsize`` 1 would be read as one symbol per byte). A core's
    segments may run past the end (a truncated core is still
    useful; ``corefile`` clamps them and checks its notes), so of a core only
    the program header table is checked here.

    :raises FileError: naming ``label`` and the header field that lies.
    """
    _checked(stream, label)


def _checked(stream: BinaryIO, label: str) -> _Checked:
    """``check_elf_layout``, giving back the header tables it read."""
    size = os.fstat(stream.fileno()).st_size
    ident = _read_at(stream, 0, 16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise NotELFError(f"{label}: not an ELF file")
    cls, data_enc = ident[4], ident[5]
    if cls not in _EHSIZE or data_enc not in (1, 2):
        raise FileError(f"{label}: malformed ELF file: unknown class {cls} or data encoding "
                        f"{data_enc}")
    end = "<" if data_enc == 1 else ">"
    header = _read_at(stream, 0, _EHSIZE[cls])
    if len(header) < _EHSIZE[cls]:
        raise FileError(f"{label}: truncated ELF header ({size} bytes)")
    e_type, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx = \
        struct.unpack_from(end + _EHDR[cls], header)

    shdr = struct.Struct(end + _SHDR[cls])
    sections: list[tuple[int, ...]] = []
    table = headers = b""
    if e_type == ET_CORE:
        # A core is read through its program headers only; a truncated core
        # is still useful, and ``corefile`` checks the notes it reads.
        shoff = 0
    if shoff:
        if shentsize != _SHENTSIZE[cls]:
            raise FileError(f"{label}: section header entry size {shentsize}, not "
                            f"{_SHENTSIZE[cls]} (e_shentsize)")
        if shoff + shentsize > size:
            raise FileError(f"{label}: section headers at offset {shoff:#x} are past the end of "
                            f"the {size}-byte file (e_shoff)")
        first = shdr.unpack(_read_at(stream, shoff, shentsize))
        count = shnum or first[3]  # extended numbering: the count is in section 0's sh_size
        if phnum == PN_XNUM:
            phnum = first[5]
        if shstrndx == SHN_XINDEX:
            shstrndx = first[4]
        if shoff + count * shentsize > size:
            raise FileError(f"{label}: {count} section headers at offset {shoff:#x} run past "
                            f"the end of the {size}-byte file (e_shnum)")
        table = _read_at(stream, shoff, count * shentsize)
        sections = [fields for fields in shdr.iter_unpack(table)]
    if phnum:
        if phentsize != _PHENTSIZE[cls]:
            raise FileError(f"{label}: program header entry size {phentsize}, not "
                            f"{_PHENTSIZE[cls]} (e_phentsize)")
        if phoff + phnum * phentsize > size:
            raise FileError(f"{label}: {phnum} program headers at offset {phoff:#x} run past "
                            f"the end of the {size}-byte file (e_phoff, e_phnum)")
        phdr = struct.Struct(end + _PHDR[cls])
        headers = b"" if e_type == ET_CORE else _read_at(stream, phoff, phnum * phentsize)
        for index, (_type, offset, filesz) in enumerate(phdr.iter_unpack(headers)):
            if offset + filesz > size:
                raise FileError(f"{label}: program header {index} claims {filesz} bytes at "
                                f"offset {offset:#x}, past the end of the {size}-byte file")
    names = _names(stream, sections, shstrndx, size)
    for index, (_name, stype, offset, ssize, _link, _info, entsize) in enumerate(sections):
        if stype in (SHT_NULL, SHT_NOBITS):
            continue
        if offset + ssize > size:
            raise FileError(f"{label}: section {index} ({names(index)}) claims {ssize} bytes at "
                            f"offset {offset:#x}, past the end of the {size}-byte file")
        own = _ENTSIZE[cls].get(stype)
        if own is not None and entsize != own:
            raise FileError(f"{label}: {_TABLE_NAMES[stype]} {names(index)} has entry size "
                            f"{entsize}, not {own} (sh_entsize)")
    return _Checked(cls, end, header, table, headers, shstrndx, size, names.strtab)


def _names(stream: BinaryIO, sections: list[tuple[int, ...]], shstrndx: int, size: int
           ) -> _Names:
    """Section names for messages, read only if the string table is sound."""
    strtab = b""
    if 0 < shstrndx < len(sections):
        _n, stype, offset, ssize = sections[shstrndx][:4]
        if stype != SHT_NOBITS and offset + ssize <= size and ssize <= 1 << 20:
            strtab = _read_at(stream, offset, ssize)
    return _Names(strtab, sections)


def _name_at(strtab: bytes, at: int) -> str:
    """A section's name as pyelftools gives it ("" past the table's end)."""
    stop = strtab.find(b"\0", at)
    return strtab[at: stop if stop >= 0 else len(strtab)].decode("utf-8", "replace")


class _Names:
    def __init__(self, strtab: bytes, sections: list[tuple[int, ...]]) -> None:
        self.strtab = strtab
        self._sections = sections

    def __call__(self, index: int) -> str:
        start = self._sections[index][0]
        if start >= len(self.strtab):
            return f"[{index}]"
        stop = self.strtab.find(b"\0", start)
        name = self.strtab[start: stop if stop >= 0 else len(self.strtab)]
        return name[:100].decode("ascii", "replace") or f"[{index}]"


def open_elf(path: str | os.PathLike[str], label: str | None = None) -> BinaryIO:
    """A regular ELF file whose headers fit it, opened for pyelftools.

    :raises FileError: as ``open_regular`` and ``check_elf_layout``.
    """
    name = os.fspath(path)
    label = name if label is None else label
    stream = open_regular(name, label)
    try:
        check_elf_layout(stream, label)
        stream.seek(0)
        return stream
    except OSError as exc:
        stream.close()
        raise FileError(f"{label}: {exc.strerror or exc}") from None
    except BaseException:
        stream.close()
        raise


SHF_COMPRESSED = 0x800
# The full section header: (sh_name, sh_type, sh_flags, sh_addr, sh_offset,
# sh_size, sh_link, sh_info, sh_addralign, sh_entsize).
_SHDR_FULL = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}


class SectionHeader(NamedTuple):
    """One section header as the file holds it (``name_offset``: into the section
    name table), the one record both ELF readers and the symbol-file writer use."""

    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int
    name_offset: int


class SegmentHeader(NamedTuple):
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


# The full program header, per class: ELF32 puts p_flags after p_memsz.
_PHDR_FULL = {1: "IIIIIIII", 2: "IIQQQQQQ"}


class ElfLayout(NamedTuple):
    """An ELF file's header fields and section headers, read with ``struct``.

    For readers on a backtrace's path (``symbols``, ``cfi``) that need a few
    sections' bytes, and for the symbol files (``module_headers``), which
    copy the headers: pyelftools builds an object per section, and parses
    the hash tables, to find one by name (about 5 ms for libc, per file
    and per reader). Only valid for a file ``check_elf_layout`` accepted.
    """

    wide: bool  # ELFCLASS64
    big_endian: bool
    e_type: int
    machine: int
    sections: tuple[SectionHeader, ...]
    segments: tuple[SegmentHeader, ...] = ()
    entry: int = 0
    # As the file holds them, for a copy of its headers (the symbol files):
    ident: bytes = b""  # e_ident
    header: tuple[int, ...] = ()  # e_type .. e_shstrndx
    program_headers: tuple[tuple[int, ...], ...] = ()  # p_type .. p_align, the class's order
    shstrndx: int = 0  # the section name table's index (extended numbering resolved)
    size: int = 0  # of the file

    def section(self, name: str) -> SectionHeader | None:
        """The section called ``name``; the last of that name, as pyelftools'
        ``get_section_by_name`` gives."""
        for header in reversed(self.sections):
            if header.name == name:
                return header
        return None

    def data(self, stream: BinaryIO, header: SectionHeader) -> bytes | None:
        """The section's bytes; empty for SHT_NOBITS, None when compressed."""
        if header.flags & SHF_COMPRESSED:
            return None
        if header.type == SHT_NOBITS:
            return b""
        return _read_at(stream, header.offset, header.size)


def elf_layout(stream: BinaryIO, label: str) -> ElfLayout:
    """The layout of an ELF file opened with ``open_elf`` (headers checked).

    :raises FileError: as ``check_elf_layout`` would (it is not trusted to
        have run on this very stream).
    """
    checked = _checked(stream, label)
    cls, end, header, size = checked.cls, checked.end, checked.header, checked.size
    ident = header[:16]
    fields = struct.unpack_from(end + _EHDR_FULL[cls], header, 16)
    e_type, machine, entry = fields[0], fields[1], fields[3]
    wide, big = cls == 2, end == ">"
    if e_type == ET_CORE:
        return ElfLayout(wide, big, e_type, machine, (), (), entry, ident, fields, (), 0, size)
    rows = section_rows(checked.sections, end, wide)
    segments: tuple[SegmentHeader, ...] = ()
    table: list[tuple[int, ...]] = []
    if checked.segments:
        table = segment_rows(checked.segments, end, wide)
        if wide:
            segments = tuple(SegmentHeader(t, f, o, v, fs, ms) for t, f, o, v, _p, fs, ms, _a
                             in table)
        else:
            segments = tuple(SegmentHeader(t, f, o, v, fs, ms) for t, o, v, _p, fs, ms, f, _a
                             in table)
    return ElfLayout(wide, big, e_type, machine, named_sections(rows, checked.strtab), segments,
                     entry, ident, fields, tuple(table), checked.shstrndx, size)


def section_rows(table: bytes, end: str, wide: bool = True) -> list[tuple[int, ...]]:
    """A section header table's entries as they are stored (``sh_name`` ..
    ``sh_entsize``), ``end`` the ``struct`` byte order."""
    return list(struct.iter_unpack(end + _SHDR_FULL[2 if wide else 1], table))


def segment_rows(table: bytes, end: str, wide: bool = True) -> list[tuple[int, ...]]:
    """A program header table's entries as they are stored (``p_type`` ..
    ``p_align``, in the class's own order)."""
    return list(struct.iter_unpack(end + _PHDR_FULL[2 if wide else 1], table))


def named_sections(rows: list[tuple[int, ...]], strtab: bytes) -> tuple[SectionHeader, ...]:
    """``section_rows``' entries as records, named from the section name table."""
    return tuple(
        SectionHeader(_name_at(strtab, at), stype, flags, addr, offset, size, link, info, align,
                      entsize, at)
        for at, stype, flags, addr, offset, size, link, info, align, entsize in rows)


NT_GNU_BUILD_ID = 3


def notes_build_id(data: bytes, endian: str) -> str | None:
    """The GNU build ID (hex) in a note section's bytes, or None: what
    pyelftools' ``n_desc`` of the NT_GNU_BUILD_ID note gives."""
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(endian + "III", data, pos)
        name_at = pos + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        end = desc_at + ((descsz + 3) & ~3)
        if desc_at + descsz > len(data):
            return None
        if ntype == NT_GNU_BUILD_ID and data[name_at:name_at + namesz].rstrip(b"\0") == b"GNU" \
                and descsz:
            return data[desc_at:desc_at + descsz].hex()
        pos = end
    return None


def is_elf(path: str) -> bool:
    """Does ``path`` start with the ELF magic? (False when it cannot be read.)"""
    try:
        with open(path, "rb") as stream:
            return stream.read(4) == b"\x7fELF"
    except OSError:
        return False


def cache_root() -> str:
    """``$XDG_CACHE_HOME/sframe-gdb`` (``~/.cache`` when the variable is unset):
    the symbol files' cache and the C analysis built for a read-only install."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "sframe-gdb")


def file_identity(path: str) -> bytes:
    """What a file is when nothing inside it names it: its real path, size and
    modification time (a module without build-id in the symbol file cache,
    the module a worker process has open)."""
    st = os.stat(path)
    return f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()
