"""A symbol file's FDEs made in C (analysis/native/fdes.c) are the Python's, byte for byte.

``native_fdes`` hands whole FDEs (their ``.debug_frame`` programs, and the
exits ``parts.Collector`` keeps) to the symbol file in place of the
Python's rows and encoder, and the Python makes those it declines. So the
files must be the same bytes with it and without it, and a corrupt section
must fail with the same error: on every amd64 fixture and real program
(binutils 2.40, 2.44, sid; PIE, non-PIE, shared, ``.o``; -O2, -Os, frame
pointers), in worker processes too, and on sections mutated at random.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import FIXTURES, missing, need
from test_native import _amd64_sframe_files

from sframe_core.analysis import native
from sframe_core.analysis.section import SectionAnalysis
from sframe_core.base.errors import SFrameError
from sframe_core.format import SAVED_REGISTERS_ENV
from sframe_core.format.elf import read_elf
from sframe_core.symfiles import native_fdes
from sframe_core.symfiles.symfile import symbol_file_bytes

REALPROGS = FIXTURES / "realprogs"


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    if native.library() is None:
        missing("no native analysis: no C compiler, or capstone's binding without its headers "
                f"(python -m sframe_core.analysis.native says which); {native.ENV}=0 turns it off")


def _both(monkeypatch: pytest.MonkeyPatch, path: Path | str, jobs: int = 1
          ) -> tuple[bytes | str, bytes | str]:
    """(the Python's file or error, the C's)."""
    out: list[bytes | str] = []
    for use in (False, True):
        monkeypatch.setenv(native_fdes.ENV, "1" if use else "0")
        try:
            out.append(symbol_file_bytes(str(path), jobs=jobs))
        except SFrameError as exc:
            out.append(f"error: {exc}")
    return out[0], out[1]


def test_every_amd64_fixture_and_real_program(monkeypatch: pytest.MonkeyPatch) -> None:
    files = list(_amd64_sframe_files())
    assert len(files) > 60
    made = 0
    for path in files:
        python, c = _both(monkeypatch, path)
        assert c == python, path
        made += isinstance(c, bytes)
    assert made > 60


def test_the_c_makes_most_fdes_of_a_real_program() -> None:
    """lua5.4 -O2 -g: the C declines gcc's ``.cold`` parts, functions the
    C analysis declines and PLT entries, and makes the rest."""
    section = read_elf(need(REALPROGS / "lua5.4" / "busid-v3" / "lua5.4.noeh")).open(whole=True,
                                                                                   analyser=SectionAnalysis)
    assert section is not None
    make = native_fdes.fdes_maker(section)
    assert make is not None
    answers = make(range(section.num_fdes))
    declined = sum(answer is None for answer in answers)
    assert 0 < declined < section.num_fdes // 5, (declined, section.num_fdes)
    assert sum(answer is not None and answer[1] is not None for answer in answers) > 0  # exits kept


def test_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split between workers, as LLDB's waited file is: the same bytes."""
    lua = need(REALPROGS / "lua5.4" / "bu2.44-v2" / "lua5.4.noeh")
    python, c = _both(monkeypatch, lua, jobs=2)
    assert c == python
    monkeypatch.setenv(native_fdes.ENV, "1")
    assert symbol_file_bytes(str(lua), jobs=1) == c


@pytest.mark.parametrize(("fixture", "mutants"), [
    ("x86_64/bu2.40-v1/deep.noeh", 120),
    ("x86_64/bu2.44-v2/deep.noeh", 120),
    ("x86_64/bu2.44-v2pcrel/deep.noeh", 60),
    ("x86_64/busid-v3/deep.noeh", 120),
    ("realprogs/bzip2/busid-v3/bzip2.noeh", 40),
])
def test_mutated_sections(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fixture: str,
                          mutants: int) -> None:
    """Bytes of ``.sframe`` changed at random (seeded): the same file, or the
    same error, with the C and without it."""
    source = need(FIXTURES / fixture)
    data = bytearray(source.read_bytes())
    with open(source, "rb") as stream:
        found = ELFFile(stream).get_section_by_name(".sframe")
        assert found is not None
        offset, size = found["sh_offset"], found["sh_size"]
    rng = random.Random(fixture)
    errors = 0
    for k in range(mutants):
        mutant = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 4))):
            at = offset + rng.randrange(size)
            mutant[at] = rng.randrange(256) if rng.random() < 0.7 else mutant[at] ^ (1 << rng.randrange(8))
        path = tmp_path / f"mutant{k}"
        path.write_bytes(mutant)
        os.chmod(path, 0o755)
        python, c = _both(monkeypatch, path)
        assert c == python, (k, python if isinstance(python, str) else "a file",
                             c if isinstance(c, str) else "a file")
        errors += isinstance(c, str)
    assert 0 < errors < mutants  # both kinds were met


def test_without_the_saved_register_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SFRAME_SAVED_REGISTERS=0`` (rows from SFrame alone): the C makes
    those FDEs too, the same bytes."""
    monkeypatch.setenv(SAVED_REGISTERS_ENV, "0")
    for path in (REALPROGS / "lua5.4" / "busid-v3" / "lua5.4.noeh",
                 FIXTURES / "x86_64" / "bu2.40-v1" / "deep.noeh",
                 FIXTURES / "x86_64" / "busid-v3" / "libsf.so.noeh"):
        python, c = _both(monkeypatch, need(path))
        assert isinstance(c, bytes) and c == python, path
