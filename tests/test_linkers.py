"""Programs linked by gold, lld and mold (tests/fixtures/linkers, built by
build_linkers.sh): each concatenates the inputs' ``.sframe`` sections, so
every output holds two SFrame headers whose parts are read as one section.

gdb with the plugin on each ``noeh`` program must show its twin's backtrace
(the twin keeps ``.eh_frame``); a section broken the way no producer writes
is refused with one line, and no frame comes from it.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from helpers import FIXTURES, missing, need
from helpers.gdbtools import GDBS, Gdb, gdb_version, parse_bt
from helpers.manifest import FDEDef, FREDef, build_section

from sframe_core.base.errors import FormatError
from sframe_core.cli.commands import main as cli_main
from sframe_core.cli.verify import report_lines
from sframe_core.format.elf import read_elf
from sframe_core.format.linked import read_linked, split_parts
from sframe_core.format.records import SFRAME_F_FDE_SORTED
from sframe_core.verify.check import verify_file

LINKERS = FIXTURES / "linkers"
BUILDS = [f"v{v}-{ld}" for v in (1, 2, 3) for ld in ("gold", "lld", "mold")]
# mold 3.0 (sid) merges v3 as ld does: one sorted section and a PT_GNU_SFRAME.
MERGED = ["v3-mold3"]
CHAIN = ["stop_here", "cb", "lb", "la", "p1", "m1", "main"]


def _functions(path: Path) -> dict[int, str]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as stream:
        symtab = ELFFile(stream).get_section_by_name(".symtab")
        return {s["st_value"]: s.name for s in symtab.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]}


@pytest.mark.parametrize("build", BUILDS + MERGED)
def test_every_part_read(build: str) -> None:
    """Two headers in each output (one where mold 3.0 merged them); every
    FDE of both parts lands on its function."""
    for name, expect in (("lk", {"stop_here", "cb", "m1", "main", "p0", "p1"}),
                         ("liblk.so", {"la", "lb"})):
        path = need(LINKERS / build / "noeh" / name)
        info = read_elf(path)
        assert info.data is not None
        assert len(split_parts(info.data)) == (1 if build in MERGED else 2)
        section = info.open()
        assert section is not None and section.header.sorted
        names = _functions(path)
        assert {names.get(fde.start) for fde in section.iter_fdes()} == expect


def _gdb() -> str:
    path = GDBS["gdb13"]
    if gdb_version(path) is None:
        missing(f"no gdb at {path} (scripts/setup.sh installs it)")
    return path


def _bt(program: Path, plugin: bool) -> tuple[list[tuple[int | None, str]], str]:
    with Gdb(_gdb(), plugin=plugin, args=[str(program)]) as g:
        g.cmd("break stop_here")
        out = g.cmd("run")
        assert "Breakpoint 1," in out, out
        text = g.cmd("bt")
        info = g.cmd("info sframe") if plugin else ""
    assert "Traceback" not in text + info and "Python Exception" not in text + info
    return [(f.pc, f.name) for f in parse_bt(text)], info


@pytest.mark.parametrize("build", BUILDS + MERGED)
def test_gdb_twin(build: str) -> None:
    twin, _ = _bt(need(LINKERS / build / "lk"), plugin=False)
    assert [n for _, n in twin] == CHAIN
    got, info = _bt(need(LINKERS / build / "noeh" / "lk"), plugin=True)
    assert got == twin
    assert "unusable" not in info, info


def _corrupt(tmp: Path) -> Path:
    """v3-lld's noeh pair with the second part's first FDE moved 1 MiB
    past the program's code."""
    for name in ("lk", "liblk.so"):
        shutil.copy(need(LINKERS / "v3-lld" / "noeh" / name), tmp / name)
    path = tmp / "lk"
    info = read_elf(path)
    assert info.data is not None and info.sframe_address is not None
    part = split_parts(info.data)[1]
    data = bytearray(path.read_bytes())
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as stream:
        offset = ELFFile(stream).get_section_by_name(".sframe")["sh_offset"]
    at = offset + part.offset + part.header.fde_base
    (value,) = struct.unpack_from("<q", data, at)
    struct.pack_into("<q", data, at, value + (1 << 20))
    path.write_bytes(bytes(data))
    return path


