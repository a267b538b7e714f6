"""The LLDB adapter against real LLDB 21/22/23 (lldb-for-pwndbg wrappers in .debuggers/bin).

Frame providers (plain ``bt``) need LLDB 22+; ``sframe bt`` works on all.
A missing debugger skips, or fails when CI=true. Expected backtraces come
from the same LLDB, without the plugin, on the twin that has ``.eh_frame``.
These tests run with the native route off (``SFRAME_LLDB_ROUTE=provider``):
the provider is what serves modules the route cannot (test_lldb_route.py
tests the route).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import X86, corrupt_sframe_version, missing, need
from helpers.lldbtools import (
    PLUGIN,
    Session,
    break_command,
    command_output,
    hang_report,
    parse_bt,
    run_lldb,
    symbol_address,
)

pytestmark = pytest.mark.lldb


@pytest.fixture(autouse=True)
def _provider_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SFRAME_LLDB_ROUTE", "provider")


PROVIDER_VERSIONS = ["22", "23"]
ALL_VERSIONS = ["21", "22", "23"]
DEEP_PRODUCERS = ["bu2.40-v1", "bu2.44-v2", "bu2.44-v2pcrel", "busid-v3"]


def _cases() -> list[tuple[str, str, str]]:
    cases = [(p, "deep.noeh.stripped", "deep") for p in DEEP_PRODUCERS]
    cases.append(("busid-v3", "realign.noeh", "realign"))
    cases.append(("busid-v3", "realign.noeh.stripped", "realign"))
    return cases


def _bt(version: str, binary: Path, twin: Path, *, plugin: bool, command: str = "bt",
        args: str = "") -> list:
    out = run_lldb(version, [f"target create {binary}", break_command(binary, twin),
                             f"process launch -- {args}".rstrip(), command], plugin=plugin)
    assert "Traceback" not in out, out
    _TRANSCRIPTS[plugin] = out
    return parse_bt(command_output(out, command))


# The last transcript with and without the plugin, shown when a comparison fails.
_TRANSCRIPTS: dict[bool, str] = {}


def _expected(version: str, twin: Path, args: str = "") -> list:
    frames = _bt(version, twin, twin, plugin=False, args=args)
    assert len(frames) >= 4, frames
    return frames


def _same(got: list, want: list, binary: Path) -> None:
    assert [f.pc for f in got] == [f.pc for f in want], (
        f"{got}\n{want}\nwith the plugin:\n{_TRANSCRIPTS.get(True, '')[-4000:]}")
    if not binary.name.endswith(".stripped"):
        for g, w in zip(got, want, strict=True):
            if g.module == binary.name:
                assert g.name == w.name, (g, w)


@pytest.mark.parametrize("version", PROVIDER_VERSIONS)
@pytest.mark.parametrize("producer,name,twin_name", _cases())
def test_plain_bt_matches_twin(version: str, producer: str, name: str, twin_name: str) -> None:
    binary, twin = need(X86 / producer / name), need(X86 / producer / twin_name)
    want = _expected(version, twin)
    got = _bt(version, binary, twin, plugin=True)
    _same(got, want, binary)
    native = _bt(version, binary, twin, plugin=False)
    assert [f.pc for f in native] != [f.pc for f in want], "native LLDB already unwinds this"


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("producer,name,twin_name",
                         [("busid-v3", "deep.noeh.stripped", "deep"),
                          ("bu2.40-v1", "deep.noeh.stripped", "deep"),
                          ("busid-v3", "realign.noeh", "realign")])
def test_sframe_bt_matches_twin(version: str, producer: str, name: str, twin_name: str) -> None:
    binary, twin = need(X86 / producer / name), need(X86 / producer / twin_name)
    want = _expected(version, twin)
    got = _bt(version, binary, twin, plugin=True, command="sframe bt")
    _same(got, want, binary)


@pytest.fixture(scope="module")
def cores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    gdb = shutil.which("gdb")
    if gdb is None:
        missing("gdb (for gcore) is missing")
    out = tmp_path_factory.mktemp("cores")
    made = {}
    for name in ("deep", "deep.noeh.stripped"):
        binary = need(X86 / "busid-v3" / name)
        core = out / f"{name}.core"
        subprocess.run([gdb, "-nx", "-batch", "-ex", "run", "-ex", f"gcore {core}",
                        "--args", str(binary), "abort"], capture_output=True, timeout=120)
        if not core.exists():
            missing("gcore made no core file")
        made[name] = core
    return made


# LLDB 23 prints a core's thread status from its event thread at times of its
# own choosing; now and then it lands inside the transcript in a way the
# parser cannot tell from ours (seen about 1 run in 14 under load, frames
# right every time). Rerun, not skipped: a wrong frame still fails every run.
_OUTPUT_RACE = pytest.mark.flaky(reruns=2)


@_OUTPUT_RACE
@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_core_file_sframe_bt(version: str, cores: dict[str, Path]) -> None:
    twin = X86 / "busid-v3" / "deep"
    binary = X86 / "busid-v3" / "deep.noeh.stripped"
    want = parse_bt(command_output(run_lldb(version, [
        f"target create {twin} --core {cores['deep']}", "bt"], plugin=False), "bt"))
    out = run_lldb(version, [f"target create {binary} --core {cores['deep.noeh.stripped']}",
                             "sframe bt"])
    assert "Traceback" not in out
    got = parse_bt(_last_backtrace(command_output(out, "sframe bt")))
    assert len(want) >= 8
    assert [f.pc for f in got] == [f.pc for f in want], out


def _last_backtrace(text: str) -> str:
    """The backtrace in ``text`` from its selected frame 0 on: with a core,
    LLDB's event thread prints a thread status of its own (frame 0, not
    marked selected) when the provider is registered, and it can land inside
    the next command's output, before or after ours."""
    start = max(text.rfind("* frame #0:"), 0)
    rest = text[start:]
    end = rest.find("thread #")  # a status printed after ours starts with its thread line
    return rest if end < 0 else rest[:end]


