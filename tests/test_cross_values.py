"""Callee-saved registers and caller-frame variables on aarch64 real code, under qemu-user.

lua5.4 cross-built at -O2 -g (tests/fixtures/build_realprogs_aarch64.sh,
static, SFrame v3) runs deep.lua under ``qemu-aarch64 -g``; gdb attaches,
stops at a function deep in the interpreter and dumps every frame's x19-x28,
d8-d15 and variables (tests/helpers/gdb_values.py). What the plugin shows
must equal what gdb's own ``.eh_frame`` unwinder shows, or be unavailable;
never a different value:

- same process: the twin with the plugin, ``set sframe mode off`` (gdb's
  DWARF unwinder) against ``set sframe mode always`` (SFrame + the code
  analysis), with gdb-multiarch (13) and gdb 18;
- jump tables: every indirect jump the analysis resolves
  (``aarch64.aarch64_jump_tables``: switch tables, ``luaV_execute``'s computed
  gotos) is watched while lua runs: each jump taken lands on one of the
  targets read from the file (an independent check of what the static proof
  in tests/test_saved.py takes from the same function);
- stepping: ``nexti`` through every instruction of ``sort_comp`` (saves,
  restores, epilogue), the same comparison at each;
- two processes: ``.noeh`` + plugin against the twin without it (copies at
  paths of the same length, so the guest stacks lie at the same addresses;
  lua's string-hash seed comes from time(), which none of the values at
  these stops depends on).

d8-d15 are gdb pseudo registers (views of v8-v15) that a Python unwinder
cannot hand (gdb_plugin/unwinder.py): always unavailable on our side.
About 3 s per session, 1 min in all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import DEBUGGERS, FIXTURES
from helpers.gdbtools import VALUES_SCRIPT, FrameValues, parse_values
from helpers.qemutools import GDB_PLUGIN, QemuStub, missing, repro, run, tool

from sframe_core.analysis.aarch64 import aarch64_jump_tables
from sframe_core.analysis.decoders import decoder_for
from sframe_core.analysis.effects import Flow
from sframe_core.format.elf import read_elf

pytestmark = [pytest.mark.gdb, pytest.mark.slow]

LUA = FIXTURES / "realprogs-aarch64" / "lua5.4" / "lua5.4"
SCRIPT = FIXTURES / "realprogs" / "lua5.4" / "deep.lua"
JUMPS_SCRIPT = Path(__file__).resolve().parent / "helpers" / "gdb_jumps.py"
UNAVAILABLE = "<unavailable>"
MARK = "==SFRAME-MODE-ALWAYS=="
DEPTH = 14  # frames dumped per stop
# deep stops: 12+ C frames of interpreter code (luaV_execute, luaD_*, lua_*, lib functions)
STOPS = ["luaD_growstack", "sort_comp", "str_gsub"]


def _gdb(name: str) -> str:
    if name == "gdb-multiarch":
        return tool("gdb-multiarch")
    path = DEBUGGERS / name
    if not path.is_file():
        missing(f"{path} not found (scripts/setup.sh installs it)")
    return str(path)


def _session(gdb: str, exe: Path, workdir: Path, breakpoint: str, *, plugin: bool,
             both_modes: bool = False, analysis: bool = True) -> tuple[str, str]:
    """(gdb's output, how to rerun it): ``exe deep.lua`` under qemu, stopped at
    ``breakpoint``'s first hit, values dumped (twice with ``both_modes``)."""
    shutil.copy2(SCRIPT, workdir / "deep.lua")
    stub = QemuStub("aarch64", exe, ["-E", "deep.lua"], cwd=workdir, same_layout=True).start()
    dump = ["-ex", f"source {VALUES_SCRIPT}"]
    cmd = [gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off",
           "-ex", "set pagination off", "-ex", "set confirm off"]
    if plugin:
        cmd += ["-ex", f"source {GDB_PLUGIN}"]
    cmd += ["-ex", f"target remote 127.0.0.1:{stub.port}", "-ex", f"tbreak {breakpoint}",
            "-ex", "continue", "-ex", f"set $values_depth = {DEPTH}"]
    if both_modes:
        cmd += ["-ex", "set sframe mode off", "-ex", "maint flush register-cache", *dump,
                "-ex", f"echo {MARK}\\n", "-ex", "set sframe mode always",
                "-ex", "maint flush register-cache"]
    cmd += [*dump, "-ex", "kill", str(exe)]
    try:
        # The control: SFrame's CFA/RA/FP rules only, by the Python unwinder.
        env = dict(os.environ, SFRAME_GDB_SYMBOL_FILES="off",
                   SFRAME_SAVED_REGISTERS="0") if not analysis else None
        proc = run(cmd, cwd=workdir, timeout=120, env=env)
    finally:
        stub.close()
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "Python Exception" not in out, out[-3000:]
    assert re.search(r"Temporary breakpoint 1(\.\d+)?, ", out), out[-3000:]
    return proc.stdout, f"{stub.command} &  {repro(cmd, workdir)}"


def _compare(native: list[FrameValues], ours: list[FrameValues], where: str) -> tuple[int, int]:
    """(values gdb's own unwinder shows in caller frames, of which ours shows too,
    d8-d15 left out); fails on any different value."""
    assert [(f.pc, f.name) for f in ours] == [(f.pc, f.name) for f in native], where
    shown = same = 0
    for theirs, mine in zip(native[1:], ours[1:], strict=True):
        for key, value in theirs.items.items():
            if value == UNAVAILABLE:
                continue
            got = mine.items.get(key, UNAVAILABLE)
            assert got in (value, UNAVAILABLE), (
                f"{where}: frame {theirs.level} ({theirs.name}): {key} = {got}, "
                f"gdb's .eh_frame unwinder says {value}")
            if key.startswith("REG d"):
                continue
            shown += 1
            same += got == value
    return shown, same


@pytest.mark.parametrize("gdb_name", ["gdb-multiarch", "gdb-18"])
@pytest.mark.parametrize("breakpoint", STOPS)
def test_sframe_mode_always_shows_the_eh_frame_values(gdb_name: str, breakpoint: str,
                                                      tmp_path: Path) -> None:
    gdb = _gdb(gdb_name)
    out, command = _session(gdb, LUA, tmp_path, breakpoint, plugin=True, both_modes=True)
    native_text, _, ours_text = out.partition(MARK)
    native, ours = parse_values(native_text), parse_values(ours_text)
    where = f"{gdb_name} lua5.4 (aarch64) at {breakpoint}\n{command}\n"
    assert len(native) == DEPTH, where
    shown, same = _compare(native, ours, where)
    print(f"{where}{same} of {shown} caller-frame registers and variables (d8-d15 aside)")
    # x19-x28 of every caller frame and what lives in them: nearly all shown.
    assert shown > 100 and same >= 0.95 * shown, (same, shown, where)


def test_noeh_with_the_plugin_shows_the_twins_values(tmp_path: Path) -> None:
    gdb = _gdb("gdb-multiarch")
    dumps = []
    commands = []
    runs = (("t", False, True), ("n", True, True), ("p", True, False))  # twin, .noeh, control
    for variant, plugin, analysis in runs:
        copy = tmp_path / variant / "lua5.4"  # paths of the same length
        copy.parent.mkdir()
        shutil.copy2(LUA if variant == "t" else LUA.with_name("lua5.4.noeh"), copy)
        out, command = _session(gdb, copy, copy.parent, "sort_comp", plugin=plugin,
                                analysis=analysis)
        dumps.append(parse_values(out))
        commands.append(command)
    where = "lua5.4 (aarch64) .noeh against the twin at sort_comp\n" + "\n".join(commands)
    assert len(dumps[0]) == DEPTH, where
    shown, same = _compare(dumps[0], dumps[1], where)
    print(f"{same} of {shown} caller-frame registers and variables (d8-d15 aside)")
    assert shown > 100 and same >= 0.95 * shown, (same, shown, where)
    # The control: without the code analysis x19-x28 are <not saved> in caller
    # frames, and most of what lives in them is unavailable.
    shown_plain, same_plain = _compare(dumps[0], dumps[2], where)
    print(f"without the analysis: {same_plain} of {shown_plain}")
    assert same_plain < 0.7 * shown_plain, (same_plain, shown_plain)


def _tables(path: Path) -> dict[int, list[int]]:
    """Every indirect jump in the file's SFrame functions that the analysis
    resolves as a jump table -> its targets."""
    section = read_elf(path).open()
    assert section is not None and section.code is not None
    decoder = decoder_for(section.arch)
    assert decoder is not None
    sites: dict[int, list[int]] = {}
    for fde in section.iter_fdes():
        code = section.code(fde.start, fde.size)
        assert code is not None
        effects = [e for e in decoder.effects(code, fde.start) if e is not None]
        sources: dict[int, list[int]] = {}
        for k, eff in enumerate(effects):
            if eff.target is not None:
                sources.setdefault(eff.target, []).append(k)
        indirect = [k for k, eff in enumerate(effects) if eff.flow is Flow.INDIRECT]
        for k, targets in aarch64_jump_tables(effects, indirect, sources, section.code,
                                              section.absolute_tables).items():
            sites[effects[k].address] = sorted(set(targets))
    return sites


def test_resolved_jump_tables_hold_every_jump_taken(tmp_path: Path) -> None:
    sites = _tables(LUA)
    # statement/llex/str_format/... switch tables and luaV_execute's 6 dispatches
    assert len(sites) >= 12, sorted(hex(a) for a in sites)
    table = tmp_path / "sites.json"
    table.write_text(json.dumps({str(a): t for a, t in sites.items()}))
    shutil.copy2(SCRIPT, tmp_path / "deep.lua")
    stub = QemuStub("aarch64", LUA, ["-E", "deep.lua"], cwd=tmp_path).start()
    cmd = [_gdb("gdb-multiarch"), "-nx", "-batch", "-iex", "set debuginfod enabled off",
           "-ex", "set pagination off", "-ex", f'set $jt_sites = "{table}"',
           "-ex", f"target remote 127.0.0.1:{stub.port}", "-ex", f"source {JUMPS_SCRIPT}",
           "-ex", "kill", str(LUA)]
    try:
        proc = run(cmd, cwd=tmp_path, timeout=120)
    finally:
        stub.close()
    where = f"{stub.command} &  {repro(cmd, tmp_path)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    jumps = [(int(a, 16), int(b, 16)) for _, a, b in
             (line.split() for line in proc.stdout.splitlines() if line.startswith("JUMP "))]
    wrong = [f"{a:#x} -> {b:#x}" for a, b in jumps if b not in sites[a]]
    assert not wrong, f"jumps to no target of their table: {wrong}\n{where}"
    hit = {a for a, _ in jumps}
    print(f"{len(jumps)} jumps at {len(hit)} of {len(sites)} resolved sites, all to a table target")
    assert len(jumps) >= 100 and len(hit) >= 10, (len(jumps), sorted(hex(a) for a in hit), where)


