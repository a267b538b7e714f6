"""gdb + the plugin on hostile input: mutated ``.sframe`` bytes and smashed stacks.

Mutants: real fixtures whose ``.sframe`` section had bytes changed (a fixed
seed, plus the two that probing found: a changed fixed-offset byte of the
header and FRE start addresses out of order). Whatever the bytes say, gdb
must show no Python exception and no traceback, at most one warning per
objfile, and a backtrace whose frames are the real ones (the twin's, with
``.eh_frame``) up to where it stops.

Smashed stacks (tests/fixtures/src/smash.c): a return address that is no
code ends the backtrace there, with gdb's own corrupt-stack line, not with
frames gdb's heuristics invent from the bad value.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from helpers.gdbtools import Gdb, fixture, parse_bt
from helpers.host_programs import HostProgram, build

from sframe_core.format.elf import read_elf
from sframe_core.format.section import SFrameSection

pytestmark = [pytest.mark.gdb]

X86 = fixture("x86_64")
PRODUCERS = ["bu2.40-v1", "bu2.44-v2", "busid-v3"]
RANDOM_MUTANTS = 8  # per producer, on top of the targeted ones
INNER = "Backtrace stopped: previous frame inner to this frame (corrupt stack?)"
SAME = "Backtrace stopped: previous frame identical to this frame (corrupt stack?)"


def _no_python_errors(text: str) -> None:
    assert "Python Exception" not in text, text
    assert "Traceback" not in text, text
    assert "Error occurred in Python" not in text, text


# -- mutants ---------------------------------------------------------------------


def _section(path: Path) -> tuple[int, bytes, SFrameSection]:
    info = read_elf(str(path))
    assert info.sframe_address is not None
    with open(path, "rb") as stream:
        from elftools.elf.elffile import ELFFile
        offset = ELFFile(stream).get_section_by_name(".sframe")["sh_offset"]
    data = path.read_bytes()
    section = info.open(info.sframe_address)
    return offset, data, section


def _targeted(section: SFrameSection) -> list[tuple[str, dict[int, int]]]:
    """Section offset -> new byte, for the mutations probing found harmful."""
    out = [("fixed RA offset +32", {6: 32}), ("fixed RA offset 0", {6: 0}),
           ("fixed FP offset +40", {5: 40})]
    # FRE start addresses out of order (as probing found: f2's FRE 4 at 0x1e,
    # before FRE 3 at 0x5d), and the second FRE moved past the third.
    for fde in section.iter_fdes():
        fres = section.get_fres(fde)
        if len(fres) >= 5 and fde.fre_type == 0:  # 1-byte start addresses
            out.append((f"FDE {fde.index}: FRE 4 before FRE 3", {fres[4].offset: 0x1E}))
            out.append((f"FDE {fde.index}: FRE 1 after FRE 2", {fres[1].offset: 0xF0}))
            break
    return out


def mutants(tmp: Path) -> list[tuple[str, Path, Path]]:
    """(what, mutant, twin) for each producer's deep.noeh."""
    made = []
    for producer in PRODUCERS:
        source = X86 / producer / "deep.noeh"
        twin = X86 / producer / "deep"
        offset, data, section = _section(source)
        changes = _targeted(section)
        rng = random.Random(f"sframe-mutants-{producer}")
        size = section.header.size
        for n in range(RANDOM_MUTANTS):
            change = {}
            for _ in range(rng.choice((1, 1, 2, 4))):
                change[rng.randrange(size)] = rng.randrange(256)
            changes.append((f"random {n}", change))
        for k, (what, change) in enumerate(changes):
            blob = bytearray(data)
            for where, value in change.items():
                blob[offset + where] = value
            path = tmp / f"{producer}-{k}"
            path.write_bytes(bytes(blob))
            path.chmod(0o755)
            made.append((f"{producer}: {what} {sorted(change.items())}", path, twin))
    return made


def _twin_pcs(g: Gdb, twin: Path) -> list[int | None]:
    g.cmd(f"file {twin}")
    g.cmd("run")
    pcs = [f.pc for f in g.bt()]
    g.cmd("kill")
    return pcs


