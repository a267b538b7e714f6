"""Test helpers, in one place (tests and benches import them from here).

``helpers`` itself: the paths, the one skip-or-fail rule for missing tools
and fixtures, the one ``Frame`` type every backtrace parser returns, and
fixtures made on the fly. Beside it: ``manifest`` (the fixture manifest,
golden dumps, hand-built sections), ``gdbtools`` (a gdb session, ``bt`` and
frame-dump parsing), ``lldbtools``, ``qemutools`` (cross-architecture runs)
and ``oracle`` (gdb as the oracle for cores and live processes, and the
``sframe`` CLI as a subprocess).
"""

from __future__ import annotations

import importlib.util
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
X86 = FIXTURES / "x86_64"
DEBUGGERS = ROOT / ".debuggers" / "bin"


def require_debuggers() -> bool:
    """With ``CI=true`` or ``SFRAME_REQUIRE_DEBUGGERS=1`` (scripts/test.sh sets
    it) a missing tool or fixture fails its tests instead of skipping them."""
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("SFRAME_REQUIRE_DEBUGGERS") == "1")


def missing(reason: str) -> NoReturn:
    """Skip, saying why; or fail, under ``require_debuggers()``."""
    if require_debuggers():
        pytest.fail(f"{reason} (CI=true or SFRAME_REQUIRE_DEBUGGERS=1: failing, not skipping)")
    pytest.skip(reason)


def need(path: Path) -> Path:
    """``path``, a built fixture; ``missing`` when it is not there."""
    if not path.exists():
        missing(f"fixture missing: {path} (run tests/fixtures/build.sh)")
    return path


@dataclass(frozen=True)
class Frame:
    """One frame of a backtrace, whoever printed it. Two frames are equal
    when their PC and function name are: the level and the module are
    where a debugger put it, not what it is."""

    pc: int | None
    name: str | None
    level: int = field(default=0, compare=False)
    module: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.pc:#x} {self.name}" if self.pc is not None else f"?? {self.name}"


def without_eh_frame(source: Path, dest: Path | None = None, *,
                     debug_frame: bool = False) -> Path:
    """The .noeh side of a twin: ``source`` (or its copy ``dest``) with
    ``.eh_frame`` and ``.eh_frame_hdr`` removed (and ``.debug_frame``), so
    that SFrame is its only unwind information."""
    import subprocess
    sections = [".eh_frame", ".eh_frame_hdr", *([".debug_frame"] if debug_frame else [])]
    subprocess.run(["objcopy", *(f"--remove-section={name}" for name in sections), str(source),
                    *([str(dest)] if dest is not None else [])], check=True)
    return dest if dest is not None else source


def no_section_headers(source: Path, dest: Path) -> Path:
    """A copy of ``source`` with its section headers gone (e_shoff, e_shnum and
    e_shstrndx zeroed, as `objcopy --strip-section-headers` leaves a file):
    GDB then sees no sections, and only PT_GNU_SFRAME leads to the SFrame data."""
    data = bytearray(source.read_bytes())
    struct.pack_into("<Q", data, 0x28, 0)  # e_shoff (ELF64, little-endian)
    struct.pack_into("<HHH", data, 0x3A, 0, 0, 0)  # e_shentsize, e_shnum, e_shstrndx
    dest.write_bytes(bytes(data))
    dest.chmod(0o755)
    return dest


def corrupt_sframe_version(source: Path, dest: Path) -> Path:
    """A copy of ``source`` whose .sframe header says version 127 (unknown)."""
    from elftools.elf.elffile import ELFFile
    data = bytearray(source.read_bytes())
    with open(source, "rb") as stream:
        offset = ELFFile(stream).get_section_by_name(".sframe")["sh_offset"]
    data[offset + 2] = 0x7F  # the version byte
    dest.write_bytes(bytes(data))
    dest.chmod(0o755)
    return dest


def bench_scale() -> ModuleType:
    """bench/bench_scale.py, whose program generator tests share with the
    benchmarks (loaded by path: bench is no package)."""
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
