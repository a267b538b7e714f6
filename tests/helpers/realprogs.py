"""Real programs from Debian source packages, built at -O2 -g with --gsframe: paths, inputs, stops.

The fixtures under ``tests/fixtures/realprogs/`` (made by
``tests/fixtures/build_realprogs.sh``, see ``tests/fixtures/README.md``) are
lua5.4 and bzip2, each built by binutils 2.40 (SFrame v1), 2.44 (v2) and sid
(v3) at Debian's default -O2 -g flags, plus two sid builds with
``-O2 -fno-omit-frame-pointer`` and ``-Os``. Each build has three files: the
twin (``.eh_frame`` and ``.sframe``), ``.noeh`` (no ``.eh_frame``,
``.eh_frame_hdr`` or ``.debug_frame``; same code at the same addresses) and
``.noeh.stripped``.

Every breakpoint in ``Program.breakpoints`` is a function name; at its FIRST
hit, with the program's ``args``, gdb's backtrace of the twin has at least
``MIN_DEPTH`` frames down to ``main`` on every producer (checked by
tests/test_realprogs.py). Several of them are inlined functions (the
breakpoint stops at an inline site). A test that wants the stops one by one
uses :func:`cases`; gdb's ``run`` line is :meth:`Program.run_line` (the
programs' output goes to /dev/null).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from helpers import FIXTURES, Frame
from helpers.gdbtools import FRAMES_SCRIPT, Gdb, parse_bt, parse_frames

DIR = FIXTURES / "realprogs"

# producer directory -> SFrame version its assembler/linker writes
PRODUCERS = {
    "bu2.40-v1": 1,       # binutils 2.40 (bookworm), -O2 -g
    "bu2.44-v2": 2,       # binutils 2.44 (trixie), -O2 -g
    "busid-v3": 3,        # binutils sid 2.47.50, -O2 -g
    "busid-v3-fp": 3,     # binutils sid, -O2 -g -fno-omit-frame-pointer
    "busid-v3-Os": 3,     # binutils sid, -Os -g
}
# one per SFrame version, at Debian's default -O2
MAIN_PRODUCERS = ("bu2.40-v1", "bu2.44-v2", "busid-v3")
VARIANTS = ("twin", "noeh", "noeh.stripped")
MIN_DEPTH = 8  # frames in gdb's bt (which ends at main) at every breakpoint's first hit



@dataclass(frozen=True, slots=True)
class Program:
    name: str
    args: tuple[str, ...]          # command-line arguments (absolute paths)
    breakpoints: tuple[str, ...]   # functions; each first hit has a deep C stack
    expected: Path                 # what the program writes to stdout with ``args``
    licence: str

    def path(self, producer: str, variant: str = "twin") -> Path:
        """The ELF file of one build: variant is "twin", "noeh" or "noeh.stripped"."""
        if producer not in PRODUCERS or variant not in VARIANTS:
            raise ValueError(f"unknown build {producer}/{variant}")
        suffix = "" if variant == "twin" else "." + variant
        return DIR / self.name / producer / (self.name + suffix)

    def run_line(self) -> str:
        """gdb's ``run`` command for this program (stdout to /dev/null)."""
        return "run " + shlex.join(self.args) + " > /dev/null"


LUA = Program(
    name="lua5.4",
    # -E: ignore LUA_INIT and LUA_PATH, so the environment cannot change the stops
    args=("-E", str(DIR / "lua5.4" / "deep.lua")),
    breakpoints=(
        # startup (lua.c's pmain under lua_pcall): 9-30 frames
        "luaE_extendCI", "luaV_finishget", "luaV_concat", "luaY_parser",
        # deep.lua's outer chain: gsub callback -> sort comparator -> __index
        "str_gsub", "add_value", "luaD_growstack", "auxsort", "sort_comp",
        "luaT_callTMres", "luaB_pcall",
        # innermost(), under 12 levels of pcall: 135-160 frames
        "str_format", "luaL_tolstring", "tconcat", "luaT_trybinTM", "luaT_tryconcatTM",
        "luaD_tryfuncTM", "luaB_error", "luaD_throw", "luaG_typeerror", "str_find_aux",
        "lua_resume", "lua_yieldk", "luaC_fullgc", "luaB_next", "utfchar", "math_floor",
        "luaB_load",
    ),
    expected=DIR / "lua5.4" / "deep.expected",
    licence="MIT (Expat): Lua.org, PUC-Rio; see fixtures/realprogs/lua5.4/COPYRIGHT.debian",
)

