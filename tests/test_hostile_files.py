"""Files that lie: headers claiming more than the file holds, odd entry sizes,
FIFOs and devices where a file was expected.

Every case is a real fixture with one header field changed (or a FIFO named
where a file goes), run through the ``sframe`` command: it must fail at once
with one line naming the file and the lie, exit 1, in bounded memory.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, X86
from helpers.oracle import one_line_error

from sframe_core.base.files import MAX_SECTION_SIZE

DEEP = X86 / "bu2.40-v1" / "deep.noeh"
V3 = X86 / "busid-v3" / "deep.noeh"


def _section_header(path: Path, name: str) -> tuple[int, int]:
    """(file offset of section ``name``'s header, its index), from the ELF64 headers."""
    data = path.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x3C)
    str_off, = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 0x18)
    for index in range(shnum):
        at = shoff + index * 64
        start = str_off + struct.unpack_from("<I", data, at)[0]
        if data[start: data.index(b"\0", start)].decode() == name:
            return at, index
    raise AssertionError(f"{path} has no {name}")


def _mutated(tmp: Path, source: Path, at: int, fmt: str, value: int) -> Path:
    """A copy of ``source`` with ``value`` packed at file offset ``at``."""
    out = tmp / source.name
    data = bytearray(source.read_bytes())
    struct.pack_into(fmt, data, at, value)
    out.write_bytes(bytes(data))
    return out


def _patched(tmp: Path, source: Path, section: str, field: int, fmt: str, value: int) -> Path:
    return _mutated(tmp, source, _section_header(source, section)[0] + field, fmt, value)


SH_OFFSET, SH_SIZE, SH_ENTSIZE = 0x18, 0x20, 0x38


@pytest.mark.parametrize("size", [(1 << 63) - 1, 1 << 32, 1 << 20])
@pytest.mark.parametrize("command", [["dump"], ["lookup", "0x1139"], ["dump", "--json"]])
def test_sframe_size_past_the_end(tmp_path: Path, size: int, command: list[str]) -> None:
    path = _patched(tmp_path, DEEP, ".sframe", SH_SIZE, "<Q", size)
    _, index = _section_header(DEEP, ".sframe")
    file_size = path.stat().st_size
    offset = struct.unpack_from("<Q", path.read_bytes(), _section_header(DEEP, ".sframe")[0]
                                + SH_OFFSET)[0]
    assert one_line_error(command[0], str(path), *command[1:]) == (
        f"sframe: {path}: section {index} (.sframe) claims {size} bytes at offset {offset:#x}, "
        f"past the end of the {file_size}-byte file")


def test_sframe_offset_past_the_end(tmp_path: Path) -> None:
    path = _patched(tmp_path, V3, ".sframe", SH_OFFSET, "<Q", 1 << 40)
    _, index = _section_header(V3, ".sframe")
    assert one_line_error("dump", str(path)).startswith(
        f"sframe: {path}: section {index} (.sframe) claims ")


def test_sframe_larger_than_any_real_section(tmp_path: Path) -> None:
    """A sparse file really that large: the size fits the file, still no 4 GiB read."""
    path = _patched(tmp_path, DEEP, ".sframe", SH_SIZE, "<Q", 1 << 32)
    at, _ = _section_header(DEEP, ".sframe")
    offset = struct.unpack_from("<Q", path.read_bytes(), at + SH_OFFSET)[0]
    with open(path, "r+b") as stream:
        stream.truncate(offset + (1 << 32) + 4096)  # sparse: no disk used
    assert one_line_error("dump", str(path)) == (
        f"sframe: {path}: .sframe claims {1 << 32} bytes, more than any SFrame section "
        f"(limit {MAX_SECTION_SIZE >> 20} MiB)")


def test_section_headers_past_the_end(tmp_path: Path) -> None:
    path = _mutated(tmp_path, DEEP, 0x3C, "<H", 0xFFF0)  # e_shnum
    shoff = struct.unpack_from("<Q", DEEP.read_bytes(), 0x28)[0]
    assert one_line_error("dump", str(path)) == (
        f"sframe: {path}: 65520 section headers at offset {shoff:#x} run past the end of "
        f"the {DEEP.stat().st_size}-byte file (e_shnum)")


