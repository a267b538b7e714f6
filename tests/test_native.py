"""The C analysis (sframe_core/analysis/native) gives what the Python one gives.

``native.analyse`` serves an amd64 function in place of ``saved.analyse``
wherever it does not decline, so every answer it gives must be the Python
analysis's, exactly: the spans of rules, the exits with their states (the
``.cold`` parts' entries are made of them), for every amd64 function of the
fixtures (binutils 2.40, 2.44, sid; -O2, -Os, frame pointers, DRAP,
stripped) and of the real programs (lua5.4, bzip2), and, with the CFA rows
of their ``.eh_frame``, every function of the host's libc and loader. The
symbol files come out the same bytes with it and without it.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import FIXTURES, missing, need

from sframe_core.analysis import native, saved
from sframe_core.analysis.section import SectionAnalysis, analysis_of
from sframe_core.base.abi import AMD64
from sframe_core.base.errors import SFrameError
from sframe_core.base.rows import CFARule
from sframe_core.format.elf import read_elf
from sframe_core.format.section import SFrameSection
from sframe_core.symfiles.symfile import symbol_file_bytes

REALPROGS = FIXTURES / "realprogs"


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    if not native.available():
        missing("no native analysis: no C compiler, or capstone's binding without its headers "
                f"(python -m sframe_core.analysis.native says which); {native.ENV}=0 turns it off")


def _amd64_sframe_files() -> Iterator[Path]:
    for root in (FIXTURES / "x86_64", REALPROGS):
        for directory, _, names in os.walk(root):
            for name in sorted(names):
                path = Path(directory) / name
                if path.is_symlink() or not path.is_file():
                    continue
                with open(path, "rb") as stream:
                    if stream.read(4) != b"\x7fELF":
                        continue
                try:
                    found = read_elf(path)
                    section = found.open()
                except SFrameError:
                    continue
                if section is not None and section.arch.name == "amd64":
                    yield path


def _opened(path: Path) -> SFrameSection:
    section = read_elf(path).open(whole=True, analyser=SectionAnalysis)
    assert section is not None
    return section


def test_every_fixture_and_real_program_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each FDE analysed both ways, from the same section rows: where the C
    answers, its answer is the Python's; it answers for most functions."""
    files = list(_amd64_sframe_files())
    assert len(files) >= 20, files
    answered = declined = 0
    for path in files:
        with_c, without = _opened(path), _opened(path)
        analysis_of(with_c).native, analysis_of(without).native = True, False
        for fde in with_c.iter_fdes():
            calls: list[bool] = []
            real = native.analyse

            def counted(*args: object, real=real, calls=calls) -> saved.Analysis | None:
                found = real(*args)  # type: ignore[arg-type]
                calls.append(found is not None)
                return found
            monkeypatch.setattr(native, "analyse", counted)
            got = analysis_of(with_c).rules(fde)
            monkeypatch.setattr(native, "analyse", real)
            want = analysis_of(without).rules(fde)
            assert got == want, (path, hex(fde.start))
            if any(calls):
                answered += 1
            else:
                declined += 1
    assert answered > 10_000 and declined < answered / 5, (answered, declined)


Reader = Callable[[int, int], "bytes | None"]
Rows = list[tuple[int, CFARule | None]]


def _eh_frame_functions(path: Path) -> tuple[Reader, list[tuple[int, bytes, Rows]]]:
    """A reader of an amd64 file's loaded bytes (jump tables), and the
    (start, code, CFA rows) of each of its functions, rows from its ``.eh_frame``."""
    from elftools.elf.elffile import ELFFile

    from sframe_core.dwarf.cfi import CFITable

    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        loaded = [(s["sh_addr"], s["sh_flags"], s.data()) for s in elf.iter_sections()
                  if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & 2]
        spans = [(e.header["initial_location"], e.header["address_range"])
                 for e in elf.get_dwarf_info().EH_CFI_entries() if type(e).__name__ == "FDE"]

    def read(address: int, size: int) -> bytes | None:
        return next((data[address - at:address - at + size] for at, _, data in loaded
                     if at <= address and address + size <= at + len(data)), None)
    table = CFITable(str(path))
    functions = []
    for start, size in spans:
        body = next((data[start - at:start - at + size] for at, flags, data in loaded
                     if flags & 4 and at <= start and start + size <= at + len(data)), None)
        rows = [(row.start, row.cfa) for row in table.fde_rows(start)]
        if body and rows:
            functions.append((start, body, rows))
    return read, functions


@pytest.mark.parametrize("name", ["libc.so.6", "ld-linux-x86-64.so.2"])
def test_every_host_library_function(name: str) -> None:
    """The host's libc and loader (compiled by the distribution, with their
    own idioms), each function from its ``.eh_frame`` CFA rows: where the C
    answers, the Python's answer."""
    path = Path("/lib/x86_64-linux-gnu") / name
    if not path.exists():
        missing(f"{path}: not on this machine")
    answered = 0
    read, functions = _eh_frame_functions(path)
    for start, code, rows in functions:
        starts = [at for at, _ in rows]

        def cfa_at(pc: int, rows=rows, starts=starts) -> CFARule | None:
            k = bisect_right(starts, pc) - 1
            return rows[k][1] if k >= 0 else None
        if cfa_at(start) != saved.entry_cfa(AMD64):
            continue
        got = native.analyse(code, start, rows, read)
        if got is None:
            continue
        answered += 1
        want = saved.analyse(AMD64, code, start, cfa_at, read, rows=rows)
        assert got == want, (name, hex(start))
    assert answered > 100, answered