BZIP2_INPUT = DIR / "bzip2" / "input.txt"
BZIP2 = Program(
    name="bzip2",
    # -1: 100k blocks, so the 105,043-byte input is one block sorted by mainSort
    # and one of ~5 KB sorted by fallbackSort
    args=("-c", "-1", str(BZIP2_INPUT)),
    breakpoints=(
        "add_pair_to_block", "flush_RL", "BZ2_blockSort", "mainSort", "mainQSort3",
        "mainSimpleSort", "mainGtU", "fallbackSort", "fallbackQSort3", "fallbackSimpleSort",
        "generateMTFValues", "makeMaps_e", "sendMTFValues", "BZ2_hbMakeCodeLengths",
        "BZ2_hbAssignCodes", "bsW", "bsFinishWrite",
    ),
    expected=DIR / "bzip2" / "input.txt.bz2",
    licence="BSD-style (bzip2 licence): Julian Seward; see fixtures/realprogs/bzip2/LICENSE",
)

PROGRAMS = {p.name: p for p in (LUA, BZIP2)}


class Case(NamedTuple):
    """One deep stop: run ``program`` with its args, break at ``breakpoint``'s first hit."""
    program: Program
    producer: str
    breakpoint: str

    @property
    def twin(self) -> Path:
        return self.program.path(self.producer, "twin")

    @property
    def noeh(self) -> Path:
        return self.program.path(self.producer, "noeh")

    @property
    def stripped(self) -> Path:
        return self.program.path(self.producer, "noeh.stripped")

    @property
    def args(self) -> tuple[str, ...]:
        return self.program.args

    @property
    def id(self) -> str:
        return f"{self.program.name}-{self.producer}-{self.breakpoint}"


def cases(programs: Iterable[str] = tuple(PROGRAMS),
          producers: Iterable[str] = MAIN_PRODUCERS) -> Iterator[Case]:
    """Every (program, producer, breakpoint), programs and producers in the given order."""
    for name in programs:
        program = PROGRAMS[name]
        for producer in producers:
            for bp in program.breakpoints:
                yield Case(program, producer, bp)


def builds(programs: Iterable[str] = tuple(PROGRAMS),
           producers: Iterable[str] = tuple(PRODUCERS)) -> Iterator[tuple[Program, str]]:
    """Every (program, producer) build."""
    for name in programs:
        for producer in producers:
            yield PROGRAMS[name], producer


def available() -> bool:
    """True when the committed fixtures are present (MANIFEST.json)."""
    return (DIR / "MANIFEST.json").exists()


class Stop(NamedTuple):
    """gdb's view at one breakpoint's first hit."""
    breakpoint: str
    bt_text: str
    frames: list[Frame]
    extra: str  # output of gdb_stops' ``extra`` command at this stop ("" without one)


_TBREAK = re.compile(r"Temporary breakpoint (\d+) at ")
_STOPPED = re.compile(r"^Temporary breakpoint \d+(?:\.\d+)?, ", re.M)
_LIVE = re.compile(r"^(\d+)\s+breakpoint\s", re.M)
# a location line of `info breakpoints` (one per location of a multi-location breakpoint)
_ADDRESS = re.compile(r"\s(0x[0-9a-f]+)\s+in\s")


def breakpoint_offsets(gdb: str, twin: Path, program: Program,
                       breakpoints: Iterable[str] | None = None) -> dict[str, list[int]]:
    """Where gdb puts each breakpoint in ``twin`` (file offsets from the load
    base, every location of inlined functions), for the stripped variant, which
    has no names: ``gdb_stops(..., at=...)`` breaks there."""
    bps = list(program.breakpoints if breakpoints is None else breakpoints)
    out: dict[str, list[int]] = {}
    with Gdb(gdb, plugin=False, args=[str(twin)]) as g:
        for bp in bps:
            g.cmd(f"tbreak {bp}")
            text = g.cmd("info breakpoints")
            g.cmd("delete")
            out[bp] = [int(a, 16) for a in _ADDRESS.findall(text)]
    return out


