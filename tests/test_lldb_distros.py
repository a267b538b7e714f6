"""LLDB as distributions ship it: Debian's lldb-14/16/19/22 and PyPI's 20, against the twin.

examples/demo.c built as scripts/demo.sh builds it (-O2 -g, SFrame on),
the same at -g0, and stripped (``strip --strip-all``), each in a ``twin/``
(with ``.eh_frame``) and a ``noeh/`` directory under the same file name, so
that the two processes start with the same stack and every printed value
can be compared as text. Each cell is one batch LLDB on the twin without
the plugin and one on the ``.noeh`` file with it: ``bt``, ``frame select
2``, ``register read`` and ``frame variable`` (read_records, whose
variables live in registers parse_record saved) must be the twin's, or
where no route serves, ``sframe status`` must say so in one true line and
``sframe bt`` must have the twin's pcs. The versions are the ones
scripts/setup.sh installs on this Debian suite (``debian_lldbs``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, missing, without_eh_frame
from helpers.lldbtools import PLUGIN, command_output, major, parse_bt, run_lldb

pytestmark = pytest.mark.lldb

ASKED = ["bt", "frame select 2", "register read rbx rbp r12 r13", "frame variable"]


def debian_lldbs() -> list[str]:
    """Debian's LLDBs setup.sh unpacks on this suite (12: 14, 16, 19, 22; 13: 19, 22)."""
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    found = re.search(r'^VERSION_ID="?(\d+)', release, re.M)
    if found is None or found.group(1) == "12":
        return ["deb14", "deb16", "deb19", "deb22"]
    return ["deb19", "deb22"]


