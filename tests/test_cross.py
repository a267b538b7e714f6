"""Cross-architecture tests under qemu-user: aarch64 (v1, v2, v3, PAC key A and
key B) and s390x (v3), with gdb-multiarch, gdb 18, lldb 23 and ``sframe
backtrace --core``. See docs/cross.md.

The oracle is always the fixture's twin (same code addresses, plus
``.eh_frame``) under the same debugger at the same breakpoint. The twin of a
PAC fixture cannot be unwound by gdb under qemu-user 7.2 (its gdbstub has no
pauth registers, so gdb keeps the signed return address of f2); there the
frames from the first signed PC on come from lldb with
``target.process.virtual-addressable-bits 48``, after checking that gdb and lldb
agree on the frames before it.

When qemu-user or a debugger is missing the tests skip, or fail when
``CI=true`` or ``SFRAME_REQUIRE_DEBUGGERS=1``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from helpers import DEBUGGERS, FIXTURES
from helpers.manifest import Entry, manifest_params, require
from helpers.qemutools import (
    AARCH64_VA_BITS,
    GDB_PLUGIN,
    LLDB_PLUGIN,
    Frame,
    QemuStub,
    Trace,
    gdb_core,
    gdb_live,
    guest_core,
    has_pac_bits,
    lldb_live,
    missing,
    parse_lldb_frames,
    sframe_cli_core,
    strip_pac,
    tool,
)

from sframe_core.format.elf import read_elf

pytestmark = [pytest.mark.gdb, pytest.mark.slow]

# deep: main -> f1 -> f2 -> f3 -(tail call)-> f4 -> stop_here; f3 is not a frame.
PROGRAM = ["stop_here", "f4", "f2", "f1", "main"]
# deep abort / segv, from f4 on (abort: libc's abort -> raise -> pthread_kill above f4)
FROM_F4 = ["f4", "f2", "f1", "main"]


def _is_deep(arch: str) -> Any:
    return lambda e: e["arch"] == arch and e["program"] == "deep" and e["variant"] == "twin"


AARCH64 = manifest_params(_is_deep("aarch64"))
S390X = manifest_params(_is_deep("s390x"))
ALL = manifest_params(lambda e: _is_deep("aarch64")(e) or _is_deep("s390x")(e))


def twin_noeh(entry: Entry) -> tuple[Path, Path]:
    twin = FIXTURES / entry["path"]
    noeh = twin.with_name(twin.name + ".noeh")
    assert twin.is_file() and noeh.is_file(), f"missing fixture {twin} or {noeh}"
    return twin, noeh


def gdb_multiarch() -> str:
    return tool("gdb-multiarch")


def need_plugin(path: Path) -> None:
    if not path.exists():
        pytest.fail(f"{path} does not exist (the adapter under test)")


def fmt(title: str, trace: Trace) -> str:
    return f"{title}:\n{trace.show()}"


def any_lldb() -> str:
    """Some lldb (for the PAC oracle: any version strips PACs given the VA size)."""
    for name in ("lldb-23", "lldb-22", "lldb-21", "lldb"):
        candidate = DEBUGGERS / name
        if candidate.is_file():
            return str(candidate)
    return tool("lldb-23")


def lldb_oracle_frames(output: str) -> list[Frame]:
    frames = parse_lldb_frames(output, start="(lldb) bt")
    return [Frame(f.pc, f.name.split(" + ")[0] if f.name else None) for f in frames]


def resolve_pac(gdb_trace: Trace, entry: Entry, lldb_frames: Any) -> Trace:
    """Complete a twin trace that stops at a PAC-signed PC with lldb's frames.

    ``lldb_frames()`` returns lldb's frames of the same stop. Returns the
    gdb trace itself when no frame has a signed PC.
    """
    signed = next((i for i, f in enumerate(gdb_trace.frames) if has_pac_bits(f.pc)), None)
    # gdb 13 (Debian 12) walks on to a frame with the signed PC; gdb 16 (Debian 13)
    # stops at the frame whose saved LR is signed, "frame did not save the PC"
    # (qemu-user cores carry no PAC mask note).
    failed = (gdb_trace.end.startswith("error") or gdb_trace.end.startswith("(no FRAME-END")
              or gdb_trace.end == "frame did not save the PC")
    if signed is None and not failed:
        return gdb_trace
    assert entry["pac"], f"gdb cannot unwind a non-PAC twin:\n{gdb_trace.show()}\n{gdb_trace.output[-3000:]}"
    frames, command = lldb_frames()
    good = len(gdb_trace.frames) if signed is None else signed
    assert len(frames) > good, f"lldb oracle too short: {frames}\n{command}"
    assert frames[:good] == gdb_trace.frames[:good], (
        f"gdb and lldb disagree on the twin:\n{gdb_trace.show()}\nlldb: {frames}\n{command}")
    if signed is not None:
        assert frames[signed].pc == strip_pac(gdb_trace.frames[signed].pc), (
            f"lldb's frame #{signed} is not gdb's with the PAC stripped: {frames}\n{gdb_trace.show()}")
    return Trace(frames, "lldb", "", f"{gdb_trace.command}\n  then {command}",
                 extra={"gdb_good_frames": good, "gdb": gdb_trace})


_ORACLES: dict[tuple[str, str], Trace] = {}


def live_oracle(entry: Entry, arch: str, gdb: str, workdir: Path) -> Trace:
    """The twin's frames at ``break stop_here`` under ``gdb`` (cached per session)."""
    twin, _ = twin_noeh(entry)
    key = (gdb, str(twin))
    if key in _ORACLES:
        return _ORACLES[key]
    stub = QemuStub(arch, twin, cwd=workdir).start()
    try:
        trace = gdb_live(gdb, stub, twin, workdir, plugin=False)
    finally:
        stub.close()
    assert trace.frames, f"gdb on the twin gave no frames\n{trace.output[-3000:]}\n{trace.command}"

    def from_lldb() -> tuple[list[Frame], str]:
        lldb = any_lldb()
        bp = f"breakpoint set -a {trace.frames[0].pc:#x}"  # the same stop as gdb's
        stub = QemuStub(arch, twin, cwd=workdir).start()
        try:
            out, command = lldb_live(
                lldb, stub, twin, workdir, breakpoint=[bp], commands=["bt"],
                before=[f"settings set target.process.virtual-addressable-bits {AARCH64_VA_BITS}"])
        finally:
            stub.close()
        return lldb_oracle_frames(out), command

    trace = resolve_pac(trace, entry, from_lldb)
    assert trace.names[:len(PROGRAM)] == PROGRAM, fmt("twin oracle is not the expected chain", trace)
    _ORACLES[key] = trace
    return trace


