"""``sframe to-dwarf`` for DWARF consumers that know nothing of SFrame: plain gdb
(no plugin: the system gdb, 17 and 18) and elfutils' ``eu-stack``, live and on
core files, find the symbol file by build-id and give the twin's frames.

The twin (same code, with ``.eh_frame``) is unwound by the same tool without
any help; each case also shows the tool alone gets the ``.noeh`` program
wrong, so the symbol file did the work. gdb runs with its amd64 prologue
analyzer disabled (gdb >= 16) so that it cannot hide a missing CFI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import X86, missing, need
from helpers.gdbtools import GDBS, Gdb, gdb_version

from sframe_core.cli.commands import main

pytestmark = [pytest.mark.gdb]

# gdb stops after main; eu-stack goes on to _start: both, on both sides.
CASES = [
    ("bu2.40-v1", "deep", "deep.noeh"),
    ("bu2.44-v2", "deep", "deep.noeh"),
    ("bu2.44-v2pcrel", "deep", "deep.noeh"),
    ("busid-v3", "deep", "deep.noeh"),
    ("busid-v3", "realign", "realign.noeh"),  # DRAP: v3 flexible FDE, dereferenced CFA
    ("bu2.44-v2", "sig", "sig.noeh"),  # through libc's signal trampoline
    ("busid-v3", "uselib", "uselib-libnoeh/uselib"),  # a library without .eh_frame
]


def _debug_dir(tmp_path: Path, *modules: Path) -> str:
    """``sframe to-dwarf --build-id-dir`` for each module; the directory list for gdb."""
    root = tmp_path / "debug"
    for module in modules:
        assert main(["to-dwarf", str(module), "--build-id-dir", str(root)]) == 0
    return f"{root}:/usr/lib/debug"


def _modules(program: Path) -> list[Path]:
    """The program and the libraries beside it that have .sframe (uselib's libsf.so)."""
    libs = [p for p in program.parent.glob("*.so") if p.is_file()]
    return [program, *libs]


_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-f]+) in )?(<signal handler called>|\S+)", re.M)


def _frames(text: str) -> list[tuple[str | None, str]]:
    return [(m.group(2), m.group(3)) for m in _FRAME.finditer(text)]


def _gdb_bt(gdb_path: str, program: Path, *, directory: str | None = None,
            core: Path | None = None, gcore: Path | None = None) -> tuple[str, Gdb]:
    args = ["-iex", f"set debug-file-directory {directory}"] if directory else []
    args.append(str(program))
    if core is not None:
        args.append(str(core))
    g = Gdb(gdb_path, plugin=False, args=args)
    if core is None:
        g.cmd("break stop_here")
        out = g.cmd("run")
        assert "Breakpoint 1," in out, out
        if gcore is not None:
            assert "Saved corefile" in g.cmd(f"gcore {gcore}")
    return g.cmd("bt"), g


@pytest.mark.parametrize(("producer", "twin", "noeh"), CASES,
                         ids=[f"{p}/{n}" for p, _, n in CASES])
def test_plain_gdb(gdb_path: str, producer: str, twin: str, noeh: str, tmp_path: Path) -> None:
    """Live: gdb finds the symbol file through ``debug-file-directory`` and
    unwinds as on the twin; callee-saved registers are what our rows say
    (``_check_saved_registers``), ``<not saved>`` where they have no rule."""
    program = need(X86 / producer / noeh)
    expected, g = _gdb_bt(gdb_path, need(X86 / producer / twin))
    g.close()
    expected_frames = _frames(expected)
    assert len(expected_frames) >= 4
    if gdb_path == GDBS["gdb13"]:  # once is enough to show the fixture needs it
        alone, g = _gdb_bt(gdb_path, program)
        g.close()
        assert _frames(alone) != expected_frames, "the fixture does not need the symbol file"
    text, g = _gdb_bt(gdb_path, program, directory=_debug_dir(tmp_path, *_modules(program)))
    with g:
        assert _frames(text) == expected_frames, text
        assert "Backtrace stopped" not in text
        _check_saved_registers(g)


# amd64 callee-saved registers SFrame does not describe, by DWARF number.
_SAVED = {"rbx": 3, "r12": 12, "r13": 13, "r14": 14, "r15": 15}


def _value(g: Gdb, expression: str) -> str:
    """gdb's answer for ``print/x EXPRESSION``: a hex value or ``<not saved>``."""
    return g.cmd(f"print/x {expression}").strip().split(" = ", 1)[-1]