def gdb_stops(gdb: str, binary: Path, program: Program, *, plugin: bool = False,
              breakpoints: Iterable[str] | None = None, extra: str | None = None,
              at: dict[str, list[int]] | None = None, prologue_analyzer: bool = False,
              timeout: float = 300, symbol_files: str = "foreground") -> dict[str, Stop]:
    """Run ``binary`` under one gdb with a ``tbreak`` on every breakpoint; ``bt`` at each stop.

    One session for all stops (a session per stop costs a gdb start each).
    Each tbreak is deleted when hit, so every stop is that function's first hit,
    as in a session with only that breakpoint; tbreaks that share a PC (an
    inline site at a function's start) are all hit by the same stop. A
    breakpoint missing from the result was never hit or could not be set.
    ``extra``: one more gdb command run at each stop (e.g. ``info registers``).
    ``at``: break at these offsets from the load base instead of at names
    (from :func:`breakpoint_offsets`; for ``.noeh.stripped``).
    ``prologue_analyzer``: leave gdb >= 16's amd64 prologue analyzer on, as a
    user has it (by default it is off, so that it cannot hide an unwinder failure).
    ``symbol_files``: the plugin's ``set sframe symbol-files`` (``off``: the
    Python unwinder alone, as while a large module's symbol file is made).
    """
    bps = list(program.breakpoints if breakpoints is None else breakpoints)
    stops: dict[str, Stop] = {}
    with Gdb(gdb, plugin=plugin, args=[str(binary)], disable_prologue=not prologue_analyzer,
             symbol_files=symbol_files) as g:
        numbers: dict[int, str] = {}
        start = program.run_line()
        if at is not None:
            g.cmd("starti" + start[len("run"):], timeout=timeout)
            base = _load_base(g.cmd("info proc mappings"), binary)
            for bp in bps:
                for off in at.get(bp, []):
                    m = _TBREAK.search(g.cmd(f"tbreak *{base + off:#x}"))
                    if m:
                        numbers[int(m.group(1))] = bp
            start = "continue"
        else:
            for bp in bps:
                m = _TBREAK.search(g.cmd(f"tbreak {bp}"))
                if m:
                    numbers[int(m.group(1))] = bp
        out = g.cmd(start, timeout=timeout)
        while _STOPPED.search(out):
            live = {int(n) for n in _LIVE.findall(g.cmd("info breakpoints"))}
            text = g.cmd("bt", timeout=timeout)
            more = g.cmd(extra, timeout=timeout) if extra else ""
            for n, bp in numbers.items():
                if n not in live and bp not in stops:
                    stops[bp] = Stop(bp, text, parse_bt(text), more)
            out = g.cmd("continue", timeout=timeout)
    return stops


def _load_base(mappings: str, binary: Path) -> int:
    starts = [int(line.split()[0], 16) for line in mappings.splitlines()
              if line.strip().endswith(str(binary)) and line.split()[0].startswith("0x")]
    if not starts:
        raise AssertionError(f"{binary} not in the process's mappings:\n{mappings}")
    return min(starts)


# gdb command printing every frame (the suite's one frame dumper)
FRAME_LIST = f"source {FRAMES_SCRIPT}"


def frame_list(stop: Stop) -> list[str]:
    """The frames FRAME_LIST printed at ``stop`` as "PC:NAME[:inline|:tailcall]"
    (an inline frame has the pc of the frame it is inlined in), then "END:why"
    when the walk ended on an error."""
    dumps = parse_frames(stop.extra)
    if not dumps:
        return ["NO-OUTPUT"]
    d = dumps[0]
    out = [f"{f.pc:x}:{f.name}" + ("" if kind == "real" else ":" + kind)
           for f, kind in zip(d.frames, d.kinds, strict=True)]
    if d.end.startswith("error"):
        out.append("END:" + d.end.replace(" ", "_"))
    return out


def no_tailcall(frames: list[str]) -> list[str]:
    """gdb's DWARF unwinder adds TAILCALL_FRAMEs from DW_TAG_call_site info (a
    function that was left by a tail jump); no Python unwinder can make them."""
    return [f for f in frames if not f.endswith(":tailcall")]


def physical_pcs(frames: list[str]) -> list[str]:
    """The pcs of real frames (no inline or tailcall frames): all a stripped file can show."""
    return [f.split(":")[0] for f in frames if not f.endswith((":tailcall", ":inline"))]
