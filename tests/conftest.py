"""pytest fixtures shared by the test modules; the helpers themselves are in ``helpers``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import bench_scale, missing
from helpers.gdbtools import GDBS, gdb_version

# gdb sessions the tests start themselves (batch runs, qemu stubs) make their
# symbol files before gdb goes on, as helpers.gdbtools.Gdb does: a session
# sees the DWARF route from its first stop whatever the module's size
# (test_gdb_route.py tests the default, which makes large ones in a worker).
os.environ.setdefault("SFRAME_GDB_SYMBOL_FILES", "foreground")
# The same for LLDB sessions started without helpers.lldbtools (the SB API
# driver of test_lldb_realprogs.py, bench runs): the native route from the
# first stop; test_lldb_route.py tests the worker and the provider meanwhile.
os.environ.setdefault("SFRAME_LLDB_SYMBOL_FILES", "foreground")

# -- a binary built here, for tests that must not wait for the fixtures ------


@pytest.fixture(scope="session")
def host_sframe_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small program built by the host's gcc + gas: SFrame v1 on Debian 12 (binutils
    2.40), v2 on Debian 13 (2.44); ``host_sframe_version`` says which."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the host SFrame test binary")
    out = tmp_path_factory.mktemp("host") / "prog"
    src = out.with_suffix(".c")
    src.write_text("#include <stdio.h>\n#include <string.h>\n"
                   "__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }\n"
                   "__attribute__((noinline)) int mid(int n) { char b[n + 1];"
                   " memset(b, 1, n + 1); return leaf(b[n / 2]) + n; }\n"
                   "int main(int c, char **v) { printf(\"%d\\n\", mid(c + 40)); return 0; }\n")
    subprocess.run(["gcc", "-O2", "-Wa,--gsframe", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture(scope="session")
def host_sframe_version(host_sframe_binary: Path) -> int:
    """The SFrame version the host's gas emits, as the host's readelf reads it.

    Platform-dependent by nature (binutils 2.40: 1; 2.41-2.45: 2; 2.46+: 3), so
    asked from the toolchain itself instead of assumed; readelf always reads
    what the gas of the same binutils writes.
    """
    out = subprocess.run(["readelf", "--sframe", str(host_sframe_binary)], check=True,
                         capture_output=True, text=True).stdout
    found = re.findall(r"Version: SFRAME_VERSION_(\d+)", out)
    assert len(found) == 1, f"readelf --sframe {host_sframe_binary}: no single version in:\n{out}"
    return int(found[0])


@pytest.fixture(scope="session")
def large_program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(twin, .noeh copy) of a generated program just large enough for its
    symbol file to be split between worker processes (``PARALLEL_MIN_FDES``)."""
    from sframe_core.symfiles.workers import PARALLEL_MIN_FDES

    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the generated program")
    scale = bench_scale()
    base = tmp_path_factory.mktemp("large")
    return scale.build(scale.gen_program(PARALLEL_MIN_FDES, base / "src"), base / "prog")


@pytest.fixture(params=sorted(GDBS), scope="module")
def gdb_path(request: pytest.FixtureRequest) -> str:
    """Every gdb the suite runs (the system's, 16, 17 and 18 from PyPI), one module at a time."""
    path = GDBS[request.param]
    if gdb_version(path) is None:
        missing(f"{request.param} not runnable at {path} (scripts/setup.sh installs gdb 16, 17 "
                "and 18)")
    return path
