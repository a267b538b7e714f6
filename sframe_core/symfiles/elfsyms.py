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
22.1.0 and 23.1.0).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..base.files import SectionHeader

__all__ = ["function_symbols", "executable_sections", "SYMBOL_PREFIX"]

SYMBOL_PREFIX = "___lldb_unnamed_symbol_"
_SHF_EXECINSTR, _SHF_ALLOC = 0x4, 0x2
_STT_FUNC, _STB_LOCAL = 2, 0



def function_symbols(ranges: Sequence[tuple[int, int]], sections: Sequence[tuple[int, int, int]],
                     big_endian: bool) -> tuple[bytes, bytes, int] | None:
    """``.symtab`` and ``.strtab`` bytes, and the symbol count, for ``ranges``.

    ``sections``: (index, address, size) of the module's executable sections;
    a range outside all of them gets no symbol. None when no range has one.
    """
    endian = ">" if big_endian else "<"
    symtab = bytearray(24)  # the null symbol
    strtab = bytearray(b"\0")
    count = 1
    seen: set[int] = set()
    for start, size in sorted(ranges):
        if start in seen or size <= 0:
            continue
        index = next((i for i, addr, span in sections if addr <= start < addr + span), None)
        if index is None:
            continue
        seen.add(start)
        name = len(strtab)
        strtab += f"{SYMBOL_PREFIX}{start:x}".encode() + b"\0"
        symtab += struct.pack(endian + "IBBHQQ", name, (_STB_LOCAL << 4) | _STT_FUNC, 0, index,
                              start, size)
        count += 1
    if count == 1:
        return None
    return bytes(symtab), bytes(strtab), count


def executable_sections(sections: Sequence[SectionHeader]) -> list[tuple[int, int, int]]:
    """(index, address, size) of the allocated, executable ones among ``sections``."""
    return [(i, sec.addr, sec.size) for i, sec in enumerate(sections)
            if i and sec.flags & _SHF_ALLOC and sec.flags & _SHF_EXECINSTR]
