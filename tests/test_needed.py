"""sframe_core.targets.needed: the libraries a program's own search path finds, by the loader's names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers import missing

from sframe_core.targets.needed import needed_libraries


def _build(tmp_path: Path, rpath: str, new_dtags: bool) -> Path:
    if shutil.which("gcc") is None:
        missing("gcc is not installed (scripts/setup.sh installs it)")
    (tmp_path / "lib").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "l.c").write_text("int lib_f(void) { return 1; }\n")
    (tmp_path / "m.c").write_text("int lib_f(void);\nint main(void) { return lib_f(); }\n")
    for where in ("lib", "other"):
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libl.so", "-o",
                        str(tmp_path / where / "libl.so"), str(tmp_path / "l.c")], check=True)
    dtags = "--enable-new-dtags" if new_dtags else "--disable-new-dtags"
    subprocess.run(["gcc", "-o", str(tmp_path / "m"), str(tmp_path / "m.c"), "-L",
                    str(tmp_path / "lib"), "-ll", f"-Wl,-rpath,{rpath}", f"-Wl,{dtags}"],
                   check=True)
    return tmp_path / "m"


def test_runpath_after_library_path(tmp_path: Path) -> None:
    """DT_RUNPATH ($ORIGIN expanded) comes after LD_LIBRARY_PATH."""
    program = _build(tmp_path, "$ORIGIN/lib", True)
    assert needed_libraries(str(program), env={}) == [str(tmp_path / "lib" / "libl.so")]
    other = {"LD_LIBRARY_PATH": str(tmp_path / "other")}
    assert needed_libraries(str(program), env=other) == [str(tmp_path / "other" / "libl.so")]


def test_rpath_before_library_path(tmp_path: Path) -> None:
    """DT_RPATH (no DT_RUNPATH) comes before LD_LIBRARY_PATH; libc is the system's: not listed."""
    program = _build(tmp_path, "$ORIGIN/lib", False)
    other = {"LD_LIBRARY_PATH": str(tmp_path / "other")}
    assert needed_libraries(str(program), env=other) == [str(tmp_path / "lib" / "libl.so")]


def test_not_elf(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("not an ELF file\n")
    assert needed_libraries(str(tmp_path / "x")) == []