# -- 1, 2: gdb-multiarch on a live qemu-user guest --------------------------------


def check_gdb_live(entry: Entry, arch: str, tmp_path: Path, record: Any) -> None:
    gdb = gdb_multiarch()
    need_plugin(GDB_PLUGIN)
    _, noeh = twin_noeh(entry)
    want = live_oracle(entry, arch, gdb, tmp_path)

    stub = QemuStub(arch, noeh, cwd=tmp_path).start()
    try:
        plain = gdb_live(gdb, stub, noeh, tmp_path, plugin=False)
    finally:
        stub.close()
    stub = QemuStub(arch, noeh, cwd=tmp_path).start()
    try:
        got = gdb_live(gdb, stub, noeh, tmp_path, plugin=True, after_stop=["info sframe"])
    finally:
        stub.close()

    record("without_plugin", [str(f) for f in plain.frames])
    assert "warning: sframe" not in got.output, got.output[-3000:]
    assert got.frames == want.frames, (
        f"{fmt('with the plugin (.noeh)', got)}\n{fmt('expected (twin)', want)}\n"
        f"gdb output:\n{got.output[-3000:]}")
    assert got.names[:len(PROGRAM)] == PROGRAM
    assert _route_line(arch, noeh) in got.output, got.output[-3000:]
    if arch == "aarch64":
        # gdb 13-18's aarch64 prologue analyser stops at f4 (measured: stop_here,
        # f4, then "previous frame identical to this frame"): the fixture proves
        # something only because of this.
        assert plain.frames != want.frames, fmt("gdb already unwinds .noeh without the plugin", plain)
    # s390x: gdb's prologue analyser alone already gets every frame of this
    # program right (see docs/cross.md), so the proof there is
    # test_gdb18_sframe_without_prologue_analyser.