VERSIONS = [*debian_lldbs(), "20"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """twin/ and noeh/ builds of examples/demo.c: demo (-g), demog0, demost (stripped)."""
    for tool in ("gcc", "objcopy", "strip"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed (scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp("distros")
    source = ROOT / "examples" / "demo.c"
    flags = ["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"]
    for side in ("twin", "noeh"):
        out = root / side
        out.mkdir()
        subprocess.run(["gcc", *flags, "-g", str(source), "-o", str(out / "demo")], check=True)
        subprocess.run(["gcc", *flags, "-g0", str(source), "-o", str(out / "demog0")], check=True)
        subprocess.run(["strip", "--strip-all", "-o", str(out / "demost"), str(out / "demog0")],
                       check=True)
        if side == "noeh":
            for name in ("demo", "demog0", "demost"):
                without_eh_frame(out / name)
    return root


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Symbol files and module copies in a cache of the module's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "distros-cache"))


def _stop_here(demo: Path, name: str) -> str:
    if name != "demost":
        return "breakpoint set -n stop_here"
    out = subprocess.run(["nm", str(demo / "twin" / "demog0")], capture_output=True, text=True,
                         check=True).stdout
    address = next(int(f[0], 16) for f in map(str.split, out.splitlines())
                   if len(f) == 3 and f[2] == "stop_here")
    return f"breakpoint set -a {address:#x} -s demost"


def _normal(text: str) -> str:
    """A command's output without what differs by design: the directory,
    process ids, source listings, and LLDB's asynchronous breakpoint news
    ("1 location added to breakpoint 1", printed as a library loads,
    wherever the output then is)."""
    text = text.replace("/twin/", "/X/").replace("/noeh/", "/X/")
    lines = []
    for line in text.splitlines():
        if (line.startswith(("Process ", "->", "sframe:")) or re.match(r"^\s+\d+\s", line)
                or re.match(r"^\d+ locations? added to breakpoint \d+$", line)
                or re.match(r"^\s+\^\s*$", line) or not line.strip()):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines)


def _cell(version: str, demo: Path, name: str, *, core: bool = False, driver: bool = False,
          create: str = "sframe create") -> tuple[str, str]:
    """The twin's transcript (plain LLDB) and the .noeh file's (the plugin;
    ``create`` makes the target, or with ``driver`` LLDB's own ``lldb
    FILE``, the plugin imported before it as from ``~/.lldbinit``)."""
    def commands(side: str, create: str) -> list[str]:
        path = demo / side / name
        if core:
            return [f"{create} {path} --core {demo / side / name}.core", *ASKED]
        made = [] if driver else [f"{create} {path}"]
        return [*made, _stop_here(demo, name), "process launch", *ASKED]

    def program(side: str) -> str | None:
        return str(demo / side / name) if driver else None
    want = run_lldb(version, commands("twin", "target create"), plugin=False,
                    program=program("twin"))
    got = run_lldb(version, [*commands("noeh", create), "sframe status", "sframe bt"],
                   program=program("noeh"))
    assert "Traceback" not in got, got
    return want, got


def _same(want: str, got: str, commands: list[str]) -> None:
    for command in commands:
        assert _normal(command_output(want, command)) == _normal(command_output(got, command)), (
            f"'{command}' differs from the twin's:\n-- twin:\n{want[-3000:]}\n-- .noeh with the "
            f"plugin:\n{got[-3000:]}")


def _status(got: str) -> str:
    return command_output(got, "sframe status")


@pytest.mark.parametrize("version", VERSIONS)
def test_live_g(version: str, demo: Path) -> None:
    """-O2 -g started as ``lldb FILE``: the twin's frames, registers and
    variables (before 22 the plugin, imported first, puts the module copy
    with the SFrame rows where LLDB's ``target create`` finds it: ``seed``),
    and LLDB's "Current executable" line names FILE."""
    want, got = _cell(version, demo, "demo", driver=True)
    _same(want, got, ASKED)
    status = _status(got)
    assert "demo: LLDB's own unwinder, .debug_frame from SFrame" in status, got
    assert f"Current executable set to '{demo / 'noeh' / 'demo'}'" in got, got
    if major(version) < 22:
        assert "found it in its module list" in status, got


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("create", ["sframe create", "target create"])
def test_live_g0(version: str, create: str, demo: Path) -> None:
    want, got = _cell(version, demo, "demog0", create=create)
    _same(want, got, ASKED)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("create", ["lldb FILE", "target create"])
def test_stripped(version: str, create: str, demo: Path) -> None:
    """Stripped, started as ``lldb FILE`` or with a ``target create`` typed
    after the import: the module is made with its symbol file from the start
    (``seed``), so LLDB's symbol table has the file's function symbols: the
    twin's pcs, registers and variables everywhere (14 and 16 had no unwind
    plan from a file added later), and the twin's names: 14-20 number their
    unnamed symbols (``___lldb_unnamed_symbol17``), and get a file whose
    symbol table is numbered as the twin's."""
    want, got = _cell(version, demo, "demost", driver=create == "lldb FILE", create=create)
    twin = parse_bt(command_output(want, "bt"))
    assert len(twin) == 8, want
    assert [f.pc for f in parse_bt(command_output(got, "sframe bt"))] == [f.pc for f in twin], got
    _same(want, got, ASKED)
    unnamed = "___lldb_unnamed_symbol" + ("_" if major(version) >= 21 else "")
    assert sum(bool(f.name and f.name.startswith(unnamed)) for f in twin) >= 3, want


# Every LLDB here: Debian's and PyPI's 20 (VERSIONS), and PyPI's 21-23.
ALL_VERSIONS = [*VERSIONS, "21", "22", "23"]


def _late_import(version: str, path: Path, commands: list[str], *, plugin: bool) -> str:
    """``target create PATH``, then (``plugin``) the plugin's import, then ``commands``."""
    imported = [f"command script import {PLUGIN}"] if plugin else []
    return run_lldb(version, [f"target create {path}", *imported, *commands], plugin=False)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_stripped_imported_after_target_create(version: str, demo: Path) -> None:
    """Stripped, the plugin imported after ``target create``: LLDB made the
    module before the symbol file came, so the plugin makes it again with
    the file (no process yet: ``seed.remake``): the twin's names, frames,
    registers and variables."""
    def commands(side: str) -> list[str]:
        return [_stop_here(demo, "demost"), "process launch", *ASKED]
    want = _late_import(version, demo / "twin" / "demost", commands("twin"), plugin=False)
    got = _late_import(version, demo / "noeh" / "demost", [*commands("noeh"), "sframe status"],
                       plugin=True)
    assert "Traceback" not in got, got
    assert len(parse_bt(command_output(want, "bt"))) == 8, want
    _same(want, got, ASKED)
    assert "demost: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got
    assert "not named" not in _status(got), got


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_stripped_imported_after_a_breakpoint(version: str, demo: Path) -> None:
    """A breakpoint in the stripped module before the import: the module is
    not made again (its address breakpoint would find no location in the new
    one), and ``sframe status`` says in one line what LLDB lacks: from 19 the
    frames are the twin's and the line says the names are not; 14 and 16
    make no unwind plan from a file added late, which the line says."""
    path = demo / "noeh" / "demost"
    got = run_lldb(version, [f"target create {path}", _stop_here(demo, "demost"),
                             f"command script import {PLUGIN}", "process launch", "bt",
                             "sframe status", "sframe bt"], plugin=False)
    twin = [f.pc for f in parse_bt(command_output(run_lldb(
        version, [f"target create {demo / 'twin' / 'demost'}", _stop_here(demo, "demost"),
                  "process launch", "bt"], plugin=False), "bt"))]
    lines = [line for line in _status(got).splitlines() if line.startswith("demost:")]
    assert len(lines) == 1, got
    assert [f.pc for f in parse_bt(command_output(got, "sframe bt"))] == twin, got
    if major(version) < 19:
        assert f"not on the native route: LLDB {major(version)} took" in lines[0], got
        return
    assert [f.pc for f in parse_bt(command_output(got, "bt"))] == twin, got
    assert "are not named as on the twin" in lines[0], got


@pytest.fixture(scope="module")
def cores(demo: Path) -> Path:
    """gcore cores of demo (-g) and demog0 stopped in stop_here, twin's and .noeh's."""
    gdb = shutil.which("gdb")
    if gdb is None:
        missing("gdb is not installed (scripts/setup.sh installs it)")
    for side, name in [(side, name) for side in ("twin", "noeh") for name in ("demo", "demog0")]:
        path = demo / side / name
        subprocess.run([gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off",
                        "-ex", "break stop_here", "-ex", "run", "-ex", f"gcore {path}.core",
                        str(path)], capture_output=True, check=True, timeout=120,
                       env=dict(os.environ, SFRAME_GDB_SYMBOL_FILES="foreground"))
        assert Path(f"{path}.core").exists()
    return demo


@pytest.mark.parametrize("version", VERSIONS)
def test_core_g(version: str, cores: Path) -> None:
    """A core of the -g build, the plugin imported first: ``sframe create
    --core`` gives the twin's frames and values."""
    want, got = _cell(version, cores, "demo", core=True)
    _same(want, got, ASKED)


@pytest.mark.parametrize("version", VERSIONS)
def test_core_g0(version: str, cores: Path) -> None:
    """A core of the -g0 build: ``sframe create --core`` routes its modules
    at once (before 21 no stop-hook runs when a core loads)."""
    want, got = _cell(version, cores, "demog0", core=True)
    _same(want, got, ASKED)


@pytest.mark.parametrize("version", VERSIONS)
def test_core_g0_plain_create(version: str, cores: Path) -> None:
    """Plain ``target create --core``, the plugin imported first: plain
    ``bt`` is the twin's at once (the plugin runs before the command and
    puts the module, with its symbol file, where LLDB finds it), and
    ``sframe status`` says so."""
    twin, noeh = cores / "twin" / "demog0", cores / "noeh" / "demog0"
    want = run_lldb(version, [f"target create {twin} --core {twin}.core", "bt"], plugin=False)
    got = run_lldb(version, [f"target create {noeh} --core {noeh}.core", "bt", "sframe status",
                             "bt"])
    assert "demog0: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got
    _same(want, got, ["bt"])
    assert _normal(command_output(got, "bt", 0)) == _normal(command_output(want, "bt")), got


@pytest.mark.parametrize("version", [v for v in VERSIONS if major(v) < 22])
def test_core_g_plain_create(version: str, cores: Path) -> None:
    """Plain ``target create --core`` of the -g build, the plugin imported
    first: the twin's (the plugin, run before the command, puts the module
    copy where ``target create`` finds it; on 14 and 16 through the C++
    override, ``overrides._sb_set_override``)."""
    path, twin = cores / "noeh" / "demo", cores / "twin" / "demo"
    got = run_lldb(version, [f"target create {path} --core {path}.core", *ASKED, "sframe status"])
    want = run_lldb(version, [f"target create {twin} --core {twin}.core", *ASKED], plugin=False)
    _same(want, got, ASKED)
    assert "demo: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got


@pytest.mark.parametrize("name", ["demo", "demog0"])
@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_core_imported_after_target_create(version: str, name: str, cores: Path) -> None:
    """``target create --core`` first, the plugin imported after: the twin's.
    -g0: the symbol file is added as the plugin loads (no stop-hook runs
    when a core loads before 21). -g before 22: the target is made again
    from the module copy (``create.remake_core``), from the core LLDB says it
    loaded (``SBProcess.GetCoreFile``) or, on 14 and 16, the one it keeps
    mapped (``create.core_file``)."""
    path, twin = cores / "noeh" / name, cores / "twin" / name
    got = run_lldb(version, [f"target create {path} --core {path}.core",
                             f"command script import {PLUGIN}", *ASKED, "sframe status"],
                   plugin=False)
    want = run_lldb(version, [f"target create {twin} --core {twin}.core", *ASKED], plugin=False)
    assert "Traceback" not in got, got
    lines = [line for line in _status(got).splitlines() if line.startswith(f"{name}:")]
    assert len(lines) == 1, got
    _same(want, got, ASKED)
    assert lines[0].startswith(f"{name}: LLDB's own unwinder, .debug_frame from SFrame"), got


def _lldb14_as_shipped() -> None:
    """Debian's lldb-14 as installed: LLDB's own Python module is broken; the
    plugin says so in one line, with the PYTHONPATH that repairs it."""
    shipped = ROOT / ".debuggers" / "lldb-deb14" / "lldb-as-shipped"
    if not shipped.exists():
        missing(f"{shipped} is missing (run scripts/setup.sh)")
    proc = subprocess.run([str(shipped), "--no-lldbinit", "-b", "-o",
                           f"command script import {PLUGIN}"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, TERM="dumb"))
    text = proc.stdout + proc.stderr
    ours = [line for line in text.splitlines() if line.startswith("sframe:")]
    assert len(ours) == 1, text
    assert "LLDB's own Python module is broken" in ours[0], text
    assert re.search(r"repair it with PYTHONPATH=\S+/llvm-14/lib/python3\.\d+/dist-packages$",
                     ours[0]), ours[0]
    assert "SBCommandReturnObject" not in text


# Debian 13 has no lldb-14: the test exists where setup.sh installs it.
if "deb14" in debian_lldbs():
    test_lldb14_as_shipped = _lldb14_as_shipped


@pytest.fixture(scope="module")
def threads(demo: Path) -> Path:
    """tests/fixtures/src/threads.c at -O2 -g, twin's and .noeh's: three
    threads, each in its own call chain."""
    source = ROOT / "tests" / "fixtures" / "src"
    for side in ("twin", "noeh"):
        out = demo / side / "threads"
        subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-Wa,--gsframe", "-I",
                        str(source), str(source / "threads.c"), "-pthread", "-o", str(out)],
                       check=True)
        if side == "noeh":
            without_eh_frame(out)
    return demo