def test_mutated_sframe(gdb_path: str, tmp_path: Path) -> None:
    """No Python exception whatever the bytes; frames shown are real ones."""
    cases = mutants(tmp_path)
    # The prologue analyzer stays on: what users have.
    with Gdb(gdb_path, disable_prologue=False, args=["-iex", "set startup-with-shell off"]) as g:
        g.cmd("set breakpoint pending on")
        g.cmd("break stop_here")
        twins: dict[Path, list[int | None]] = {}
        for what, mutant, twin in cases:
            if twin not in twins:
                twins[twin] = _twin_pcs(g, twin)
            text = g.cmd(f"file {mutant}") + g.cmd("run")
            first = g.cmd("bt")
            text += first + g.cmd("bt") + g.cmd("info sframe") + g.cmd("sframe lookup $pc")
            for level in range(len(parse_bt(first))):  # the row of every frame shown
                text += g.cmd(f"frame {level}") + g.cmd("info sframe $pc")
            text += g.cmd("kill")
            context = f"{what}:\n{text}"
            _no_python_errors(context)
            assert text.count("warning: sframe: ") <= 1, context
            got = [f.pc for f in parse_bt(first)]
            want = twins[twin]
            # The real frames up to where the backtrace ends: a wrong frame is
            # worse than a stopped backtrace. (gdb shows a frame whose caller
            # it cannot find; where the rows were mutated into a wrong rule,
            # the frame after the last good one can be gdb's guess, marked by
            # gdb's corrupt-stack line.)
            good = 0
            while good < min(len(got), len(want)) and got[good] == want[good]:
                good += 1
            assert good >= 1, context
            if good < len(got):
                assert INNER in first or SAME in first or good == len(got) - 1, context


# -- smashed stacks ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smash(tmp_path_factory: pytest.TempPathFactory) -> HostProgram:
    return build("smash", tmp_path_factory.mktemp("smash"))


@pytest.mark.parametrize("kind", ["stack", "heap", "unmapped", "noncanonical", "low"])
def test_smashed_return_address(gdb_path: str, smash: HostProgram, kind: str) -> None:
    """The Python unwinder (no symbol file yet, or none possible) unwinds inner
    and middle; middle's return address is no code: the backtrace ends there
    with gdb's corrupt-stack line. Through the symbol file gdb's own unwinder
    takes every frame, and the backtrace is the twin's, line for line."""
    with Gdb(gdb_path, disable_prologue=False, symbol_files="off",
             args=["--args", str(smash.noeh), kind]) as g:
        g.cmd("break stop_here")
        g.cmd("run")
        text = g.cmd("bt")
        _no_python_errors(text)
        assert [f.name for f in parse_bt(text)] == ["stop_here", "inner", "middle"], text
        assert text.rstrip().splitlines()[-1] == INNER, text
    _route_equals_twin(gdb_path, smash, [kind], "break stop_here", "run")


def _route_equals_twin(gdb_path: str, smash: HostProgram, args: list[str], *commands: str) -> None:
    """The same session on the twin and on .noeh through the symbol file: the
    same bt. (Both run as ``X/smash`` from one directory, so that their stacks
    lie at the same addresses.)"""
    root = _pair(smash)
    texts = []
    for which in ("twin", "noeh"):
        with Gdb(gdb_path, plugin=which == "noeh", disable_prologue=False, cwd=str(root),
                 args=["--args", f"{which}/smash", *args]) as g:
            for command in commands:
                g.cmd(command)
            text = g.cmd("bt 12")
            _no_python_errors(text)
            texts.append(text.replace("noeh/smash", "twin/smash"))
    assert texts[1] == texts[0], texts


def _pair(smash: HostProgram) -> Path:
    """twin/smash and noeh/smash side by side (same path lengths, same stacks)."""
    root = smash.twin.parent / "pair"
    for which, program in (("twin", smash.twin), ("noeh", smash.noeh)):
        if not (root / which / "smash").exists():
            (root / which).mkdir(parents=True, exist_ok=True)
            shutil.copy(program, root / which / "smash")
    return root