def _route_line(arch: str, noeh: Path) -> str:
    """What ``info sframe`` says serves the program: gdb's own unwinder from
    the symbol file, or the Python unwinder and why gdb's route cannot serve
    (s390x: gdb takes .debug_frame's f8-f15 rules for the vector registers;
    aarch64 with signed return addresses: gdb does not strip them through a
    separate debug file)."""
    if arch == "s390x":
        return ("unwound by the sframe unwinder: no symbol file (gdb misreads s390x "
                "floating-point register rules in .debug_frame)")
    section = read_elf(str(noeh)).open()
    assert section is not None
    if any(fre.mangled_ra for fde in section.iter_fdes() for fre in section.get_fres(fde)):
        return ("unwound by the sframe unwinder: no symbol file (return addresses signed "
                "(pointer authentication): gdb does not strip them through a separate debug "
                "file)")
    return "unwound by gdb's DWARF unwinder from the symbol file"


@pytest.mark.parametrize("entry", AARCH64)
def test_gdb_aarch64_live(entry: Entry | None, tmp_path: Path, record_property: Any) -> None:
    check_gdb_live(require(entry), "aarch64", tmp_path, record_property)


@pytest.mark.parametrize("entry", S390X)
def test_gdb_s390x_live(entry: Entry | None, tmp_path: Path, record_property: Any) -> None:
    check_gdb_live(require(entry), "s390x", tmp_path, record_property)


# gdb >= 16 can switch its prologue analyser off: then every frame of the
# program must come from the sframe unwinder, on both architectures.
PROLOGUE = {"aarch64": "aarch64 prologue", "s390x": "s390 prologue"}


@pytest.mark.parametrize("entry", ALL)
def test_gdb18_sframe_without_prologue_analyser(entry: Entry | None, tmp_path: Path) -> None:
    entry = require(entry)
    arch = entry["arch"]
    gdb = str(DEBUGGERS / "gdb-18")
    if not Path(gdb).is_file():
        missing(f"{gdb} not found (scripts/setup.sh installs gdb 18)")
    need_plugin(GDB_PLUGIN)
    _, noeh = twin_noeh(entry)
    want = live_oracle(entry, arch, gdb_multiarch(), tmp_path)
    disable = [f'maint frame-unwinder disable -name "{PROLOGUE[arch]}"']

    stub = QemuStub(arch, noeh, cwd=tmp_path).start()
    try:
        got = gdb_live(gdb, stub, noeh, tmp_path, plugin=True, before=disable)
    finally:
        stub.close()
    # libc's start code has no SFrame (Debian's libc.a is not built with it), so
    # with no prologue analyser the walk ends after main.
    n = len(PROGRAM)
    assert got.frames[:n] == want.frames[:n], (
        f"{fmt('gdb 18, plugin, no prologue analyser', got)}\n{fmt('expected (twin)', want)}\n"
        f"{got.output[-3000:]}")
    assert len(got.frames) == n, fmt("frames past main without unwind info?", got)

    stub = QemuStub(arch, noeh, cwd=tmp_path).start()
    try:
        plain = gdb_live(gdb, stub, noeh, tmp_path, plugin=False, before=disable)
    finally:
        stub.close()
    assert plain.frames[:n] != want.frames[:n], fmt("gdb 18 unwinds without any unwinder?", plain)


# -- 3: sframe backtrace --core on qemu-user guest cores ----------------------------