def test_program_header_past_the_end(tmp_path: Path) -> None:
    phoff = struct.unpack_from("<Q", DEEP.read_bytes(), 0x20)[0]
    path = _mutated(tmp_path, DEEP, phoff + 0x20, "<Q", 1 << 62)  # p_filesz of header 0
    assert one_line_error("dump", str(path)).startswith(
        f"sframe: {path}: program header 0 claims {1 << 62} bytes at offset ")


@pytest.mark.parametrize("entsize", [1, 0, 48])
def test_symtab_entry_size(tmp_path: Path, entsize: int) -> None:
    path = _patched(tmp_path, DEEP, ".symtab", SH_ENTSIZE, "<Q", entsize)
    assert one_line_error("dump", str(path)) == (
        f"sframe: {path}: symbol table .symtab has entry size {entsize}, not 24 (sh_entsize)")


def test_symtab_entry_size_as_backtrace_exe(tmp_path: Path) -> None:
    """``--exe`` names the file: its lie is the command's error, before any core is read."""
    path = _patched(tmp_path, DEEP, ".symtab", SH_ENTSIZE, "<Q", 1)
    core = X86 / "bu2.40-v1" / "deep.noeh"  # never read: the executable is checked first
    assert one_line_error("backtrace", "--core", str(core), "--exe", str(path)) == (
        f"sframe: {path}: symbol table .symtab has entry size 1, not 24 (sh_entsize)")


@pytest.mark.parametrize(("at", "fmt", "value"), [
    (0x3C, "<H", 0xFFF0),  # e_shnum
    (0x3A, "<H", 40),  # e_shentsize
    (0x40 + 0x20, "<Q", 1 << 62),  # p_filesz of program header 0
    (5, "B", 3),  # the data encoding
])
def test_symbol_files_say_what_dump_says(tmp_path: Path, at: int, fmt: str, value: int) -> None:
    """One reader of ELF headers: ``sframe to-dwarf`` (and the debuggers'
    symbol files, ``read_module``) refuse a lying header in ``dump``'s words."""
    from sframe_core.base.errors import FileError
    from sframe_core.symfiles.module_headers import read_module

    path = _mutated(tmp_path, DEEP, at, fmt, value)
    said = one_line_error("dump", str(path))
    assert one_line_error("to-dwarf", str(path), "-o", str(tmp_path / "out.debug")) == said
    with pytest.raises(FileError) as caught:
        read_module(str(path))
    assert f"sframe: {caught.value}" == said


# -- not regular files --------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _fails_at_once(*args: str) -> str:
    """One line, exit 1, well before the timeout a blocked read would hit."""
    out = subprocess.run([sys.executable, "-m", "sframe_core", *args], capture_output=True,
                         text=True, timeout=60, check=False, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)
    assert out.returncode == 1, out
    assert len(out.stderr.splitlines()) == 1, out.stderr
    return out.stderr.rstrip("\n")


@pytest.mark.parametrize("args", [["dump", "{}"], ["lookup", "{}", "0x1000"],
                                  ["dump", "--raw", "{}"], ["lookup", "--raw", "{}", "0"],
                                  ["backtrace", "--core", "{}"]])
def test_fifo_is_refused(fifo: Path, args: list[str]) -> None:
    argv = [a.format(fifo) for a in args]
    assert _fails_at_once(*argv) == f"sframe: {fifo}: not a regular file (a FIFO)"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_raw_device_is_refused(device: str) -> None:
    assert _fails_at_once("dump", "--raw", device) == \
        f"sframe: {device}: not a regular file (a character device)"


def test_raw_blob_larger_than_any_section(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    with open(blob, "wb") as stream:
        stream.truncate(MAX_SECTION_SIZE + 1)  # sparse
    assert _fails_at_once("dump", "--raw", str(blob)) == (
        f"sframe: {blob}: {MAX_SECTION_SIZE + 1} bytes, larger than any SFrame section "
        f"(limit {MAX_SECTION_SIZE >> 20} MiB)")


def test_directory_is_refused(tmp_path: Path) -> None:
    assert _fails_at_once("dump", str(tmp_path)) == \
        f"sframe: {tmp_path}: not a regular file (a directory)"
