"""The GDB adapter's objfile table, parsed from captured output of real GDBs.

``gdb_plugin.objfiles`` does not import ``gdb``: these tests run without one,
on what gdb 13 (Debian 12), 16 (Debian 13), 17 and 18 printed for
``maint info sections`` and ``info proc mappings`` (tests/data/gdb_objfiles,
made by its capture.py): a live process without ``.eh_frame``, its twin with
``.eh_frame``, and the core of a copy without section headers, whose
``.sframe`` only ``PT_GNU_SFRAME`` and the mappings place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, X86, no_section_headers

from gdb_plugin.objfiles import (
    MAPPINGS_COMMAND,
    SECTIONS_COMMAND,
    CommandFailed,
    ObjfileEntry,
    ObjfileTable,
    ObjfileTables,
    parse_mappings,
    segment_candidates,
    segment_entries,
)

DATA = Path(__file__).resolve().parent / "data" / "gdb_objfiles"
CAPTURES = sorted(DATA.glob("*.json"))
GDBS = sorted({p.name.split("-")[0] for p in CAPTURES})

# deep.noeh of bu2.44-v2 as every x86-64 Linux GDB places a PIE: at 0x555555554000.
SFRAME = 0x555555556248
CODE = [(0x555555555000, 0x555555555017), (0x555555555020, 0x5555555550B0),
        (0x5555555550B0, 0x5555555550B8), (0x5555555550C0, 0x5555555554DC),
        (0x5555555554DC, 0x5555555554E5)]
STOP_HERE = 0x5555555552A0


def _capture(name: str, scenario: str, noshdr: Path | None = None) -> dict[str, object]:
    path = DATA / f"{name}-{scenario}.json"
    text = path.read_text().replace("@ROOT@", str(ROOT))
    if noshdr is not None:
        text = text.replace("@NOSHDR@", str(noshdr))
    data: dict[str, object] = json.loads(text)
    return data


def _parse(data: dict[str, object], old: dict[tuple[str, int], ObjfileEntry] | None = None
           ) -> ObjfileTable:
    assert isinstance(data["sections"], str) and isinstance(data["objfiles"], list)
    return ObjfileTable.parse(data["sections"], set(data["objfiles"]), old or {})


def test_every_gdb_is_captured() -> None:
    assert {"gdb13", "gdb16", "gdb17", "gdb18"} <= set(GDBS), GDBS
    for name in GDBS:
        assert {p.name for p in CAPTURES if p.name.startswith(name + "-")} == {
            f"{name}-{s}.json" for s in ("live", "twin", "noshdr-core")}


@pytest.mark.parametrize("name", GDBS)
def test_live_process_without_eh_frame(name: str) -> None:
    data = _capture(name, "live")
    table = _parse(data)
    program = str(X86 / "bu2.44-v2" / "deep.noeh")
    assert [(e.path, e.sframe_address) for e in table.entries] == [(program, SFRAME)]
    entry = table.entries[0]
    assert entry.code == CODE
    assert not entry.has_eh_frame and not entry.has_debug_frame
    assert table.find(STOP_HERE) is entry
    assert table.find(CODE[-1][1]) is None and table.find(SFRAME) is None
    assert table.is_code(STOP_HERE) and not table.is_code(SFRAME) and not table.is_code(0)
    # libc has no .sframe, but its code is code: a return address into it is plausible.
    assert isinstance(data["mappings"], str)
    libc = [m for m in parse_mappings(data["mappings"]) if m.path.endswith("/libc.so.6")]
    assert len(libc) >= 4 and libc[1].file_offset > 0
    inside = libc[1].start + 0x1000
    assert table.is_code(inside) and table.find(inside) is None
    # The table is re-read at every stop: an objfile at the same place keeps its entry.
    again = _parse(data, {(entry.path, entry.sframe_address): entry})
    assert again.entries == [entry]


@pytest.mark.parametrize("name", GDBS)
def test_twin_with_eh_frame(name: str) -> None:
    table = _parse(_capture(name, "twin"))
    assert [e.path for e in table.entries] == [str(X86 / "bu2.44-v2" / "deep")]
    entry = table.entries[0]
    assert entry.has_eh_frame and not entry.has_debug_frame
    assert table.find(STOP_HERE) is entry


@pytest.mark.parametrize("name", GDBS)
def test_mappings(name: str) -> None:
    data = _capture(name, "live")
    assert isinstance(data["mappings"], str)
    program = str(X86 / "bu2.44-v2" / "deep.noeh")
    mine = [(m.start, m.end, m.file_offset) for m in parse_mappings(data["mappings"]) if m.path == program]
    assert mine == [(0x555555554000, 0x555555555000, 0), (0x555555555000, 0x555555556000, 0x1000),
                    (0x555555556000, 0x555555557000, 0x2000), (0x555555557000, 0x555555559000, 0x2000)]


@pytest.mark.parametrize("name", GDBS)
def test_core_of_a_file_without_section_headers(name: str, tmp_path: Path) -> None:
    """GDB lists no section of the file (and the core's own sections belong to
    no objfile): the entry comes from PT_GNU_SFRAME, placed by the core's mappings."""
    noshdr = no_section_headers(X86 / "bu2.44-v2" / "deep.noeh", tmp_path / "deep.noshdr")
    data = _capture(name, "noshdr-core", noshdr)
    table = _parse(data)
    assert table.entries == []
    assert str(noshdr) in data["objfiles"]  # type: ignore[operator]
    cache: set[tuple[str, int]] = set()
    candidates = segment_candidates({str(noshdr), str(X86 / "bu2.44-v2" / "deep")}, cache)
    assert list(candidates) == [str(noshdr)]
    assert len(cache) == 1  # the twin has sections: remembered as "no PT_GNU_SFRAME only"
    assert isinstance(data["mappings"], str)
    extra = segment_entries(candidates, parse_mappings(data["mappings"]), {})
    assert [(e.path, e.sframe_address) for e in extra] == [(str(noshdr), SFRAME)]
    assert extra[0].code == [(0x555555555000, CODE[-1][1])]
    assert not extra[0].has_eh_frame
    full = table.extended(extra)
    assert full.find(STOP_HERE) is extra[0] and full.is_code(STOP_HERE)