def _check_saved_registers(g: Gdb) -> None:
    """Frame 2's callee-saved registers come from frame 1's CFI (frame 0 stops
    on a `ret`, where gdb's own amd64 epilogue unwinder answers instead). The
    symbol file says what our rows say (sframe_core.analysis.saved's rules, or
    undefined): where a row has no rule gdb shows ``<not saved>``, never
    another frame's value; a saved slot gives the word at CFA + offset; an
    unchanged register gives frame 1's value."""
    from sframe_core.analysis.section import SectionAnalysis
    from sframe_core.base.rows import RuleKind
    from sframe_core.format.elf import open_sframe

    mappings = g.cmd("info proc mappings")
    g.cmd("frame 1")
    pc = int(_value(g, "$pc"), 16)
    lines = [m.groups() for m in re.finditer(
        r"^\s*(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+(?:\S+\s+)?(/\S+)\s*$",
        mappings, re.M)]
    path = next(obj for lo, hi, obj in lines if int(lo, 16) <= pc < int(hi, 16))
    base = min(int(lo, 16) for lo, _hi, obj in lines if obj == path)
    row = open_sframe(path, analyser=SectionAnalysis).row_at(pc - base - 1)  # a caller: looked up at pc - 1
    assert row is not None
    rules = dict(row.regs)
    inner = {name: _value(g, f"${name}") for name in _SAVED}
    g.cmd("frame 2")
    cfa = int(_value(g, "$sp"), 16)  # amd64: the caller's SP is the CFA
    for name, regno in _SAVED.items():
        got = _value(g, f"${name}")
        rule = rules.get(regno)
        if rule is None:
            assert got == "<not saved>", (name, got)
        elif rule.kind is RuleKind.AT_CFA:
            assert got == _value(g, f"*(unsigned long *)({cfa:#x} + {rule.offset})"), (name, rule)
        else:
            assert rule.kind is RuleKind.SAME_VALUE, (name, rule)
            assert got == inner[name], (name, got, inner[name])


def test_plain_gdb_core_and_add_symbol_file(gdb_path: str, tmp_path: Path) -> None:
    """A core file, with the symbol file found by build-id; and the
    ``add-symbol-file FILE -o BIAS`` route on the live process."""
    producer = "bu2.44-v2"
    program = need(X86 / producer / "deep.noeh")
    expected, g = _gdb_bt(gdb_path, need(X86 / producer / "deep"))
    g.close()
    core = tmp_path / "deep.core"
    alone, g = _gdb_bt(gdb_path, program, gcore=core)
    out = tmp_path / "deep.sym"
    assert main(["to-dwarf", str(program), "-o", str(out)]) == 0
    with g:
        mappings = g.cmd("info proc mappings")
        base = min(int(m.group(1), 16) for m in re.finditer(
            r"^\s*(0x[0-9a-f]+)\s.*deep\.noeh\s*$", mappings, re.M))
        g.cmd(f"add-symbol-file {out} -o {base:#x}")
        assert _frames(g.cmd("bt")) == _frames(expected)
    assert _frames(alone) != _frames(expected)
    text, g = _gdb_bt(gdb_path, program, directory=_debug_dir(tmp_path, program), core=core)
    with g:
        assert _frames(text) == _frames(expected), text


# -- elfutils ----------------------------------------------------------------------------


def _eu_stack() -> str:
    path = shutil.which("eu-stack")
    if path is None:
        missing("eu-stack not installed (scripts/setup.sh installs elfutils)")
    assert path is not None
    return path


def _core(tmp_path: Path, program: Path) -> Path:
    core = tmp_path / f"{program.name}.core"
    gdb = GDBS["gdb13"]
    if gdb_version(gdb) is None:
        missing(f"no gdb at {gdb} to write a core file")
    _, g = _gdb_bt(gdb, program, gcore=core)
    g.close()
    return core


def _eu_frames(core: Path, program: Path, path: str | None = None) -> tuple[list[str], str]:
    args = [_eu_stack(), f"--core={core}", "-e", str(program)]
    if path is not None:
        args.append(f"--debuginfo-path={path}")
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return [line for line in res.stdout.splitlines() if line.startswith("#")], res.stderr


@pytest.mark.parametrize(("producer", "twin", "noeh"), CASES,
                         ids=[f"{p}/{n}" for p, _, n in CASES])
def test_eu_stack_core(producer: str, twin: str, noeh: str, tmp_path: Path) -> None:
    """libdwfl finds the symbol file by build-id under ``--debuginfo-path`` and
    takes the module's CFI from its ``.debug_frame``: the same frames as the
    twin's core, to ``_start``, with no error."""
    _eu_stack()
    program = need(X86 / producer / noeh)
    expected, _ = _eu_frames(_core(tmp_path, need(X86 / producer / twin)),
                             X86 / producer / twin)
    assert len(expected) >= 5 and expected[-1].endswith(" _start"), expected
    core = _core(tmp_path, program)
    alone, _ = _eu_frames(core, program)
    assert alone != expected, "the fixture does not need the symbol file"
    got, err = _eu_frames(core, program, _debug_dir(tmp_path, *_modules(program)))
    assert got == expected, err
    assert "eu-stack:" not in err, err