def _own_frames(text: str) -> list[list[tuple[int | None, str | None]]]:
    """Each thread's callers in the program itself (``bt all``), after its
    first frame there: where a polling thread is in its loop and in libc
    depends on timing."""
    chains = []
    for chunk in text.split("thread #")[1:]:
        frames = [(f.pc, f.name) for f in parse_bt(chunk) if f.module == "threads"]
        chains.append(frames[1:])
    return sorted(chains, key=repr)


@pytest.mark.parametrize("version", VERSIONS)
def test_threads_g(version: str, threads: Path) -> None:
    def commands(side: str, create: str) -> list[str]:
        return [f"{create} {threads / side / 'threads'}", "breakpoint set -n stop_here",
                "process launch", "bt all"]
    want = _own_frames(command_output(run_lldb(version, commands("twin", "target create"),
                                               plugin=False), "bt all"))
    got = _own_frames(command_output(run_lldb(version, commands("noeh", "sframe create")), "bt all"))
    assert len(want) == 4 and sum(map(bool, want)) >= 3, want
    assert got == want


@pytest.mark.parametrize("version", VERSIONS)
def test_attach_g(version: str, threads: Path) -> None:
    """Attach to the threads program (``sleep`` mode, ASLR off for both),
    started as ``lldb FILE`` then ``process attach -p PID``."""
    setarch = shutil.which("setarch")
    if setarch is None:
        missing("setarch is not installed (util-linux)")

    def frames(side: str, plugin: bool) -> list[list[tuple[int | None, str | None]]]:
        path = threads / side / "threads"
        proc = subprocess.Popen([setarch, "-R", str(path), "sleep"], stdout=subprocess.PIPE,
                                text=True)
        try:
            assert proc.stdout is not None and "READY" in proc.stdout.readline()
            out = run_lldb(version, [f"process attach -p {proc.pid}", "bt all",
                                     "process detach"], plugin=plugin, program=str(path))
        finally:
            proc.kill()
            proc.wait()
        return _own_frames(command_output(out, "bt all"))
    want = frames("twin", False)
    assert len(want) == 4 and sum(map(bool, want)) >= 3, want
    assert frames("noeh", True) == want