def core_oracle(entry: Entry, mode: str, tmp_path: Path) -> Trace:
    twin, _ = twin_noeh(entry)
    core = guest_core("aarch64", twin, mode, tmp_path / "twin")
    trace = gdb_core(gdb_multiarch(), twin, core, tmp_path)
    assert trace.frames, f"gdb read no frame from the twin's core\n{trace.output[-3000:]}\n{trace.command}"

    def from_lldb() -> tuple[list[Frame], str]:
        lldb = any_lldb()
        cmd = [lldb, "--no-lldbinit", "-b",
               "-o", f"settings set target.process.virtual-addressable-bits {AARCH64_VA_BITS}",
               "-o", f"target create {twin} --core {core}", "-o", "bt"]
        from helpers.qemutools import repro, run
        proc = run(cmd, cwd=tmp_path)
        return lldb_oracle_frames(proc.stdout + proc.stderr), repro(cmd, tmp_path)

    return resolve_pac(trace, entry, from_lldb)


@pytest.mark.parametrize("reader", ["sframe-cli", "gdb-plugin"])
@pytest.mark.parametrize("mode", ["segv", "abort"])
@pytest.mark.parametrize("entry", AARCH64)
def test_core_aarch64(entry: Entry | None, mode: str, reader: str, tmp_path: Path) -> None:
    """A qemu-user core of ``deep.noeh MODE`` read by ``sframe backtrace --core``
    (sframe-cli) or by gdb-multiarch with sframe_gdb.py (gdb-plugin).

    segv faults in f4 itself; abort dies three libc frames above f4
    (pthread_kill <- raise <- abort), in code that has no SFrame and, in
    ``.noeh``, no .eh_frame either.
    """
    entry = require(entry)
    _, noeh = twin_noeh(entry)
    want = core_oracle(entry, mode, tmp_path)
    assert "f4" in want.names, fmt("twin core oracle has no f4", want)
    start = want.names.index("f4")
    assert want.names[start:start + len(FROM_F4)] == FROM_F4, fmt("twin core oracle", want)

    core = guest_core("aarch64", noeh, mode, tmp_path / "noeh")
    if reader == "gdb-plugin":
        need_plugin(GDB_PLUGIN)
        got = gdb_core(gdb_multiarch(), noeh, core, tmp_path, plugin=True)
        assert "warning: sframe" not in got.output, got.output[-3000:]
        if got.pcs != want.pcs:
            pytest.fail(f"{fmt('gdb + plugin on the .noeh core', got)}\n{fmt('expected (twin core)', want)}"
                        f"\n{got.output[-2000:]}", pytrace=False)
        drop_cores(tmp_path)
        return
    got = sframe_cli_core(core, noeh, tmp_path)
    assert got.frames, fmt("sframe backtrace printed no frame", got)
    if mode == "abort":
        # The signal hit inside libc's pthread_kill, which in a static .noeh
        # binary has no unwind information of any kind: the walk must stop at
        # frame 0 and say so (gdb's prologue analyser guesses on; we do not).
        assert got.pcs == want.pcs[:1], fmt("sframe backtrace --core", got)
        assert got.end.startswith("no_info: no unwind information covers this PC"), got.end
        drop_cores(tmp_path)
        return
    # Every frame it prints must be the twin's, and it must get at least to
    # main. (Past main it stops in libc's start code, which has no unwind info
    # at all in .noeh: "no unwind information covers this PC".)
    if got.pcs != want.pcs[:len(got.pcs)]:
        pytest.fail(f"{fmt('sframe backtrace --core', got)}\n{fmt('expected (twin core)', want)}",
                    pytrace=False)
    if len(got.frames) < start + len(FROM_F4):
        pytest.fail(f"sframe backtrace --core stops before main:\n{fmt('sframe backtrace --core', got)}\n"
                    f"{fmt('expected (twin core)', want)}", pytrace=False)
    drop_cores(tmp_path)


def drop_cores(directory: Path) -> None:
    """Delete a passed test's cores (8.5 MB each; pytest keeps 3 runs of tmp dirs).
    A failed test keeps them: its message names them in the repro commands."""
    for core in directory.rglob("qemu_*.core"):
        core.unlink()


# -- 4: lldb 23 with the plugin over gdb-remote --------------------------------------


