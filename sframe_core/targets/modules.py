"""The module table: which loaded file covers a PC, and its unwind tables.

Built from a list of mappings (a core's NT_FILE note, /proc/PID/maps, or a
debugger's module list). Each module reads its ELF headers, SFrame section
and DWARF CFI only when a PC inside it is first unwound through, and keeps
them: a backtrace through ten libraries opens ten files, not a hundred.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base.errors import SFrameError
from ..base.rows import Row

if TYPE_CHECKING:
    from ..dwarf.cfi import CFITable
    from ..format.elf import ElfSFrame
    from ..format.section import SFrameSection

__all__ = ["Mapping", "Module", "ModuleTable", "SOURCES", "load_bias"]

# Row sources in the order they are tried, by default: SFrame first, the
# reason this project exists; DWARF CFI where SFrame has no FDE (libc on
# Debian, the vdso).
SOURCES = ("sframe", "eh_frame")


@dataclass(frozen=True, slots=True)
class Mapping:
    """``[start, end)`` maps ``path`` from ``file_offset`` on."""

    start: int
    end: int
    file_offset: int
    path: str


def load_bias(info: ElfSFrame, maps: Iterable[Mapping]) -> int | None:
    """A file's load bias from its mappings: the first, by file offset, that
    lies in a PT_LOAD segment decides (a core's NT_FILE, /proc/PID/maps and
    GDB's ``info proc mappings`` all list them)."""
    for m in sorted(maps, key=lambda m: m.file_offset):
        bias = info.bias_for_mapping(m.start, m.file_offset)
        if bias is not None:
            return bias
    return None


# glibc's _start: 38 bytes on x86-64, 52 on aarch64; musl's is smaller.
ENTRY_FUNCTION_MAX = 64


class Module:
    """One loaded ELF file at a load bias, with lazily opened unwind tables.

    :param path: the file on disk (after any sysroot was applied).
    :param bias: runtime address minus file address.
    :param ranges: runtime address ranges the module occupies.
    :param sframe_loader: optional override that returns the section bytes
        and their runtime address (adapters that read them from a debugger).
    """

    def __init__(self, path: str, bias: int, ranges: Sequence[tuple[int, int]], *,
                 name: str | None = None, sources: Sequence[str] = SOURCES,
                 on_error: Callable[[Module, SFrameError], None] | None = None,
                 sframe_loader: Callable[[], tuple[bytes, int] | None] | None = None,
                 elf: ElfSFrame | None = None) -> None:
        self.path = path
        self._sframe_loader = sframe_loader
        self.name = name or path
        self.bias = bias
        self.ranges = sorted(ranges)
        self.sources = tuple(sources)
        self._on_error = on_error
        # ``elf``: the file's headers when the caller has read them already.
        self._elf: ElfSFrame | None = elf
        self._sframe: SFrameSection | None = None
        self._cfi: CFITable | None = None
        self._loaded: set[str] = {"elf"} if elf is not None else set()
        self.error: SFrameError | None = None

    @property
    def start(self) -> int:
        return self.ranges[0][0]

    @property
    def end(self) -> int:
        return self.ranges[-1][1]

    def contains(self, pc: int) -> bool:
        return any(lo <= pc < hi for lo, hi in self.ranges)

    def unusable(self, exc: SFrameError) -> None:
        """The file cannot be read at all (a FIFO, an unreadable file): say so
        once, and never try again."""
        self._loaded.update(("elf", "sframe", "cfi"))
        self._fail(exc)

    def _fail(self, exc: SFrameError) -> None:
        if self.error is None:
            self.error = exc
            if self._on_error is not None:
                self._on_error(self, exc)

    @property
    def elf(self) -> ElfSFrame | None:
        if "elf" not in self._loaded:
            self._loaded.add("elf")
            from ..format.elf import read_elf
            try:
                self._elf = read_elf(self.path)
            except SFrameError as exc:
                self._fail(exc)
        return self._elf

    @property
    def sframe(self) -> SFrameSection | None:
        """The SFrame section at its runtime address, or None."""
        if "sframe" not in self._loaded:
            self._loaded.add("sframe")
            if self._sframe_loader is not None:
                from ..format.section import SFrameSection
                try:
                    loaded = self._sframe_loader()
                    if loaded is not None:
                        from ..format.linked import read_linked
                        linked = read_linked(loaded[0], loaded[1], exact=True,
                                              code=self._code_ranges())
                        self._sframe = SFrameSection(linked.data, loaded[1], name=self.name)
                        self._sframe.merged = linked.note
                except SFrameError as exc:
                    self._fail(exc)
                return self._sframe
            info = self.elf
            if info is not None and info.has_sframe and info.sframe_address is not None:
                from ..analysis.section import SectionAnalysis
                try:
                    self._sframe = info.open(info.sframe_address + self.bias,
                                             analyser=SectionAnalysis)
                except SFrameError as exc:
                    self._fail(exc)
        return self._sframe

    def _code_ranges(self) -> list[tuple[int, int]]:
        """The module's executable segments where its file is on disk (read
        quietly: a module only in memory is no error), else all it occupies."""
        info = self._elf
        if info is None and os.path.isfile(self.path):
            from ..format.elf import read_elf
            try:
                info = read_elf(self.path)
            except SFrameError:
                info = None
        ranges = info.code_ranges(self.bias) if info is not None else []
        return ranges or list(self.ranges)

    def entry_function(self) -> tuple[int, int] | None:
        """The runtime span of an executable's entry function (``_start``)
        when no FDE describes it: from ``e_entry`` to the next function with
        an FDE, at most ``ENTRY_FUNCTION_MAX`` bytes (``_start`` is a handful
        of instructions in every libc, and a static binary's libc start code
        that follows it has no FDE either). None for libraries and where
        ``_start`` has its own FDE."""
        info = self.elf
        section = self.sframe
        if info is None or section is None or not info.entry or info.elf_type not in (
                "ET_EXEC", "ET_DYN"):
            return None
        start = info.entry + self.bias
        try:
            if section.find_fde(start) is not None:
                return None
            following = section.next_fde_start(start)
        except SFrameError as exc:
            self._fail(exc)
            return None
        end = start + ENTRY_FUNCTION_MAX
        if following is not None:
            end = min(end, following)
        return (start, end)

    @property
    def cfi(self) -> CFITable | None:
        """The DWARF CFI table (``.eh_frame``, ``.debug_frame``), or None."""
        if "cfi" not in self._loaded:
            self._loaded.add("cfi")
            info = self.elf
            if info is not None and (info.has_eh_frame or info.has_debug_frame):
                from ..dwarf.cfi import CFITable
                try:
                    self._cfi = CFITable(self.path, self.bias)
                except SFrameError as exc:
                    self._fail(exc)
        return self._cfi

    def row_at(self, pc: int) -> Row | None:
        for source in self.sources:
            table: SFrameSection | CFITable | None = self.sframe if source == "sframe" else self.cfi
            if table is None:
                continue
            try:
                row = table.row_at(pc)
            except SFrameError as exc:
                self._fail(exc)
                if source == "sframe":
                    self._sframe = None  # a corrupt section is reported once, then ignored
                continue
            if row is not None:
                return row
        return None

    def __repr__(self) -> str:
        return f"Module({self.name!r}, bias={self.bias:#x})"


class ModuleTable:
    """PC -> module, by binary search over the modules' start addresses."""

    def __init__(self, modules: Iterable[Module]) -> None:
        self.modules = sorted(modules, key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    @classmethod
    def from_mappings(cls, mappings: Iterable[Mapping], *, sysroot: str | None = None,
                      sources: Sequence[str] = SOURCES,
                      on_error: Callable[[Module, SFrameError], None] | None = None,
                      ) -> ModuleTable:
        """Group file mappings by path and work out each file's load bias."""
        from ..base.errors import NotELFError
        from ..format.elf import read_elf

        by_path: dict[str, list[Mapping]] = {}
        for m in mappings:
            # Pseudo-files ([vdso], [heap]), devices and deleted files have no ELF to read.
            if m.path and not m.path.startswith(("[", "/dev/")) and "(deleted)" not in m.path:
                by_path.setdefault(m.path, []).append(m)
        modules = []
        for path, maps in by_path.items():
            disk = os.path.join(sysroot, path.lstrip("/")) if sysroot else path
            try:
                info = read_elf(disk)
            except NotELFError:
                continue  # a data file mapped by the program
            except SFrameError as exc:
                if not os.path.exists(disk):
                    continue  # gone, or on another machine: as before, no file
                # Unusable (a FIFO behind --sysroot, a lying header): a module
                # that names why, so a PC in it says more than "no file".
                failed = Module(disk, 0, [(m.start, m.end) for m in maps], name=path,
                                sources=sources, on_error=on_error)
                failed.unusable(exc)
                modules.append(failed)
                continue
            bias = load_bias(info, maps)
            if bias is None:
                continue
            modules.append(Module(disk, bias, [(m.start, m.end) for m in maps], name=path,
                                  sources=sources, on_error=on_error, elf=info))
        return cls(modules)

    def module_for(self, pc: int) -> Module | None:
        i = bisect.bisect_right(self._starts, pc) - 1
        # Modules can interleave (a library mapped into another's gap), so
        # look back over those that start before pc; the first is nearly
        # always the one.
        while i >= 0:
            module = self.modules[i]
            if module.contains(pc):
                return module
            i -= 1
        return None

    def row_at(self, pc: int) -> Row | None:
        module = self.module_for(pc)
        return module.row_at(pc) if module else None