CORE_22 = ("sframe: core file: plain 'bt' is not changed with this LLDB "
           "(no SBProcess.IsLiveDebugSession); use 'sframe bt'")


@_OUTPUT_RACE
@pytest.mark.parametrize("version", PROVIDER_VERSIONS)
@pytest.mark.parametrize("order", ["plugin-first", "core-first"])
def test_core_file_plain_bt(version: str, order: str, cores: dict[str, Path]) -> None:
    """Plain ``bt`` on a core, with the plugin imported before or after the
    core is loaded (stop-hook or import registration). LLDB 22.1.0 builds a
    provider's frames for a core on two threads at once (frame 0 twice, its
    own frames out of order afterwards): there no provider is registered."""
    twin = X86 / "busid-v3" / "deep"
    binary = X86 / "busid-v3" / "deep.noeh.stripped"
    want = parse_bt(command_output(run_lldb(version, [
        f"target create {twin} --core {cores['deep']}", "bt"], plugin=False), "bt"))
    load = f"target create {binary} --core {cores['deep.noeh.stripped']}"
    plugin = f"command script import {PLUGIN}"
    commands = [plugin, load] if order == "plugin-first" else [load, plugin]
    if version == "22":
        native = parse_bt(command_output(run_lldb(version, [load, "bt"], plugin=False), "bt"))
        out = run_lldb(version, commands + ["bt", "sframe status"], plugin=False)
        assert "Traceback" not in out
        assert CORE_22 in out, out
        assert parse_bt(command_output(out, "bt")) == native  # LLDB's own, untouched
        assert [f.pc for f in native] != [f.pc for f in want]  # ... and wrong
        assert "not used for core files" in command_output(out, "sframe status")
        return
    out = run_lldb(version, commands + ["bt", "frame select 5", "sframe status"], plugin=False)
    assert "Traceback" not in out
    got = parse_bt(_last_backtrace(command_output(out, "bt")))
    assert [f.pc for f in got] == [f.pc for f in want], out
    assert f"frame #5: {want[5].pc:#018x}" in command_output(out, "frame select 5"), out
    assert "registered for this target" in command_output(out, "sframe status")


# LLDB 23 with the plugin as it was deadlocked about once in 5 rounds here
# (each round loads the core once more and imports the plugin again).
IMPORT_ROUNDS = 25
IMPORT_BUDGET = 45.0  # seconds: the test stops adding rounds after this