# lldb + plugin on these programs takes < 1 s; a session that hangs is not retried
# for the other fixtures of the same lldb (it would cost LLDB_TIMEOUT each).
LLDB_TIMEOUT = 10.0
_LLDB_HUNG: dict[str, str] = {}
# (lldb, command): lldb 21 has no scripted frame providers, so plain ``bt`` is
# only checked on 22 and 23, where it goes through the plugin's frame provider.
LLDB_CASES = [("lldb-21", "sframe bt"), ("lldb-22", "sframe bt"), ("lldb-22", "bt"),
              ("lldb-23", "sframe bt"), ("lldb-23", "bt")]


@pytest.mark.lldb
@pytest.mark.parametrize("lldb_name,command", LLDB_CASES, ids=[f"{n}-{c.replace(' ', '_')}"
                                                              for n, c in LLDB_CASES])
@pytest.mark.parametrize("entry", ALL)
def test_lldb_live(entry: Entry | None, lldb_name: str, command: str, tmp_path: Path) -> None:
    """lldb + lldb_plugin over gdb-remote to qemu-user, stopped where gdb stops."""
    entry = require(entry)
    arch = entry["arch"]
    lldb = tool(lldb_name)
    need_plugin(LLDB_PLUGIN / "__init__.py")
    _, noeh = twin_noeh(entry)
    want = live_oracle(entry, arch, gdb_multiarch(), tmp_path)
    bp = f"breakpoint set -a {want.frames[0].pc:#x}"  # gdb's stop (after its prologue skip)

    if lldb_name in _LLDB_HUNG:
        pytest.fail(f"not run: an earlier {lldb_name} session with the plugin hung "
                    f"({_LLDB_HUNG[lldb_name]})", pytrace=False)
    before = [f"command script import {LLDB_PLUGIN}"]
    if entry.get("pac"):
        # qemu-user's stub reports no address mask, so LLDB's own unwinder
        # cannot strip PAC signatures (the frames the provider hands back to
        # it after main) unless told the VA size, as on real hardware.
        before.insert(0, f"settings set target.process.virtual-addressable-bits {AARCH64_VA_BITS}")
    stub = QemuStub(arch, noeh, cwd=tmp_path).start()
    try:
        out, repro_cmd = lldb_live(lldb, stub, noeh, tmp_path, breakpoint=[bp], timeout=LLDB_TIMEOUT,
                                   before=before,
                                   commands=[command, "sframe status"])
    except pytest.fail.Exception as exc:
        if "timed out" in str(exc):
            _LLDB_HUNG[lldb_name] = entry["path"]
        raise
    finally:
        stub.close()
    got = [f.pc for f in parse_lldb_frames(out, start=f"(lldb) {command}", first_pc=want.pcs[0])]
    detail = (f"repro: {repro_cmd}\noutput:\n{out[-4000:]}\n"
              f"got: {[hex(pc) for pc in got]}\nexpected (twin):\n{want.show()}")
    assert "Traceback" not in out and "sframe: cannot load" not in out, detail
    # Every ABI takes the native route: LLDB's own unwinder reads the
    # generated .debug_frame (the frame provider serves no module here).
    assert f"{noeh.name}: LLDB's own unwinder" in out, detail
    if command == "sframe bt" or arch == "s390x":
        # ``sframe bt`` walks SFrame only: it ends in libc's start code, which
        # has none (__libc_start_call_main is its last frame). On s390x lldb's
        # own unwinder cannot go on from there either (alone it stops at #0).
        n = len(PROGRAM)
        if not (got == want.pcs[:len(got)] and len(got) >= n):
            pytest.fail(f"{command} is not the twin's chain through main\n{detail}", pytrace=False)
    elif got != want.pcs:
        # plain bt on aarch64: lldb alone unwinds libc's start code (it does
        # without the plugin), so the provider must not lose those frames.
        pytest.fail(f"bt (frame provider) is not the twin's chain\n{detail}", pytrace=False)