def test_refused_once(tmp_path: Path) -> None:
    """One line names the module and what is wrong; no frame from it."""
    path = _corrupt(tmp_path)
    with pytest.raises(FormatError, match=r"lk: \.sframe: 2 SFrame headers concatenated "
                       r"\(at 0x0, 0x88\): FDE 0 of the header at 0x88 .* is outside "
                       r"the module's code"):
        read_elf(path).open()
    with Gdb(_gdb(), args=[str(path)]) as g:
        g.cmd("break stop_here")
        out = g.cmd("run")
        text = g.cmd("bt")
        text += g.cmd("bt")
        info = g.cmd("info sframe")
    assert "Traceback" not in out + text + info
    warned = [line for line in (out + text).splitlines() if "is outside the module's code" in line]
    assert len(warned) == 1, out + text
    assert f"{path}: .sframe unusable: 2 SFrame headers concatenated" in info, info


# -- sframe verify ------------------------------------------------------------------


@pytest.mark.parametrize("build", ["v1-gold", "v2-mold", "v3-lld"])
def test_verify_names_the_concatenation(build: str) -> None:
    """Every function agrees (the parts are read right); the concatenation and
    the missing SORTED flag fail the file, as libsframe and the kernel refuse it."""
    report = verify_file(str(need(LINKERS / build / "lk")))
    assert {f.verdict for f in report.functions} <= {"agrees", "not-covered"}
    assert all(f.known for f in report.functions)
    kinds = {f.kind: f for f in report.findings}
    assert kinds["concatenated"].text.startswith("2 SFrame headers concatenated (at 0x0, ")
    assert "sees 4 of the 6 FDEs" in kinds["concatenated"].text
    assert kinds["concatenated"].fatal and kinds["sorted-flag"].fatal
    assert report.status == 1
    kernel = verify_file(str(LINKERS / build / "lk"), kernel=True).kernel
    assert kernel is not None and any(f.kind == "kernel-concatenated" for f in kernel)


def test_verify_lost_plt() -> None:
    """ld 2.47.50 with --gc-sections: its PLT stubs' FDEs lost, named so; the
    PT_GNU_SFRAME it keeps from before the merge, a note."""
    report = verify_file(str(need(LINKERS / "v3-ld-gc" / "lk")))
    lost = [f for f in report.functions if not f.known]
    assert {f.name for f in lost} >= {".plt"}, report_lines(report)
    assert all("lost their SFrame FDE" in f.detail for f in lost)
    assert [f.kind for f in report.findings] == ["segment-size"]
    assert not report.findings[0].fatal
    assert report.status == 1


def test_verify_recursive_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-r over a tree where no file has .sframe: not a pass."""
    shutil.copy("/bin/true", tmp_path / "true")
    assert cli_main(["verify", "-r", str(tmp_path)]) == 2
    assert "no file verified (1 skipped" in capsys.readouterr().err


# -- LLDB ---------------------------------------------------------------------------

_LLDB_TWINS: dict[tuple[str, str], list[int | None]] = {}


def _lldb_pcs(version: str, binary: Path, twin: Path, plugin: bool) -> tuple[list[int | None], str]:
    from helpers.lldbtools import break_command, command_output, run_lldb
    from helpers.lldbtools import parse_bt as lldb_bt

    out = run_lldb(version, [f"target create {binary}", break_command(binary, twin),
                             "process launch", "bt", "sframe status"], plugin=plugin)
    assert "Traceback" not in out, out
    return [f.pc for f in lldb_bt(command_output(out, "bt"))], out


@pytest.mark.lldb
@pytest.mark.parametrize("version", ["22", "23"])
@pytest.mark.parametrize("build", BUILDS + MERGED)
def test_lldb_twin(version: str, build: str) -> None:
    """LLDB with the plugin on each noeh program (v1, v2 and v3): the twin's frames."""
    twin = need(LINKERS / build / "lk")
    key = (version, build)
    if key not in _LLDB_TWINS:
        _LLDB_TWINS[key] = _lldb_pcs(version, twin, twin, plugin=False)[0]
    want = _LLDB_TWINS[key]
    assert len(want) >= len(CHAIN), want
    got, out = _lldb_pcs(version, need(LINKERS / build / "noeh" / "lk"), twin, plugin=True)
    assert got == want, out[-4000:]
    assert "unusable" not in out, out[-4000:]


# -- the host's toolchain, at test time ---------------------------------------------