def test_import_on_a_core_never_hangs(tmp_path: Path) -> None:
    """LLDB 23, a core of a program stopped after a longjmp, the plugin imported
    right after the core loads: LLDB's event-handler thread makes the frame
    provider (holding the thread's frame-list lock) while this import's SB calls
    hold the target's API lock. The provider's constructor and a core's frames
    make no SB call that locks, and the import asks for no frames once the
    provider is registered: no deadlock, however the two threads interleave."""
    import time

    import pexpect
    from helpers.host_programs import build
    from helpers.oracle import gdb_run

    program = build("longjmp", tmp_path).noeh
    core = tmp_path / "longjmp.core"
    gdb_run(program, [], tmp_path, core=core, pcs=False)
    session = Session("23", plugin=False, timeout=20)
    start = time.monotonic()
    try:
        for round_ in range(IMPORT_ROUNDS):
            for command in (f"target create {program} --core {core}",
                            f"command script import {PLUGIN}"):
                try:
                    out = session.cmd(command)
                except pexpect.TIMEOUT:
                    pytest.fail(f"lldb-23 hung in round {round_} at {command!r}; its threads:\n"
                                + hang_report(session.child))
                assert "Traceback" not in out, out
            if time.monotonic() - start > IMPORT_BUDGET:
                break
        # LLDB's event thread prints each core's stop as it pleases, into the
        # output of later commands: wait for the frames themselves.
        session.child.sendline("bt")
        session.child.expect(r"frame #1: 0x[0-9a-f]+ longjmp\.noeh`after[^\n]*\n[^\n]*"
                             r"frame #2: 0x[0-9a-f]+ longjmp\.noeh`main")
    finally:
        session.close()


@pytest.mark.parametrize("version", PROVIDER_VERSIONS)
def test_threads_bt_all(version: str) -> None:
    twin = need(X86 / "busid-v3" / "threads")
    binary = need(X86 / "busid-v3" / "threads.noeh.stripped")

    def stacks(path: Path, plugin: bool, command: str) -> list[list[int]]:
        out = run_lldb(version, [f"target create {path}", break_command(path, twin),
                                 "process launch", command], plugin=plugin)
        text = command_output(out, command)
        per_thread = [parse_bt(chunk) for chunk in text.split("thread #")[1:]]
        # Each worker polls (usleep loop), so where exactly it is in libc and in
        # stop_here_thread depends on timing: compare its callers from there on.
        chains = []
        for frames in per_thread:
            own = [k for k, f in enumerate(frames) if f.module == path.name]
            assert own, frames
            chains.append([f.pc for f in frames[own[0] + 1:]])
        return sorted(chains)

    want = stacks(twin, False, "bt all")
    assert len(want) == 4
    assert stacks(binary, True, "sframe bt --all") == want
    assert stacks(binary, True, "bt all") == want


@pytest.mark.parametrize("version", PROVIDER_VERSIONS)
def test_uselib_library_without_eh_frame(version: str) -> None:
    twin = need(X86 / "busid-v3" / "uselib")
    binary = need(X86 / "busid-v3" / "uselib-libnoeh" / "uselib")
    want = _expected(version, twin)
    got = _bt(version, binary, twin, plugin=True)
    assert [f.pc for f in got] == [f.pc for f in want], (
        f"{got}\n{want}\nwith the plugin:\n{_TRANSCRIPTS.get(True, '')[-4000:]}")
    assert any(f.module and f.module.startswith("libsf") for f in got)