@pytest.mark.lldb
@pytest.mark.parametrize("entry", S390X)
def test_lldb_s390x_without_plugin_stops(entry: Entry | None, tmp_path: Path) -> None:
    """What the lldb tests prove on s390x: lldb alone gives frame #0 only."""
    entry = require(entry)
    lldb = any_lldb()
    _, noeh = twin_noeh(entry)
    want = live_oracle(entry, "s390x", gdb_multiarch(), tmp_path)
    stub = QemuStub("s390x", noeh, cwd=tmp_path).start()
    try:
        out, repro_cmd = lldb_live(lldb, stub, noeh, tmp_path, timeout=LLDB_TIMEOUT,
                                   breakpoint=[f"breakpoint set -a {want.pcs[0]:#x}"], commands=["bt"])
    finally:
        stub.close()
    got = [f.pc for f in parse_lldb_frames(out, start="(lldb) bt", first_pc=want.pcs[0])]
    assert got, f"lldb did not stop at {want.pcs[0]:#x}\n{repro_cmd}\n{out[-3000:]}"
    # measured with lldb 21-23: frame #0 only
    assert len(got) < len(PROGRAM), f"lldb unwinds s390x .noeh alone now: {got}\n{repro_cmd}"


# -- sframe to-dwarf: plain gdb with the symbol file, no plugin ---------------------


def _gdb_once(gdb: str, arch: str, exe: Path, workdir: Path, before: list[str]) -> Trace:
    """One plain gdb session on a fresh qemu-user stub running ``exe``."""
    stub = QemuStub(arch, exe, cwd=workdir).start()
    try:
        return gdb_live(gdb, stub, exe, workdir, plugin=False, before=before)
    finally:
        stub.close()


@pytest.mark.parametrize("entry", ALL)
def test_gdb18_symbol_file_without_plugin(entry: Entry | None, tmp_path: Path) -> None:
    """gdb 18 without the plugin and without its prologue analyser, given
    ``sframe to-dwarf``'s file (``add-symbol-file``: these are static
    executables): the twin's frames down to main, from the generated
    ``.debug_frame`` alone (aarch64 with PAC A and B keys, s390x)."""
    from sframe_core.symfiles.symfile import write_symbol_file

    entry = require(entry)
    arch = entry["arch"]
    gdb = DEBUGGERS / "gdb-18"
    if not gdb.is_file():
        missing(f"{gdb} not found (scripts/setup.sh installs gdb 18)")
    twin, noeh = twin_noeh(entry)
    want = live_oracle(entry, arch, gdb_multiarch(), tmp_path)
    symbols = tmp_path / "noeh.sym"
    write_symbol_file(str(noeh), str(symbols))
    disable = [f'maint frame-unwinder disable -name "{PROLOGUE[arch]}"']
    got = _gdb_once(str(gdb), arch, noeh, tmp_path, [*disable, f"add-symbol-file {symbols}"])
    n = len(PROGRAM)
    if entry["pac"]:
        # gdb cannot strip PACs under qemu-user (no pauth mask from the stub):
        # it is wrong in the same way with the twin's own CFI. Same frames as
        # gdb on the twin is what the symbol file can promise there.
        want = _gdb_once(str(gdb), arch, twin, tmp_path, disable)
        # Each process signs with its own keys, and a signed address's PAC is
        # now and then all zeros (1 in 128): up to the first frame either
        # side shows signed, whose name gdb cannot find.
        signed = [next((i for i, f in enumerate(side.frames) if has_pac_bits(f.pc)), n - 1)
                  for side in (want, got)]
        n = min(signed) + 1
        assert n >= 3, fmt("gdb on the twin", want)
        # The PCs without the PACs; the names before that frame.
        assert [strip_pac(f.pc) for f in got.frames[:n]] == \
            [strip_pac(f.pc) for f in want.frames[:n]], (
                f"{fmt('gdb 18, symbol file', got)}\n{fmt('gdb 18, twin', want)}")
        assert [f.name for f in got.frames[:n - 1]] == [f.name for f in want.frames[:n - 1]], (
            f"{fmt('gdb 18, symbol file', got)}\n{fmt('gdb 18, twin', want)}")
        return
    assert got.frames[:n] == want.frames[:n], (
        f"{fmt('gdb 18, symbol file, no plugin, no prologue analyser', got)}\n"
        f"{fmt('expected (twin)', want)}\n{got.output[-3000:]}")


