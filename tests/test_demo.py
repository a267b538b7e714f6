"""`bash scripts/demo.sh`, the README's first command, shows what it says it shows.

The demo is run once (setup skipped, its build in a temporary directory) and
every section is checked against its own "Look at:" line: gdb's and LLDB's
backtraces of the example without the plugin differ from the twin's and with
it equal them; frame 2's registers and variables with the plugin are the
twin's (parsed from the output, not written down here); each debugger says
which route serves the example; plain gdb served by a debuginfod shows the
twin's frames and values; `sframe verify` passes the example and names
the planted row's function and PC in the copy. A section that rots fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, Frame, missing
from helpers.gdbtools import parse_bt as gdb_bt
from helpers.lldbtools import lldb_path, symbol_address
from helpers.lldbtools import parse_bt as lldb_bt

pytestmark = [pytest.mark.gdb, pytest.mark.lldb]

CHAIN = ["stop_here", "parse_record", "read_records", "load_config", "main"]
REGISTERS = ("rbx", "rbp", "r12", "r13")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The demo's output (piped, so plain text) and its build directory."""
    for tool in ("gcc", "objcopy", "gdb"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed (scripts/setup.sh installs it)")
    lldb_path("23")
    build = tmp_path_factory.mktemp("demo") / "build"
    env = dict(os.environ, SFRAME_SKIP_SETUP="1", SFRAME_DEMO_BUILD=str(build))
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"demo.sh exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr}"
    return proc.stdout, build


def sections(text: str) -> dict[str, str]:
    """``== TITLE`` sections, by title."""
    parts = re.split(r"^== (.*)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def section(text: str, prefix: str) -> str:
    found = [body for title, body in sections(text).items() if title.startswith(prefix)]
    assert len(found) == 1, f"no single section '{prefix}...' in:\n{text}"
    body = found[0]
    assert body.startswith("Look at: "), f"section '{prefix}' does not say what to look at:\n{body}"
    return body


def subsections(body: str) -> list[str]:
    """The ``-- ...`` parts of a section: without the plugin, with it, the twin."""
    return re.split(r"^-- .*\n", body, flags=re.M)[1:]


def commands(text: str, prompt: str) -> dict[str, str]:
    """Each command's output, by command, from ``(PROMPT) COMMAND`` lines."""
    parts = re.split(rf"^\({prompt}\) (.*)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def gdb_registers(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)\s+(0x[0-9a-f]+|<not saved>)", text, re.M))


def gdb_locals(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+) = (.*)$", text, re.M))


def lldb_registers(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(\w+)\s+= (\S.*?)\s*$", text, re.M))


def lldb_variables(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\([^)]*\) (\w+) = (.*)$", text, re.M))


def names(frames: list[Frame]) -> list[str | None]:
    return [f.name for f in frames]


def test_output_is_plain_text_when_piped(demo: tuple[str, Path]) -> None:
    text, _ = demo
    assert "\x1b" not in text
    assert text.startswith("\n== The example's SFrame section")


def test_dump_and_lookup(demo: tuple[str, Path]) -> None:
    text, build = demo
    start = symbol_address(build / "demo", "parse_record")
    dump = section(text, "The example's SFrame section")
    assert "func idx [" in dump and f"]: pc = {start:#x}, size = " in dump
    assert re.search(r"^    [0-9a-f]{16}  fp\+16     c-16      f", dump, re.M)
    lookup = section(text, "How the caller of parse_record is found")
    rule = lookup.strip().splitlines()[-1]
    assert re.fullmatch(r"CFA = rbp \+ 16; RA at CFA - 8; FP at CFA - 16; rbx at CFA - \d+; "
                        r"r12 at CFA - \d+; r13 at CFA - \d+; r14, r15 unchanged", rule), rule


def test_gdb(demo: tuple[str, Path]) -> None:
    text, build = demo
    without, with_plugin, twin = (commands(part, "gdb")
                                  for part in subsections(section(text, "gdb ")))
    twin_bt = gdb_bt(twin["bt"])
    assert names(twin_bt) == CHAIN
    assert gdb_bt(with_plugin["bt"]) == twin_bt
    assert gdb_bt(without["bt"]) != twin_bt and gdb_bt(without["bt"])[-1].name == "??"
    assert gdb_bt(with_plugin["frame 2"])[0].name == gdb_bt(twin["frame 2"])[0].name == "read_records"

    regs = gdb_registers(twin["info registers rbx rbp r12 r13"])
    assert tuple(regs) == REGISTERS
    assert gdb_registers(with_plugin["info registers rbx rbp r12 r13"]) == regs
    assert gdb_registers(without["info registers rbx rbp r12 r13"])["rbx"] != regs["rbx"]
    variables = gdb_locals(twin["info locals"])
    assert variables == {"i": "3", "total": "427"}
    assert gdb_locals(with_plugin["info locals"]) == variables
    assert gdb_locals(without["info locals"])["i"] != variables["i"]

    route = with_plugin["info sframe"].splitlines()
    objfile = route.index(str(build / "demo.noeh"))
    assert route[objfile + 2].startswith("  no .eh_frame; unwound by gdb's DWARF unwinder from the symbol "
                                         f"file {build}/cache/sframe-gdb/symbols/"), route


def test_lldb(demo: tuple[str, Path]) -> None:
    text, build = demo
    without, with_plugin, twin = (commands(part, "lldb")
                                  for part in subsections(section(text, "LLDB ")))
    twin_bt = lldb_bt(twin["bt"])
    assert names(twin_bt)[:5] == CHAIN and names(twin_bt)[-1] == "_start"
    assert lldb_bt(with_plugin["bt"]) == twin_bt
    # LLDB's own unwinder cannot leave load_config.cold: the backtrace stops there.
    assert lldb_bt(without["bt"]) == twin_bt[:3]
    assert "frame #2: " in with_plugin["frame select 2"] and "`read_records(" in twin["frame select 2"]

    regs = lldb_registers(twin["register read rbx rbp r12 r13"])
    assert tuple(regs) == REGISTERS and all(v.startswith("0x") for v in regs.values())
    assert lldb_registers(with_plugin["register read rbx rbp r12 r13"]) == regs
    # What the section's line says: LLDB's instruction emulation reads this frame right.
    assert lldb_registers(without["register read rbx rbp r12 r13"]) == regs
    variables = lldb_variables(twin["frame variable"])
    assert variables["i"] == "3" and variables["total"] == "427" and set(variables) == {
        "text", "count", "total", "i"}
    assert lldb_variables(with_plugin["frame variable"]) == variables
    assert lldb_variables(without["frame variable"]) == variables

    status = with_plugin["sframe status"]
    assert re.search(r"^demo\.noeh: LLDB's own unwinder, \.debug_frame from SFrame in "
                     + re.escape(f"{build}/cache/sframe-gdb/symbols/") + r"\S+\.debug$", status, re.M), status


def test_verify(demo: tuple[str, Path]) -> None:
    text, build = demo
    good, bad = subsections(section(text, "sframe verify"))
    # What else the example has (PLT stubs, _start) depends on the linker; none of it fails.
    assert " 0 DISAGREE, " in good.splitlines()[-2] and good.splitlines()[-2].endswith(": OK")
    assert good.splitlines()[-1] == "exit 0"
    planted = re.fullmatch(r"demo\.bad: read_records at (0x[0-9a-f]+): CFA = rsp \+ (\d+) changed to "
                           r"rsp \+ (\d+)", bad.splitlines()[0])
    assert planted, bad
    pc, old, new = planted.groups()
    assert symbol_address(build / "demo", "read_records") < int(pc, 16) \
        < symbol_address(build / "demo", "load_config")
    assert (f"demo.bad: {pc} read_records: DISAGREES: SFrame: CFA = rsp + {new}; RA at CFA - 8; FP not "
            f"saved; CFI: CFA = rsp + {old}; RA at CFA - 8; FP not saved") in bad.splitlines()
    assert " 1 DISAGREE, " in bad.splitlines()[-2] and bad.splitlines()[-2].endswith(": FAIL")
    assert bad.splitlines()[-1] == "exit 1"


def test_debuginfod(demo: tuple[str, Path]) -> None:
    """Plain gdb served by a debuginfod: the debug file alone ends in ??; the
    file of ``sframe to-dwarf --debug-file`` gives the twin's frames, frame
    2's registers and variables (docs/debuginfod.md)."""
    text, _ = demo
    twin = commands(subsections(section(text, "gdb "))[2], "gdb")
    alone, served = (commands(part, "gdb")
                     for part in subsections(section(text, "Many machines: ")))
    twin_bt = gdb_bt(twin["bt"])
    assert gdb_bt(served["bt"]) == twin_bt
    assert gdb_bt(alone["bt"]) != twin_bt and gdb_bt(alone["bt"])[-1].name == "??"
    for command in ("frame 2", "info registers rbx rbp r12 r13", "info locals"):
        assert served[command] == twin[command], command
    assert gdb_locals(alone["info locals"]) != gdb_locals(twin["info locals"])
