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
from collections.abc import Iterable
from typing import Any, NamedTuple

from .errors import FileError, reading_elf

__all__ = ["Symbol", "SymbolTable", "Symbolizer", "DEBUG_ROOTS"]

DEBUG_ROOTS = ("/usr/lib/debug",)


class Symbol(NamedTuple):
    start: int  # file (link-time) address
    size: int
    name: str


def _rank(sym: Any) -> int:
    """Which of several names for one address to show: global, then weak, then local."""
    return {"STB_GLOBAL": 0, "STB_WEAK": 1}.get(sym["st_info"]["bind"], 2)


def _read_symbols(elf: Any) -> tuple[list[tuple[int, int, int, str]], bool]:
    out: list[tuple[int, int, int, str]] = []
    has_symtab = False
    for name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(name)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            continue
        has_symtab = has_symtab or name == ".symtab"
        for sym in section.iter_symbols():
            kind = sym["st_info"]["type"]
            if kind not in ("STT_FUNC", "STT_GNU_IFUNC") or sym["st_size"] == 0 \
                    or sym["st_shndx"] == "SHN_UNDEF" or not sym.name:
                continue
            out.append((sym["st_value"], sym["st_size"], _rank(sym), sym.name.split("@")[0]))
    return out, has_symtab


def _build_id(elf: Any) -> str | None:
    section = elf.get_section_by_name(".note.gnu.build-id")
    if section is None:
        return None
    for note in section.iter_notes():
        if note["n_type"] == "NT_GNU_BUILD_ID":
            return str(note["n_desc"])
    return None


class SymbolTable:
    """One file's function symbols, sorted once, searched by bisection."""

    def __init__(self, symbols: Iterable[Symbol]) -> None:
        self.symbols = sorted(symbols)
        self._starts = [s.start for s in self.symbols]

    @classmethod
    def from_file(cls, path: str, debug_roots: Iterable[str] = DEBUG_ROOTS) -> SymbolTable:
        """The symbols of ``path``; empty when it cannot be read (a missing name is ``??``)."""
        from elftools.elf.elffile import ELFFile

        raw: list[tuple[int, int, int, str]] = []
        try:
            with reading_elf(path), open(path, "rb") as stream:
                elf = ELFFile(stream)
                raw, has_symtab = _read_symbols(elf)
                build_id = None if has_symtab else _build_id(elf)
            if build_id and len(build_id) > 2:
                for root in debug_roots:
                    debug = os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")
                    if os.path.exists(debug):
                        with reading_elf(debug), open(debug, "rb") as stream:
                            raw += _read_symbols(ELFFile(stream))[0]
                        break
        except FileError:
            pass  # symbols are decoration: a bad file just has none
        best: dict[tuple[int, int], tuple[int, str]] = {}
        for start, size, rank, name in raw:
            key = (start, size)
            if key not in best or (rank, name) < best[key]:
                best[key] = (rank, name)
        return cls(Symbol(start, size, name) for (start, size), (_, name) in best.items())

    def lookup(self, address: int) -> tuple[str, int] | None:
        """``(name, offset)`` of the function holding file address ``address``.

        Among nested or overlapping symbols the one starting closest below
        wins; a few symbols back are checked because a big function can
        contain a later-starting small one's range only rarely.
        """
        i = bisect.bisect_right(self._starts, address) - 1
        for j in range(i, max(i - 8, -1), -1):
            sym = self.symbols[j]
            if sym.start <= address < sym.start + sym.size:
                return sym.name, address - sym.start
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
