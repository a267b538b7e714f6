"""Plant one wrong SFrame row in a copy of an ELF file, for the demo's ``sframe verify``.

    .venv/bin/python scripts/plant_defect.py FILE FUNCTION OUT

Copies FILE to OUT with the CFA offset of FUNCTION's second FRE (the row
after its first push) 8 bytes too large, as a buggy producer might write it,
and prints one line: the function, the PC of the row and the change. The
copy keeps its .eh_frame, so ``sframe verify OUT`` has the truth to compare
with. Done as tests/test_verify.py plants its defects: one byte of the
``.sframe`` section, nothing else.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from elftools.elf.elffile import ELFFile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's sframe_core
from sframe_core.format.section import SFrameSection
from sframe_core.targets.symbols import SymbolTable


def plant(source: Path, function: str, out: Path) -> str:
    """Write the planted copy; the line that says what was changed."""
    with open(source, "rb") as stream:
        elf_section = ELFFile(stream).get_section_by_name(".sframe")
        if elf_section is None:
            raise SystemExit(f"plant_defect: {source}: no .sframe section")
        base, address = int(elf_section["sh_offset"]), int(elf_section["sh_addr"])
        section = SFrameSection(elf_section.data(), address)
    symbols = SymbolTable.from_file(str(source))
    for fde in section.iter_fdes():
        if symbols.lookup(fde.start) != (function, 0):
            continue
        fres = section.get_fres(fde)
        if len(fres) < 2 or fres[1].word_size != 1 or not fres[1].base_is_sp:
            raise SystemExit(f"plant_defect: {source}: {function}'s second row is not CFA = rsp + N")
        fre = fres[1]
        # The first data word (the CFA offset) follows the start address and the info byte.
        word = base + fre.offset + (1 << fde.fre_type) + 1
        data = bytearray(source.read_bytes())
        old = fre.words[0]
        data[word:word + 1] = struct.pack("<b", old + 8)
        out.write_bytes(bytes(data))
        return (f"{out.name}: {function} at {fde.start + fre.start:#x}: "
                f"CFA = rsp + {old} changed to rsp + {old + 8}")
    raise SystemExit(f"plant_defect: {source}: no SFrame FDE for {function}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.strip().splitlines()[2].strip())
    print(plant(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