def test_return_address_into_libc(gdb_path: str, smash: HostProgram) -> None:
    """middle's return address overwritten with an address inside libc's
    ``abort``: code with CFI of its own. gdb on the twin goes on from the
    planted frame through libc's CFI into garbage (0x0202... words, then a
    stray ``main``); through the symbol file gdb's own unwinder does exactly
    that, live and from a core: never worse than the twin, and no frame of
    ours. The Python unwinder alone (no symbol file) stops one frame after
    the planted one, where SP no longer grows."""
    _route_equals_twin(gdb_path, smash, ["libc"], "break stop_here", "run")
    root = _pair(smash)
    for which in ("twin", "noeh"):  # each core made by gdb alone
        with Gdb(gdb_path, plugin=False, disable_prologue=False, cwd=str(root),
                 args=["--args", f"{which}/smash", "libc"]) as g:
            g.cmd("break stop_here")
            g.cmd("run")
            assert "Saved corefile" in g.cmd(f"gcore {which}.core")
    texts = []
    for which in ("twin", "noeh"):
        with Gdb(gdb_path, plugin=which == "noeh", disable_prologue=False, cwd=str(root),
                 args=[f"{which}/smash", f"{which}.core"]) as g:
            text = g.cmd("bt 12")
            _no_python_errors(text)
            texts.append(text.replace("noeh/smash", "twin/smash").replace("noeh.core", "twin.core"))
    assert texts[1] == texts[0], texts
    names = [f.name for f in parse_bt(texts[0])]
    assert names[:4] == ["stop_here", "inner", "middle", "__GI_abort"], texts[0]
    with Gdb(gdb_path, disable_prologue=False, symbol_files="off",
             args=["--args", str(smash.noeh), "libc"]) as g:
        g.cmd("break stop_here")
        g.cmd("run")
        text = g.cmd("bt")
        _no_python_errors(text)
        assert [f.name for f in parse_bt(text)] == ["stop_here", "inner", "middle", "__GI_abort",
                                                    "??"], text
        assert text.rstrip().splitlines()[-1] == INNER, text


def test_return_into_the_stack(gdb_path: str, smash: HostProgram) -> None:
    """middle returns through a stack address (SIGSEGV there, frame 0 in the
    stack) with a non-canonical word at SP: the plugin claims frame 0 and
    ends the backtrace; without it GDB's heuristics read garbage frames."""
    with Gdb(gdb_path, plugin=False, disable_prologue=False,
             args=["--args", str(smash.twin), "jump"]) as g:
        g.cmd("run")
        text = g.cmd("bt 4")
        assert [f.pc for f in parse_bt(text)][1:3] == [0x0202020202020202] * 2, text
    with Gdb(gdb_path, disable_prologue=False, symbol_files="off",
             args=["--args", str(smash.noeh), "jump"]) as g:
        g.cmd("run")
        text = g.cmd("bt")
        _no_python_errors(text)
        frames = parse_bt(text)
        assert len(frames) == 1 and frames[0].name == "??", text
        assert text.rstrip().splitlines()[-1] == SAME, text
    _route_equals_twin(gdb_path, smash, ["jump"], "run")


def test_call_through_null_is_left_to_gdb(gdb_path: str, smash: HostProgram) -> None:
    """A call through a null pointer: frame 0 at pc 0, the caller's return
    address at SP. GDB's heuristics find the caller, as they do without the
    plugin on the twin: the plugin leaves frame 0 to them and unwinds on."""
    def frames(program: Path, plugin: bool) -> list[tuple[int | None, str | None]]:
        with Gdb(gdb_path, plugin=plugin, disable_prologue=False,
                 args=["--args", str(program), "call0"]) as g:
            g.cmd("run")
            text = g.cmd("bt")
            _no_python_errors(text)
            return [(f.pc, f.name) for f in parse_bt(text)]

    want = frames(smash.twin, False)
    assert [name for _, name in want][:4] == ["??", "middle", "outer", "main"], want
    assert frames(smash.noeh, True) == want
