"""The analysis results kept across builds (sframe_core/symfiles/analysis_store.py,
sframe_core/analysis/results.py): a rebuilt program's symbol file is the same,
byte for byte, with the store and without it, whatever the store holds.

Programs come from ``bench/bench_scale.py``'s generator (the same functions
as the benchmarks: calls, switch tables, stack buffers, loops), built twice:
build B has one function edited (one more call), so every function after it
has moved and every call across it has a new displacement.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import ROOT, bench_scale

from sframe_core.analysis import native, results, saved
from sframe_core.analysis.saved import Analysis, analyse
from sframe_core.analysis.section import SectionAnalysis
from sframe_core.base.abi import AMD64
from sframe_core.base.rows import CFARule
from sframe_core.cli.commands import main
from sframe_core.format.elf import read_elf
from sframe_core.format.section import SFrameSection
from sframe_core.symfiles import analysis_store, symfile, workers
from sframe_core.symfiles.analysis_store import AnalysisStore

FUNCTIONS = 300  # above analysis_store.MIN_FDES with the chain and main


@pytest.fixture(autouse=True)
def _python_analysis() -> Iterator[None]:
    """The store keeps what the Python analysis makes: the C one
    (``analysis.native``), where it serves, is cheaper than a kept result
    and keeps none, so these tests run without it (a patch of its own: the
    tests' ``monkeypatch.undo()`` leaves it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(native.ENV, "0")
        yield
EDITED = 100
TAG = f"sframe-gdb symbol file {symfile.GENERATOR}"


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(build A, build B): the ``.noeh`` programs, B with f<EDITED> edited."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the generated programs")
    scale = bench_scale()
    base = tmp_path_factory.mktemp("rebuild")
    _, a = scale.build(scale.gen_program(FUNCTIONS, base / "a" / "src"), base / "a" / "prog")
    _, b = scale.build(scale.gen_program(FUNCTIONS, base / "b" / "src", edited=EDITED),
                       base / "b" / "prog")
    return a, b


def _plain(path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        m.setenv(analysis_store.ENV, "0")
        return symfile.symbol_file_bytes(str(path))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the dataflows run (``saved._dataflow``): what the store saves."""
    runs = [0]
    real = saved._dataflow

    def counted(*args: object) -> Analysis:
        runs[0] += 1
        return real(*args)  # type: ignore[arg-type]
    monkeypatch.setattr(saved, "_dataflow", counted)
    return runs


def _store_file(store: Path) -> Path:
    found = [p for p in store.iterdir() if p.name.endswith(analysis_store.SUFFIX)]
    assert len(found) == 1, found
    return found[0]


def test_rebuild_same_bytes_with_and_without_the_store(builds: tuple[Path, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = builds
    module, store = tmp_path / "prog.noeh", tmp_path / "store"
    shutil.copy(a, module)
    plain_a = _plain(module, monkeypatch)
    runs = _counting(monkeypatch)
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_a
    first = runs[0]
    saved_a = _store_file(store).read_bytes()
    assert 0 < first < FUNCTIONS  # functions of one shape share a result within a build too
    # The edit-compile-debug loop: build B at the same path, A's store.
    shutil.copy(b, module)
    plain_b = _plain(module, monkeypatch)
    assert plain_b != plain_a  # the edit moved functions: another file
    runs[0] = 0
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_b
    assert runs[0] < first  # the moved functions reused A's results
    # The store now holds B's results: B again runs no dataflow at all.
    assert _store_file(store).read_bytes() != saved_a
    runs[0] = 0
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_b
    assert runs[0] == 0
    # Back to A with B's store: the same bytes as A without it.
    shutil.copy(a, module)
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_a


def test_workers_use_and_fill_the_store(builds: tuple[Path, Path], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--jobs``: each worker reads the store, the parent writes what they used."""
    a, b = builds
    monkeypatch.setattr(workers, "PARALLEL_MIN_FDES", 64)
    monkeypatch.setattr(workers, "NATIVE_SPLIT_MIN_FDES", 64)
    module, store = tmp_path / "prog.noeh", tmp_path / "store"
    shutil.copy(a, module)
    plain_a = _plain(module, monkeypatch)
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store), jobs=2) == plain_a
    filled = AnalysisStore.load(str(_store_file(store)), TAG)
    assert filled.note == "" and len(filled.kept()[0]) == 0  # nothing used yet in this one
    assert len(filled._loaded) > 0
    shutil.copy(b, module)
    plain_b = _plain(module, monkeypatch)
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store), jobs=2) == plain_b
    # A store filled by workers serves one process alike.
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_b


