"""Test programs built at test time by the host toolchain (gcc + gas --gsframe).

For programs whose point is what they do at run time (a smashed stack, a
longjmp) rather than what a given binutils emits: the committed fixtures
cover the producers. Same flags as tests/fixtures/build.sh; the host's gas
writes SFrame v1 on Debian 12 (binutils 2.40), v2 on Debian 13 (2.44).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from . import without_eh_frame

SRC = Path(__file__).resolve().parent.parent / "fixtures" / "src"
FLAGS = ["-O2", "-fomit-frame-pointer", "-fno-reorder-blocks-and-partition", "-g0",
         "-Wa,--gsframe", "-fno-use-linker-plugin"]


class HostProgram(NamedTuple):
    twin: Path  # .eh_frame and .sframe
    noeh: Path  # .sframe only


def build(name: str, out: Path) -> HostProgram:
    """``tests/fixtures/src/NAME.c`` as ``out/NAME`` and ``out/NAME.noeh``."""
    for tool in ("gcc", "objcopy"):
        if shutil.which(tool) is None:
            raise AssertionError(f"{tool} is needed to build {name} (scripts/setup.sh installs it)")
    twin = out / name
    noeh = out / f"{name}.noeh"
    if not noeh.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", *FLAGS, "-I", str(SRC), "-o", str(twin), str(SRC / f"{name}.c")],
                       check=True)
        without_eh_frame(twin, noeh, debug_frame=True)
    return HostProgram(twin, noeh)