@pytest.mark.parametrize("entry", manifest_params(lambda e: _is_deep("aarch64")(e)
                                                  and bool(e["pac"])))
def test_lldb_symbol_file_pac(entry: Entry | None, tmp_path: Path) -> None:
    """LLDB 23 with ``sframe to-dwarf``'s file added (``target symbols add``)
    unwinds the PAC-signed .noeh (keys A and B) to _start as on the twin,
    with the generated ``.debug_frame`` (``DW_CFA_AARCH64_negate_ra_state``
    where SFrame says the RA is signed) as f2's unwind plan. (LLDB's own
    instruction emulation gets this small program right too: the test shows
    the symbol file never makes it worse.)"""
    from sframe_core.symfiles.symfile import write_symbol_file

    entry = require(entry)
    lldb = DEBUGGERS / "lldb-23"
    if not lldb.is_file():
        missing(f"{lldb} not found (scripts/setup.sh installs lldb 23)")
    _, noeh = twin_noeh(entry)
    want = live_oracle(entry, "aarch64", gdb_multiarch(), tmp_path)
    symbols = tmp_path / "noeh.sym"
    write_symbol_file(str(noeh), str(symbols))
    stub = QemuStub("aarch64", noeh, cwd=tmp_path).start()
    try:
        out, command = lldb_live(
            str(lldb), stub, noeh, tmp_path, commands=["bt", "image show-unwind -n f2"],
            breakpoint=[f"breakpoint set -a {want.frames[0].pc:#x}"],
            before=[f"settings set target.process.virtual-addressable-bits {AARCH64_VA_BITS}",
                    f"target symbols add {symbols}"])
    finally:
        stub.close()

    def plain(frames: list[Frame]) -> list[tuple[int, str]]:
        return [(f.pc, (f.name or "").split("`")[-1]) for f in frames]

    got = lldb_oracle_frames(out)
    assert "debug_frame UnwindPlan:" in out, out[-3000:]
    assert plain(got) == plain(want.frames), f"{got}\n{fmt('expected (twin)', want)}\n{command}"


# -- s390x: what is inside the caller frames (issue 10) -----------------------------
#
# gdb-multiarch at a deep stop: every callee-saved register (r6-r15, f8-f15)
# and every variable in scope, in every caller frame. The oracle is gdb's own
# DWARF unwinder on the twin (.eh_frame), without the plugin; ours is the
# plugin on .noeh (SFrame + the code analysis of sframe_core.analysis.saved). Each
# value ours shows must equal the oracle's; "unavailable" is allowed.

S390X_BZIP2 = FIXTURES / "realprogs" / "s390x" / "bzip2" / "bzip2"
S390X_VALUE_STOPS = [("deep", "stop_here"), ("bzip2", "BZ2_hbAssignCodes"),
                     ("bzip2", "fallbackSort"), ("bzip2", "mainGtU")]
_OURS = "==== OURS ===="


def _s390x_program(name: str) -> tuple[Path, list[str]]:
    if name == "deep":
        return FIXTURES / "s390x" / "busid-v3" / "deep", []
    from helpers.realprogs import BZIP2_INPUT

    return S390X_BZIP2, ["-c", "-1", str(BZIP2_INPUT)]


