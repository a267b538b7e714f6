"""Which objfile covers a PC, from the text GDB prints about its objfiles.

GDB's Python API exposes no section addresses, so the runtime address of each
objfile's ``.sframe`` and code sections comes from ``maint info sections
-all-objects``, and, for a file whose section headers were stripped (GDB
shows no sections of it), its ``PT_GNU_SFRAME`` segment is placed by ``info
proc mappings``. This module parses that text and keeps the result per program
space (``ObjfileTables``); it does not import ``gdb`` (the adapter hands it a
function running a command), so its parsers are tested on captured output of
every GDB (``tests/test_gdb_objfiles.py``) without one. The load bias is the section's
runtime address minus its ``sh_addr`` on disk (debugger-apis.md A2: never
from ``info sharedlibrary``). ELF headers and SFrame tables are read only when
a PC inside the objfile is first unwound through, then cached in a
``sframe_core.targets.modules.Module``.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sframe_core.base.errors import SFrameError
from sframe_core.format.elf import ElfSFrame, read_elf
from sframe_core.unwind.addresses import AddressMap, Region, regions_from_maps

if TYPE_CHECKING:
    from sframe_core.format.section import SFrameSection
    from sframe_core.targets.modules import Mapping, Module

    from .registers import Registers

__all__ = ["cli_text", "CommandFailed", "ObjfileEntry", "ObjfileTable", "ObjfileTables", "Reporter",
           "SECTIONS_COMMAND", "CORE_COMMAND", "MAPPINGS_COMMAND", "parse_mappings",
           "parse_core_regions", "segment_candidates", "segment_entries", "live_regions"]

# The command whose output ObjfileTable.parse reads.
SECTIONS_COMMAND = "maint info sections -all-objects .sframe .text .eh_frame .debug_frame CODE"
# With a core file loaded: its segments (GDB's ``loadN`` sections, CODE where
# PF_X), whose output parse_core_regions reads.
CORE_COMMAND = "maint info sections ALLOC"
# Where a file without section headers is mapped (live processes and cores),
# whose output parse_mappings reads.
MAPPINGS_COMMAND = "info proc mappings"

_HEADER = re.compile(r"^(Exec file|Object file|Core file): [`'](.*)', file type")
# A line of `info proc mappings`: start, end, size, offset, [perms,] objfile.
_MAPPING = re.compile(r"^\s*(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)"
                      r"(?:\s+[-r][-w][-x][-ps])?\s+(/.*)$", re.M)
_SECTION = re.compile(r"^\s*\[\s*\d+\]\s+(0x[0-9a-fA-F]+)->(0x[0-9a-fA-F]+) at 0x[0-9a-fA-F]+: "
                      r"(\S+)(.*)$")


# An MI console stream record: ~"C string".
_MI_CONSOLE = re.compile(r'^~"(.*)"\s*$')
_MI_ESCAPE = re.compile(r'\\([0-7]{1,3}|.)')
_MI_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "e": "\x1b", "a": "\a", "f": "\f", "v": "\v"}


def cli_text(text: str) -> str:
    """The text a command printed, from what ``gdb.execute(..., to_string=True)`` returned.

    Under MI (``gdb -i=mi``, every IDE) gdb 18 returns the command's output
    as MI console records (``~"Exec file: ..."``), one C string per line; a
    CLI session gets the text itself, returned as it is.
    """
    lines = text.splitlines()
    if not lines or not any(line.startswith('~"') for line in lines):
        return text

    def unescape(m: re.Match[str]) -> str:
        c = m.group(1)
        if c[0] in "01234567":
            return chr(int(c, 8))
        return _MI_ESCAPES.get(c, c)
    return "".join(_MI_ESCAPE.sub(unescape, m.group(1))
                   for m in map(_MI_CONSOLE.match, lines) if m)


class Reporter(Protocol):
    def report(self, path: str, text: str) -> None:
        """One warning per objfile, however many frames hit the problem."""


class Routes(Protocol):
    """What the tables ask of the DWARF route (``symfiles.Routes``)."""

    def native_paths(self, progspace: object) -> set[str]:
        """The objfiles gdb's own unwinder serves."""

    def serves_fallback(self, progspace: object) -> bool:
        """Does an objfile with SFrame there wait for, or go without, its symbol file?"""


class CommandFailed(Exception):
    """A command whose output a table is read from failed (``gdb.error``)."""