@pytest.fixture(scope="module")
def library(demo: Path) -> Path:
    """tests/fixtures/src/uselib.c and libsf.c at -O2 -g: the .noeh side's
    library without .eh_frame, its program with (a library of its own
    debug information: what the locate-module callback serves)."""
    source = ROOT / "tests" / "fixtures" / "src"
    flags = ["gcc", "-O2", "-g", "-fomit-frame-pointer", "-Wa,--gsframe", "-I", str(source)]
    for side in ("twin", "noeh"):
        out = demo / side
        subprocess.run([*flags, "-fPIC", "-shared", "-Wl,-soname,libsf.so", "-o",
                        str(out / "libsf.so"), str(source / "libsf.c")], check=True)
        subprocess.run([*flags, "-o", str(out / "uselib"), str(source / "uselib.c"), "-L",
                        str(out), "-lsf", "-Wl,-rpath,$ORIGIN"], check=True)
        if side == "noeh":
            without_eh_frame(out / "libsf.so")
    return demo


@pytest.mark.parametrize("version", VERSIONS)
def test_library_g(version: str, library: Path) -> None:
    """A -g library without .eh_frame: before 22 LLDB is given a copy of it
    with the SFrame rows as the module (by the locate-module callback from
    17; on 14 and 16, which have none, put in LLDB's module list with the
    program started as ``lldb FILE``); ``image show-unwind`` has the DWARF
    CFI plan, and the frames and values are the twin's."""
    def commands(side: str) -> list[str]:
        return ["breakpoint set -n stop_here", "process launch", *ASKED,
                "image show-unwind -n lib_b"]
    want = run_lldb(version, commands("twin"), plugin=False,
                    program=str(library / "twin" / "uselib"))
    got = run_lldb(version, [*commands("noeh"), "sframe status"],
                   program=str(library / "noeh" / "uselib"))
    _same(want, got, ASKED)
    assert "debug_frame UnwindPlan" in command_output(got, "image show-unwind -n lib_b"), got
    assert "libsf.so: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got