def _corruptions(data: bytes) -> dict[str, bytes]:
    magic, tag, digest, payload = data.split(b"\n", 3)
    flipped = bytearray(data)
    flipped[-10] ^= 0x40
    import hashlib
    import zlib
    key = b'"' + b"0" * 40 + b'"'
    bad_spans = zlib.compress(b'{"regs":[[]],"results":{' + key + b':[5,2,0]},"masks":{},'
                              b'"reads":{},"states":[],"exits":{}}')
    bad_exit = zlib.compress(b'{"regs":[[]],"results":{' + key + b':[0,2,0]},"masks":{},'
                             b'"reads":{},"states":[],"exits":{' + key + b':[0,7,0]}}')
    bad_state = zlib.compress(b'{"regs":[[]],"results":{},"masks":{},"reads":{},'
                              b'"states":[[0,null,[[null,1,false,null]],null]],"exits":{}}')

    def whole(payload: bytes) -> bytes:
        return b"\n".join((magic, tag, hashlib.sha256(payload).hexdigest().encode(), payload))
    return {
        "truncated": data[: len(data) // 2],
        "one byte flipped": bytes(flipped),
        "garbage": b"\x7fELF" + os.urandom(200),
        "empty": b"",
        "another version": b"\n".join((magic, b"0" * len(tag), digest, payload)),
        # Whole and checksummed, but an entry whose spans go backwards.
        "malformed entry": whole(bad_spans),
        # An exit whose state is not in the table, a state with a number for a flag.
        "malformed exit": whole(bad_exit),
        "malformed state": whole(bad_state),
    }


def test_corrupt_store_is_ignored_and_replaced(builds: tuple[Path, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = builds
    module, store = tmp_path / "prog.noeh", tmp_path / "store"
    shutil.copy(a, module)
    symfile.symbol_file_bytes(str(module), store_dir=str(store))
    path = _store_file(store)
    good = path.read_bytes()
    shutil.copy(b, module)
    plain_b = _plain(module, monkeypatch)
    notes = {}
    for what, data in _corruptions(good).items():
        path.write_bytes(data)
        notes[what] = AnalysisStore.load(str(path), TAG).note
        runs = _counting(monkeypatch)
        assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_b, what
        monkeypatch.undo()
        assert runs[0] > 0, what  # nothing was taken from it
        assert AnalysisStore.load(str(path), TAG).note == "", what  # replaced by a whole one
    assert notes == {"truncated": "checksum mismatch (truncated or corrupt)",
                     "one byte flipped": "checksum mismatch (truncated or corrupt)",
                     "garbage": "not a store file", "empty": "not a store file",
                     "another version": "made by another version",
                     "malformed entry": "malformed entry", "malformed exit": "malformed entry",
                     "malformed state": "malformed states or exits"}


def test_switched_off(builds: tuple[Path, Path], tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """SFRAME_ANALYSIS_CACHE=0: no store read or written; ``sframe cache``
    lists and clears the store files beside the symbol files."""
    a, _ = builds
    cache = tmp_path / "cache"
    monkeypatch.setenv(analysis_store.ENV, "0")
    made = symfile.symbol_file_for(str(a), cache=str(cache))
    assert os.listdir(cache) == [os.path.basename(made.path)]
    monkeypatch.delenv(analysis_store.ENV)
    os.unlink(made.path)
    made = symfile.symbol_file_for(str(a), cache=str(cache))
    kept = analysis_store.store_path(str(cache), str(a))
    assert sorted(os.listdir(cache)) == sorted([os.path.basename(made.path),
                                                os.path.basename(kept)])
    assert os.path.basename(kept).startswith("prog.noeh-") and kept.endswith(".analysis")
    assert main(["cache", "--dir", str(cache)]) == 0
    assert main(["cache", "--clear", "--dir", str(cache)]) == 0
    assert os.listdir(cache) == []


# -- the keys, function by function ------------------------------------------------------


def _functions(path: Path) -> tuple[SFrameSection, dict[str, tuple[int, int]]]:
    """The section (file addresses) and name -> (start, size) of the generated functions."""
    from elftools.elf.elffile import ELFFile

    section = read_elf(str(path)).open()
    assert section is not None
    with open(path, "rb") as stream:
        symtab = ELFFile(stream).get_section_by_name(".symtab")
        spans = {sym.name: (sym["st_value"], sym["st_size"]) for sym in symtab.iter_symbols()
                 if sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"]}
    return section, spans


def _inputs(section: SFrameSection, start: int) -> tuple[bytes, Callable[[int], CFARule | None],
                                                         list[tuple[int, CFARule | None]]]:
    """What ``SectionAnalysis.rules`` hands ``analyse`` for the function at ``start``."""
    from bisect import bisect_right

    from sframe_core.format.errata import correct_cfa
    from sframe_core.format.rules import fre_rules

    fde = section.find_fde(start)
    assert fde is not None and fde.start == start and section.code is not None
    code = section.code(fde.start, fde.size)
    assert code is not None
    rows = [(fde.start + fre.start,
             correct_cfa(section.arch, fde, fre_rules(section.header, fde, fre, section.arch).cfa))
            for fre in section.get_fres(fde)]
    starts = [s for s, _ in rows]

    def cfa_at(pc: int) -> CFARule | None:
        k = bisect_right(starts, pc) - 1
        return rows[k][1] if k >= 0 else None
    return code, cfa_at, rows


class _Dict:
    """A ResultStore in memory."""

    def __init__(self) -> None:
        self.results: dict[bytes, results.Kept] = {}
        self.kinds: dict[bytes, list[results.Masks]] = {}
        self.asked: dict[bytes, list[results.Reads]] = {}
        self.hits = 0

    def get(self, key: bytes) -> results.Kept | None:
        found = self.results.get(key)
        self.hits += found is not None
        return found

    def put(self, key: bytes, spans: results.Kept) -> None:
        self.results[key] = spans

    def masks(self, index: bytes) -> list[results.Masks]:
        return self.kinds.setdefault(index, [])

    def add_masks(self, index: bytes, masks: results.Masks) -> None:
        if masks not in self.masks(index):
            self.masks(index).append(masks)

    def reads(self, key: bytes) -> list[results.Reads]:
        return self.asked.setdefault(key, [])

    def add_reads(self, key: bytes, reads: results.Reads) -> None:
        if reads not in self.reads(key):
            self.reads(key).append(reads)


@pytest.mark.parametrize("name", ["f50", "f200"])
def test_function_reuses_by_its_masked_bytes(builds: tuple[Path, Path], name: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Shape 0 (calls, callee-saved registers live across them). f50 is
    before the edit: it stayed, but its calls to ext (after the edit) have
    new displacements. f200 is after it: it moved with ext, so its bytes are
    the same at another address. Either way B's function takes A's result
    from the masked bytes, without being decoded."""
    a, b = builds
    (sec_a, funcs_a), (sec_b, funcs_b) = _functions(a), _functions(b)
    start_a, start_b = funcs_a[name][0], funcs_b[name][0]
    code_a, cfa_a, rows_a = _inputs(sec_a, start_a)
    code_b, cfa_b, rows_b = _inputs(sec_b, start_b)
    assert len(code_a) == len(code_b)
    if name == "f50":
        assert start_a == start_b and code_a != code_b
    else:
        assert start_a != start_b and code_a == code_b
    fresh_b = analyse(AMD64, code_b, start_b, cfa_b, sec_b.code, rows=rows_b)
    assert fresh_b.spans and fresh_b.note == ""
    store = _Dict()
    from_a = analyse(AMD64, code_a, start_a, cfa_a, sec_a.code, store=store, rows=rows_a)
    assert [(s - start_a, e - start_a, r) for s, e, r in from_a.spans] == \
        [(s - start_b, e - start_b, r) for s, e, r in fresh_b.spans]
    (masks,) = next(m for m in store.kinds.values() if m)
    assert [kind for kind, _, _ in masks] == [1, 1, 1]  # its three calls to ext
    from sframe_core.analysis.decoders import decoder_for

    decoder = decoder_for(AMD64)
    assert decoder is not None

    def no_decoding(*args: object) -> None:
        raise AssertionError("decoded")
    monkeypatch.setattr(decoder, "effects", no_decoding)
    assert analyse(AMD64, code_b, start_b, cfa_b, sec_b.code, store=store, rows=rows_b) == fresh_b
    assert store.hits == 1


def test_call_into_own_function_is_not_reused() -> None:
    """The same bytes but a call's displacement: a call out of the function
    (kept) and one into it (refused): the masked key holds where it goes."""
    # push rbx; call rel32; pop rbx; ret
    def code(rel: int) -> bytes:
        return b"\x53\xe8" + struct.pack("<i", rel) + b"\x5b\xc3"
    start = 0x401000
    rows = [(start, CFARule(7, 8)), (start + 1, CFARule(7, 16)), (start + 7, CFARule(7, 8))]

    def cfa_at(pc: int) -> CFARule | None:
        return [cfa for at, cfa in rows if at <= pc][-1]
    store = _Dict()
    out = analyse(AMD64, code(0x1000), start, cfa_at, store=store, rows=rows)
    assert out.note == "" and out.spans
    inside = analyse(AMD64, code(0), start, cfa_at, store=store, rows=rows)  # calls pop rbx
    assert inside == analyse(AMD64, code(0), start, cfa_at) == \
        Analysis((), f"call at {start + 1:#x} into its own function", ())
    assert store.hits == 0
    # Elsewhere outside: the kept result, moved.
    again = analyse(AMD64, code(-0x5000), start + 0x40, lambda pc: cfa_at(pc - 0x40), store=store,
                    rows=[(at + 0x40, cfa) for at, cfa in rows])
    assert store.hits == 1
    assert again.spans == tuple(s._replace(start=s.start + 0x40, end=s.end + 0x40) for s in out.spans)
    # Its exit (the call, no state: it enters at a function entry) goes where
    # the call now goes, read from the bytes: what the analysis would say.
    assert out.exits == ((start + 6 + 0x1000, None),)
    assert again.exits == ((start + 0x40 + 6 - 0x5000, None),) == \
        analyse(AMD64, code(-0x5000), start + 0x40, lambda pc: cfa_at(pc - 0x40)).exits


def test_jump_tables_are_in_the_key(builds: tuple[Path, Path],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """f101, a switch: what its jump-table reader read is part of the key, so
    a table that says otherwise (same code, other file data) is never given
    A's result; the same table is, without decoding."""
    a, _ = builds
    section, funcs = _functions(a)
    start = funcs["f101"][0]
    code, cfa_at, rows = _inputs(section, start)
    read = section.code
    assert read is not None
    reads: list[tuple[int, int]] = []

    def spy(address: int, size: int) -> bytes | None:
        reads.append((address, size))
        return read(address, size)
    store = _Dict()
    first = analyse(AMD64, code, start, cfa_at, spy, store=store, rows=rows)
    assert reads and first == analyse(AMD64, code, start, cfa_at, read, rows=rows)
    table, size = reads[0]
    # Every entry pointing at the first entry's target: another table.
    entry = read(table, 4)
    assert entry is not None

    def other(address: int, count: int) -> bytes | None:
        return entry * (count // 4) if (address, count) == (table, size) else read(address, count)
    fresh = analyse(AMD64, code, start, cfa_at, other, rows=rows)
    assert fresh != first  # the test tells the two apart
    assert analyse(AMD64, code, start, cfa_at, other, store=store, rows=rows) == fresh
    assert store.hits == 0
    (masks,) = next(m for m in store.kinds.values() if m)
    assert masks[0] == results.INDIRECT and {k for k, _, _ in masks[1:]} <= {1, 2}
    (asked,) = next(r for r in store.asked.values() if r)
    assert asked[0] == (0, table, size)
    # The same table again: the kept result, read again but not decoded.
    from sframe_core.analysis.decoders import decoder_for

    decoder = decoder_for(AMD64)
    assert decoder is not None

    def no_decoding(*args: object) -> None:
        raise AssertionError("decoded")
    monkeypatch.setattr(decoder, "effects", no_decoding)
    reads.clear()
    assert analyse(AMD64, code, start, cfa_at, spy, store=store, rows=rows) == first
    assert store.hits == 1 and reads == [asked[0][1:]] * 1 + [r[1:] for r in asked[1:]]


REAL = ROOT / "tests" / "fixtures"


@pytest.mark.parametrize("program", [
    REAL / "realprogs" / "lua5.4" / "busid-v3" / "lua5.4.noeh",  # amd64: both keys
    REAL / "realprogs-aarch64" / "lua5.4" / "lua5.4.noeh",  # the dataflow's key only
    REAL / "realprogs" / "s390x" / "bzip2" / "bzip2",
], ids=["lua5.4-amd64", "lua5.4-aarch64", "bzip2-s390x"])
def test_real_programs_same_bytes(program: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Real programs of every ABI (computed gotos, jump tables, the s390x and
    aarch64 decoders): the file made with an empty store, and again with the
    store it left, is the file made without one; the second run takes every
    function's result from the store."""
    from helpers import need

    module = need(program)
    monkeypatch.setattr(analysis_store, "MIN_FDES", 0)  # bzip2 has 71 FDEs
    plain = _plain(module, monkeypatch)
    store = tmp_path / "store"
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain
    runs = _counting(monkeypatch)
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain
    assert runs[0] == 0


def test_indirect_jump_reading_nothing_reuses_when_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """An indirect tail call (``jmp rax``: no table, its reader reads nothing)
    in a function that moved and whose call changed: the kept result, from
    the bytes (``UNREAD``), without decoding; one whose reader reads is keyed
    with its address (``INDIRECT``, test_jump_tables_are_in_the_key)."""
    def code(rel: int) -> bytes:
        # push rbx; mov rbx, rdi; call rel32; mov rax, rbx; pop rbx; jmp rax
        return b"\x53\x48\x89\xfb\xe8" + struct.pack("<i", rel) + b"\x48\x89\xd8\x5b\xff\xe0"

    def inputs(start: int) -> tuple[Callable[[int], CFARule | None], list[tuple[int, CFARule | None]]]:
        rows: list[tuple[int, CFARule | None]] = [(start, CFARule(7, 8)), (start + 1, CFARule(7, 16)),
                                                  (start + 13, CFARule(7, 8))]
        return (lambda pc: [cfa for at, cfa in rows if at <= pc][-1]), rows

    def nothing(address: int, size: int) -> bytes | None:
        raise AssertionError("read")
    store = _Dict()
    cfa_at, rows = inputs(0x401000)
    first = analyse(AMD64, code(0x1000), 0x401000, cfa_at, nothing, store=store, rows=rows)
    assert first.note == "" and first.spans
    (masks,) = next(m for m in store.kinds.values() if m)
    assert masks == (results.UNREAD, (1, 4, 5))
    cfa_at, rows = inputs(0x402000)
    fresh = analyse(AMD64, code(-0x3000), 0x402000, cfa_at, nothing, rows=rows)
    from sframe_core.analysis.decoders import decoder_for

    decoder = decoder_for(AMD64)
    assert decoder is not None

    def no_decoding(*args: object) -> None:
        raise AssertionError("decoded")
    monkeypatch.setattr(decoder, "effects", no_decoding)
    assert analyse(AMD64, code(-0x3000), 0x402000, cfa_at, nothing, store=store, rows=rows) == fresh
    assert store.hits == 1


# Four functions whose calls to a cold function gcc -O2 moves into parts of
# their own (f1.cold ... in .text.unlikely); build B inserts a function
# before them, so the hot parts move and the cold parts do not: every jump
# from a hot part into its cold part has a new displacement.
_COLD_SOURCE = r"""
#include <stdio.h>
__attribute__((noinline)) int sink(int x) { return x * 3; }
__attribute__((cold, noinline)) void report(int s, int t) { fprintf(stderr, "%d %d\n", s, t); }
#ifdef EDITED
__attribute__((noinline)) int filler(int x) {
  int r = 0; for (int i = 0; i < x; i++) r += sink(i) * i; return r; }
#endif
#define F(n) __attribute__((noinline)) int f##n(int a, int b) { \
  int s = sink(a); int t = sink(b + n); \
  if (s < 0) { report(s, t); report(t, s); s = sink(s + t); } \
  return s + t + sink(s ^ t); }
F(1) F(2) F(3) F(4)
int main(int argc, char **argv) { return f1(argc, 1) + f2(argc, 2) + f3(argc, 3) + f4(argc, 4); }
"""


def test_cold_parts_moved_against_their_hot_parts(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept function's branches out (what ``parts.py`` proves the parts'
    entries from) go where the new build's bytes say: B with A's store is
    B without it, its four parts entered, and only the new function analysed."""
    import subprocess

    from sframe_core.analysis.parts import Collector, entries
    from sframe_core.dwarf.debug_frame import functions
    from sframe_core.symfiles.elfsyms import executable_sections

    source = tmp_path / "cold.c"
    source.write_text(_COLD_SOURCE)
    builds = []
    for name, flags in (("a", []), ("b", ["-DEDITED"])):
        twin = tmp_path / name
        subprocess.run(["gcc", "-O2", "-g", "-Wa,--gsframe", *flags, str(source), "-o", str(twin)],
                       check=True)
        subprocess.run(["objcopy", "--remove-section", ".eh_frame", "--remove-section",
                        ".eh_frame_hdr", str(twin), f"{twin}.noeh"], check=True)
        builds.append(Path(f"{twin}.noeh"))
    monkeypatch.setattr(analysis_store, "MIN_FDES", 0)
    module, store = tmp_path / "prog.noeh", tmp_path / "store"
    shutil.copy(builds[1], module)
    plain_b = _plain(module, monkeypatch)
    section = read_elf(str(module)).open(analyser=SectionAnalysis)
    assert section is not None
    collector = Collector(section)
    for _ in functions(section, collector.rows):
        pass
    starts = {addr for _, addr, _ in executable_sections(symfile.read_module(str(module)).sections)}
    assert len(entries(section, collector.exits, starts)) == 4
    shutil.copy(builds[0], module)
    symfile.symbol_file_bytes(str(module), store_dir=str(store))
    shutil.copy(builds[1], module)
    runs = _counting(monkeypatch)
    assert symfile.symbol_file_bytes(str(module), store_dir=str(store)) == plain_b
    assert runs[0] == 1  # filler