@pytest.mark.parametrize("version", PROVIDER_VERSIONS)
def test_up_down_across_provided_frames(version: str) -> None:
    twin = need(X86 / "busid-v3" / "deep")
    binary = need(X86 / "busid-v3" / "deep.noeh.stripped")
    want = _expected(version, twin)
    session = Session(version)
    try:
        session.cmd(f"target create {binary}")
        session.cmd(break_command(binary, twin))
        session.cmd("process launch")
        session.cmd("bt")
        out = session.cmd("up")
        assert f"frame #1: 0x{want[1].pc:016x}" in out, out
        out = session.cmd("up")
        assert f"frame #2: 0x{want[2].pc:016x}" in out, out
        out = session.cmd("down")
        assert f"frame #1: 0x{want[1].pc:016x}" in out, out
        out = session.cmd("frame select 4")
        assert f"frame #4: 0x{want[4].pc:016x}" in out, out
    finally:
        session.close()


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_import_twice_info_lookup(version: str) -> None:
    binary = need(X86 / "busid-v3" / "deep.noeh.stripped")
    twin = X86 / "busid-v3" / "deep"
    addr = symbol_address(twin, "f4")
    out = run_lldb(version, [
        f"command script import {Path(__file__).resolve().parent.parent / 'lldb_plugin'}",
        f"target create {binary}", break_command(binary, twin), "process launch",
        "sframe info", f"sframe lookup {0x555555554000 + addr + 1:#x}", "sframe status",
        "sframe bt -c 2", "sframe lookup nonsense"])
    assert "Traceback" not in out
    assert "SFrame v3, ABI amd64" in command_output(out, "sframe info")
    assert ".eh_frame absent" in command_output(out, "sframe info")
    assert "CFA = " in out
    assert "error:" in command_output(out, "sframe lookup nonsense")
    assert len(parse_bt(command_output(out, "sframe bt -c 2"))) == 2
    status = command_output(out, "sframe status")
    if version == "21":
        assert "not available" in status
        assert out.count("use 'sframe bt'") >= 1
    else:
        assert "registered" in status


def test_missing_dependencies_one_line(tmp_path: Path) -> None:
    """Without pyelftools reachable, the import says so in one line."""
    version = "23"
    import sys
    copy = tmp_path / "lldb_plugin"
    shutil.copytree(Path(__file__).resolve().parent.parent / "lldb_plugin", copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = run_lldb(version, [f"command script import {copy}", "sframe bt"], plugin=False,
                   env={"HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"})
    assert "Traceback" not in out
    # LLDB may draw its status line ("no target") on the same terminal line first.
    lines = [line for line in out.splitlines() if "sframe: cannot load" in line]
    assert len(lines) == 1, out
    assert sys is not None


@pytest.mark.parametrize("version", ["21", "23"])
def test_corrupt_sframe_reported_once(version: str, tmp_path: Path) -> None:
    """A corrupt .sframe: one line, no traceback, no hang; the rest still works."""
    twin = need(X86 / "busid-v3" / "deep")
    binary = corrupt_sframe_version(need(X86 / "busid-v3" / "deep.noeh.stripped"),
                                    tmp_path / "deep.noeh.stripped")
    commands = [f"target create {binary}", break_command(binary, twin), "process launch",
                "bt", "sframe bt", "sframe info", "sframe bt"]
    out = run_lldb(version, commands)
    assert "Traceback" not in out
    assert sum("deep.noeh.stripped" in line and "sframe:" in line and "ignored" in line
               for line in out.splitlines()) == 1, out
    assert len(parse_bt(command_output(out, "sframe bt", 0))) >= 1


@pytest.mark.parametrize("version,command", [("21", "sframe bt"), ("22", "bt"), ("22", "sframe bt"),
                                             ("23", "bt"), ("23", "sframe bt")])
@pytest.mark.parametrize("mode", ["usr1", "raise"])
def test_through_signal_frame(version: str, command: str, mode: str) -> None:
    """handler -> __restore_rt -> the interrupted g2 (no libc, or libc frames between)."""
    twin = need(X86 / "busid-v3" / "sig")
    binary = need(X86 / "busid-v3" / "sig.noeh.stripped")
    handle = "process handle SIGUSR1 -s false -p true -n false"

    def frames(path: Path, plugin: bool, cmd: str) -> list:
        out = run_lldb(version, [f"target create {path}", handle, break_command(path, twin),
                                 f"process launch -- {mode}", cmd], plugin=plugin)
        assert "Traceback" not in out
        return parse_bt(command_output(out, cmd))

    want = frames(twin, False, "bt")
    assert any(f.name == "__restore_rt" for f in want), want
    got = frames(binary, True, command)
    assert [f.pc for f in got] == [f.pc for f in want], (
        f"{got}\n{want}\nwith the plugin:\n{_TRANSCRIPTS.get(True, '')[-4000:]}")
    assert [f.name for f in got if f.module == "libc.so.6"][:1] == \
        [f.name for f in want if f.module == "libc.so.6"][:1]
