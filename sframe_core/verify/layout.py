"""Where things are in the ELF file ``sframe verify`` reads, beyond what
``ElfSFrame`` says: its sections, its program headers, and in a relocatable
object the place each text section is laid out at.

Read with pyelftools once per file: ``verify`` is a batch check, not on a
debugger's path, so it does not share ``base/files.py``'s lean header read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ..base.errors import reading_elf
from ..format.elf import PT_GNU_SFRAME
from ..targets.symbols import SymbolTable

__all__ = ["Layout", "read_layout", "Relocatable", "read_relocatable", "Namer", "namer",
           "section_of"]

_SHF_EXECINSTR = 4


class Layout(NamedTuple):
    """What the ELF headers say beyond ``ElfSFrame``: sections, segments, interpreter."""

    sections: tuple[tuple[str, int, int, bool], ...]  # name, address, size, executable
    sframe_section: tuple[int, int] | None  # address, size of .sframe
    sframe_segments: tuple[tuple[int, int], ...]  # PT_GNU_SFRAME (vaddr, memsz)
    exec_segments: tuple[tuple[int, int], ...]  # executable PT_LOAD (vaddr, memsz)
    interp: bool


def read_layout(path: str) -> Layout:
    """The sections and program headers of ``path`` that the checks need."""
    from elftools.elf.elffile import ELFFile

    from ..base.files import open_elf

    with reading_elf(path), open_elf(path) as stream:
        elf = ELFFile(stream)
        sections = []
        sframe = None
        for sec in elf.iter_sections():
            sections.append((sec.name, sec["sh_addr"], sec["sh_size"],
                             bool(sec["sh_flags"] & _SHF_EXECINSTR)))
            if sec.name == ".sframe":
                sframe = (sec["sh_addr"], sec["sh_size"])
        segs, execs, interp = [], [], False
        for seg in elf.iter_segments():
            kind = seg["p_type"]
            if kind in (PT_GNU_SFRAME, "PT_GNU_SFRAME"):
                segs.append((seg["p_vaddr"], seg["p_memsz"]))
            elif kind == "PT_LOAD" and seg["p_flags"] & 1:
                execs.append((seg["p_vaddr"], seg["p_memsz"]))
            elif kind == "PT_INTERP":
                interp = True
    return Layout(tuple(sections), sframe, tuple(segs), tuple(execs), interp)


class Relocatable(NamedTuple):
    """A relocatable object laid out for comparison: each text section at its
    own base (they all start at 0 in the file), so functions of ``.text`` and
    ``.text.startup`` no longer share addresses. FDE start fields are mapped
    to their text section through the relocations on them."""

    bases: dict[int, int]  # section index -> base
    spans: tuple[tuple[int, int, str], ...]  # (base, size, section name)
    sframe: dict[int, int]  # .sframe offset of a start field -> section index
    eh_frame: dict[int, int]  # .eh_frame offset of an FDE's pc_begin -> section index
    symbols: tuple[Any, ...]  # Symbol records at laid-out addresses


_OBJECT_BASE = 0x10000

# A function's name (``f4``, ``f4+0x10``, or its section's: ``.plt``) at an address.
Namer = Callable[[int], "str | None"]


def read_relocatable(path: str) -> Relocatable:
    """``path`` (a ``.o``) with each text section at a base of its own, page
    apart: its FDEs' start fields placed by their relocations."""
    from elftools.elf.elffile import ELFFile

    from ..base.files import open_elf
    from ..targets.symbols import Symbol

    with reading_elf(path), open_elf(path) as stream:
        elf = ELFFile(stream)
        bases: dict[int, int] = {}
        spans = []
        at = _OBJECT_BASE
        targets: dict[int, str] = {}
        for index, sec in enumerate(elf.iter_sections()):
            if sec["sh_flags"] & _SHF_EXECINSTR and sec["sh_type"] != "SHT_NOBITS":
                bases[index] = at
                spans.append((at, sec["sh_size"], sec.name))
                at += (sec["sh_size"] + 0xFFF) & ~0xFFF or 0x1000
            elif sec.name in (".sframe", ".eh_frame"):
                targets[index] = sec.name
        maps: dict[str, dict[int, int]] = {".sframe": {}, ".eh_frame": {}}
        symbols = []
        other: Any
        for other in elf.iter_sections():
            sec = other  # relocation and symbol sections: pyelftools' subclasses
            if sec["sh_type"] in ("SHT_RELA", "SHT_REL") and sec["sh_info"] in targets:
                symtab: Any = elf.get_section(sec["sh_link"])
                out = maps[targets[sec["sh_info"]]]
                for rel in sec.iter_relocations():
                    out[rel["r_offset"]] = symtab.get_symbol(rel["r_info_sym"])["st_shndx"]
            elif sec["sh_type"] == "SHT_SYMTAB":
                for sym in sec.iter_symbols():
                    shndx = sym["st_shndx"]
                    if (sym["st_info"]["type"] == "STT_FUNC" and isinstance(shndx, int)
                            and shndx in bases and sym["st_size"]):
                        symbols.append(Symbol(bases[shndx] + sym["st_value"], sym["st_size"],
                                              sym.name))
    return Relocatable(bases, tuple(spans), maps[".sframe"], maps[".eh_frame"], tuple(symbols))


def namer(symbols: SymbolTable, layout: Layout) -> Namer:
    """Names from the symbols, else the executable section's name (a PLT has
    no symbol)."""
    def name(pc: int) -> str | None:
        hit = symbols.lookup(pc)
        if hit is not None:
            return hit[0] if hit[1] == 0 else f"{hit[0]}+{hit[1]:#x}"
        for sec_name, addr, size, executable in layout.sections:
            if executable and addr <= pc < addr + size and addr:
                return sec_name
        return None
    return name


def section_of(layout: Layout, pc: int) -> str | None:
    """The executable section holding ``pc``, by name."""
    for sec_name, addr, size, executable in layout.sections:
        if executable and addr <= pc < addr + size:
            return sec_name
    return None