def _linker_flags(linker: str) -> list[str]:
    """gcc's flags to link with ``linker`` (scripts/setup.sh installs them)."""
    if linker == "lld":
        found = shutil.which("ld.lld") or next(
            (str(p) for p in sorted(Path("/usr/lib").glob("llvm-*/bin/ld.lld"), reverse=True)),
            None)
        if found is None:
            missing("no ld.lld (scripts/setup.sh installs lld)")
        return ["-fuse-ld=lld", "-B", str(Path(found).parent) + "/"]
    if shutil.which(f"ld.{linker}") is None:
        missing(f"no ld.{linker} (scripts/setup.sh installs it)")
    return [f"-fuse-ld={linker}"]


@pytest.mark.parametrize("linker", ["gold", "lld", "mold"])
def test_host_toolchain(linker: str, tmp_path: Path) -> None:
    """The host's gas (SFrame v1 on Debian 12, v2 on 13) and each linker:
    gdb with the plugin shows the twin's backtrace, or the linker dropped
    .sframe and ``sframe verify`` says there is none."""
    _build(tmp_path, ["gcc", "-fno-reorder-blocks-and-partition"], _linker_flags(linker))
    info = read_elf(tmp_path / "noeh" / "lk")
    if info.data is None:
        assert cli_main(["verify", str(tmp_path / "lk")]) == 2  # "no .sframe section"
        return
    assert info.open() is not None
    twin, _ = _bt(tmp_path / "lk", plugin=False)
    assert [n for _, n in twin] == CHAIN
    got, status = _bt(tmp_path / "noeh" / "lk", plugin=True)
    assert got == twin
    assert "unusable" not in status, status


def _build(tmp: Path, compiler: list[str], ld: list[str]) -> None:
    """The linkers' program and library, compiled by ``compiler`` and linked
    with ``ld``; each ``noeh`` copy without ``.eh_frame``."""
    import subprocess

    src = FIXTURES / "src" / "linkers"
    cflags = ["-O2", "-fomit-frame-pointer", "-g0", "-Wa,--gsframe"]

    def run(*argv: str) -> None:
        done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr}"

    for name in ("main", "part"):
        run(*compiler, *cflags, "-c", str(src / f"{name}.c"), "-o", f"{name}.o")
    for name in ("liba", "libb"):
        run(*compiler, *cflags, "-fPIC", "-c", str(src / f"{name}.c"), "-o", f"{name}.o")
    run(*compiler, *ld, "-shared", "-Wl,-soname,liblk.so", "-o", "liblk.so", "liba.o", "libb.o")
    run(*compiler, *ld, "-o", "lk", "main.o", "part.o", "-L.", "-llk", "-Wl,-rpath,$ORIGIN")
    (tmp / "noeh").mkdir()
    for name in ("lk", "liblk.so"):
        run("objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", name,
            f"noeh/{name}")


def _clang22() -> list[str]:
    if shutil.which("clang-22") is None:
        missing("no clang-22 (scripts/setup.sh installs clang-22 and lld-22)")
    return ["clang-22", "-Wa,--allow-experimental-sframe"]


def test_clang22_lld(tmp_path: Path) -> None:
    """clang 22's own assembler (SFrame v2, starts PC-relative and flagged so)
    linked by lld 22, which concatenates: both parts read, gdb with the
    plugin shows the twin's backtrace."""
    from sframe_core.format.records import SFRAME_F_FDE_FUNC_START_PCREL

    _build(tmp_path, _clang22(), ["-fuse-ld=lld"])
    for name, expect in (("lk", {"stop_here", "cb", "m1", "main", "p0", "p1"}),
                         ("liblk.so", {"la", "lb"})):
        info = read_elf(tmp_path / "noeh" / name)
        assert info.data is not None
        parts = split_parts(info.data)
        assert len(parts) == 2, parts
        assert all(part.header.version == 2 and part.header.flags & SFRAME_F_FDE_FUNC_START_PCREL
                   for part in parts), parts
        section = info.open()
        assert section is not None
        names = _functions(tmp_path / "noeh" / name)
        assert {names.get(fde.start) for fde in section.iter_fdes()} == expect
    twin, _ = _bt(tmp_path / "lk", plugin=False)
    assert [n for _, n in twin] == CHAIN
    got, status = _bt(tmp_path / "noeh" / "lk", plugin=True)
    assert got == twin
    assert "unusable" not in status, status


