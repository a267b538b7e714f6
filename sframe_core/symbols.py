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
from typing import Any, NamedTuple

__all__ = ["Symbol", "SymbolTable", "Symbolizer", "DEBUG_ROOTS"]

DEBUG_ROOTS = ("/usr/lib/debug",)


class Symbol(NamedTuple):
    start: int  # file (link-time) address
    size: int
    name: str


# st_info's binding -> rank among names for one address: global, weak, local.
_RANK = {1: 0, 2: 1}
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
# (st_name, st_info, st_shndx, st_value, st_size) per ELF class and byte order.
_SYM = {
    (64, True): struct.Struct("<IBxHQQ"), (64, False): struct.Struct(">IBxHQQ"),
    (32, True): struct.Struct("<IIIBxH"), (32, False): struct.Struct(">IIIBxH"),
}


def _read_symbols(elf: Any) -> tuple[list[tuple[int, int, int, str]], bool]:
    """Sized, defined function symbols of ``.symtab`` and ``.dynsym``.

    The tables are unpacked with ``struct`` in one pass over their bytes:
    pyelftools builds a dict per symbol, about 80 us each, which made an
    executable with 87,000 functions cost seconds per backtrace. Entry sizes
    were checked against the ELF class when the file was opened.
    """
    out: list[tuple[int, int, int, str]] = []
    has_symtab = False
    layout = _SYM[(elf.elfclass, elf.little_endian)]
    for name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(name)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            continue
        has_symtab = has_symtab or name == ".symtab"
        strings = elf.get_section(section["sh_link"]).data()
        table = section.data()
        table = table[: len(table) - len(table) % layout.size]
        for fields in layout.iter_unpack(table):
            if elf.elfclass == 64:
                name_at, info, shndx, value, size = fields
            else:
                name_at, value, size, info, shndx = fields
            if size == 0 or shndx == 0 or name_at == 0 or info & 0xF not in (
                    _STT_FUNC, _STT_GNU_IFUNC):
                continue
            stop = strings.find(b"\0", name_at)
            raw = strings[name_at: stop if stop >= 0 else len(strings)]
            if not raw:
                continue
            text = raw.decode("utf-8", "replace").split("@")[0]
            out.append((value, size, _RANK.get(info >> 4, 2), text))
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

        from .files import open_elf

        raw: list[tuple[int, int, int, str]] = []
        try:
            with open_elf(path) as stream:
                elf = ELFFile(stream)
                raw, has_symtab = _read_symbols(elf)
                build_id = None if has_symtab else _build_id(elf)
            if build_id and len(build_id) > 2:
                for root in debug_roots:
                    debug = os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")
                    if os.path.exists(debug):
                        with open_elf(debug) as stream:
                            raw += _read_symbols(ELFFile(stream))[0]
                        break
        except Exception:  # noqa: BLE001 - symbols are decoration; a bad file just has none
            pass
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
