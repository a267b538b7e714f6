"""``.eh_frame_hdr`` lookups (``CFITable``'s fast path) against the full read.

A backtrace asks a few PCs of libc; reading libc's 3,700 FDEs for them was
most of ``sframe backtrace --core``'s time. Through the header's sorted
table one FDE is parsed per function. These tests hold the two ways to the
same answer: the same FDE, hence byte-identical rows, at sampled PCs of
every FDE of real files (the host's libc and loader, the real programs);
and, for headers that lie (a wrong encoding, an unsorted table, an entry
out of range or naming the wrong start, a truncated table), the full read
instead, with the reason kept, never a wrong row and never a traceback; and
a table that leaves FDEs out (GNU ld lists one per start) with those parsed
at once.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import FIXTURES, X86, missing
from helpers.oracle import gdb_run, sframe

from sframe_core.base.errors import FormatError
from sframe_core.dwarf import cfi
from sframe_core.dwarf.cfi import CFITable

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")
LOADER = Path("/lib64/ld-linux-x86-64.so.2")
# Debian's cross libcs (libc6-arm64-cross, libc6-s390x-cross): the other
# ABIs' real .eh_frame_hdr tables, s390x's big-endian.
CROSS = [Path("/usr/aarch64-linux-gnu/lib/libc.so.6"),
         Path("/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1"),
         Path("/usr/s390x-linux-gnu/lib/libc.so.6"),
         Path("/usr/s390x-linux-gnu/lib/ld64.so.1")]
REALPROGS = [FIXTURES / "realprogs" / "lua5.4" / "busid-v3" / "lua5.4",
             FIXTURES / "realprogs" / "bzip2" / "busid-v3" / "bzip2",
             FIXTURES / "realprogs" / "lua5.4" / "bu2.40-v1" / "lua5.4"]
TWIN = X86 / "busid-v3" / "deep"  # the fixture with .eh_frame (and its header)


def _both(path: Path) -> tuple[CFITable, CFITable]:
    """(the full read, the header's table) of one file."""
    full = CFITable(path)
    full._load()
    fast = CFITable(path)
    fast._open()
    return full, fast


def _key(table: CFITable, pc: int) -> object:
    ref = table._find(pc)
    if ref is None:
        return None
    return (ref.start, ref.end, ref.source, ref.entry.offset,
            [(ins.opcode, ins.args) for ins in ref.entry.instructions])


@pytest.mark.parametrize("path", [LIBC, LOADER, *CROSS, *REALPROGS],
                         ids=lambda p: f"{p.parent.parent.name}-{p.name}" if p in CROSS else p.name)
def test_header_lookup_is_the_full_read(path: Path) -> None:
    """At each FDE's first, middle and last byte and just outside it: the same
    FDE, with the same instructions; on every 8th FDE the same rows."""
    if not path.exists():
        missing(f"{path} not present on this host")
    full, fast = _both(path)
    assert fast._hdr is not None, fast.hdr_problem
    fdes = list(full.iter_fdes())
    assert len(fdes) > 50
    for n, ref in enumerate(fdes):
        for pc in (ref.start, (ref.start + ref.end) // 2, ref.end - 1, ref.end, ref.start - 1):
            assert _key(fast, pc) == _key(full, pc), f"{path} at {pc:#x}"
            assert fast.has_fde(pc) == full.has_fde(pc) == (_key(full, pc) is not None)
        if n % 8 == 0:
            mid = (ref.start + ref.end) // 2
            assert fast.fde_rows(mid) == full.fde_rows(mid)
            assert fast.row_at(mid) == full.row_at(mid)
    assert fast._index is None  # served by the header throughout, never the full read
    assert not fast.has_fde(0) and not fast.has_fde(2**63)


@pytest.mark.parametrize("path", [LIBC, LOADER, *CROSS, *REALPROGS, TWIN],
                         ids=lambda p: f"{p.parent.parent.name}-{p.name}" if p in CROSS else p.name)
def test_fde_span_is_what_pyelftools_parses(path: Path) -> None:
    """``cfi.fde_span`` (an FDE's range from its header words: what ``has_fde``
    reads through the table) and ``fde_spans`` (every FDE's, for a module
    with both SFrame and CFI) give every FDE's initial location and address
    range as pyelftools' parse of the whole entry does, and read them all
    (real CIEs: ``zR``, ``zPLR`` with personality routines, ``zRS``)."""
    from io import BytesIO

    from elftools.dwarf.callframe import FDE, CallFrameInfo
    from elftools.dwarf.structs import DWARFStructs

    if not path.exists():
        missing(f"{path} not present on this host")
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        section = elf.get_section_by_name(".eh_frame")
        data, address = section.data(), section["sh_addr"]
        structs = DWARFStructs(little_endian=elf.little_endian, dwarf_format=32,
                               address_size=elf.elfclass // 8)
        big_endian, wide = not elf.little_endian, elf.elfclass == 64
    entries = CallFrameInfo(BytesIO(data), len(data), address, structs,
                            for_eh_frame=True).get_entries()
    encodings: dict[int, int | None] = {}
    fdes = [entry for entry in entries if isinstance(entry, FDE)]
    assert len(fdes) > 5
    want = [(entry.header["initial_location"], entry.header["address_range"]) for entry in fdes]
    for entry, span in zip(fdes, want, strict=True):
        assert cfi.fde_span(data, entry.offset, address, big_endian, wide, encodings) == span, \
            hex(entry.offset)
    # All at once (``fde_spans``: the commonest encoding with one unpack each).
    assert cfi.fde_spans(data, [entry.offset for entry in fdes], address, big_endian, wide,
                         {}) == want


@pytest.mark.parametrize("path", [LIBC, LOADER, *CROSS, *REALPROGS, TWIN],
                         ids=lambda p: f"{p.parent.parent.name}-{p.name}" if p in CROSS else p.name)
def test_uncovered_is_has_fde_of_each(path: Path) -> None:
    """``uncovered`` (every function of a module with both SFrame and CFI
    asked at once: the header's sized starts as a set) names exactly the PCs
    ``has_fde`` refuses, at each FDE's first, middle and last byte, just
    outside it and at an address of none; and on the twin, every SFrame
    function's start is covered."""
    if not path.exists():
        missing(f"{path} not present on this host")
    full, fast = _both(path)
    pcs = [0, 2**63]
    for ref in full.iter_fdes():
        pcs += [ref.start, (ref.start + ref.end) // 2, ref.end - 1, ref.end, ref.start - 1]
    assert list(fast.uncovered(pcs)) == [pc for pc in pcs if not full.has_fde(pc)]
    assert fast._hdr is not None and fast._index is None  # the header served throughout
    if path == TWIN:
        from sframe_core.format.elf import read_elf

        section = read_elf(str(path)).open()
        assert section is not None
        assert list(fast.uncovered(fde.start for fde in section.iter_fdes())) == []


# -- Headers that lie ---------------------------------------------------------------


def _layout(path: Path) -> tuple[int, int, int, int, int]:
    """(.eh_frame_hdr's file offset, its size, its address, .eh_frame's address,
    the file offset of the header's sh_size)."""
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        hdr, eh = elf.get_section_by_name(".eh_frame_hdr"), elf.get_section_by_name(".eh_frame")
        sh_size = (elf["e_shoff"] + elf.get_section_index(".eh_frame_hdr") * elf["e_shentsize"]
                   + 0x20)
        return hdr["sh_offset"], hdr["sh_size"], hdr["sh_addr"], eh["sh_addr"], sh_size


def _lie(path: Path, tmp: Path, how: str) -> Path:
    """A copy of ``path`` whose ``.eh_frame_hdr`` lies as ``how`` says."""
    data = bytearray(path.read_bytes())
    offset, size, _, _, sh_size = _layout(path)
    table = offset + 12  # version, 3 encodings, eh_frame_ptr, fde_count (udata4)
    count = struct.unpack_from("<I", data, offset + 8)[0]
    if how == "version":
        data[offset] = 2
    elif how == "table_encoding":
        data[offset + 3] = 0x1B  # pcrel: not what a binary search takes
    elif how == "indirect_pointer":
        data[offset + 1] = 0x9B
    elif how == "eh_frame_ptr":
        struct.pack_into("<i", data, offset + 4, struct.unpack_from("<i", data, offset + 4)[0] + 8)
    elif how == "count_too_big":
        struct.pack_into("<I", data, offset + 8, 0x7FFFFFFF)
    elif how == "count_one_short":
        struct.pack_into("<I", data, offset + 8, count - 1)
    elif how == "unsorted":
        first, second = data[table:table + 8], data[table + 8:table + 16]
        data[table:table + 8], data[table + 8:table + 16] = second, first
    elif how == "entry_out_of_range":
        struct.pack_into("<i", data, table + 12, 0x7FFFFFF0)  # second entry's FDE pointer
    elif how == "entry_twice":
        data[table + 12:table + 16] = data[table + 4:table + 8]
    elif how == "wrong_start":
        # The last entry's start one byte on: still sorted, its FDE says otherwise.
        last = table + 8 * (count - 1)
        struct.pack_into("<i", data, last, struct.unpack_from("<i", data, last)[0] + 1)
    elif how == "truncated":  # the section ends in the middle of the table
        struct.pack_into("<Q", data, sh_size, 12 + 8 * (count // 2) + 4)
    else:
        raise AssertionError(how)
    out = tmp / f"{path.name}.{how}"
    out.write_bytes(bytes(data))
    return out


LIES = {
    "version": "version 2, not 1",
    "table_encoding": "table encoding 0x1b, not 0x3b",
    "indirect_pointer": "encoding 0x9b not supported",
    "eh_frame_ptr": "eh_frame_ptr 0x{ptr:x} is not .eh_frame's address 0x{eh:x}",
    "count_too_big": "2147483647 table entries do not fit in {size} bytes",
    "unsorted": "table not sorted",
    "entry_out_of_range": "table entry for offset 0x{stray:x} is not an FDE of .eh_frame",
    "entry_twice": "table lists an FDE twice",
    "truncated": "{count} table entries do not fit in {short} bytes",
}


@pytest.mark.parametrize("how", sorted(LIES))
def test_a_lying_header_is_not_used(tmp_path: Path, how: str) -> None:
    """Caught when the table is first read: every row then comes from the full read."""
    lying = _lie(TWIN, tmp_path, how)
    offset, size, address, eh, _ = _layout(TWIN)
    count = struct.unpack_from("<I", TWIN.read_bytes(), offset + 8)[0]
    table = CFITable(lying)
    table._open()
    assert table._hdr is None
    assert table.hdr_problem == LIES[how].format(ptr=eh + 8, eh=eh, size=size, count=count,
                                                 short=12 + 8 * (count // 2) + 4,
                                                 stray=address + 0x7FFFFFF0 - eh)
    honest = CFITable(TWIN)
    for ref in honest.iter_fdes():
        for pc in range(ref.start - 1, ref.end + 1):
            assert table.row_at(pc) == honest.row_at(pc)


def test_fdes_the_table_leaves_out_are_parsed_at_once(tmp_path: Path) -> None:
    """GNU ld lists one FDE per start (the others are of functions folded by
    --icf): those left out are parsed when the table is read and looked up
    as the full read looks them up. Here the table forgets its last entry."""
    lying = _lie(TWIN, tmp_path, "count_one_short")
    table, honest = CFITable(lying), CFITable(TWIN)
    table._open()
    assert table._hdr is not None and table.hdr_problem is None
    fdes = list(honest.iter_fdes())
    assert len(table._hdr.starts) == len(fdes)
    for ref in fdes:
        for pc in range(ref.start - 1, ref.end + 1):
            assert table.row_at(pc) == honest.row_at(pc)
    assert table._index is None


def test_too_many_left_out_is_the_full_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setattr(cfi, "MAX_OMITTED", 0)
    table = CFITable(_lie(TWIN, tmp_path, "count_one_short"))
    table._open()
    assert table._hdr is None and table._index is not None
    count = len(table._index.fdes)
    assert table.hdr_problem == f"table omits 1 of the {count} FDEs"


def test_an_entry_naming_the_wrong_start_is_caught_when_it_is_parsed(tmp_path: Path) -> None:
    lying = _lie(TWIN, tmp_path, "wrong_start")
    table, honest = CFITable(lying), CFITable(TWIN)
    fdes = list(honest.iter_fdes())
    first = fdes[0]
    assert table.row_at(first.start) == honest.row_at(first.start)
    assert table._hdr is not None and table.hdr_problem is None  # the lie not met yet
    last = fdes[-1]
    assert table.row_at(last.start + 1) == honest.row_at(last.start + 1)
    assert table._hdr is None and table._index is not None
    assert table.hdr_problem is not None and table.hdr_problem.startswith(
        f"table entry {len(fdes) - 1} says {last.start + 1:#x}, its FDE at offset ")
    # All starts at once (``uncovered``): the lie is met reading the table, the full read answers.
    starts = [ref.start for ref in fdes] + [last.start + 1]
    every = CFITable(lying)
    assert list(every.uncovered(starts)) == [pc for pc in starts if not honest.has_fde(pc)]
    assert every._hdr is None and every.hdr_problem is not None
    # Asked only whether an FDE is there (its range read alone): caught the same way.
    quick = CFITable(lying)
    assert quick.has_fde(first.start) and quick._hdr is not None
    assert quick.has_fde(last.start + 1) == honest.has_fde(last.start + 1)
    assert quick._hdr is None and quick.hdr_problem == table.hdr_problem


@pytest.fixture(scope="module")
def twin_core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("hdr")
    core = tmp / "deep.core"
    gdb_run(TWIN, ["deep"], tmp, core=core, pcs=False)
    return core


@pytest.mark.gdb
@pytest.mark.parametrize("how", ["table_encoding", "unsorted", "wrong_start", "truncated",
                                 "count_one_short"])
def test_backtrace_through_a_lying_header(tmp_path: Path, twin_core: Path, how: str) -> None:
    """``sframe backtrace --core`` on the executable with a lying header prints
    what it prints with the honest one, byte for byte, and no error."""
    honest = sframe("backtrace", "--core", str(twin_core), "--exe", str(TWIN),
                    "--source", "eh_frame")
    lying = _lie(TWIN, tmp_path, how)
    out = sframe("backtrace", "--core", str(twin_core), "--exe", str(lying),
                 "--source", "eh_frame")
    assert out.stdout == honest.stdout.replace(str(TWIN), str(lying))
    assert " in main+" in honest.stdout and out.stderr == honest.stderr == ""


def test_a_corrupt_fde_spoils_its_own_function_only(tmp_path: Path) -> None:
    """Found through the table, FDEs are parsed one by one, as libgcc parses
    them: an unknown opcode in one is that function's error (one line,
    naming the file), and every other function still has its rows."""
    honest = CFITable(TWIN)
    fdes = list(honest.iter_fdes())
    bad_ref, good = fdes[1], [ref for ref in fdes if ref is not fdes[1]]
    data = bytearray(TWIN.read_bytes())
    with open(TWIN, "rb") as stream:
        eh_offset = ELFFile(stream).get_section_by_name(".eh_frame")["sh_offset"]
    at = eh_offset + bad_ref.entry.offset
    length = struct.unpack_from("<I", data, at)[0]
    data[at + 4 + length - 1] = 0x3F  # the last instruction byte: no such DW_CFA
    broken = tmp_path / "deep"
    broken.write_bytes(bytes(data))
    table = CFITable(broken)
    for ref in good:
        assert table.row_at(ref.start) == honest.row_at(ref.start)
    with pytest.raises(FormatError, match=rf"^{broken}: \.eh_frame: "):
        table.row_at(bad_ref.start)
    assert table._hdr is not None  # still served by the table
