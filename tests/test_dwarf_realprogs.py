"""Symbol files on real programs (Debian lua5.4 and bzip2 at -O2 -g): a stripped
``.noeh`` binary whose debug information is in a separate debug file (as with
Debian's -dbgsym packages), plus the symbol file ``sframe_core.symfiles.symfile`` makes
from both. Plain gdb and eu-stack, given only the symbol file, show the twin's
frames: same PCs, functions (inlined ones too), files and lines; every
argument either equals the twin's or is unavailable, never another value.

Both programs are copied to paths of the same length, so that the two
processes have the same stack layout and argument values can be compared.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import missing
from helpers.gdbtools import GDBS, Gdb, gdb_version
from helpers.realprogs import PROGRAMS, Program, available, gdb_stops

from sframe_core.symfiles import symfile

pytestmark = [pytest.mark.gdb]

STOPS = {"lua5.4": ("luaT_trybinTM", "luaB_error", "str_find_aux", "auxsort"),
         "bzip2": ("mainGtU", "fallbackSort", "BZ2_hbMakeCodeLengths")}
PRODUCERS = ("bu2.40-v1", "busid-v3")  # SFrame v1 and v3
UNAVAILABLE = ("<optimized out>", "<not saved>", "<unavailable>", "<error reading variable")


class Setup:
    """The twin and the stripped .noeh at same-length paths, and the symbol file."""

    def __init__(self, tmp_path: Path, program: Program, producer: str) -> None:
        if not available():
            pytest.fail("tests/fixtures/realprogs is missing (tests/fixtures/build_realprogs.sh)")
        objcopy = shutil.which("objcopy")
        assert objcopy, "binutils objcopy is needed (scripts/setup.sh installs binutils)"
        self.program = program
        self.twin = tmp_path / "a" / program.name
        self.ours = tmp_path / "b" / program.name
        for src, dst in ((program.path(producer, "twin"), self.twin),
                         (program.path(producer, "noeh.stripped"), self.ours)):
            dst.parent.mkdir()
            shutil.copy(src, dst)
        build_id = symfile.read_module(str(self.ours)).build_id
        assert build_id
        # The distribution's debug file (what -dbgsym installs), under its own root.
        dbgsym = Path(symfile.build_id_path(str(tmp_path / "dbgsym"), build_id))
        dbgsym.parent.mkdir(parents=True)
        subprocess.run([objcopy, "--only-keep-debug", str(program.path(producer, "noeh")),
                        str(dbgsym)], check=True, capture_output=True)
        self.symdir = tmp_path / "sym"
        out = Path(symfile.build_id_path(str(self.symdir), build_id))
        out.parent.mkdir(parents=True)
        made = symfile.write_symbol_file(str(self.ours), str(out),
                                         debug_roots=(str(tmp_path / "dbgsym"),))
        assert made.debug_source == str(dbgsym)
        self.tmp = tmp_path

    def gdb_wrapper(self, gdb: str) -> str:
        """``gdb`` looking for debug files in the symbol file directory only."""
        wrapper = self.tmp / f"gdb-{Path(gdb).name}"
        wrapper.write_text(f'#!/bin/sh\nexec {gdb} -iex "set debug-file-directory '
                           f'{self.symdir}" "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        return str(wrapper)


_LINE = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-f]+) in )?(\S+) \((.*)\)( at \S+| from \S+)?$")


def _split_args(text: str) -> dict[str, str]:
    """``a=1, b=b@entry=0x2, s=0x... "x, y"`` -> {a: 1, b: 0x2, b@entry: 0x2, s: ...}."""
    parts, depth, quote, current = [], 0, False, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quote = not quote
        elif not quote and ch in "(<[{":
            depth += 1
        elif not quote and ch in ")>]}":
            depth -= 1
        if ch == "," and not quote and depth == 0 and text[i:i + 2] == ", ":
            parts.append(current)
            current = ""
            i += 2
            continue
        current += ch
        i += 1
    if current:
        parts.append(current)
    args: dict[str, str] = {}
    for part in parts:
        name, _, value = part.partition("=")
        entry = re.match(r"^(\S+@entry)=(.*)$", value)
        if entry:  # gdb folds "x=V, x@entry=V" into "x=x@entry=V"
            args[entry.group(1)] = value = entry.group(2)
        args[name] = value
    return args


def _frames(text: str) -> list[tuple[str | None, str, str, dict[str, str]]]:
    frames = []
    for line in text.splitlines():
        if not line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, f"unparsed frame line: {line}"
        frames.append((m.group(2), m.group(3), (m.group(5) or "").strip(), _split_args(m.group(4))))
    return frames


def _compare(expected: str, got: str) -> None:
    want, have = _frames(expected), _frames(got)
    assert [f[:3] for f in have] == [f[:3] for f in want], got
    for (pc, name, _, wargs), (_, _, _, hargs) in zip(want, have, strict=True):
        for arg, value in hargs.items():
            if value.startswith(UNAVAILABLE):
                continue
            assert wargs.get(arg) == value, f"{name} at {pc}: {arg}={value}, twin {wargs.get(arg)}"


@pytest.mark.parametrize("gdb_name", ["gdb13", "gdb18"])
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("name", sorted(STOPS))
def test_plain_gdb_keeps_debug_info(name: str, producer: str, gdb_name: str,
                                    tmp_path: Path) -> None:
    gdb = GDBS[gdb_name]
    if gdb_version(gdb) is None:
        missing(f"{gdb_name} not runnable at {gdb}")
    setup = Setup(tmp_path, PROGRAMS[name], producer)
    bps = STOPS[name]
    twin = gdb_stops(gdb, setup.twin, setup.program, breakpoints=bps)
    ours = gdb_stops(setup.gdb_wrapper(gdb), setup.ours, setup.program, breakpoints=bps)
    assert sorted(twin) == sorted(ours) == sorted(bps)
    for bp in bps:
        assert len(twin[bp].frames) >= 8
        _compare(twin[bp].bt_text, ours[bp].bt_text)
    # Without the symbol file the stripped binary has no names at all.
    alone = gdb_stops(gdb, setup.ours, setup.program, breakpoints=bps[:1])
    assert alone == {}, "a stripped binary's functions should not be found by name"


def _core(gdb: str, binary: Path, program: Program, bp: str, core: Path) -> None:
    with Gdb(gdb, plugin=False, args=[str(binary)]) as g:
        g.cmd(f"tbreak {bp}")
        out = g.cmd(program.run_line(), timeout=300)
        assert "Temporary breakpoint" in out, out
        assert "Saved corefile" in g.cmd(f"gcore {core}")


def _eu_stack(core: Path, binary: Path, path: str) -> list[str]:
    eu = shutil.which("eu-stack")
    if eu is None:
        missing("eu-stack not installed (scripts/setup.sh installs elfutils)")
    assert eu is not None
    res = subprocess.run([eu, "-i", "-s", f"--core={core}", "-e", str(binary),
                          f"--debuginfo-path={path}"], capture_output=True, text=True, timeout=300)
    assert "eu-stack:" not in res.stderr, res.stderr
    # Frame lines and their source lines ("    ./lua5.4/src/ldo.c:506:8").
    return [line for line in res.stdout.splitlines() if line.startswith(("#", "    "))]


@pytest.mark.parametrize("producer", PRODUCERS)
def test_eu_stack_keeps_debug_info(producer: str, tmp_path: Path) -> None:
    """eu-stack -i -s on cores: inlined frames and source lines from the debug
    information the symbol file carries, frames to _start as on the twin."""
    gdb = GDBS["gdb13"]
    if gdb_version(gdb) is None:
        missing(f"no gdb at {gdb} to write core files")
    setup = Setup(tmp_path, PROGRAMS["lua5.4"], producer)
    twin_core, our_core = tmp_path / "twin.core", tmp_path / "ours.core"
    _core(gdb, setup.twin, setup.program, "luaB_error", twin_core)
    # The stripped binary's names come from the symbol file.
    _core(setup.gdb_wrapper(gdb), setup.ours, setup.program, "luaB_error", our_core)
    expected = _eu_stack(twin_core, setup.twin, "/usr/lib/debug")
    got = _eu_stack(our_core, setup.ours, f"{setup.symdir}:/usr/lib/debug")
    assert len(expected) > 40 and any(line.startswith("    ./lua5.4/src/ldo.c:")
                                      for line in expected)
    assert [line.replace(str(setup.ours), str(setup.twin)) for line in got] == expected