def _s390x_values(exe: Path, args: list[str], workdir: Path, breakpoint: str, *, plugin: bool,
                  both: bool = False, steps: int = 0) -> list[list[Any]]:
    """The values dump(s) at ``breakpoint``'s first hit (``both``: gdb's own
    unwinder, then the plugin's, in the same process; ``steps``: that again
    after each of so many ``nexti``)."""
    from helpers.gdbtools import VALUES_SCRIPT, parse_values

    def dumps() -> list[str]:
        if not both:
            return [f"source {VALUES_SCRIPT}", f"echo {_OURS}\\n"]
        return ["set sframe mode off", "maint flush register-cache", "set $values_fpr_oracle = 1",
                f"source {VALUES_SCRIPT}", f"echo {_OURS}\\n", "set $values_fpr_oracle = 0",
                "set sframe mode always", "maint flush register-cache",
                f"source {VALUES_SCRIPT}", f"echo {_OURS}\\n"]

    after = ["set $values_depth = 6"] if steps else []
    if not plugin:
        after.append("set $values_fpr_oracle = 1")  # see helpers/gdb_values.py
    after += dumps()
    for _ in range(steps):
        after += ["nexti"] + dumps()
    stub = QemuStub("s390x", exe, args, cwd=workdir, same_layout=True).start()
    try:
        trace = gdb_live(gdb_multiarch(), stub, exe, workdir, plugin=plugin, after_stop=after,
                         breakpoint=breakpoint)
    finally:
        stub.close()
    assert "Traceback" not in trace.output and "Python Exception" not in trace.output, \
        fmt("python errors", trace)
    # Each dump ends with the marker; what follows the last one is gdb_live's bt.
    return [parse_values(chunk) for chunk in trace.output.split(_OURS)[:-1]]


@pytest.mark.parametrize(("name", "breakpoint"), S390X_VALUE_STOPS)
def test_gdb_s390x_caller_frame_values(name: str, breakpoint: str, tmp_path: Path) -> None:
    """.noeh with the plugin against the twin under gdb alone, same stop. Both
    files are run under the same path (argv[0] and so the stack are the same)."""
    from helpers.gdbtools import compare_values

    need_plugin(GDB_PLUGIN)
    twin, args = _s390x_program(name)
    noeh = twin.with_name(twin.name + ".noeh")
    assert twin.is_file() and noeh.is_file(), f"missing fixture {twin} or {noeh}"
    if args:
        # bzip2 fstat()s its input (compress's statBuf): one copy for both
        # runs, its access time already after its mtime, so that the first
        # run's read does not change it for the second (relatime).
        source = Path(args[-1])
        copy = tmp_path / source.name
        copy.write_bytes(source.read_bytes())
        st = copy.stat()
        os.utime(copy, (st.st_mtime + 60, st.st_mtime))
        args = [*args[:-1], str(copy)]
    runs = []
    for kind, src, plugin in (("twin", twin, False), ("noeh", noeh, True)):
        work = tmp_path / kind
        work.mkdir()
        exe = work / "prog"
        exe.write_bytes(src.read_bytes())
        exe.chmod(0o755)
        runs.append(_s390x_values(exe, args, work, breakpoint, plugin=plugin)[0])
    native, ours = runs
    assert len(native) >= 4, native
    shown, same = compare_values(native, ours, f"s390x {name} at {breakpoint}")
    regs = sum(1 for f in native[1:] for k, v in f.items.items()
               if k.startswith("REG ") and v != "<unavailable>")
    print(f"s390x {name} at {breakpoint}: {same} of {shown} caller-frame values shown "
          f"({regs} registers)")
    assert same >= 0.9 * shown, (same, shown)


def test_gdb_s390x_nexti_values_match(tmp_path: Path) -> None:
    """Every instruction from BZ2_hbMakeCodeLengths' entry (stmg, r14 pointed
    below the register save area, std of f8-f15 through it) into its body:
    the caller frames' registers and variables, gdb's unwinder against ours
    on the twin at each."""
    from helpers.gdbtools import compare_values

    need_plugin(GDB_PLUGIN)
    _, args = _s390x_program("bzip2")
    chunks = _s390x_values(S390X_BZIP2, args, tmp_path, "*BZ2_hbMakeCodeLengths", plugin=True,
                           both=True, steps=40)
    pairs = list(zip(chunks[0::2], chunks[1::2], strict=False))
    assert len(pairs) == 41, len(pairs)
    shown = same = 0
    for step, (native, ours) in enumerate(pairs):
        assert native and native[0].name == "BZ2_hbMakeCodeLengths", (step, native[:1])
        s, m = compare_values(native, ours, f"step {step} at {native[0].pc:#x}")
        shown += s
        same += m
    print(f"s390x nexti BZ2_hbMakeCodeLengths: {same} of {shown} caller-frame values shown")
    assert same >= 0.9 * shown, (same, shown)
