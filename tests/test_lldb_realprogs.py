"""The native route on real Debian programs (lua5.4, bzip2 at -O2 -g, see helpers/realprogs.py).

At the first hit of every deep breakpoint, LLDB with the plugin on the
``.noeh`` build shows the same ``bt`` as LLDB without it on the twin, frame
by frame: pc, module, function (inlined frames included) and
file:line:column; in the caller frames ``frame variable`` and
``register read`` show the twin's values or nothing (unavailable), never
another value. On ``.noeh.stripped`` (no symbols, no debug info: LLDB alone
stops after frame 0) the pcs equal the twin's.

Both builds run as ``PROGRAM`` from directories of the same length, with the
same environment, so that their stacks are alike byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import DEBUGGERS, ROOT
from helpers.lldbtools import (
    PLUGIN,
    command_output,
    frame_variables,
    is_aggregate,
    lldb_path,
    run_lldb,
    symbol_address,
)
from helpers.realprogs import MAIN_PRODUCERS, PROGRAMS, available

pytestmark = pytest.mark.lldb

REGISTER = re.compile(r"^\s*(\w+) = (0x[0-9a-f]+)", re.M)
UNAVAILABLE = ("not available", "unavailable", "could not evaluate", "<no location",
               "optimized out", "<empty constant data>")
# No "<incomplete type": LLDB gets the symbol file as it creates the module
# (lldb_plugin/locate.py), before "b NAME" parses any type.


def _cases() -> list[tuple[str, str, str, str]]:
    cases = [(v, p, producer, "noeh") for v in ("22", "23") for p in PROGRAMS
             for producer in MAIN_PRODUCERS]
    # LLDB 21 only where the module has no debug information of its own
    # (test_lldb21_keeps_debug_info_modules says why).
    cases += [(v, p, "busid-v3", "noeh.stripped") for v in ("21", "23") for p in PROGRAMS]
    return cases


def _stops(version: str, binary: Path, program_name: str, plugin: bool, env: dict[str, str],
           frames: int, addresses: dict[str, int] | None = None) -> tuple[dict[str, dict], str]:
    program = PROGRAMS[program_name]
    python = DEBUGGERS / f"lldb-{version}-python"
    lldb_path(version)  # skips, or fails under CI, when missing
    config = {"binary": str(binary), "args": list(program.args),
              "breakpoints": list(program.breakpoints),
              "plugin": str(PLUGIN) if plugin else None, "frames": frames,
              "addresses": addresses}
    full_env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    full_env.update(env)
    script = ROOT / "tests" / "helpers" / "lldb_stops.py"
    result = subprocess.run([str(python), str(script), json.dumps(config)], capture_output=True,
                            text=True, timeout=1200, env=full_env, cwd=str(ROOT))
    assert result.returncode == 0, result.stderr[-3000:]
    stops = json.loads(result.stdout)
    log = stops.pop("__log__") + result.stderr
    assert "Traceback" not in log, log[-3000:]
    return stops, log


@pytest.mark.skipif(not available(), reason="tests/fixtures/realprogs not built")
@pytest.mark.parametrize("version,program,producer,variant", _cases(),
                         ids=lambda v: str(v))
def test_deep_stops_equal_twin(version: str, program: str, producer: str, variant: str,
                               tmp_path: Path) -> None:
    prog = PROGRAMS[program]
    copies = {}
    for label, which in (("twin", "twin"), ("test", variant)):
        (tmp_path / label).mkdir()
        copies[label] = tmp_path / label / prog.name
        shutil.copy(prog.path(producer, which), copies[label])
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    stripped = variant.endswith("stripped")
    depth = 0 if stripped else 3
    addresses = None
    if stripped:
        # No symbols: both runs stop at the functions' entries, by address
        # (names only inlined have no address and are left out).
        addresses = {}
        for bp in prog.breakpoints:
            try:
                addresses[bp] = symbol_address(copies["twin"], bp)
            except KeyError:
                pass
    want, _ = _stops(version, copies["twin"], program, False, env, depth, addresses)
    if stripped:
        # Its own cache directory: LLDB keeps symbols by build-id under
        # $XDG_CACHE_HOME/lldb, and the twin's must not reach the stripped file.
        env = {"XDG_CACHE_HOME": str(tmp_path / "cach2")}
    got, log = _stops(version, copies["test"], program, True, env, depth, addresses)
    # Values that differ between two runs of the twin (uninitialised stack
    # arrays holding the stack protector's random canary) say nothing.
    again = _stops(version, copies["twin"], program, False, env, depth)[0] if depth else {}
    assert len(want) >= (len(addresses) if addresses is not None else len(prog.breakpoints)) - 2, \
        sorted(want)
    assert f"{prog.name}: no SFrame symbol file" not in log, log
    differ = []
    for bp, stop in want.items():
        w, g = [tuple(f) for f in stop["list"]], [tuple(f) for f in got.get(bp, {}).get("list", [])]
        if stripped:
            # No debug information: no inlined frames, no tail-call frames
            # made from DWARF call sites ([artificial]), no names of its own.
            # Of the twin's frames for one concrete frame (inlined ones, then
            # the function they are inlined in) the first has the real pc.
            w = [f for f in w if not f[5]]
            w = [f[:2] for i, f in enumerate(w) if i == 0 or not w[i - 1][4]]
            g = [f[:2] for f in g]
        if w != g:
            pairs = enumerate(zip(w, g, strict=False))
            first = next((i for i, (a, b) in pairs if a != b), min(len(w), len(g)))
            differ.append(f"{bp}: {len(g)} frames, the twin {len(w)}; first difference at "
                          f"#{first}: {g[first] if first < len(g) else None} vs "
                          f"{w[first] if first < len(w) else None}")
            if len(differ) == 1:
                differ.append(got.get(bp, {}).get("bt", "") + log[-2000:])
            continue
        for k, ((w_vars, w_regs), (g_vars, g_regs)) in enumerate(
                zip(stop["frames"], got[bp]["frames"], strict=True), start=1):
            wv, gv = frame_variables(w_vars), frame_variables(g_vars)
            other = again.get(bp, {}).get("frames", [])
            av = frame_variables(other[k - 1][0]) if len(other) >= k else {}
            for name, value in gv.items():
                if av.get(name) != wv.get(name) or is_aggregate(wv.get(name)):
                    continue
                if value != wv.get(name) and not any(u in value for u in UNAVAILABLE):
                    differ.append(f"{bp} frame #{k}: {name} = {value!r}, the twin: {wv.get(name)!r}")
            wr, gr = dict(REGISTER.findall(w_regs)), dict(REGISTER.findall(g_regs))
            for reg, value in gr.items():
                if wr.get(reg) != value:
                    differ.append(f"{bp} frame #{k}: {reg} = {value}, the twin: {wr.get(reg)}")
    assert not differ, "\n".join(differ)


@pytest.mark.skipif(not available(), reason="tests/fixtures/realprogs not built")
@pytest.mark.parametrize("version", ["22", "23"])
def test_sframe_load_before_breakpoints_keeps_types(version: str, tmp_path: Path) -> None:
    """``sframe load`` right after ``target create`` adds the symbol file before
    LLDB reads the module's DWARF for ``b NAME``: caller-frame structures print
    in full, as on the twin (docs/lldb.md: types parsed before the add)."""
    lua = PROGRAMS["lua5.4"]
    binary = lua.path("busid-v3", "noeh")
    args = " ".join(lua.args)
    out = run_lldb(version, [f"target create {binary}", "sframe load", "b luaV_concat",
                             f"process launch -o /dev/null -- {args}", "frame select 3",
                             "frame variable buff"], env={"XDG_CACHE_HOME": str(tmp_path)})
    assert "Traceback" not in out
    assert "lua5.4.noeh: LLDB's own unwinder" in command_output(out, "sframe load")
    text = command_output(out, "frame variable buff")
    assert "luaO_pushvfstring" in command_output(out, "frame select 3"), out[-3000:]
    assert "incomplete type" not in text and "pushed = 1" in text, text


@pytest.mark.skipif(not available(), reason="tests/fixtures/realprogs not built")
@pytest.mark.parametrize("version", ["22", "23"])
def test_breakpoint_before_run_keeps_types(version: str, tmp_path: Path) -> None:
    """``b NAME`` before ``run``, no ``sframe load``: a structure in a caller
    frame prints as on the twin. LLDB 23 parsed lua's ``BuffFS`` from the
    module's own DWARF for the breakpoint and printed ``<incomplete type>``
    once the stop-hook had replaced the symbol file; the locate-module
    callback (lldb_plugin/locate.py) now gives LLDB the symbol file as it
    creates the module."""
    lua = PROGRAMS["lua5.4"]
    args = " ".join(lua.args)
    fields = re.compile(r"^\s*(L|pushed|blen) = (.*)$", re.M)

    def buff(binary: Path, plugin: bool) -> tuple[str, str]:
        out = run_lldb(version, [f"target create {binary}", "b luaV_concat",
                                 f"process launch -o /dev/null -- {args}", "frame select 3",
                                 "frame variable buff", "sframe status" if plugin else "bt 1"],
                       plugin=plugin, env={"XDG_CACHE_HOME": str(tmp_path)})
        assert "Traceback" not in out
        assert "luaO_pushvfstring" in command_output(out, "frame select 3"), out[-3000:]
        return command_output(out, "frame variable buff"), out

    want, _ = buff(lua.path("busid-v3", "twin"), False)
    got, out = buff(lua.path("busid-v3", "noeh"), True)
    assert "incomplete type" not in got, got
    assert fields.findall(got) == fields.findall(want) and len(fields.findall(want)) == 3, \
        (got, want)
    assert "lua5.4.noeh: LLDB's own unwinder" in command_output(out, "sframe status"), out[-3000:]


@pytest.mark.skipif(not available(), reason="tests/fixtures/realprogs not built")
def test_lldb21_debug_info_modules_get_the_copy(tmp_path: Path) -> None:
    """LLDB 21 loses a module's load addresses when a symbol file replaces the
    module's own DWARF (breakpoints set afterwards never hit): its
    ``target create`` gets the module copy with the SFrame rows instead
    (``lldb_plugin.seed``), and breakpoints set before and after the launch
    are hit."""
    lua = PROGRAMS["lua5.4"]
    out = run_lldb("21", [f"target create {lua.path('busid-v3', 'noeh')}", "b luaE_extendCI",
                          f"process launch -o /dev/null -- {' '.join(lua.args)}", "sframe status",
                          "breakpoint disable 1", "b luaV_concat", "continue"],
                   env={"XDG_CACHE_HOME": str(tmp_path)})
    assert "Traceback" not in out
    assert "loses a module's addresses" not in out
    status = command_output(out, "sframe status")
    assert "lua5.4.noeh: LLDB's own unwinder, .debug_frame from SFrame" in status, status
    assert "found it in its module list" in status, status
    assert "stop reason = breakpoint 1." in out, out[-2000:]
    assert "stop reason = breakpoint 2." in command_output(out, "continue"), out[-2000:]


@pytest.mark.skipif(not available(), reason="tests/fixtures/realprogs not built")
def test_lldb21_symbol_file_given_at_creation_loses_addresses_too(tmp_path: Path) -> None:
    """Why LLDB 21 keeps modules with debug information to itself, whatever
    the timing: even given as the module is created (``target create -s``,
    before anything is parsed or loaded), LLDB 21.1.7 resolves the symbol
    file's DWARF addresses in that file's own sections, which never get load
    addresses: a breakpoint by name is never hit. 22 resolves them in the
    module's. Fails (and says so) the day a 21.x behaves like 22."""
    from sframe_core.symfiles.symfile import symbol_file_for
    lua = PROGRAMS["lua5.4"]
    binary = lua.path("busid-v3", "noeh")
    made = symbol_file_for(str(binary), cache=str(tmp_path))
    commands = [f"target create -s {made.path} {binary}", "image lookup -n luaV_concat",
                "b luaV_concat", f"process launch -o /dev/null -- {' '.join(lua.args)}"]
    sections = re.compile(r"\((\S+)\.PT_LOAD\[1\]\.\.text \+ \d+\)")
    for version, owner, hit in (("21", os.path.basename(made.path), False),
                                ("22", binary.name, True)):
        out = run_lldb(version, commands, plugin=False)
        found = sections.findall(command_output(out, "image lookup -n luaV_concat"))
        assert found and set(found) == {owner}, (version, out[-3000:])
        assert ("stop reason = breakpoint 1." in out) == hit, (version, out[-3000:])
