"""ELF core files: threads' registers, mapped files and memory, for the walker.

A core holds three things the unwinder needs: each thread's registers
(``NT_PRSTATUS``), which file is mapped where (``NT_FILE``) and the dumped
memory (``PT_LOAD``). The kernel and gdb's ``gcore`` both leave out
file-backed read-only memory such as ``.text``, so reads that the core cannot
answer fall back on the mapped file on disk, but only where the core says the
range is not writable (or does not have it at all): a writable page that is
missing from the core is unknown, not the file's bytes.

The notes are parsed here rather than with pyelftools' note iterator, so that
a truncated or corrupt note becomes ``FileError`` naming the core instead of
a pyelftools exception; pyelftools still reads the ELF and program headers.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ..base.abi import AARCH64_BE, AARCH64_LE, AMD64, Arch, arch_for_machine
from ..base.errors import FileError, reading_elf
from ..base.files import check_elf_layout, open_elf, open_regular
from ..unwind.addresses import Region, name_stacks
from .modules import Mapping

__all__ = [
    "Thread", "Segment", "CoreFile", "CoreMemory", "open_core", "parse_notes",
    "regs_from_user_regs", "arch_for_elf", "resolve_path", "MAX_READ",
    "NT_PRSTATUS", "NT_FILE", "NT_AUXV", "NT_ARM_PAC_MASK",
]

NT_PRSTATUS = 1
NT_AUXV = 6
NT_FILE = 0x46494C45
NT_ARM_PAC_MASK = 0x406
AT_ENTRY = 9

# The unwinder reads words; nothing legitimate asks for more than this at once,
# and the bound keeps a corrupt rule from making us copy a whole core.
MAX_READ = 1 << 20

# Offset of pr_reg in struct elf_prstatus on every 64-bit Linux ABI: siginfo
# (12), cursig (2+2 pad), sigpend, sighold (8 each), pid/ppid/pgrp/sid (4
# each), four timevals (16 each).
_PRSTATUS_PID = 32
_PRSTATUS_REG = 112

# x86_64 struct user_regs_struct, in order, as DWARF register numbers (None:
# not a DWARF register the unwinder uses).
_AMD64_USER_REGS: tuple[int | None, ...] = (
    15, 14, 13, 12, 6, 3, 11, 10, 9, 8,  # r15 r14 r13 r12 rbp rbx r11 r10 r9 r8
    0, 2, 1, 4, 5,  # rax rcx rdx rsi rdi
    None,  # orig_rax
    16,  # rip
    None, None,  # cs eflags
    7,  # rsp
    None, None, None, None, None, None, None,  # ss fs_base gs_base ds es fs gs
)
# aarch64 struct user_pt_regs: x0..x30, sp, pc, pstate. DWARF: x0-x30 = 0-30,
# sp = 31; the PC has no DWARF column of its own.
_AARCH64_USER_REGS: tuple[int | None, ...] = tuple(range(31)) + (31, -1, None)


@dataclass(frozen=True, slots=True)
class Thread:
    """One thread of a core or a live process, stopped."""

    lwp: int
    pc: int
    regs: dict[int, int] = field(hash=False)  # DWARF number -> value
    signal: int = 0  # the signal that was being delivered (pr_cursig)


@dataclass(frozen=True, slots=True)
class Segment:
    """A ``PT_LOAD`` of the core: ``[start, start + memsz)``, ``filesz`` of it dumped."""

    start: int
    memsz: int
    offset: int
    filesz: int
    writable: bool
    executable: bool = False

    @property
    def end(self) -> int:
        return self.start + self.memsz


def arch_for_elf(machine: str, big_endian: bool) -> Arch | None:
    """The unwinding ABI of a core's ``e_machine``, where we know the layout
    of its registers (``regs_from_user_regs``)."""
    arch = arch_for_machine(machine, big_endian)
    return arch if arch in (AMD64, AARCH64_LE, AARCH64_BE) else None


def regs_from_user_regs(arch: Arch, data: bytes) -> tuple[int, dict[int, int]]:
    """``(pc, registers by DWARF number)`` from a ``user_regs_struct``.

    Shared by core files (``NT_PRSTATUS``'s ``pr_reg``) and ptrace
    (``PTRACE_GETREGSET`` with ``NT_PRSTATUS`` returns the same layout).
    """
    layout = _AMD64_USER_REGS if arch is AMD64 else _AARCH64_USER_REGS
    need = 8 * len(layout)
    if len(data) < need:
        raise ValueError(f"register set is {len(data)} bytes, expected {need}")
    words = struct.unpack_from((">" if arch.big_endian else "<") + f"{len(layout)}Q", data)
    regs: dict[int, int] = {}
    pc = 0
    for regno, value in zip(layout, words, strict=True):
        if regno == -1 or (arch is AMD64 and regno == AMD64.ra):
            pc = value
        elif regno is not None:
            regs[regno] = value
    return pc, regs


def parse_notes(data: bytes, big_endian: bool) -> Iterator[tuple[str, int, bytes]]:
    """``(name, type, descriptor)`` of each note in a ``PT_NOTE`` segment.

    :raises ValueError: a note runs past the end of the segment.
    """
    endian = ">" if big_endian else "<"
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(endian + "3I", data, pos)
        pos += 12
        name_end = pos + namesz
        desc = (name_end + 3) & ~3
        desc_end = desc + descsz
        if desc_end > len(data):
            raise ValueError(f"note of type {ntype:#x} at offset {pos - 12:#x} is truncated")
        name = data[pos:name_end].rstrip(b"\0").decode("ascii", "replace")
        yield name, ntype, data[desc:desc_end]
        pos = (desc_end + 3) & ~3


def _parse_nt_file(desc: bytes, big_endian: bool) -> list[Mapping]:
    endian = ">" if big_endian else "<"
    count, page_size = struct.unpack_from(endian + "2Q", desc, 0)
    table_end = 16 + 24 * count
    if table_end > len(desc):
        raise ValueError(f"NT_FILE claims {count} entries in {len(desc)} bytes")
    names = desc[table_end:].split(b"\0")
    if len(names) < count:
        raise ValueError(f"NT_FILE has {len(names)} names for {count} entries")
    out = []
    for i in range(count):
        start, end, page = struct.unpack_from(endian + "3Q", desc, 16 + 24 * i)
        out.append(Mapping(start, end, page * page_size, os.fsdecode(names[i])))
    return out


def _parse_auxv(desc: bytes, big_endian: bool) -> dict[int, int]:
    endian = ">" if big_endian else "<"
    words = struct.unpack_from(endian + f"{len(desc) // 8}Q", desc)
    return {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2)}


def resolve_path(path: str, sysroot: str | None) -> str:
    """Where a target path is on this machine (``--sysroot`` prefixes absolute paths)."""
    if sysroot and path.startswith("/"):
        return os.path.join(sysroot, path.lstrip("/"))
    return path


class CoreMemory:
    """``unwind.Memory`` over a core: its dumped segments, then the mapped files.

    Reads are bounded (``MAX_READ``) and may span adjacent segments; any byte
    that neither source has makes the read return None.
    """

    def __init__(self, data: bytes | mmap.mmap, segments: Sequence[Segment],
                 mappings: Sequence[Mapping], resolve: Callable[[str], str]) -> None:
        self._data = data
        self._segments = sorted(segments, key=lambda s: s.start)
        self._seg_starts = [s.start for s in self._segments]
        self._mappings = sorted(mappings, key=lambda m: m.start)
        self._map_starts = [m.start for m in self._mappings]
        self._resolve = resolve
        self._files: dict[str, BinaryIO | None] = {}

    def close(self) -> None:
        for stream in self._files.values():
            if stream is not None:
                stream.close()
        self._files.clear()

    def _segment(self, address: int) -> Segment | None:
        i = bisect.bisect_right(self._seg_starts, address) - 1
        if i >= 0 and address < self._segments[i].end:
            return self._segments[i]
        return None

    def _mapping(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self._map_starts, address) - 1
        if i >= 0 and address < self._mappings[i].end:
            return self._mappings[i]
        return None

    def _from_file(self, address: int, size: int) -> bytes | None:
        mapping = self._mapping(address)
        if mapping is None:
            return None
        size = min(size, mapping.end - address)
        path = mapping.path
        if path not in self._files:
            try:
                self._files[path] = open_regular(self._resolve(path))
            except FileError:
                self._files[path] = None
        stream = self._files[path]
        if stream is None:
            return None
        try:
            chunk = os.pread(stream.fileno(), size, mapping.file_offset + address - mapping.start)
        except OSError:
            return None
        return chunk or None

    def _piece(self, address: int, size: int) -> bytes | None:
        seg = self._segment(address)
        if seg is not None:
            inside = address - seg.start
            if inside < seg.filesz:
                n = min(size, seg.filesz - inside)
                return bytes(self._data[seg.offset + inside: seg.offset + inside + n])
            if seg.writable:
                return None  # dirty memory the core left out: unknown
            return self._from_file(address, min(size, seg.end - address))
        return self._from_file(address, size)

    def read(self, address: int, size: int) -> bytes | None:
        if size <= 0 or size > MAX_READ or address < 0 or address + size > 1 << 64:
            return None
        parts = []
        while size:
            piece = self._piece(address, size)
            if not piece:
                return None
            parts.append(piece)
            address += len(piece)
            size -= len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)


@dataclass(frozen=True)
class CoreFile:
    """What a core says about the process it was taken from.

    ``mappings`` are NT_FILE's, with the executable's path replaced by
    ``--exe`` when one was given; ``memory`` must be closed with ``close``.
    """

    path: str
    arch: Arch
    threads: tuple[Thread, ...]
    mappings: tuple[Mapping, ...]
    memory: CoreMemory
    entry: int | None = None  # AT_ENTRY: the executable's entry point, at run time
    pac_mask: int | None = None  # aarch64 NT_ARM_PAC_MASK insn_mask
    _closers: tuple[Any, ...] = ()
    regions: tuple[Region, ...] = ()  # what was mapped, with permissions (``core_regions``)

    def close(self) -> None:
        self.memory.close()
        for closer in self._closers:
            closer.close()

    def __enter__(self) -> CoreFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def core_regions(segments: Sequence[Segment], mappings: Sequence[Mapping],
                 stack_pointers: Sequence[int | None] = ()) -> tuple[Region, ...]:
    """The process's memory as the core saw it: every ``PT_LOAD`` with its
    ``PF_X`` (the kernel writes one per mapping, dumped or not), and the
    files of NT_FILE where no segment covers them (gcore leaves out code it
    can read back from the file), whose permissions the core does not say."""
    regions = [Region(s.start, s.end, s.executable) for s in segments]
    starts = sorted((s.start, s.end) for s in segments)
    for m in mappings:
        if not any(lo < m.end and m.start < hi for lo, hi in starts):
            regions.append(Region(m.start, m.end, None, m.path))
    named = {m.start: m.path for m in mappings}
    regions = [Region(r.start, r.end, r.executable, r.name or named.get(r.start, ""))
               for r in regions]
    return tuple(name_stacks(regions, stack_pointers))


def _exe_mappings(exe: str, entry: int, mappings: list[Mapping]) -> list[Mapping]:
    """Point the mappings of the file holding the entry point at ``exe``.

    Where NT_FILE has no such mapping (a core without NT_FILE), make them from
    the executable's own PT_LOADs, at the bias the entry point gives.
    """
    holder = next((m.path for m in mappings if m.start <= entry < m.end), None)
    if holder is not None:
        return [Mapping(m.start, m.end, m.file_offset, exe) if m.path == holder else m
                for m in mappings]
    from elftools.elf.elffile import ELFFile

    with reading_elf(exe, "not a usable ELF file"), open_elf(exe) as stream:
        elf = ELFFile(stream)
        bias = entry - elf["e_entry"]
        loads = [(s["p_vaddr"], s["p_memsz"], s["p_offset"]) for s in elf.iter_segments()
                 if s["p_type"] == "PT_LOAD"]
    made = [Mapping(bias + vaddr, bias + vaddr + memsz, offset, exe)
            for vaddr, memsz, offset in loads]
    return sorted(mappings + made, key=lambda m: m.start)


def open_core(path: str, *, exe: str | None = None, sysroot: str | None = None) -> CoreFile:
    """Read a core's threads, mappings and memory.

    :raises FileError: the file is missing, not an ELF core, or its notes are
        truncated or for an unsupported machine; the message names the file.
    """
    from elftools.elf.elffile import ELFFile

    stream = open_regular(path)
    try:
        with reading_elf(path, "malformed ELF core"):
            check_elf_layout(stream, path)
            stream.seek(0)
            elf = ELFFile(stream)
            if elf["e_type"] != "ET_CORE":
                raise FileError(f"{path}: not a core file (ELF type {elf['e_type']})")
            big = not elf.little_endian
            if elf.elfclass != 64:
                raise FileError(f"{path}: only 64-bit cores are supported")
            arch = arch_for_elf(elf["e_machine"], big)
            if arch is None:
                raise FileError(f"{path}: cores of {elf['e_machine']} are not supported")
            size = os.fstat(stream.fileno()).st_size
            segments: list[Segment] = []
            notes: list[bytes] = []
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD":
                    filesz = max(0, min(seg["p_filesz"], size - seg["p_offset"]))
                    segments.append(Segment(seg["p_vaddr"], seg["p_memsz"], seg["p_offset"],
                                            filesz, bool(seg["p_flags"] & 2),
                                            bool(seg["p_flags"] & 1)))
                elif seg["p_type"] == "PT_NOTE":
                    if seg["p_offset"] + seg["p_filesz"] > size:
                        raise FileError(f"{path}: the notes are truncated (file is {size} bytes)")
                    stream.seek(seg["p_offset"])
                    notes.append(stream.read(seg["p_filesz"]))
        if not notes:
            raise FileError(f"{path}: no notes (PT_NOTE) in the core")
        threads: list[Thread] = []
        mappings: list[Mapping] = []
        auxv: dict[int, int] = {}
        pac_mask: int | None = None
        endian = ">" if big else "<"
        try:
            for block in notes:
                for name, ntype, desc in parse_notes(block, big):
                    if name == "CORE" and ntype == NT_PRSTATUS:
                        lwp = struct.unpack_from(endian + "i", desc, _PRSTATUS_PID)[0]
                        cursig = struct.unpack_from(endian + "H", desc, 12)[0]
                        pc, regs = regs_from_user_regs(arch, desc[_PRSTATUS_REG:])
                        threads.append(Thread(lwp, pc, regs, cursig))
                    elif name == "CORE" and ntype == NT_FILE:
                        mappings = _parse_nt_file(desc, big)
                    elif name == "CORE" and ntype == NT_AUXV:
                        auxv = _parse_auxv(desc, big)
                    elif name == "LINUX" and ntype == NT_ARM_PAC_MASK and len(desc) >= 16:
                        pac_mask = struct.unpack_from(endian + "2Q", desc)[1]
        except (ValueError, struct.error) as exc:
            raise FileError(f"{path}: corrupt note: {exc}") from None
        if not threads:
            raise FileError(f"{path}: the core has no thread (no NT_PRSTATUS note)")
        entry = auxv.get(AT_ENTRY)
        if exe is not None:
            if entry is None:
                raise FileError(f"{path}: no entry point (NT_AUXV) to place --exe {exe} at")
            mappings = _exe_mappings(exe, entry, mappings)
        try:
            data: bytes | mmap.mmap = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            data = b""
        memory = CoreMemory(data, segments, mappings, lambda p: resolve_path(p, sysroot))
        closers = (data,) if isinstance(data, mmap.mmap) else ()
        regions = core_regions(segments, mappings, [t.regs.get(arch.sp) for t in threads])
        return CoreFile(path, arch, tuple(threads), tuple(mappings), memory, entry, pac_mask,
                        closers, regions)
    finally:
        stream.close()