class ObjfileEntry:
    """One objfile with a ``.sframe`` section, at the addresses GDB reports."""

    def __init__(self, path: str, sframe_address: int) -> None:
        self.path = path
        self.sframe_address = sframe_address  # runtime address of .sframe
        self.code: list[tuple[int, int]] = []
        self.has_eh_frame = False
        self.has_debug_frame = False
        self.module: Module | None = None
        self.failed = False  # unreadable or corrupt: reported, then ignored
        self.section: SFrameSection | None = None  # the SFrameSection, once opened
        self._start: tuple[int, int] | None = None
        self._start_known = False
        self.regs: Registers | None = None  # this objfile's register handles
        self.native = False  # served by gdb's DWARF unwinder (the symbol-file route)

    def get_module(self, plugin: Reporter) -> Module | None:
        if self.module is None and not self.failed:
            # Imported at the first frame unwound through an objfile: a
            # session whose objfiles all have symbol files never needs it.
            from sframe_core.targets.modules import Module
            try:
                info = read_elf(self.path)
                if info.sframe_address is None:
                    raise SFrameError("no .sframe section in the file on disk")
            except SFrameError as exc:
                self.failed = True
                plugin.report(self.path, str(exc))
                return None
            self.module = Module(self.path, self.sframe_address - info.sframe_address,
                                 self.code or [(0, 0)], sources=("sframe",),
                                 on_error=lambda m, exc: plugin.report(m.path, str(exc)),
                                 elf=info)
        return self.module

    def sframe(self, plugin: Reporter) -> SFrameSection | None:
        module = self.get_module(plugin)
        if module is None:
            return None
        section = module.sframe
        if section is None or module.error is not None:
            self.failed = True
            return None
        self.section = section
        return section

    def start_function(self) -> tuple[int, int] | None:
        """The span of ``_start`` when this is an executable without an FDE for it."""
        if not self._start_known:
            self._start = self.module.entry_function() if self.module is not None else None
            self._start_known = True
        return self._start

    def covered_by_cfi(self, plugin: Reporter, pc: int) -> bool:
        """Does an ``.eh_frame``/``.debug_frame`` FDE of this file cover ``pc``?"""
        if not (self.has_eh_frame or self.has_debug_frame):
            return False
        module = self.get_module(plugin)
        if module is None:
            return True  # cannot tell: leave the frame to GDB
        table = module.cfi
        if table is None:
            return module.error is not None or self.has_eh_frame
        return bool(table.has_fde(pc))


class ObjfileTable:
    """PC -> ``ObjfileEntry`` for one program space, parsed from GDB's section list."""

    def __init__(self, entries: list[ObjfileEntry], code: list[tuple[int, int]] | None = None,
                 core: list[Region] | None = None) -> None:
        self.entries = entries
        # A core file's segments: with them, every mapping of the process is known.
        self.core = core or []
        # The code sections of every objfile (with SFrame or not, the vdso
        # included): a return address outside them ends the backtrace.
        self.code = sorted(code or [])
        self._code_starts = [lo for lo, _ in self.code]
        spans = sorted(((lo, hi, e) for e in entries for lo, hi in e.code), key=lambda s: s[:2])
        self._starts = [s[0] for s in spans]
        self._spans = spans
        self._map: AddressMap | None = None

    def address_map(self) -> AddressMap:
        """The code of every objfile, and a core's segments (then the map is
        complete: every mapping of the process is known). Built once per table."""
        if self._map is None:
            regions = [Region(lo, hi, True) for lo, hi in self.code] + self.core
            self._map = AddressMap(regions, complete=bool(self.core))
        return self._map

    def find(self, pc: int) -> ObjfileEntry | None:
        # Code sections of different objfiles do not overlap.
        i = bisect.bisect_right(self._starts, pc) - 1
        if i >= 0:
            lo, hi, entry = self._spans[i]
            if lo <= pc < hi:
                return entry
        return None

    def is_code(self, pc: int) -> bool:
        i = bisect.bisect_right(self._code_starts, pc) - 1
        return i >= 0 and self.code[i][0] <= pc < self.code[i][1]

    @classmethod
    def parse(cls, text: str, wanted: set[str],
              old: dict[tuple[str, int], ObjfileEntry]) -> ObjfileTable:
        """The table from the output of ``SECTIONS_COMMAND``: entries for the
        objfiles in ``wanted`` that have ``.sframe`` (reusing those in ``old``,
        keyed by path and ``.sframe`` address), and every objfile's code."""
        entries: list[ObjfileEntry] = []
        code: list[tuple[int, int]] = []
        path = None
        sections: list[tuple[int, int, str, str]] = []

        def flush() -> None:
            if path is None:
                return
            code.extend((lo, hi) for lo, hi, _, flags in sections
                        if "CODE" in flags and "HAS_CONTENTS" in flags and hi > lo)
            if path not in wanted:
                return
            sframe = [s for s in sections if s[2] == ".sframe" and "HAS_CONTENTS" in s[3]]
            if not sframe:
                return
            start = sframe[0][0]
            entry = old.get((path, start)) or ObjfileEntry(path, start)
            entry.code = [(lo, hi) for lo, hi, _, flags in sections if "CODE" in flags and hi > lo]
            entry.has_eh_frame = any(s[2] == ".eh_frame" and s[1] > s[0] for s in sections)
            entry.has_debug_frame = any(s[2] == ".debug_frame" and s[1] > s[0] for s in sections)
            entries.append(entry)

        for line in text.splitlines():
            m = _HEADER.match(line)
            if m:
                flush()
                path = m.group(2) if m.group(1) != "Core file" else None
                sections = []
                continue
            m = _SECTION.match(line)
            if m and path is not None:
                sections.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4)))
        flush()
        return cls(entries, code)

    def extended(self, extra: list[ObjfileEntry]) -> ObjfileTable:
        """This table with the entries of section-less objfiles added."""
        if not extra:
            return self
        return ObjfileTable(self.entries + extra, self.code + [span for e in extra for span in e.code],
                            self.core)

    def with_core(self, core: list[Region]) -> ObjfileTable:
        return ObjfileTable(self.entries, self.code, core)

    @staticmethod
    def has_core(text: str) -> bool:
        """Does the output of ``SECTIONS_COMMAND`` show a core file?"""
        return any(m.group(1) == "Core file" for m in map(_HEADER.match, text.splitlines()) if m)


