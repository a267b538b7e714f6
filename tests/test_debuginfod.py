"""``sframe to-dwarf --build-id-dir`` served by a real debuginfod: plain gdb
(13, 17, 18), LLDB 22 and 23 and eu-stack, with no plugin, fetch the files
through ``DEBUGINFOD_URLS`` and show the twin's backtrace, live and from cores.

The programs are stripped as Debian's dh_strip strips them: the debug
information in a separate file (``objcopy --only-keep-debug
--compress-debug-sections``, ``strip``, ``--add-gnu-debuglink``) that the
client machine does not have. A program
(uselib) and its library (libsf.so), built here with ``-g``; the twin keeps
its ``.eh_frame`` and its debug files are served as they are, by a
debuginfod of its own (twin and ``.noeh`` share their build-ids); the
``.noeh`` side gets ``sframe to-dwarf -r`` of its tree. Every server runs on
a free port, is asked for on 127.0.0.1 only, and is stopped by the fixture.

LLDB 21 from PyPI is not driven: it is built without an HTTP client and
never asks debuginfod (docs/debuginfod.md).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import missing
from helpers.gdbtools import GDBS, Gdb
from helpers.host_programs import FLAGS, SRC
from helpers.lldbtools import run_lldb

from sframe_core.cli.commands import main
from sframe_core.symfiles.symfile import build_id_path, read_module

pytestmark = [pytest.mark.gdb]

SIDES = ("twin", "noeh")
MODULES = ("uselib", "libsf.so")
_START_TIMEOUT = 60  # seconds for a debuginfod to index its directory


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"{name} not installed (scripts/setup.sh installs it)")
    assert path is not None
    return path


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=120)


def _build(out: Path) -> None:
    """uselib and libsf.so with -g, as ``out/twin`` and ``out/noeh`` (no
    ``.eh_frame``), each stripped with its debug file in ``SIDE-debug``."""
    flags = [f for f in FLAGS if f != "-g0"] + ["-g"]
    _run("gcc", *flags, "-fPIC", "-shared", "-o", str(out / "libsf.so"), str(SRC / "libsf.c"))
    _run("gcc", *flags, "-I", str(SRC), "-o", str(out / "uselib"), str(SRC / "uselib.c"),
         f"-L{out}", "-lsf", "-Wl,-rpath,$ORIGIN")
    for side in SIDES:
        (out / side).mkdir()
        (out / f"{side}-debug").mkdir()
        for name in MODULES:
            module, debug = out / side / name, out / f"{side}-debug" / f"{name}.debug"
            if side == "twin":
                shutil.copy2(out / name, module)
            else:
                _run("objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr",
                     str(out / name), str(module))
            _run("objcopy", "--only-keep-debug", "--compress-debug-sections", str(module),
                 str(debug))
            _run("strip", "--remove-section=.comment", "--strip-unneeded", str(module))
            _run("objcopy", f"--add-gnu-debuglink={debug}", str(module))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Server(NamedTuple):
    url: str
    process: subprocess.Popen[bytes]


def _start(directory: Path, build_ids: list[str], log: Path) -> Server:
    """A debuginfod scanning ``directory`` (``-F``), once it serves every build-id."""
    binary = _tool("debuginfod")
    for _ in range(3):  # another process may take the port between its choice and the bind
        port = _free_port()
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [binary, "-F", "-p", str(port), "-d", str(log.with_suffix(".sqlite")),
                 "-t", "0", "-g", "0", "-c", "1", "--disable-source-scan", str(directory)],
                stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + _START_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            if all(_serves(f"{url}/buildid/{b}/debuginfo") for b in build_ids):
                return Server(url, process)
            time.sleep(0.2)
        _stop(process)
    raise AssertionError(f"debuginfod did not serve {directory}:\n{log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


class Served(NamedTuple):
    root: Path
    urls: dict[str, str]  # side -> its server; "plain": the .noeh side's debug files alone


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    for tool in ("gcc", "objcopy", "strip"):
        _tool(tool)
    _tool("debuginfod")
    root = tmp_path_factory.mktemp("debuginfod")
    _build(root)
    build_ids = [str(read_module(str(root / "noeh" / name)).build_id) for name in MODULES]
    assert main(["to-dwarf", "-r", str(root / "noeh"), "--debug-dir", str(root / "noeh-debug"),
                 "--build-id-dir", str(root / "served")]) == 0
    trees = {"twin": root / "twin-debug", "noeh": root / "served", "plain": root / "noeh-debug"}
    servers: dict[str, Server] = {}
    try:
        for side, tree in trees.items():
            servers[side] = _start(tree, build_ids, root / f"{side}.log")
        yield Served(root, {side: server.url for side, server in servers.items()})
    finally:
        for server in servers.values():
            _stop(server.process)


def _env(served: Served, side: str, client: str) -> dict[str, str]:
    """The client's debuginfod settings: this side's server, a cache of its own."""
    cache = served.root / "cache" / f"{side}-{client}-{time.monotonic_ns()}"
    cache.mkdir(parents=True)  # libdebuginfod makes the last directory only
    return {"DEBUGINFOD_URLS": served.urls[side], "DEBUGINFOD_CACHE_PATH": str(cache),
            "DEBUGINFOD_TIMEOUT": "30"}


def _program(served: Served, side: str) -> Path:
    return served.root / ("twin" if side == "twin" else "noeh") / "uselib"


# -- gdb ---------------------------------------------------------------------------------


def _gdb(gdb_path: str, served: Served, side: str) -> Gdb:
    g = Gdb(gdb_path, plugin=False, env=_env(served, side, "gdb"))
    g.cmd("set debuginfod enabled on")  # gdbtools turns it off
    return g


_FRAME_LINE = re.compile(r"^#\d+ ", re.M)


def _gdb_live(gdb_path: str, served: Served, side: str, core: Path | None = None) -> str:
    """``bt full`` at stop_here (and ``gcore`` to ``core``)."""
    with _gdb(gdb_path, served, side) as g:
        g.cmd(f"file {_program(served, side)}")
        assert "Breakpoint 1," in g.cmd("break stop_here") + g.cmd("run")
        text = g.cmd("bt full")
        if core is not None:
            assert "Saved corefile" in g.cmd(f"gcore {core}")
    return text


def _gdb_core(gdb_path: str, served: Served, side: str, core: Path) -> str:
    with _gdb(gdb_path, served, side) as g:
        g.cmd(f"file {_program(served, side)}")
        g.cmd(f"core-file {core}")
        return g.cmd("bt full")


def _check_gdb(expected: str, got: str) -> None:
    assert len(_FRAME_LINE.findall(expected)) >= 7 and " in main (" in expected, expected
    assert "lib_b (cb=" in expected and "        v = 3\n" in expected, expected
    assert got == expected


def test_gdb_live_and_core(gdb_path: str, served: Served, tmp_path: Path) -> None:
    """Names, arguments, lines and every frame's locals (``bt full``) as on the
    twin, live and from a core file; the debug files alone (what a
    distribution serves today) do not unwind the .noeh program."""
    cores = {side: tmp_path / f"{side}.core" for side in SIDES}
    expected = _gdb_live(gdb_path, served, "twin", cores["twin"])
    _check_gdb(expected, _gdb_live(gdb_path, served, "noeh", cores["noeh"]))
    _check_gdb(_gdb_core(gdb_path, served, "twin", cores["twin"]),
               _gdb_core(gdb_path, served, "noeh", cores["noeh"]))
    if gdb_path == GDBS["gdb13"]:  # once is enough to show the program needs it
        assert _gdb_live(gdb_path, served, "plain") != expected


# -- LLDB ---------------------------------------------------------------------------------

_LLDB_FRAMES = range(1, 7)  # app_callback .. main


def _lldb(version: str, served: Served, side: str, target: str, start: list[str]) -> str:
    url = served.urls[side]
    commands = [f"settings set plugin.symbol-locator.debuginfod.server-urls {url}", target,
                *start, "bt"]
    for level in _LLDB_FRAMES:
        commands += [f"frame select {level}", "frame variable"]
    text = run_lldb(version, commands, plugin=False, env=_env(served, side, f"lldb{version}"))
    return text[text.index("(lldb) bt\n"):]


@pytest.mark.parametrize("version", ["22", "23"])
def test_lldb_live_and_core(version: str, served: Served, tmp_path: Path) -> None:
    """LLDB 22 and 23 ask debuginfod for the modules' symbol files: the twin's
    frames, lines and each caller frame's variables, live and from a core."""
    cores = {side: tmp_path / f"{side}.core" for side in SIDES}
    live = {side: _lldb(version, served, side, f"target create {_program(served, side)}",
                        ["b stop_here", "run", f"process save-core {cores[side]}"])
            for side in SIDES}
    assert "uselib`main(" in live["twin"] and "libsf.so`lib_b(" in live["twin"], live["twin"]
    assert "(volatile int) v = 3\n" in live["twin"], live["twin"]
    assert live["noeh"] == live["twin"]
    dead = {side: _lldb(version, served, side,
                        f"target create {_program(served, side)} --core {cores[side]}", [])
            for side in SIDES}
    assert "libsf.so`lib_a(" in dead["twin"], dead["twin"]
    assert dead["noeh"] == dead["twin"]


