"""sframe_core.targets.needed: the libraries a program needs, by the dynamic loader's names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers import missing

from sframe_core.targets.needed import cache_lookup, needed_libraries

# The program's own search path only (the system's libraries left out).
OWN = {"cache": None, "system": False}


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
    assert needed_libraries(str(program), env={}, **OWN) == [str(tmp_path / "lib" / "libl.so")]
    other = {"LD_LIBRARY_PATH": str(tmp_path / "other")}
    assert needed_libraries(str(program), env=other, **OWN) == [str(tmp_path / "other" / "libl.so")]


def test_rpath_before_library_path(tmp_path: Path) -> None:
    """DT_RPATH (no DT_RUNPATH) comes before LD_LIBRARY_PATH."""
    program = _build(tmp_path, "$ORIGIN/lib", False)
    other = {"LD_LIBRARY_PATH": str(tmp_path / "other")}
    assert needed_libraries(str(program), env=other, **OWN) == [str(tmp_path / "lib" / "libl.so")]


def _ldd(program: Path, env: dict[str, str]) -> list[str]:
    """What the dynamic loader itself loads, by its names (``ldd``'s paths:
    after "=>", or alone for the loader itself)."""
    out = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=True,
                         env=env).stdout
    paths = [line.split("=>")[-1].split("(")[0].strip() for line in out.splitlines()]
    return [p for p in paths if p.startswith("/")]


def test_system_libraries_as_the_loader_names_them(tmp_path: Path) -> None:
    """After the program's own search path: ld.so.cache, then the system's
    directories; the same paths, in the same order, as ``ldd`` (the loader)."""
    if shutil.which("ldd") is None:
        missing("ldd is not installed (libc-bin)")
    program = _build(tmp_path, "$ORIGIN/lib", True)
    got = needed_libraries(str(program), env={})
    assert got[1] == str(tmp_path / "lib" / "libl.so"), got  # after the loader
    assert set(got) == set(_ldd(program, {})), got


def test_a_library_ldconfig_put_in_the_cache(tmp_path: Path) -> None:
    """A library installed outside every search path and ``ldconfig``'d is
    found through the cache, under the cache's path (a real cache, made by
    ``ldconfig -C``)."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not Path(ldconfig).exists():
        missing("ldconfig is not installed (libc-bin)")
    program = _build(tmp_path, "/nonexistent", True)
    (tmp_path / "ld.so.conf").write_text(f"{tmp_path / 'other'}\n")
    subprocess.run([ldconfig, "-X", "-C", str(tmp_path / "ld.so.cache"), "-f",
                    str(tmp_path / "ld.so.conf")], check=True, capture_output=True)
    cache = str(tmp_path / "ld.so.cache")
    got = needed_libraries(str(program), env={}, cache=cache)
    assert got[1] == str(tmp_path / "other" / "libl.so"), got
    assert str(tmp_path / "other" / "libl.so") not in needed_libraries(str(program), env={},
                                                                       cache=None)
    # an ELF library of another machine under the same name is not taken
    assert cache_lookup("libl.so", ("EM_AARCH64", 64), cache) is None


def test_a_cache_that_is_not_one(tmp_path: Path) -> None:
    """Garbage, a cut-short cache, a missing one: nothing found there, no error."""
    real = Path("/etc/ld.so.cache").read_bytes() if Path("/etc/ld.so.cache").exists() else b""
    for i, data in enumerate([b"", b"not a cache at all", real[:40], real[:200],
                              b"glibc-ld.so.cache1.1" + b"\xff" * 60]):
        cache = tmp_path / f"c{i}"
        cache.write_bytes(data)
        assert cache_lookup("libc.so.6", ("EM_X86_64", 64), str(cache)) is None
    assert cache_lookup("libc.so.6", ("EM_X86_64", 64), str(tmp_path / "missing")) is None


def test_not_elf(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("not an ELF file\n")
    assert needed_libraries(str(tmp_path / "x")) == []
