"""A copy of a module whose ``.debug_frame`` says what its ``.sframe`` says.

For a debugger that cannot take a separate symbol file for a module that
has debug information of its own without losing the module's addresses
(LLDB before 22: when the module has ``.debug_info``, ``target symbols
add`` gives it a symbol file whose sections LLDB never loads, so
breakpoints, line tables and variable locations point nowhere). Handed
this copy as the module itself, the debugger finds the module's own debug
information and the SFrame rows in one file, with the same build-id and
the same layout: every byte of the original file is kept where it was, and
the ``.debug_frame`` of the symbol file (``symfile``), a new section-name
table and a new section header table are appended after it.
"""

from __future__ import annotations

import os
import struct
import tempfile

from ..base.errors import SFrameError
from ..base.files import ElfLayout, elf_layout, open_elf
from .jobs import symbol_file_now

__all__ = ["module_with_debug_frame", "add_debug_frame"]

_SHT_PROGBITS, _SHT_STRTAB = 1, 3
_SHDR64 = "IIQQQQIIQQ"
_SHDR32 = "IIIIIIIIII"


def module_with_debug_frame(path: str) -> str:
    """The cached copy of ``path`` with the SFrame rows as ``.debug_frame``
    (made now if missing): ``<symbol file>.module/<name of path>``, so that
    the debugger names the module as it names the original.

    :raises SFrameError: one line, when the module or its symbol file cannot
        be read, or the module already has a ``.debug_frame``.
    """
    made = symbol_file_now(path)
    out_dir = made.path + ".module"
    out = os.path.join(out_dir, os.path.basename(path))
    if os.path.isfile(out) and os.path.getmtime(out) >= os.path.getmtime(made.path):
        return out
    with open_elf(made.path) as stream:
        layout = elf_layout(stream, made.path)
        header = layout.section(".debug_frame")
        frame = layout.data(stream, header) if header is not None else None
    if not frame:
        raise SFrameError(f"{made.path}: no .debug_frame to add to {path}")
    with open_elf(path) as stream:
        layout = elf_layout(stream, path)
        if layout.section(".debug_frame") is not None:
            raise SFrameError(f"{path}: has a .debug_frame already")
        stream.seek(0)
        original = stream.read()
    data = add_debug_frame(original, layout, frame)
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".tmp-")
    with os.fdopen(fd, "wb") as dest:
        dest.write(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


def add_debug_frame(original: bytes, layout: ElfLayout, frame: bytes) -> bytes:
    """``original`` with ``frame`` appended as a ``.debug_frame`` section.

    The program headers and every section keep their offsets; only the ELF
    header's section-table fields change, and the old section-name table
    and section headers stay in the file, unreferenced.
    """
    end = ">" if layout.big_endian else "<"
    wide = layout.wide
    names = next((i for i, s in enumerate(layout.sections)
                  if s.type == _SHT_STRTAB and s.name == ".shstrtab"), None)
    if names is None or len(layout.sections) >= 0xFF00:
        raise SFrameError("no section name table to extend")
    old_names = original[layout.sections[names].offset:
                         layout.sections[names].offset + layout.sections[names].size]
    out = bytearray(original)
    _pad(out, 8)
    frame_offset = len(out)
    out += frame
    names_offset = len(out)
    frame_name = len(old_names)
    out += old_names + b".debug_frame\0"
    _pad(out, 8)
    table_offset = len(out)
    shdr = struct.Struct(end + (_SHDR64 if wide else _SHDR32))
    for i, s in enumerate(layout.sections):
        offset, size = s.offset, s.size
        if i == names:
            offset, size = names_offset, len(old_names) + len(b".debug_frame\0")
        out += shdr.pack(s.name_offset, s.type, s.flags, s.addr, offset, size, s.link, s.info,
                         s.align, s.entsize)
    out += shdr.pack(frame_name, _SHT_PROGBITS, 0, 0, frame_offset, len(frame), 0, 0, 8, 0)
    count = len(layout.sections) + 1
    if wide:
        struct.pack_into(end + "Q", out, 0x28, table_offset)
        struct.pack_into(end + "H", out, 0x3C, count)
    else:
        struct.pack_into(end + "I", out, 0x20, table_offset)
        struct.pack_into(end + "H", out, 0x30, count)
    return bytes(out)


def _pad(buffer: bytearray, align: int) -> None:
    buffer += b"\0" * (-len(buffer) % align)