def test_clang22_ld(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ld 2.40 given clang 22's v2 objects writes a .sframe of its PLT only
    (and exits 0): sframe verify fails the file, naming every function
    no FDE covers, instead of passing it."""
    _build(tmp_path, _clang22(), ["-fuse-ld=bfd"])
    assert cli_main(["verify", str(tmp_path / "lk")]) == 1
    out = capsys.readouterr().out
    for name in ("stop_here", "cb", "m1", "main", "p1"):
        assert f" {name}: not covered: CFI describes it; no SFrame FDE covers it" in out, out


@pytest.mark.lldb
def test_lldb_refused_once(tmp_path: Path) -> None:
    """LLDB 22: the same one line, once; ``sframe status`` says why."""
    from helpers.lldbtools import command_output, run_lldb

    path = _corrupt(tmp_path)
    out = run_lldb("22", [f"target create {path}", "breakpoint set -n stop_here",
                          "process launch", "bt", "bt", "sframe status"])
    assert "Traceback" not in out, out
    assert out.count("is outside the module's code") == 2, out  # the warning and the status
    status = command_output(out, "sframe status")
    assert "lk: not on the native route: unusable .sframe: 2 SFrame headers concatenated " \
        "(at 0x0, 0x88): FDE 0 of the header at 0x88" in status, status


# -- the checks, on the bytes --------------------------------------------------------


def _section(build: str) -> tuple[bytes, int, list[tuple[int, int]]]:
    info = read_elf(need(LINKERS / build / "noeh" / "lk"))
    assert info.data is not None and info.sframe_address is not None
    return bytes(info.data), info.sframe_address, info.code_ranges(0)


def test_padding_and_trailing_bytes() -> None:
    data, address, code = _section("v2-lld")
    assert len(read_linked(data + b"\0" * 7, address, exact=True, code=code).parts) == 2
    with pytest.raises(FormatError, match=r"the header's counts end at 0x[0-9a-f]+, and the 3 "
                       r"bytes that follow in the \d+-byte section are not an SFrame header"):
        read_linked(data + b"\1\2\3", address, exact=True, code=code)
    # Through PT_GNU_SFRAME (longer than the section in ld's output) they are not its.
    assert len(read_linked(data + b"\1\2\3", address, exact=False, code=code).parts) == 2


def test_part_refused() -> None:
    data, address, code = _section("v2-gold")
    second = split_parts(data)[1].offset
    sorted_part = bytearray(data)
    sorted_part[second + 3] |= SFRAME_F_FDE_SORTED
    with pytest.raises(FormatError, match="the part at 0x[0-9a-f]+ is flagged sorted"):
        read_linked(bytes(sorted_part), address, exact=True, code=code)
    other = bytearray(data)
    other[second + 2] = 3
    with pytest.raises(FormatError, match=r"SFrame header 2 at 0x[0-9a-f]+ is version 3 "):
        read_linked(bytes(other), address, exact=True, code=code)


def test_section_relative_starts_without_the_flag_refused() -> None:
    """ld's v1 section with SORTED cleared: read as a concatenating linker
    leaves it, its starts land outside the code or on each other: refused."""
    info = read_elf(need(FIXTURES / "x86_64" / "bu2.40-v1" / "deep.noeh"))
    assert info.data is not None and info.sframe_address is not None
    data = bytearray(info.data)
    data[3] &= ~SFRAME_F_FDE_SORTED
    with pytest.raises(FormatError, match=r"^FDEs not flagged sorted: FDE \d+ .*(outside the "
                       r"module's code|overlaps)"):
        read_linked(bytes(data), info.sframe_address, exact=True, code=info.code_ranges(0))


def test_dump_says_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """``sframe dump`` of a concatenated section: the parts read as one, and it says so."""
    assert cli_main(["dump", str(need(LINKERS / "v1-mold" / "noeh" / "lk"))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("# 2 SFrame headers concatenated (at 0x0, 0x")
    assert lines[1].endswith("by the linker: shown as read, one sorted section")
    assert sum(line.startswith("    func idx [") for line in lines) == 6


# -- a module without any unwind information ------------------------------------------


def test_no_unwind_information(tmp_path: Path) -> None:
    """A library built without unwind tables or start files: gdb's ``info
    sframe`` and LLDB's ``sframe status`` say its frames are guesses."""
    import subprocess

    src = FIXTURES / "src" / "linkers"
    for argv in (["gcc", "-O2", "-fPIC", "-shared", "-nostartfiles", "-fno-asynchronous-unwind-tables",
                  "-fno-unwind-tables", "-Wl,-soname,liblk.so", "-o", "liblk.so",
                  str(src / "liba.c"), str(src / "libb.c")],
                 ["gcc", "-O2", "-Wa,--gsframe", "-o", "lk", str(src / "main.c"), str(src / "part.c"),
                  "-L.", "-llk", "-Wl,-rpath,$ORIGIN"]):
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    library = tmp_path / "liblk.so"
    line = (": no unwind information (no .eh_frame, .debug_frame or .sframe in the file): "
            "frames in its code are the debugger's guesses")
    with Gdb(_gdb(), args=[str(tmp_path / "lk")]) as g:
        g.cmd("break stop_here")
        g.cmd("run")
        info = g.cmd("info sframe")
    assert f"{library}{line}" in info, info
    assert str(tmp_path / "lk") + line not in info, info
    from helpers.lldbtools import command_output, run_lldb

    out = run_lldb("22", [f"target create {tmp_path / 'lk'}", "breakpoint set -n stop_here",
                          "process launch", "sframe status"])
    status = command_output(out, "sframe status")
    assert f"liblk.so{line}" in status, status
    assert f"lk{line}" not in status.replace(f"liblk.so{line}", ""), status


# -- sframe backtrace -----------------------------------------------------------------


def _core(program: Path, tmp: Path) -> Path:
    core = tmp / "core"
    with Gdb(_gdb(), plugin=False, args=[str(program)]) as g:
        g.cmd("break stop_here")
        g.cmd("run")
        g.cmd(f"gcore {core}")
    assert core.exists()
    return core


def test_backtrace_core(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sframe backtrace --source sframe`` on a core of a gold program: every
    frame from the concatenated sections, to main."""
    program = need(LINKERS / "v2-gold" / "noeh" / "lk")
    core = _core(program, tmp_path)
    assert cli_main(["backtrace", "--core", str(core), "--exe", str(program),
                     "--source", "sframe"]) == 0
    out = capsys.readouterr().out
    names = [n for n in CHAIN if f" {n} " in out or f" {n}+" in out or f"in {n}" in out]
    assert names == CHAIN, out


def test_backtrace_core_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The broken concatenation: one line, and no frame from it."""
    program = _corrupt(tmp_path)
    core = _core(program, tmp_path)
    cli_main(["backtrace", "--core", str(core), "--exe", str(program), "--source", "sframe"])
    captured = capsys.readouterr()
    assert captured.err.count("is outside the module's code") == 1, captured.err  # the warning
    assert "Backtrace stopped: no unwind information covers this PC" in captured.out
    assert "2 SFrame headers concatenated (at 0x0, 0x88)" in captured.out, captured.out
    assert " cb" not in captured.out and " m1" not in captured.out, captured.out


def test_one_sorted_fde() -> None:
    """ld's section of one function: checked against the code, not against itself."""
    section = build_section(3, 3, [FDEDef(0x1040, 0x20, [FREDef(0, (8, -8))])], address=0x3000)
    found = read_linked(section, 0x3000, exact=True, code=[(0x1000, 0x2000)])
    assert not found.merged and found.parts[0].header.num_fdes == 1


def test_verify_mold3() -> None:
    """mold 3.0's merge: nothing to say."""
    for name in ("lk", "liblk.so"):
        report = verify_file(str(need(LINKERS / "v3-mold3" / name)))
        assert report.status == 0 and not report.findings, report_lines(report)


def test_dump_raw_parts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sframe dump --raw`` of a concatenated section's bytes: every part."""
    info = read_elf(need(LINKERS / "v3-gold" / "noeh" / "lk"))
    assert info.data is not None and info.sframe_address is not None
    blob = tmp_path / "sframe.bin"
    blob.write_bytes(info.data)
    assert cli_main(["dump", "--raw", str(blob), "--address", hex(info.sframe_address)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("# 2 SFrame headers concatenated")
    assert sum(line.startswith("    func idx [") for line in lines) == 6
