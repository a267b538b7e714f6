"""``sframe lookup`` against the golden rows, and the CLI's errors and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT
from helpers.manifest import Entry, GoldenFDE, fixture_path, manifest_params, parse_golden, require

from sframe_core.analysis.section import SectionAnalysis
from sframe_core.cli.commands import main
from sframe_core.format import SAVED_REGISTERS_ENV
from sframe_core.format.dump import fre_columns
from sframe_core.format.elf import open_sframe
from sframe_core.format.records import FDE_SIZE
from sframe_core.format.section import SFrameSection

LINKED = manifest_params(lambda e: e["kind"] != "obj", unique_golden=True)


def expected_row(fde: GoldenFDE, offset: int) -> tuple[str, ...] | None:
    """The golden row holding ``offset`` (a PC, or a repeat-block offset for [m])."""
    found = None
    for start, columns in fde.rows:
        if start <= offset:
            found = columns
    return found


def columns_at(section: SFrameSection, pc: int, entry: Entry) -> tuple[str, ...] | None:
    hit = section.lookup(pc)
    if hit is None:
        return None
    cols = fre_columns(section.header, hit.fde, hit.fre, hit.rules, section.arch)
    if cols is None:
        return ("RA undefined",)
    ra = cols[2].rstrip()
    if entry["producer_dir"].startswith("bu2.40") and ra == "f":
        ra = "u"  # the 2.40 dumper printed the fixed amd64 RA as "u" (test_dump.norm_v1_240)
    return (cols[0], cols[1], ra)


@pytest.mark.parametrize("entry", LINKED)
def test_lookup_every_pc_agrees_with_golden(entry: Entry | None) -> None:
    entry = require(entry)
    section = open_sframe(fixture_path(entry), analyser=SectionAnalysis)
    golden = parse_golden(fixture_path(entry, "golden").read_text())
    checked = 0
    for fde in golden:
        if fde.size == 0 or not fde.rows:
            continue
        for pc in range(fde.pc, fde.pc + fde.size):
            if fde.mask:
                got = section.lookup(pc)
                assert got is not None and got.fde.index == fde.index
                want = expected_row(fde, (pc - fde.pc) % got.fde.rep_size)
            else:
                want = expected_row(fde, pc)
            assert columns_at(section, pc, entry) == want, f"{entry['path']} pc {pc:#x}"
            checked += 1
        # Just past the end: not this function.
        after = section.lookup(fde.pc + fde.size)
        assert after is None or after.fde.index != fde.index
    assert checked


@pytest.mark.parametrize("entry", LINKED)
def test_cli_lookup_json_per_row(entry: Entry | None, capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``main``: the first PC of every row of the largest function."""
    entry = require(entry)
    golden = [f for f in parse_golden(fixture_path(entry, "golden").read_text()) if not f.mask]
    fde = max(golden, key=lambda f: (len(f.rows), f.size))
    for start, columns in fde.rows:
        assert main(["lookup", "--json", str(fixture_path(entry)), hex(start)]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["fde"]["index"] == fde.index and data["fde"]["start"] == fde.pc
        text = data["fre"]["text"]
        got = ("RA undefined",) if text is None else (text["cfa"], text["fp"], text["ra"])
        if entry["producer_dir"].startswith("bu2.40") and got[-1] == "f":
            got = (*got[:2], "u")  # 2.40 dumper quirk, see columns_at
        assert got == columns
        assert data["row"]["start"] == start
        assert data["description"]


def test_lookup_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    entry = require(next(iter(p.values[0] for p in LINKED)))
    golden = parse_golden(fixture_path(entry, "golden").read_text())
    fde = next(f for f in golden if not f.mask and f.rows)
    assert main(["lookup", str(fixture_path(entry)), hex(fde.rows[0][0])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(f"FDE [{fde.index}]: 0x{fde.pc:x}-0x{fde.pc + fde.size:x}")
    assert lines[2].startswith("FRE [0]: ")
    assert "CFA = " in lines[3] or lines[3] == "RA undefined (outermost frame)"


def test_raw_lookup_matches_file_lookup(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same words from the section's bytes alone as from the file, except
    the callee-saved registers: only the file has the code that places them."""
    entry = require(next(iter(p.values[0] for p in LINKED)))
    golden = parse_golden(fixture_path(entry, "golden").read_text())
    pc = next(f for f in golden if not f.mask and f.rows).rows[-1][0]
    raw = ["lookup", "--raw", str(fixture_path(entry, "sframe_bin")), "--address",
           str(entry["sframe_addr"]), str(pc)]
    assert main(["lookup", str(fixture_path(entry)), hex(pc)]) == 0
    from_file = capsys.readouterr().out
    assert main(raw) == 0
    from_raw = capsys.readouterr().out
    assert from_raw != from_file and "unknown" in from_raw.splitlines()[-1]
    monkeypatch.setenv(SAVED_REGISTERS_ENV, "0")
    assert main(["lookup", str(fixture_path(entry)), hex(pc)]) == 0
    assert capsys.readouterr().out == from_raw


# -- errors -------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sframe_core", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("sframe: "), err
    assert "Traceback" not in err
    return err.strip()


def test_error_not_elf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "text"
    path.write_text("hello\n")
    assert one_line_error(capsys, ["dump", str(path)]) == f"sframe: {path}: not an ELF file"


def test_error_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope"
    assert one_line_error(capsys, ["dump", str(path)]) == \
        f"sframe: {path}: No such file or directory"
    assert one_line_error(capsys, ["dump", "--raw", str(path)]) == \
        f"sframe: {path}: No such file or directory"


def test_error_no_sframe(capsys: pytest.CaptureFixture[str]) -> None:
    assert one_line_error(capsys, ["dump", sys.executable]) in (
        f"sframe: {sys.executable}: no .sframe section",)


def test_error_corrupt_section_names_offset(tmp_path: Path, host_sframe_binary: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    section = open_sframe(host_sframe_binary)
    blob = tmp_path / "bad.bin"
    data = bytearray(section.data)
    data[2] = 9
    blob.write_bytes(bytes(data))
    assert one_line_error(capsys, ["dump", "--raw", str(blob)]) == \
        f"sframe: {blob}: unknown SFrame version 9 (at offset 0x2)"
    # Patched inside the ELF file itself.
    elf = bytearray(host_sframe_binary.read_bytes())
    where = elf.find(bytes(section.data[:28]))
    elf[where + 2] = 9
    patched = tmp_path / "prog"
    patched.write_bytes(bytes(elf))
    assert one_line_error(capsys, ["lookup", str(patched), "0x1000"]) == \
        f"sframe: {patched}: .sframe: unknown SFrame version 9 (at offset 0x2)"


def test_error_corrupt_fde_dump_goes_on(tmp_path: Path, host_sframe_binary: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    section = open_sframe(host_sframe_binary)
    # The host's gas writes v1 (Debian 12) or v2 (Debian 13): both keep the FDE's
    # info byte at offset 16 of the FDE record (v3 moved it to the FRE sub-section).
    assert section.version in (1, 2), f"host gas emits SFrame v{section.version}: extend this test"
    data = bytearray(section.data)
    fde1 = section.header.fde_base + FDE_SIZE[section.version]
    data[fde1 + 16] = 0x0F  # FRE type 15
    blob = tmp_path / "bad.bin"
    blob.write_bytes(bytes(data))
    assert main(["dump", "--raw", str(blob), "--address", hex(section.address)]) == 1
    captured = capsys.readouterr()
    assert f"func idx [1]: error: FDE 1: bad FRE type 15 (at offset {fde1 + 16:#x})" in captured.out
    assert f"func idx [{section.num_fdes - 1}]: pc = " in captured.out  # the rest is there
    assert captured.err == f"sframe: {blob}: FDE 1: bad FRE type 15 (at offset {fde1 + 16:#x})\n"


def test_error_address_not_covered(host_sframe_binary: Path, capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    assert one_line_error(capsys, ["lookup", str(host_sframe_binary), "0x1"]) == \
        f"sframe: {host_sframe_binary}: address 0x1 is not covered by any FDE"


@pytest.mark.parametrize("argv", [[], ["dump"], ["frobnicate"], ["lookup", "x"],
                                  ["lookup", "x", "zz"], ["dump", "a", "--raw", "b"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_address_forms(host_sframe_binary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section = open_sframe(host_sframe_binary)
    pc = section.get_fde(0).start
    assert main(["lookup", str(host_sframe_binary), hex(pc)]) == 0
    by_hex = capsys.readouterr().out
    assert main(["lookup", str(host_sframe_binary), str(pc)]) == 0
    assert capsys.readouterr().out == by_hex


def test_module_entry_point_and_closed_pipe(host_sframe_binary: Path) -> None:
    done = run_cli("dump", str(host_sframe_binary))
    assert done.returncode == 0 and "  Header :" in done.stdout
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    big = [sys.executable, "-m", "sframe_core", "dump", "--json", str(host_sframe_binary)]
    proc = subprocess.Popen(big, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert proc.returncode == 0


def test_no_traceback_by_default_but_on_request(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"\x7fELF" + b"\0" * 10)
    done = run_cli("dump", str(path))
    assert done.returncode == 1 and done.stderr.startswith(f"sframe: {path}: ")
    assert "Traceback" not in done.stderr
    done = run_cli("--traceback", "dump", str(path))
    assert done.returncode == 1 and "Traceback" in done.stderr


def test_version_from_one_place() -> None:
    """``sframe --version`` prints sframe_core.version's, which pyproject.toml reads too."""
    from sframe_core.version import __version__
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout == f"sframe (sframe-gdb) {__version__}\n", out
    assert "dynamic = [\"version\"]" in (ROOT / "pyproject.toml").read_text()
