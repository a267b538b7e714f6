"""``sframe_core.symfiles.module_copy``: a module copy whose .debug_frame says what .sframe says.

What LLDB before 22 is given as the module itself (``sframe create``, the
locate-module callback): every byte of the original where it was, the same
build-id and program headers, the symbol file's .debug_frame appended.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import without_eh_frame

from sframe_core.base.errors import SFrameError
from sframe_core.symfiles.module_copy import module_with_debug_frame


@pytest.fixture
def noeh(host_sframe_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "prog"
    return without_eh_frame(host_sframe_binary, out)


def _sections(path: Path) -> dict[str, tuple[int, int, int, bytes]]:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        return {s.name: (s["sh_addr"], s["sh_offset"], s["sh_size"], s.data()
                         if s["sh_type"] != "SHT_NOBITS" else b"")
                for s in elf.iter_sections() if s.name}


def _segments(path: Path) -> list[tuple[int, int, int]]:
    with open(path, "rb") as stream:
        return [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in ELFFile(stream).iter_segments()]


def test_copy_keeps_the_module_and_adds_the_rows(noeh: Path) -> None:
    copy = Path(module_with_debug_frame(str(noeh)))
    assert copy.name == noeh.name
    original, copied = noeh.read_bytes(), copy.read_bytes()
    # Only the ELF header's section-table fields differ in the original's span.
    changed = [i for i, (a, b) in enumerate(zip(original, copied[:len(original)], strict=True)) if a != b]
    assert changed and all(0x28 <= i < 0x30 or 0x3C <= i < 0x3E for i in changed), changed
    before, after = _sections(noeh), _sections(copy)
    assert {k: v for k, v in after.items() if k not in (".debug_frame", ".shstrtab")} == \
        {k: v for k, v in before.items() if k != ".shstrtab"}
    assert _segments(copy) == _segments(noeh)
    assert after[".debug_frame"][3], "no rows"
    if shutil.which("readelf"):
        frames = subprocess.run(["readelf", "--debug-dump=frames", str(copy)], capture_output=True,
                                text=True, check=True).stdout
        assert "FDE" in frames
    # Made once: the second call finds it.
    assert module_with_debug_frame(str(noeh)) == str(copy)


def test_a_module_with_debug_frame_is_refused(noeh: Path, tmp_path: Path) -> None:
    copy = module_with_debug_frame(str(noeh))
    again = tmp_path / "again"
    shutil.copy(copy, again)
    with pytest.raises(SFrameError, match="has a .debug_frame already"):
        module_with_debug_frame(str(again))