@pytest.fixture(scope="module")
def stripped_library(demo: Path) -> Path:
    """libsf.c at -O2 -g0, ``strip --strip-all``, in lib/ of twin/ and noeh/
    (the .noeh side's without .eh_frame), and uselib.c at -O2 -g beside it
    (with its .eh_frame): a stripped library whose exported functions LLDB
    names from ``.dynsym``, the rest after its own unnamed symbols."""
    source = ROOT / "tests" / "fixtures" / "src"
    flags = ["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-I", str(source)]
    for side in ("twin", "noeh"):
        out = demo / side / "lib"
        out.mkdir()
        subprocess.run([*flags, "-g0", "-fPIC", "-shared", "-Wl,-soname,libsf.so", "-o",
                        str(out / "libsf.so"), str(source / "libsf.c")], check=True)
        subprocess.run(["strip", "--strip-all", str(out / "libsf.so")], check=True)
        subprocess.run([*flags, "-g", "-o", str(out / "uselib"), str(source / "uselib.c"), "-L",
                        str(out), "-lsf", "-Wl,-rpath,$ORIGIN"], check=True)
        if side == "noeh":
            without_eh_frame(out / "libsf.so")
    return demo


@pytest.mark.parametrize("late", [False, True], ids=["first", "late"])
@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_stripped_library(version: str, late: bool, stripped_library: Path) -> None:
    """A stripped library without .eh_frame, the plugin imported first
    (``lldb FILE``) or after ``target create`` (the library is loaded at
    ``run``: the locate-module callback from 17, the module list on 14 and
    16, or the first stop): the twin's frames, registers and variables, and
    names (``.dynsym``'s ``lib_a``, ``lib_b``, ``lib_stop``, which the
    symbol file carries: LLDB reads no ``.dynsym`` beside its ``.symtab``)."""
    def commands() -> list[str]:
        return ["breakpoint set -n stop_here", "process launch", *ASKED]
    twin, noeh = (stripped_library / side / "lib" / "uselib" for side in ("twin", "noeh"))
    want = run_lldb(version, commands(), plugin=False, program=str(twin))
    if late:
        got = _late_import(version, noeh, [*commands(), "sframe status"], plugin=True)
    else:
        got = run_lldb(version, [*commands(), "sframe status"], program=str(noeh))
    assert "Traceback" not in got, got
    frames = parse_bt(command_output(want, "bt"))
    assert [f.name for f in frames if f.module == "libsf.so"] == ["lib_stop", "lib_b", "lib_a"]
    assert [f.pc for f in parse_bt(command_output(got, "bt"))] == [f.pc for f in frames], got
    _same(want, got, ASKED)
    assert "libsf.so: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got