# -- eu-stack ---------------------------------------------------------------------------------


def _eu_stack(served: Served, side: str, *args: str) -> str:
    env = dict(os.environ) | _env(served, side, "eu-stack")
    res = subprocess.run([_tool("eu-stack"), "-s", "-i", *args], capture_output=True, text=True,
                         timeout=120, env=env)
    assert "eu-stack:" not in res.stderr, res.stderr
    return "\n".join(line for line in res.stdout.splitlines() if not line.startswith(("PID",
                                                                                        "TID")))


def _sleeping(served: Served, side: str) -> subprocess.Popen[str]:
    """The program paused in app_callback, at the addresses of every run (no ASLR)."""
    process = subprocess.Popen([_tool("setarch"), "x86_64", "-R", str(_program(served, side)),
                                "sleep"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().startswith("READY")
    # READY is written before pause(): until the process is in pause (x86_64's
    # syscall 34) a sample can catch it in write's return, a frame apart.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{process.pid}/syscall").read_text().split()[0] == "34":
                return process
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    process.kill()
    raise AssertionError(f"{_program(served, side)} never reached pause()")


def test_eu_stack_live_and_core(served: Served, tmp_path: Path) -> None:
    """eu-stack (libdwfl) fetches the files through debuginfod: the twin's
    frames with inlined ones and source lines (``-i -s``), for a live process
    (``-p``) and a core; the debug files alone do not unwind the program."""
    got = {}
    for side in (*SIDES, "plain"):
        process = _sleeping(served, side)
        try:
            got[side] = _eu_stack(served, side, "-p", str(process.pid))
            if side != "plain":
                core = tmp_path / f"{side}.core"
                _run(GDBS["gdb13"], "-nx", "-batch", "-p", str(process.pid), "-ex",
                     f"gcore {core}")
                got[f"{side}-core"] = _eu_stack(served, side, f"--core={core}", "-e",
                                                str(_program(served, side)))
        finally:
            process.kill()
            process.wait(timeout=10)
    assert " main\n" in got["twin"] and got["twin"].rstrip().endswith(" _start"), got["twin"]
    assert got["noeh"] == got["twin"]
    assert got["noeh-core"] == got["twin-core"]
    assert got["plain"] != got["twin"]


# -- the files ---------------------------------------------------------------------------------


def test_served_file_holds_both(served: Served) -> None:
    """What debuginfod serves for the .noeh library: its build-id note, the
    debug file's sections and symbol table, the SFrame ``.debug_frame``, and
    no allocated bytes (SHT_NOBITS, as objcopy --only-keep-debug leaves them)."""
    library = read_module(str(served.root / "noeh" / "libsf.so"))
    with urllib.request.urlopen(f"{served.urls['noeh']}/buildid/{library.build_id}/debuginfo",
                                timeout=30) as answer:
        data = answer.read()
    path = served.root / "fetched.debug"
    path.write_bytes(data)
    info = read_module(str(path))
    assert info.build_id == library.build_id
    names = {sec.name: sec for sec in info.sections}
    for name in (".debug_info", ".debug_line", ".symtab", ".debug_frame"):
        assert names[name].type != 8 and names[name].size, name
    assert all(sec.type in (7, 8) for sec in info.sections if sec.flags & 2), \
        [(s.name, s.type) for s in info.sections if s.flags & 2 and s.type not in (7, 8)]


# -- the command ---------------------------------------------------------------------------------


def test_debug_file_checked(served: Served, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--debug-file``: copied in when it is the module's; another module's
    (another build-id) is refused in one line, and nothing is written."""
    noeh, debug = served.root / "noeh", served.root / "noeh-debug"
    out = tmp_path / "uselib.sym"
    assert main(["to-dwarf", str(noeh / "uselib"), "--debug-file", str(debug / "uselib.debug"),
                 "-o", str(out)]) == 0
    names = {sec.name for sec in read_module(str(out)).sections}
    assert {".debug_info", ".debug_frame", ".symtab"} <= names
    capsys.readouterr()
    wrong = tmp_path / "wrong.sym"
    assert main(["to-dwarf", str(noeh / "uselib"), "--debug-file",
                 str(debug / "libsf.so.debug"), "-o", str(wrong)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sframe: {debug / 'libsf.so.debug'}: build-id ") and \
        err.count("\n") == 1 and "is not that of" in err, err
    assert not wrong.exists()


def test_tree_incremental_and_errors(served: Served, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``-r``: files up to date are left alone, a changed module is made
    again, ``--force`` remakes all; a module that cannot get a file is one
    line on stderr and exit status 1, the others are still written; the
    twin (it has an .eh_frame) is skipped."""
    tree = tmp_path / "tree"
    shutil.copytree(served.root / "noeh", tree / "noeh")
    shutil.copytree(served.root / "twin", tree / "twin")
    out = tmp_path / "out"
    args = ["to-dwarf", "-r", str(tree), "--debug-dir", str(served.root / "noeh-debug"),
            "--build-id-dir", str(out), "-j", "2"]
    assert main(args) == 0
    assert "2 written, 0 up to date, 0 failed; 2 skipped" in capsys.readouterr().out
    assert main(args) == 0
    assert "0 written, 2 up to date" in capsys.readouterr().out
    os.utime(tree / "noeh" / "libsf.so")
    assert main(args) == 0
    assert "1 written, 1 up to date" in capsys.readouterr().out
    assert main([*args, "--force"]) == 0
    assert "2 written, 0 up to date" in capsys.readouterr().out
    nameless = tree / "noeh" / "nobuildid"
    _run("objcopy", "--remove-section=.note.gnu.build-id", str(tree / "noeh" / "uselib"),
         str(nameless))
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.err == f"sframe: {nameless}: no build-id note: a build-id tree cannot hold " \
                           "its symbol file\n"
    assert "1 failed" in captured.out


def test_own_debug_information_warned(served: Served, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A module that carries its own debug information gets its file, and a
    warning: no debugger asks debuginfod for it (alone, and in a tree)."""
    assert main(["to-dwarf", str(served.root / "libsf.so"), "--build-id-dir",
                 str(tmp_path / "one")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("sframe: warning: ") and "has debug information of its own" in err
    tree = tmp_path / "tree"
    tree.mkdir()
    _run("objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr",
         str(served.root / "libsf.so"), str(tree / "libsf.so"))
    assert main(["to-dwarf", "-r", str(tree), "--build-id-dir", str(tmp_path / "all")]) == 0
    err = capsys.readouterr().err
    assert err == (f"sframe: warning: {tree / 'libsf.so'} has debug information of its own: "
                   "debuggers will not look up this file by build-id (strip the module and keep "
                   "its debug file: objcopy --only-keep-debug, strip, --debug-file)\n"), err


def test_tree_debug_files_by_build_id(served: Served, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``--debug-dir DIR/.build-id`` (a /usr/lib/debug/.build-id): the debug
    files are found by build-id and copied in."""
    debug_root = tmp_path / "usr-lib-debug"
    for name in MODULES:
        build_id = str(read_module(str(served.root / "noeh" / name)).build_id)
        target = Path(build_id_path(str(debug_root), build_id))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(served.root / "noeh-debug" / f"{name}.debug", target)
    out = tmp_path / "out"
    assert main(["to-dwarf", "-r", str(served.root / "noeh"), "--debug-dir",
                 str(debug_root / ".build-id"), "--build-id-dir", str(out)]) == 0
    assert capsys.readouterr().err == ""
    made = sorted(out.glob(".build-id/*/*.debug"))
    assert len(made) == 2
    for path in made:
        names = {sec.name for sec in read_module(str(path)).sections if sec.type != 8}
        assert {".debug_info", ".debug_line", ".debug_frame"} <= names, (path, names)


def test_compressed_debug_frame_kept(tmp_path: Path) -> None:
    """A ``-fno-asynchronous-unwind-tables`` library: its CFI is a
    ``.debug_frame`` in its (compressed, as dh_strip leaves it) debug file,
    its ``.eh_frame`` a lone terminator. ``-r`` takes it; the file keeps
    the compiler's FDEs, uncompressed, and adds SFrame's for what they do
    not cover: the same ``.debug_frame`` as from the uncompressed debug file."""
    for tool in ("gcc", "objcopy", "strip"):
        _tool(tool)
    flags = [f for f in FLAGS if f != "-g0"] + ["-g", "-fno-asynchronous-unwind-tables"]
    lib, debug, plain = tmp_path / "lib" / "libsf.so", tmp_path / "libsf.debug", tmp_path / "p"
    lib.parent.mkdir()
    _run("gcc", *flags, "-fPIC", "-shared", "-o", str(lib), str(SRC / "libsf.c"))
    _run("objcopy", "--only-keep-debug", "--compress-debug-sections", str(lib), str(debug))
    _run("objcopy", "--decompress-debug-sections", str(debug), str(plain))
    _run("strip", "--strip-unneeded", str(lib))
    _run("objcopy", f"--add-gnu-debuglink={debug}", str(lib))
    assert main(["to-dwarf", "-r", str(lib.parent), "--debug-dir", str(tmp_path),
                 "--build-id-dir", str(tmp_path / "out")]) == 0
    assert main(["to-dwarf", str(lib), "--debug-file", str(plain), "-o", str(tmp_path / "x")]) == 0
    (made,) = (tmp_path / "out").glob(".build-id/*/*.debug")
    frames = [_section_bytes(path, ".debug_frame") for path in (made, tmp_path / "x")]
    assert frames[0] == frames[1]
    compiler = _section_bytes(plain, ".debug_frame")
    assert frames[0].startswith(compiler) and len(frames[0]) > len(compiler)


def _section_bytes(path: Path, name: str) -> bytes:
    sec = read_module(str(path)).section(name)
    assert sec is not None, (path, name)
    with open(path, "rb") as stream:
        stream.seek(sec.offset)
        return stream.read(sec.size)