def parse_core_regions(text: str) -> list[Region]:
    """The core file's segments in the output of ``CORE_COMMAND``."""
    regions = []
    in_core = False
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            in_core = m.group(1) == "Core file"
            continue
        m = _SECTION.match(line)
        if m and in_core and "ALLOC" in m.group(4):
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            if hi > lo:
                regions.append(Region(lo, hi, "CODE" in m.group(4)))
    return regions


def parse_mappings(text: str) -> list[Mapping]:
    """The file mappings listed by ``info proc mappings`` (live processes and cores)."""
    from sframe_core.targets.modules import Mapping

    return [Mapping(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), m.group(4).strip())
            for m in _MAPPING.finditer(text)]


def segment_candidates(paths: set[str], no_segment: set[tuple[str, int]]) -> dict[str, ElfSFrame]:
    """The files among ``paths`` whose ``.sframe`` is found only through
    ``PT_GNU_SFRAME`` (section headers stripped). ``no_segment`` caches the
    (path, mtime) of files known to have none."""
    candidates = {}
    for path in paths:
        try:
            key = (path, os.stat(path).st_mtime_ns)
        except OSError:
            continue
        if key in no_segment:
            continue
        info: ElfSFrame | None
        try:
            info = read_elf(path)
        except SFrameError:
            info = None
        if info is None or not info.from_segment or info.sframe_address is None:
            no_segment.add(key)
            continue
        candidates[path] = info
    return candidates


def segment_entries(candidates: dict[str, ElfSFrame], mappings: list[Mapping],
                    old: dict[tuple[str, int], ObjfileEntry]) -> list[ObjfileEntry]:
    """Entries for the ``candidates`` (GDB shows no sections of them), placed by the mappings."""
    from sframe_core.targets.modules import load_bias

    entries = []
    for path, info in candidates.items():
        bias = load_bias(info, (m for m in mappings if m.path == path))
        if bias is None or info.sframe_address is None:
            continue
        start = info.sframe_address + bias
        entry = old.get((path, start)) or ObjfileEntry(path, start)
        entry.code = [(seg.vaddr + bias, seg.vaddr + seg.memsz + bias)
                      for seg in info.segments if seg.executable and seg.memsz]
        # Without section headers GDB reads no .eh_frame either.
        entry.has_eh_frame = entry.has_debug_frame = False
        entries.append(entry)
    return entries


def live_regions(inferior) -> Callable[[int], Region | None] | None:
    """``find`` for an AddressMap over a live process on this machine (its
    ``/proc/PID/maps``, read at the first address asked), or None (a core,
    a remote target; ``inferior`` is a ``gdb.Inferior``)."""
    connection = getattr(inferior, "connection", None)  # GDB 12+
    if not inferior.pid or connection is None or getattr(connection, "type", "") != "native":
        return None
    pid = inferior.pid
    maps: list[AddressMap] = []

    def find(address: int) -> Region | None:
        if not maps:
            try:
                with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as stream:
                    maps.append(AddressMap(regions_from_maps(stream.read()), complete=True))
            except OSError:
                return None
        hits = maps[0].regions_at(address)
        return hits[0] if hits else Region(address, address + 1, False, mapped=False)
    return find


