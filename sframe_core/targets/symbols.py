"""Address -> ``function+offset`` from ELF symbol tables, for printing backtraces.

Only sized function symbols count (``STT_FUNC``/``STT_GNU_IFUNC`` with a
size): an address past a function's end belongs to no function, and a guess
from the nearest preceding symbol would name the wrong one, which is worse
than ``??`` in a backtrace. ``.symtab`` and ``.dynsym`` are merged; when the
file's ``.symtab`` is gone (a stripped library), the separate debug file
found by build ID under ``/usr/lib/debug/.build-id`` is read instead, as gdb
does, so Debian's ``libc6-dbg`` gives libc's static functions their names.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable
from typing import BinaryIO, NamedTuple

from ..base.errors import FileError, reading_elf
from ..base.files import SHT_NOBITS, ElfLayout, notes_build_id

__all__ = ["Symbol", "SymbolTable", "Symbolizer", "DEBUG_ROOTS"]

DEBUG_ROOTS = ("/usr/lib/debug",)


class Symbol(NamedTuple):
    start: int  # file (link-time) address
    size: int
    name: str


# st_info's binding -> rank among names for one address: global, weak, local.
_RANK = {1: 0, 2: 1}
_FUNCTION_TYPES = frozenset({2, 10})  # STT_FUNC, STT_GNU_IFUNC
# (st_name, st_info, st_shndx, st_value, st_size) per ELF class and byte order.
_SYM = {
    (64, True): struct.Struct("<IBxHQQ"), (64, False): struct.Struct(">IBxHQQ"),
    (32, True): struct.Struct("<IIIBxH"), (32, False): struct.Struct(">IIIBxH"),
}

# A raw entry: (start, size, rank, string table number, name offset). Names
# stay offsets into their string table until a lookup needs one.
_Raw = tuple[int, int, int, int, int]


def _cstring(strings: bytes, at: int) -> str:
    stop = strings.find(b"\0", at)
    raw = strings[at: stop if stop >= 0 else len(strings)]
    return raw.decode("utf-8", "replace").split("@")[0]


def _read_symbols(stream: BinaryIO, layout: ElfLayout, strtabs: list[bytes]
                  ) -> tuple[list[_Raw], bool]:
    """Sized, defined function symbols of ``.symtab`` and ``.dynsym``, raw.

    The tables are unpacked with ``struct`` in one pass over their bytes and
    no name is decoded: pyelftools builds a dict per symbol (about 80 us
    each), which made an executable with 87,000 functions cost seconds.
    The sections are found from the headers alone (``files.elf_layout``),
    not through pyelftools' section objects. Entry sizes were checked
    against the ELF class when the file was opened. A compressed table
    (never seen in a real file) gives no symbols.
    """
    out: list[_Raw] = []
    has_symtab = False
    layout_struct = _SYM[(64 if layout.wide else 32, not layout.big_endian)]
    wide = layout.wide
    for name in (".symtab", ".dynsym"):
        section = layout.section(name)
        if section is None or section.type == SHT_NOBITS:
            continue
        has_symtab = has_symtab or name == ".symtab"
        table = layout.data(stream, section)
        strings = layout.data(stream, layout.sections[section.link])
        if table is None or strings is None:
            continue
        table = table[: len(table) - len(table) % layout_struct.size]
        number = len(strtabs)
        strtabs.append(strings)
        rows = layout_struct.iter_unpack(table)
        if not wide:
            rows = ((n, i, sh, v, sz) for n, v, sz, i, sh in rows)
        out += [(value, size, _RANK.get(info >> 4, 2), number, name_at)
                for name_at, info, shndx, value, size in rows
                if size and shndx and name_at and info & 0xF in _FUNCTION_TYPES]
    return out, has_symtab


def _build_id(stream: BinaryIO, layout: ElfLayout) -> str | None:
    section = layout.section(".note.gnu.build-id")
    data = None if section is None else layout.data(stream, section)
    return notes_build_id(data, ">" if layout.big_endian else "<") if data else None


class SymbolTable:
    """One file's function symbols: parallel sorted arrays, searched by bisection.

    One entry per distinct ``(start, size)``; among several names for it the
    global, then weak, then local one, alphabetically first on a tie. Names
    are decoded on first lookup, so indexing costs one sort of integer tuples.
    """

    def __init__(self, symbols: Iterable[Symbol] = ()) -> None:
        listed = list(symbols)
        raw = sorted((s.start, s.size, 0, i, 0) for i, s in enumerate(listed))
        self._init(raw, [], [s.name for s in listed])

    def _init(self, raw: list[_Raw], strtabs: list[bytes], names: list[str] | None = None
              ) -> None:
        self._strtabs = strtabs
        starts: list[int] = []
        ends: list[int] = []
        refs: list[str | tuple[int, int]] = []
        # Entry -> the other names of its best rank: which one is alphabetically
        # first is decided when the entry is first looked up, as libc with its
        # debug file has thousands of such pairs (.dynsym and .symtab both).
        ties: dict[int, list[str | tuple[int, int]]] = {}
        last = None
        best_rank = 0
        for start, size, rank, table, at in raw:  # sorted: the best rank comes first
            ref: str | tuple[int, int] = names[table] if names is not None else (table, at)
            if (start, size) == last:
                if rank == best_rank:
                    ties.setdefault(len(refs) - 1, []).append(ref)
                continue
            last, best_rank = (start, size), rank
            starts.append(start)
            ends.append(start + size)
            refs.append(ref)
        self._starts, self._ends, self._refs, self._ties = starts, ends, refs, ties

    def _decode(self, ref: str | tuple[int, int]) -> str:
        if isinstance(ref, str):
            return ref
        return _cstring(self._strtabs[ref[0]], ref[1])

    def _name(self, index: int) -> str:
        ref = self._refs[index]
        others = self._ties.pop(index, None)
        if isinstance(ref, str) and others is None:
            return ref
        name = self._refs[index] = min(self._decode(r) for r in [ref, *(others or ())])
        return name

    @property
    def symbols(self) -> list[Symbol]:
        """Every entry, names decoded (for tests and tools; lookups never need it)."""
        return [Symbol(start, end - start, self._name(i))
                for i, (start, end) in enumerate(zip(self._starts, self._ends, strict=True))]

    @classmethod
    def from_file(cls, path: str, debug_roots: Iterable[str] = DEBUG_ROOTS) -> SymbolTable:
        """The symbols of ``path``; empty when it cannot be read (a missing name is ``??``)."""
        from ..base.files import elf_layout, open_elf

        raw: list[_Raw] = []
        strtabs: list[bytes] = []
        try:
            with reading_elf(path), open_elf(path) as stream:
                layout = elf_layout(stream, path)
                raw, has_symtab = _read_symbols(stream, layout, strtabs)
                build_id = None if has_symtab else _build_id(stream, layout)
            if build_id and len(build_id) > 2:
                for root in debug_roots:
                    debug = os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")
                    if os.path.exists(debug):
                        with reading_elf(debug), open_elf(debug) as stream:
                            raw += _read_symbols(stream, elf_layout(stream, debug), strtabs)[0]
                        break
        except FileError:
            raw = []  # symbols are decoration: a bad file just has none
        raw.sort()
        table = cls()
        table._init(raw, strtabs)
        return table

    def lookup(self, address: int) -> tuple[str, int] | None:
        """``(name, offset)`` of the function holding file address ``address``.

        Among nested or overlapping symbols the one starting closest below
        wins; a few symbols back are checked because a big function can
        contain a later-starting small one's range only rarely.
        """
        i = bisect.bisect_right(self._starts, address) - 1
        for j in range(i, max(i - 8, -1), -1):
            if address < self._ends[j]:
                name = self._name(j)
                if name:
                    return name, address - self._starts[j]
        return None


class Symbolizer:
    """Names runtime addresses, opening each file's symbol table once."""

    def __init__(self, debug_roots: Iterable[str] = DEBUG_ROOTS) -> None:
        self._tables: dict[str, SymbolTable] = {}
        self._debug_roots = tuple(debug_roots)

    def table(self, path: str) -> SymbolTable:
        table = self._tables.get(path)
        if table is None:
            table = SymbolTable.from_file(path, self._debug_roots)
            self._tables[path] = table
        return table

    def lookup(self, path: str, bias: int, pc: int) -> tuple[str, int] | None:
        """``(function, offset)`` for runtime address ``pc`` in ``path`` loaded at ``bias``."""
        return self.table(path).lookup(pc - bias)