@pytest.mark.parametrize("version", [*VERSIONS, "21"])
@pytest.mark.parametrize("create", ["target create", "file"])
def test_live_g_target_create(version: str, create: str, demo: Path) -> None:
    """The plugin runs before ``target create`` (and ``file``, its alias):
    one typed after the import gets the module copy too before 22 (put
    where LLDB looks), with the twin's frames, registers and variables."""
    def commands(side: str) -> list[str]:
        return [f"{create} {demo / side / 'demo'}", _stop_here(demo, "demo"),
                "process launch", *ASKED]
    want = run_lldb(version, commands("twin"), plugin=False)
    got = run_lldb(version, [*commands("noeh"), "sframe status"])
    _same(want, got, ASKED)
    assert "demo: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got
    assert f"Current executable set to '{demo / 'noeh' / 'demo'}'" in got, got
    if major(version) < 22:
        assert "found it in its module list" in _status(got), got


# lua5.4 -O2 -g (tests/fixtures/realprogs), large as far as the plugin is
# concerned: above this many FDEs a module's symbol file is "large"
# (sframe_core.symfiles.jobs.made_at_once), as tests/test_gdb_batch.py sends it to a worker.
LARGE = {"SFRAME_FOREGROUND_FDES": "300", "SFRAME_LLDB_SYMBOL_FILES": "auto"}