class ObjfileTables:
    """The ``ObjfileTable`` of each program space, re-read only once an event
    marked it stale.

    A table is read from command output (``run``), which an unwinder may not
    ask for (it may not call ``gdb.execute``): event handlers and commands
    call ``read``, the unwinder only looks a table up (``get``).
    """

    def __init__(self, run: Callable[[str], str], warn: Callable[[str], None]) -> None:
        self._run = run  # a command's text (``cli_text``); raises CommandFailed
        self._warn = warn
        self._tables: dict[object, ObjfileTable] = {}  # progspace -> table
        self._stale: set[object] = set()  # progspaces whose table must be re-read
        # Progspaces where gdb's own unwinder serves every objfile with SFrame
        # (the Python unwinder looks at no frame there): the unwinder tests
        # membership per frame, so it holds this very set.
        self.idle: set[object] = set()
        self._no_segment_sframe: set[tuple[str, int]] = set()  # (path, mtime): no PT_GNU_SFRAME

    def get(self, progspace: object) -> ObjfileTable | None:
        return self._tables.get(progspace)

    def entries(self, progspace: object) -> list[ObjfileEntry]:
        table = self._tables.get(progspace)
        return table.entries if table else []

    def read_in(self, progspace: object) -> bool:
        """Has the table of ``progspace`` been read?"""
        return progspace in self._tables

    def progspaces(self) -> list[object]:
        """The program spaces with a table."""
        return list(self._tables)

    def mark_stale(self, progspace: object) -> None:
        self._stale.add(progspace)

    def mark_all_stale(self, current: object) -> None:
        """Every table, and that of ``current`` (the current program space) if it has none yet."""
        self._stale.update(self._tables)
        self._stale.add(current)

    def route_changed(self, progspace: object) -> None:
        """The DWARF route took or gave up objfiles of ``progspace``."""
        self._stale.add(progspace)
        self.idle.discard(progspace)  # until read() looks again

    def forget(self, progspace: object) -> None:
        self._tables.pop(progspace, None)
        self._stale.discard(progspace)
        self.idle.discard(progspace)

    def read(self, progspace, routes: Routes | None, force: bool = False) -> None:
        """Re-read the table of ``progspace`` (gdb's ``gdb.Progspace``) if it
        is stale, or not read yet, or ``force``."""
        if not force and progspace in self._tables and progspace not in self._stale:
            return
        self._stale.discard(progspace)
        native = routes.native_paths(progspace) if routes is not None else set()
        wanted = set()
        for objfile in progspace.objfiles():
            if objfile.owner is not None or not getattr(objfile, "is_file", True):
                continue  # separate debug files, the vdso
            wanted.add(objfile.filename)
        old = {(e.path, e.sframe_address): e for e in self.entries(progspace)}
        if not wanted:
            self._tables[progspace] = ObjfileTable([])
            return
        try:
            text = self._run(SECTIONS_COMMAND)
        except CommandFailed as exc:
            self._warn(f"cannot read the section table: {exc}")
            return
        table = ObjfileTable.parse(text, wanted, old)
        if ObjfileTable.has_core(text):
            try:
                table = table.with_core(parse_core_regions(self._run(CORE_COMMAND)))
            except CommandFailed:
                pass
        found = {e.path for e in table.entries}
        table = table.extended(self._segment_entries(wanted - found, old))
        for entry in table.entries:
            entry.native = entry.path in native
        self._tables[progspace] = table
        if all(entry.native for entry in table.entries) and (
                routes is None or not routes.serves_fallback(progspace)):
            self.idle.add(progspace)
        else:
            self.idle.discard(progspace)

    def _segment_entries(self, paths: set[str], old: dict[tuple[str, int], ObjfileEntry]
                         ) -> list[ObjfileEntry]:
        """Entries for objfiles GDB shows no sections of (section headers
        stripped) whose file has a PT_GNU_SFRAME segment, placed by the
        process's mappings (``MAPPINGS_COMMAND``: live processes and cores)."""
        candidates = segment_candidates(paths, self._no_segment_sframe)
        if not candidates:
            return []
        try:
            text = self._run(MAPPINGS_COMMAND)
        except CommandFailed:
            return []  # no process yet, or a target without mappings
        return segment_entries(candidates, parse_mappings(text), old)