class _Objfile:
    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.owner = None


class _Progspace:
    def __init__(self, filenames: list[str]) -> None:
        self._objfiles = [_Objfile(f) for f in filenames]

    def objfiles(self) -> list[_Objfile]:
        return self._objfiles


class _Routes:
    def __init__(self, native: set[str], fallback: bool = False) -> None:
        self.native = native
        self.fallback = fallback

    def native_paths(self, progspace: object) -> set[str]:
        return self.native

    def serves_fallback(self, progspace: object) -> bool:
        return self.fallback


def _tables(data: dict[str, object], ran: list[str], warnings: list[str]) -> ObjfileTables:
    def run(command: str) -> str:
        ran.append(command)
        text = {SECTIONS_COMMAND: data["sections"], MAPPINGS_COMMAND: data["mappings"]}.get(command)
        if not isinstance(text, str):
            raise CommandFailed(f"no output captured for {command!r}")
        return text
    return ObjfileTables(run, warnings.append)


@pytest.mark.parametrize("name", GDBS)
def test_tables_are_read_once_until_stale(name: str) -> None:
    """The table of a program space is read from the commands' output, then
    kept until an event marks it stale; idle where gdb's own unwinder serves
    every objfile with SFrame."""
    data = _capture(name, "live")
    assert isinstance(data["objfiles"], list)
    space = _Progspace(data["objfiles"])
    ran: list[str] = []
    warnings: list[str] = []
    tables = _tables(data, ran, warnings)
    program = str(X86 / "bu2.44-v2" / "deep.noeh")
    tables.read(space, _Routes(set()))
    table = tables.get(space)
    assert table is not None and [e.path for e in table.entries] == [program]
    assert tables.read_in(space) and tables.progspaces() == [space]
    assert space not in tables.idle and ran == [SECTIONS_COMMAND] and not warnings
    tables.read(space, _Routes(set()))
    assert tables.get(space) is table and len(ran) == 1
    tables.mark_stale(space)
    tables.read(space, _Routes({program}))
    assert tables.entries(space) == table.entries and tables.entries(space)[0].native
    assert space in tables.idle and len(ran) == 2
    tables.route_changed(space)
    assert space not in tables.idle
    tables.read(space, _Routes({program}, fallback=True))
    assert space not in tables.idle
    tables.forget(space)
    assert tables.get(space) is None and tables.entries(space) == []


@pytest.mark.parametrize("name", GDBS)
def test_tables_place_a_file_without_section_headers(name: str, tmp_path: Path) -> None:
    noshdr = no_section_headers(X86 / "bu2.44-v2" / "deep.noeh", tmp_path / "deep.noshdr")
    data = _capture(name, "noshdr-core", noshdr)
    assert isinstance(data["objfiles"], list)
    space = _Progspace(data["objfiles"])
    ran: list[str] = []
    tables = _tables(data, ran, [])
    tables.read(space, None)
    assert [(e.path, e.sframe_address) for e in tables.entries(space)] == [(str(noshdr), SFRAME)]
    assert MAPPINGS_COMMAND in ran


def test_tables_warn_when_gdb_cannot_list_sections() -> None:
    warnings: list[str] = []
    tables = _tables({"sections": None, "mappings": None}, [], warnings)
    space = _Progspace(["/bin/true"])
    tables.read(space, None)
    assert tables.get(space) is None
    assert warnings == ["cannot read the section table: no output captured for "
                        f"{SECTIONS_COMMAND!r}"]