def test_indirect_jumps_are_declined() -> None:
    """``jmp rax`` (a tail call or a table the C does not read): the Python decides."""
    code = bytes.fromhex("53" "ffe0")  # push rbx; jmp rax
    rows = [(0x1000, CFARule(7, 8)), (0x1001, CFARule(7, 16))]
    assert native.analyse(code, 0x1000, rows) is None
    plain = bytes.fromhex("53" "5b" "c3")  # push rbx; pop rbx; ret
    found = native.analyse(plain, 0x1000, [*rows, (0x1002, CFARule(7, 8))])
    assert found is not None and found == _python(plain, 0x1000, [*rows, (0x1002, CFARule(7, 8))])


def _python(code: bytes, start: int, rows: list[tuple[int, CFARule | None]]) -> saved.Analysis:
    starts = [at for at, _ in rows]
    return saved.analyse(AMD64, code, start, lambda pc: rows[bisect_right(starts, pc) - 1][1],
                         rows=rows)


def test_symbol_files_are_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """lua5.4 -O2 -g (jump tables, ``.cold`` parts): the symbol file with the
    C analysis is the one without it, byte for byte."""
    lua = str(need(REALPROGS / "lua5.4" / "busid-v3" / "lua5.4.noeh"))
    monkeypatch.setenv(native.ENV, "1")
    with_c = symbol_file_bytes(lua)
    monkeypatch.setenv(native.ENV, "0")
    assert symbol_file_bytes(lua) == with_c


def test_a_debugger_process_never_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Inside gdb or LLDB (their module imported) a missing build is not
    made there (a compiler's second at some first frame): the Python serves."""
    import sys
    import types

    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "library_path", lambda: str(tmp_path / "amd64-missing.so"))
    monkeypatch.setattr(native, "build", lambda: pytest.fail("compiled inside a debugger"))
    monkeypatch.setitem(sys.modules, "gdb", types.ModuleType("gdb"))
    assert not native.available()


def test_a_failing_reader_declines_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    """A jump table's reader that raises (a file gone, a bad read) leaves
    nothing on stderr from the ctypes callback: the C declines, and the
    Python analysis meets the reader itself."""
    section = _opened(need(REALPROGS / "lua5.4" / "busid-v3" / "lua5.4.noeh"))
    assert section.code is not None

    def broken(address: int, size: int) -> bytes | None:
        raise OSError("gone")
    asked: list[int] = []

    def counted(address: int, size: int) -> bytes | None:
        assert section.code is not None
        asked.append(address)
        return section.code(address, size)
    for fde in section.iter_fdes():
        code = section.code(fde.start, fde.size)
        rows = [(fde.start + fre.start, section._rules_for(fde, fre).cfa)
                for fre in section.get_fres(fde)]
        if not code or rows[0][1] != saved.entry_cfa(AMD64):
            continue
        asked.clear()
        if native.analyse(code, fde.start, rows, counted) is not None and asked:
            assert native.analyse(code, fde.start, rows, broken) is None
            break
    else:
        pytest.fail("no function of lua5.4 with a jump table the C reads")
    assert capfd.readouterr().err == ""


def test_the_python_values_name_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C is given the Python analysis's values when it is built (not a
    copy of them): changing one changes the flags and so the build's name,
    so a checkout never loads a library made with other values."""
    from sframe_core.analysis import records
    from sframe_core.analysis.native import protocol

    built = native._name()
    assert f"-DSF_MAX_INSNS={records.MAX_INSNS}" in protocol.compile_flags()
    monkeypatch.setattr(records, "MAX_INSNS", records.MAX_INSNS + 1)
    native._name.cache_clear()
    try:
        assert f"-DSF_MAX_INSNS={records.MAX_INSNS}" in protocol.compile_flags()
        assert native._name() != built
    finally:
        monkeypatch.undo()
        native._name.cache_clear()
    assert native._name() == built


def test_the_c_is_not_built_without_the_python_values() -> None:
    """``sframe_native.h`` refuses a build that was not given the values
    (a compiler run by hand), saying how to build it."""
    import shutil
    import subprocess

    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler is not None
    source = Path(native.__file__).with_name("fdes.c")
    done = subprocess.run([compiler, "-fsyntax-only", str(source)], capture_output=True, text=True,
                          check=False)
    assert done.returncode != 0
    assert "python -m sframe_core.analysis.native" in done.stderr


def test_the_mirror_matches_the_library() -> None:
    """The ctypes structs are the C's (their sizes, as the library reports)."""
    from sframe_core.analysis.native import protocol

    assert protocol.declare(native.library())
