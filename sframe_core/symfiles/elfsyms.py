"""Function symbols for a symbol file made from a module without a symbol table.

LLDB takes a symbol file only if it brings a symbol table or debug
information ("symbol file ... does not match any existing module"), and its
unwinder picks a function's CFI by the function's bounds, which a stripped
module does not have (without them it does not unwind frame 0 at all).
LLDB itself makes such bounds from ``.eh_frame`` FDEs, never from
``.debug_frame``: so a symbol file for a stripped module carries one
``STT_FUNC`` symbol per FDE of the generated ``.debug_frame``, named as LLDB
names the ones it makes (``___lldb_unnamed_symbol_<hex address>``, shown as
an unnamed function), with the FDE's address range (observed on LLDB 21.1.7,
22.1.0 and 23.1.0). Not in the PLT sections (``PLT_SECTIONS``): LLDB names
the stubs there itself (``ObjectFileELF::ParseTrampolineSymbols``: ``printf``
for ``printf@plt``), and on the twin makes an unnamed symbol only at each
section's start, where ld's ``.eh_frame`` has an FDE; a symbol of ours at a
stub would hide its trampoline symbol. The stubs still unwind from their
FDEs: LLDB finds a function's CFI by the trampoline symbol's bounds.

LLDB 14 to 20 name the symbols they make by number instead
(``___lldb_unnamed_symbol17``, ``Symbol::SynthesizeNameIfNeeded``: the
symbol's user id), and with our ``.symtab`` in the module's sections their
``ObjectFileELF::ParseSymtab`` no longer reads ``.dynsym`` (it does only
when there is no ``.symtab``). Their file's symbol table is the one the
twin (the module with its ``.eh_frame``) gets there: ``numbered_symbols``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..base.files import SectionHeader

__all__ = ["function_symbols", "numbered_symbols", "crt1_stub", "defined_dynamic", "with_dynamic",
           "executable_sections", "plt_sections",
           "SYMBOL_PREFIX", "STUB_WINDOW",
           "NUMBERED_PREFIX", "PLT_SECTIONS"]

SYMBOL_PREFIX = "___lldb_unnamed_symbol_"
NUMBERED_PREFIX = "___lldb_unnamed_symbol"  # and the symbol's id (LLDB 14-20)
# The sections the linker's PLT stubs are in: ld gives each one FDE in
# .eh_frame, from its start; SFrame has none for .plt.got and splits .plt
# and .plt.sec (the stubs of -z ibtplt).
PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got")
_SHF_EXECINSTR, _SHF_ALLOC = 0x4, 0x2
_STT_FUNC, _STT_SECTION, _STB_LOCAL, _STB_GLOBAL = 2, 3, 0, 1
_SHN_UNDEF, _SHN_LORESERVE = 0, 0xff00
SYMBOL = "IBBHQQ"  # Elf64_Sym: st_name, st_info, st_other, st_shndx, st_value, st_size
_SYMBOL_SIZE = 24


def _entries(table: bytes, endian: str) -> list[tuple[int, int, int, int, int, int]]:
    """The Elf64_Sym entries of ``table`` (its whole entries)."""
    return [struct.unpack_from(endian + SYMBOL, table, at)
            for at in range(0, len(table) - len(table) % _SYMBOL_SIZE, _SYMBOL_SIZE)]


def _defined(shndx: int) -> bool:
    """Is a symbol with section index ``shndx`` defined in a section of the file?"""
    return shndx != _SHN_UNDEF and shndx < _SHN_LORESERVE


def function_symbols(ranges: Sequence[tuple[int, int]], sections: Sequence[tuple[int, int, int]],
                     big_endian: bool, plts: Sequence[tuple[int, int]] = ()
                     ) -> tuple[bytes, bytes, int] | None:
    """``.symtab`` and ``.strtab`` bytes, and the symbol count, for ``ranges``.

    ``sections``: (index, address, size) of the module's executable sections;
    a range outside all of them gets no symbol. ``plts``: (address, size) of
    its PLT sections (``plt_sections``): a range in one gets no symbol, and
    each gets one at its start, of no size, which LLDB makes up to the next
    symbol (the first stub's), as on the twin. None when no range has one.
    """
    endian = ">" if big_endian else "<"
    symtab = bytearray(24)  # the null symbol
    strtab = bytearray(b"\0")
    count = 1
    seen: set[int] = set()
    wanted = [(start, size) for start, size in ranges
              if size > 0 and not any(addr <= start < addr + span for addr, span in plts)]
    for start, size in sorted([*wanted, *((addr, 0) for addr, _ in plts)]):
        if start in seen:
            continue
        index = next((i for i, addr, span in sections if addr <= start < addr + span), None)
        if index is None:
            continue
        seen.add(start)
        name = len(strtab)
        strtab += f"{SYMBOL_PREFIX}{start:x}".encode() + b"\0"
        symtab += struct.pack(endian + SYMBOL, name, (_STB_LOCAL << 4) | _STT_FUNC, 0, index,
                              start, size)
        count += 1
    if count == 1:
        return None
    return bytes(symtab), bytes(strtab), count


def numbered_symbols(ranges: Sequence[tuple[int, int]], sections: Sequence[SectionHeader],
                     dynsym: bytes, dynstr: bytes, plt_relocations: int, big_endian: bool,
                     extra: Sequence[tuple[bytes, int, int, int]] = (),
                     twin_starts: Sequence[int] = ()) -> tuple[bytes, bytes, int] | None:
    """LLDB 14-20's ``.symtab`` and ``.strtab`` bytes, and the count of its
    leading local symbols, for a stripped module whose FDEs start at
    ``ranges`` (start, size): the symbol table LLDB makes for the module's
    twin, each symbol at its index there (``ParseSymbols``: the id is the
    index in the table it comes from).

    - ``.dynsym``'s entries first, as they are (``dynsym``, with ``dynstr``
      as the start of our ``.strtab``, so every name offset holds): an
      exported function keeps its name, and LLDB reads no ``.dynsym``
      beside a ``.symtab``.
    - Then one unnamed entry per PLT relocation (``plt_relocations``), which
      LLDB skips (no name) but counts: the ids its trampoline symbols have
      in the twin (``ParseTrampolineSymbols``, after ``.dynsym``). Ours get
      later ids: LLDB makes them after our table, with the same names.
    - Then, numbered on from there (``ParseUnwindSymbols``: the last
      symbol's id plus one, in address order), one function symbol per FDE
      the twin's ``.eh_frame`` has and no symbol starts at, named
      ``___lldb_unnamed_symbol<ID>``, with its FDE's range (as 21's file:
      LLDB picks a function's CFI by its bounds). The twin's FDEs are ours
      but in the PLT sections (``PLT_SECTIONS``), where ld gives each
      section one FDE from its start, and ``twin_starts`` (``crt1_stub``):
      those have no size, which LLDB makes up to the next symbol, as on the
      twin (a PLT stub's trampoline symbol, in the PLT).
    - Then ``extra`` (name, section index, address, size) as function
      symbols, numbered after all that (no name of the twin's moves).

    None when ``dynsym`` is not a symbol table (no whole entries), or no
    symbol is made.
    """
    endian = ">" if big_endian else "<"
    dynsym = dynsym or bytes(24)  # none (a static executable): the null symbol alone
    if len(dynsym) % 24:
        return None
    entries = _entries(dynsym, endian)
    known = {value for name, info, _, shndx, value, _ in entries
             if _defined(shndx) and (name or info & 0xF == _STT_SECTION)}
    last = max((i for i, entry in enumerate(entries) if entry[0]), default=0)
    plt = next((sec for sec in sections if sec.name == ".plt" and sec.size), None)
    if plt is not None and plt_relocations:
        # LLDB's GetPltEntrySizeAndOffset: the stubs fill the section's end.
        size = -(-plt.entsize // plt.align) * plt.align if plt.align else plt.entsize
        if size <= 4:
            size = (plt.size // plt.align // (plt_relocations + 1) * plt.align if plt.align
                    else plt.size // (plt_relocations + 1))
        first = plt.addr + plt.size - plt_relocations * size
        known.update(first + i * size for i in range(plt_relocations))
        last = len(entries) + plt_relocations - 1
    plts = plt_sections(sections)
    executable = executable_sections(sections)
    # start -> size: an FDE's own; 0 (LLDB sizes it up to the next symbol, as
    # on the twin) for a PLT section's, which holds the stubs' symbols too,
    # and for the twin's own.
    starts = dict.fromkeys([addr for addr, _ in plts] + list(twin_starts), 0)
    for start, size in ranges:
        if size > 0:
            plt_start = next((addr for addr, span in plts if addr <= start < addr + span), None)
            if plt_start is None:
                starts.setdefault(start, size)
    symtab = bytearray(dynsym)
    symtab += bytes(24 * max(0, last + 1 - len(entries)))  # the trampolines' ids
    strtab = bytearray(dynstr or b"\0")
    names: list[tuple[bytes, int, int, int]] = []
    for start in sorted(starts.keys() - known):
        index = next((i for i, addr, span in executable if addr <= start < addr + span), None)
        if index is not None:
            last += 1
            names.append((f"{NUMBERED_PREFIX}{last}".encode(), index, start, starts[start]))
    names.extend(extra)
    if not names:
        return None
    for name, index, start, size in names:
        symtab += struct.pack(endian + SYMBOL, len(strtab), (_STB_GLOBAL << 4) | _STT_FUNC, 0,
                              index, start, size)
        strtab += name + b"\0"
    locals_ = next((i for i, entry in enumerate(entries) if entry[1] >> 4 != _STB_LOCAL),
                   len(entries))
    return bytes(symtab), bytes(strtab), locals_


# glibc's crt1.o (a non-PIE executable's start code) has _start and then
# _dl_relocate_static_pie, an empty function with an .eh_frame FDE and no
# SFrame (glibc is not assembled with --gsframe): _start ends with hlt, the
# other starts at the next 16-byte boundary, as ret or endbr64; ret.
_STUB_BODIES = (b"\xc3", b"\xf3\x0f\x1e\xfa\xc3")
STUB_WINDOW = 80  # bytes from e_entry that hold both


def defined_dynamic(dynsym: bytes, big_endian: bool) -> set[int]:
    """The addresses of ``.dynsym``'s defined, named symbols (a library's
    exported functions and data): LLDB names what starts there after them."""
    if len(dynsym) % 24:
        return set()
    endian = ">" if big_endian else "<"
    return {value for name, _, _, shndx, value, _ in _entries(dynsym, endian)
            if name and _defined(shndx)}


def with_dynamic(symtab: bytes, strtab: bytes, locals_: int, dynsym: bytes, dynstr: bytes,
                 big_endian: bool) -> tuple[bytes, bytes, int]:
    """``symtab`` (``locals_`` local symbols first) and ``strtab`` with
    ``.dynsym``'s entries too (LLDB 21-23's file of a stripped module that
    exports symbols: LLDB reads no ``.dynsym`` beside our ``.symtab``, and
    the twin names those functions after it). ``dynstr`` goes first in the
    string table, so ``.dynsym``'s name offsets hold; the locals stay first."""
    endian = ">" if big_endian else "<"
    shift = len(dynstr)
    moved = [struct.pack(endian + SYMBOL, name + shift, *rest)
             for name, *rest in _entries(symtab, endian)[1:]]
    entries = [dynsym[at:at + 24] for at in range(24, len(dynsym) - len(dynsym) % 24, 24)]
    dyn_locals = [e for e in entries if e[4] >> 4 == _STB_LOCAL]
    dyn_globals = [e for e in entries if e[4] >> 4 != _STB_LOCAL]
    table = (bytes(24) + b"".join(moved[:locals_ - 1]) + b"".join(dyn_locals)
             + b"".join(moved[locals_ - 1:]) + b"".join(dyn_globals))
    return table, dynstr + strtab, locals_ + len(dyn_locals)


def crt1_stub(code: bytes, entry: int) -> int | None:
    """The address of glibc's ``_dl_relocate_static_pie`` after ``_start``
    in ``code`` (the bytes from ``entry``, the entry point, on), or None:
    the twin's ``.eh_frame`` has an FDE there that SFrame does not."""
    end = code.find(b"\xf4")  # _start's hlt
    if end < 0:
        return None
    at = (entry + end + 16) & ~15
    body = code[at - entry:]
    if not any(body.startswith(stub) for stub in _STUB_BODIES):
        return None
    padding = code[end + 1:at - entry]
    return at if set(padding) <= {0x0f, 0x1f, 0x2e, 0x40, 0x44, 0x66, 0x84, 0x90, 0x00} else None


def plt_sections(sections: Sequence[SectionHeader]) -> list[tuple[int, int]]:
    """(address, size) of the PLT sections (``PLT_SECTIONS``) among ``sections``."""
    return [(sec.addr, sec.size) for sec in sections if sec.name in PLT_SECTIONS and sec.size]


def executable_sections(sections: Sequence[SectionHeader]) -> list[tuple[int, int, int]]:
    """(index, address, size) of the allocated, executable ones among ``sections``."""
    return [(i, sec.addr, sec.size) for i, sec in enumerate(sections)
            if i and sec.flags & _SHF_ALLOC and sec.flags & _SHF_EXECINSTR]