STEP_SCRIPT = """\
import gdb
first = gdb.newest_frame().name()
for step in range({steps}):
    frame = gdb.newest_frame()
    name = frame.name()
    print(f"STEP {{step}} {{frame.pc():#x}} {{name}}")
    for mode in ("off", "always"):
        gdb.execute(f"set sframe mode {{mode}}")
        gdb.execute("maint flush register-cache")
        print(f"MODE {{mode}}")
        gdb.execute("source {values}")
    if name != first:
        break
    gdb.execute("nexti", to_string=True)
"""


def test_nexti_through_sort_comp_values_match(tmp_path: Path) -> None:
    """Every instruction of lua's sort_comp (stp/str saves between other
    instructions, ldr/ldp restores, the ret epilogue), then back in its caller:
    the caller frames' x19-x28 and variables with SFrame + the analysis equal
    gdb's .eh_frame unwinder's at each, or are unavailable."""
    script = tmp_path / "steps.py"
    script.write_text(STEP_SCRIPT.format(steps=80, values=VALUES_SCRIPT))
    shutil.copy2(SCRIPT, tmp_path / "deep.lua")
    stub = QemuStub("aarch64", LUA, ["-E", "deep.lua"], cwd=tmp_path).start()
    cmd = [_gdb("gdb-multiarch"), "-nx", "-batch", "-iex", "set debuginfod enabled off",
           "-ex", "set pagination off", "-ex", f"source {GDB_PLUGIN}",
           "-ex", f"target remote 127.0.0.1:{stub.port}", "-ex", "tbreak *sort_comp",
           "-ex", "continue", "-ex", "set $values_depth = 5", "-ex", f"source {script}",
           "-ex", "kill", str(LUA)]
    try:
        proc = run(cmd, cwd=tmp_path, timeout=300)
    finally:
        stub.close()
    out = proc.stdout
    assert "Traceback" not in out + proc.stderr, (out + proc.stderr)[-3000:]
    where = f"{stub.command} &  {repro(cmd, tmp_path)}"
    names = []
    shown = same = 0
    for chunk in out.split("STEP ")[1:]:
        head, _, rest = chunk.partition("\n")
        off, _, always = rest.partition("MODE off")[2].partition("MODE always")
        native, ours = parse_values(off), parse_values(always)
        assert native and len(ours) == len(native), f"{head}\n{rest[-2000:]}\n{where}"
        names.append(head.split()[-1])
        counts = _compare(native[:5], ours[:5], f"at {head}\n{where}")
        shown, same = shown + counts[0], same + counts[1]
    print(f"{len(names)} instructions; {same} of {shown} caller-frame values shown")
    # sort_comp's ret path (its comparator is a Lua function): ~35 instructions, then auxsort
    assert names[0] == "sort_comp" and names[-1] != "sort_comp" and len(names) >= 20, names
    assert same >= 0.95 * shown, (same, shown)