@pytest.mark.parametrize("version", [v for v in VERSIONS if major(v) < 22])
@pytest.mark.parametrize("create", ["lldb FILE", "target create"])
def test_large_g(version: str, create: str, tmp_path: Path) -> None:
    """A large -g program before 22: the plugin makes its module copy before
    LLDB creates the target (nothing would serve the module otherwise),
    says so in one line, and ``bt`` at a breakpoint is the twin's; the next
    session finds the copy cached and says nothing."""
    from helpers import need
    lua = ROOT / "tests" / "fixtures" / "realprogs" / "lua5.4"
    for side, name in (("twin", "lua5.4"), ("noeh", "lua5.4.noeh")):
        (tmp_path / side).mkdir()
        shutil.copy(need(lua / "busid-v3" / name), tmp_path / side / "lua5.4")
    env = {**LARGE, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def session(side: str, plugin: bool) -> str:
        path = str(tmp_path / side / "lua5.4")
        made = [] if create == "lldb FILE" else [f"target create {path}"]
        return run_lldb(version, [*made, "breakpoint set -n luaT_callTMres",
                                  f"process launch -o /dev/null -- -E {lua / 'deep.lua'}", "bt",
                                  *(["sframe status"] if plugin else [])],
                        plugin=plugin, env=env, program=path if create == "lldb FILE" else None)
    want = session("twin", False)
    assert len(parse_bt(command_output(want, "bt"))) > 20, want
    for first in (True, False):
        got = session("noeh", True)
        assert "Traceback" not in got, got
        _same(want, got, ["bt"])
        assert "found it in its module list" in _status(got), got
        said = [line for line in got.splitlines() if line.startswith("sframe:")]
        assert said == ([f"sframe: lua5.4: making LLDB's .debug_frame from the SFrame rows of its "
                         f"705 functions before LLDB reads the module (once: cached in "
                         f"{tmp_path / 'cache' / 'sframe-gdb' / 'symbols'} for next time)"]
                        if first else []), got


@pytest.mark.parametrize("version", [v for v in VERSIONS if major(v) < 19])
def test_target_create_without_the_override(version: str, demo: Path) -> None:
    """14 and 16 with the C++ override not found (its symbol name made
    wrong before the import): nothing runs before a typed ``target create``,
    as before the override, and ``sframe status`` says so in the true line
    (a) of docs/lldb.md, with no traceback."""
    path = demo / "noeh" / "demo"
    got = run_lldb(version, [
        f"script import sys; sys.path.insert(0, {str(ROOT)!r}); "
        "import lldb_plugin.overrides as o; o._SET_OVERRIDE = 'no_such_symbol'",
        f"command script import {PLUGIN}", f"target create {path}", _stop_here(demo, "demo"),
        "process launch", "sframe status", "sframe bt"], plugin=False)
    assert "Traceback" not in got, got
    status = _status(got)
    assert f"demo: not on the native route: LLDB {major(version)} loses a module's addresses" \
        in status, got
    assert "'sframe create " in status and "'sframe bt' has the SFrame frames" in status, got
    assert len(parse_bt(command_output(got, "sframe bt"))) == 8, got



def _plt(binary: Path, name: str) -> tuple[int, int]:
    """The file addresses of ``binary``'s ``.plt`` (its first entry) and of
    the stub of ``name`` there (``name@plt``)."""
    out = subprocess.run(["objdump", "-d", "-j", ".plt", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    first = re.search(r"^([0-9a-f]+) <", out, re.M)
    stub = re.search(rf"^([0-9a-f]+) <{re.escape(name)}@plt>:", out, re.M)
    assert first is not None and stub is not None, out
    return int(first.group(1), 16), int(stub.group(1), 16)


# Stopped in a PLT stub with lazy binding (the first call): at the stub's
# jump through the GOT, its push (where that jump lands), its jump to the
# first entry (the CFA 8 further: ld's 16-byte amd64 stub), and at that
# first entry's push and jump (reached by this call or an earlier one's).
# Frame 1 is the stub's caller.
PLT_ASKED = ["bt", "frame select 1", "register read rbx r12 r13", "frame select 2",
             "register read rbx rbp r12 r13", "frame variable", "frame select 0",
             "image show-unwind -a $pc"]


def _plt_cell(version: str, root: Path, program: str, module: str, stub: str,
              loaded_at: str | None = None, driver: bool = False) -> None:
    """``program`` under ``root``'s twin/ and noeh/ (``target create`` typed
    after the import, or with ``driver`` LLDB's own ``lldb FILE``), stopped
    in ``module``'s PLT (the stub of ``stub``, then the first entry): the
    twin's names, frames, registers and variables at every stop, and LLDB
    unwinds the stub's frame with the SFrame rows.
    ``loaded_at``: a function the program reaches once the module is loaded
    (before 21 LLDB resolves no address breakpoint in a module loaded later)."""
    first, at = _plt(root / "twin" / module, stub)
    stops = [at, at + 6, at + 11, first, first + 6]
    name = module.rsplit("/", 1)[-1]

    def commands(side: str) -> list[str]:
        out = [] if driver else [f"target create {root / side / program}"]
        if loaded_at is not None:
            out += [f"breakpoint set --one-shot true -n {loaded_at}", "process launch"]
        out += [f"breakpoint set -a {address:#x} -s {name}" for address in stops]
        out += ["process launch" if loaded_at is None else "process continue", *PLT_ASKED]
        for _ in stops[1:]:
            out += ["process continue", *PLT_ASKED]
        return out
    def path(side: str) -> str | None:
        return str(root / side / program) if driver else None
    want = run_lldb(version, commands("twin"), plugin=False, program=path("twin"))
    got = run_lldb(version, [*commands("noeh"), "sframe status"], program=path("noeh"))
    assert "Traceback" not in got, got
    for stop in range(len(stops)):  # in the order the program meets them
        twin = parse_bt(command_output(want, "bt", stop))
        address = next((a for a in stops if a & 0xfff == twin[0].pc & 0xfff), None)
        assert twin[0].module == name and address is not None, want
        assert (twin[0].name == stub) == (address >= at), want
        assert [f.pc for f in parse_bt(command_output(got, "bt", stop))] == [f.pc for f in twin]
        for command in PLT_ASKED[:-1]:
            assert _normal(command_output(want, command, stop)) == \
                _normal(command_output(got, command, stop)), (
                f"stop {stop} ({address:#x}): '{command}' differs from the twin's:\n-- twin:\n"
                f"{command_output(want, command, stop)}\n-- .noeh with the plugin:\n"
                f"{command_output(got, command, stop)}")
        plans = command_output(got, "image show-unwind -a $pc", stop)
        assert "debug_frame UnwindPlan" in plans, plans
    assert f"{name}: LLDB's own unwinder, .debug_frame from SFrame" in _status(got), got


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_stripped_plt_stub(version: str, demo: Path) -> None:
    """The stripped demo stopped in ``memcpy``'s PLT stub (parse_record's
    call) and in the PLT's first entry: LLDB names the stub as on the twin
    (its trampoline symbol ``memcpy``: no symbol of ours over a stub), the
    first entry with its unnamed symbol, and unwinds both from the SFrame
    rows (the twin's frames, registers, variables)."""
    _plt_cell(version, demo, "demost", "demost", "memcpy")


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_stripped_library_plt_stub(version: str, stripped_library: Path) -> None:
    """The stripped library stopped in its own PLT (lib_b's call of
    ``lib_stop``, which goes through it), the program started as ``lldb
    FILE`` (the library given its file as it loads: ``test_stripped_library``):
    as the demo's, and the callers' registers (main's ``argc``) the twin's."""
    _plt_cell(version, stripped_library, "lib/uselib", "lib/libsf.so", "lib_stop", "lib_a",
              driver=True)


@pytest.fixture(scope="module")
def ibt_demo(demo: Path) -> Path:
    """examples/demo.c stripped as ``demost``, linked with ``-z ibtplt`` (the
    stubs in ``.plt.sec``, where ld 2.40's PC-mask FDE runs past the
    section's end over ``.text``'s first functions), in ibt/twin, ibt/noeh."""
    root = demo / "ibt"
    for side in ("twin", "noeh"):
        out = root / side
        out.mkdir(parents=True)
        subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-g0",
                        "-fcf-protection", "-Wl,-z,ibtplt", "-s", str(ROOT / "examples" / "demo.c"),
                        "-o", str(out / "demost")], check=True)
        if side == "noeh":
            without_eh_frame(out / "demost")
    return root


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_stripped_ibt_plt_stub(version: str, ibt_demo: Path) -> None:
    """Stopped in ``memcpy``'s stub in ``.plt.sec``: the twin's names (the
    section's unnamed symbol, as on the twin), all 8 frames, the caller's
    registers (the symbol file's PC-mask FDE ends where .text's first
    function starts: given both, LLDB unwound that function with the stubs'
    rules and lost every frame above it)."""
    out = subprocess.run(["objdump", "-d", "-j", ".plt.sec", str(ibt_demo / "twin" / "demost")],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"^([0-9a-f]+) <memcpy@plt>:", out, re.M)
    assert found is not None, out
    asked = ["bt", "frame select 1", "register read rbx r12 r13", *ASKED[1:]]

    def commands(side: str) -> list[str]:
        return [f"target create {ibt_demo / side / 'demost'}",
                f"breakpoint set -a {int(found.group(1), 16):#x} -s demost", "process launch",
                *asked]
    want = run_lldb(version, commands("twin"), plugin=False)
    got = run_lldb(version, commands("noeh"))
    assert "Traceback" not in got, got
    assert len(parse_bt(command_output(want, "bt"))) == 8, want
    _same(want, got, asked)
