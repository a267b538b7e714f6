"""``sframe backtrace --core`` against gdb, on real cores made at test time.

For each fixture producer, gdb runs the binary without ``.eh_frame`` and the
twin that has it, to the same breakpoint (or fatal signal), and dumps a core
of each; gdb unwinds the twin with its CFI, we unwind the ``.noeh`` core with
SFrame (and libc's ``.eh_frame``). gdb disables ASLR and the two files'
code is at the same addresses, so every frame's PC must be equal, through
libc to ``_start`` and, for ``threads``, in every thread.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import X86
from helpers.oracle import PRODUCERS, gdb_run, one_line_error, our_pcs, sframe, sframe_json

from sframe_core.base.errors import FileError
from sframe_core.targets.corefile import open_core

LIBC_TAIL = ["__libc_start_call_main", "__libc_start_main"]


class Cores(NamedTuple):
    noeh: Path
    twin: Path
    twin_pcs: dict[int, list[int]]


def _fixture(producer: str, name: str) -> Path:
    path = X86 / producer / name
    assert path.is_file(), f"fixture {path} is missing (run tests/fixtures/build.sh)"
    return path


def _names(data: dict, thread: int = 0) -> list[str | None]:  # type: ignore[type-arg]
    return [f["function"] for f in data["threads"][thread]["frames"]]


@pytest.fixture(scope="module")
def deep_cores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Cores]:
    """Per producer: the .noeh core at stop_here, the twin's, and gdb's PCs on the twin."""
    out = {}
    for producer in PRODUCERS:
        tmp = tmp_path_factory.mktemp(producer)
        core = tmp / "deep.noeh.core"
        gdb_run(_fixture(producer, "deep.noeh"), ["deep"], tmp, core=core, pcs=False)
        twin = gdb_run(_fixture(producer, "deep"), ["deep"], tmp, core=tmp / "deep.core")
        out[producer] = Cores(core, tmp / "deep.core", twin)
    return out


@pytest.mark.gdb
@pytest.mark.parametrize("producer", PRODUCERS)
def test_deep_core_matches_gdb_on_the_twin(producer: str, deep_cores: dict[str, Cores]) -> None:
    core, _, twin = deep_cores[producer]
    data = sframe_json("backtrace", "--core", str(core))
    (gdb_pcs,) = twin.values()
    (ours,) = our_pcs(data).values()
    assert ours == gdb_pcs
    assert _names(data) == ["stop_here", "f4", "f2", "f1", "main", *LIBC_TAIL, "_start"]
    sources = [f["source"] for f in data["threads"][0]["frames"]]
    assert sources == ["sframe"] * 5 + ["eh_frame"] * 2 + [None]
    assert data["threads"][0]["stop"]["reason"] == "outermost"


@pytest.mark.gdb
@pytest.mark.parametrize("mode", ["abort", "segv"])
def test_fatal_signal_cores_match_gdb(mode: str, tmp_path: Path) -> None:
    core = tmp_path / "noeh.core"
    gdb_run(_fixture("bu2.40-v1", "deep.noeh"), [mode], tmp_path, core=core, breakpoint=None,
            pcs=False)
    twin = gdb_run(_fixture("bu2.40-v1", "deep"), [mode], tmp_path, core=tmp_path / "twin.core",
                   breakpoint=None)
    data = sframe_json("backtrace", "--core", str(core))
    assert list(our_pcs(data).values()) == list(twin.values())
    names = _names(data)
    # f3 tail-calls f4, so it is not on the stack.
    assert names[-7:] == ["f4", "f2", "f1", "main", *LIBC_TAIL, "_start"]
    if mode == "segv":
        assert len(names) == 7  # the faulting instruction is in f4 itself
    else:
        assert "abort" in names and "raise" in names


@pytest.mark.gdb
@pytest.mark.parametrize("producer", PRODUCERS)
def test_threads_core_matches_gdb_in_every_thread(producer: str, tmp_path: Path) -> None:
    # Threads loop on usleep(); at the breakpoint some may not have left the
    # barrier yet (settle runs them on for a moment), and one may be between
    # two sleeps when gdb stops them: the two runs are retried until every
    # thread is in the kernel.
    for attempt in range(4):
        core = tmp_path / f"threads.noeh.{attempt}.core"
        gdb_run(_fixture(producer, "threads.noeh"), [], tmp_path, core=core, pcs=False,
                settle=True)
        twin = gdb_run(_fixture(producer, "threads"), [], tmp_path,
                       core=tmp_path / f"threads.{attempt}.core", settle=True)
        data = sframe_json("backtrace", "--core", str(core))
        ours = sorted(our_pcs(data).values())
        theirs = sorted(twin.values())
        if ours == theirs:
            break
    assert ours == theirs
    assert len(data["threads"]) == 4
    ours_only = ("t_", "start_a", "start_b", "start_c")
    chains = sorted(tuple(n for n in _names(data, i) if n and n.startswith(ours_only))
                    for i in range(4))
    assert chains == [(), ("t_a2", "t_a1", "start_a"), ("t_b3", "t_b2", "t_b1", "start_b"),
                      ("t_c1", "start_c")]
    for thread in data["threads"]:
        assert thread["stop"]["reason"] == "outermost", thread["stop"]


@pytest.mark.gdb
def test_text_output(deep_cores: dict[str, Cores]) -> None:
    core, _, twin = deep_cores["bu2.40-v1"]
    (pcs,) = twin.values()
    out = sframe("backtrace", "--core", str(core)).stdout.splitlines()
    exe = str(X86 / "bu2.40-v1" / "deep.noeh")
    lwp = open_core(str(core)).threads[0].lwp
    assert out[0] == f"Thread 1 (LWP {lwp}):"
    assert out[1] == f"#0  0x{pcs[0]:016x} in stop_here+0 ({exe})"
    assert out[2].startswith(f"#1  0x{pcs[1]:016x} in f4+") and out[2].endswith(f" ({exe})")
    assert out[6].startswith(f"#5  0x{pcs[5]:016x} in __libc_start_call_main+")
    assert out[8].startswith(f"#7  0x{pcs[7]:016x} in _start+")
    assert out[9] == (f"Backtrace stopped: outermost frame (no unwind information at pc "
                      f"{pcs[7]:#x} and the frame pointer is 0, as at _start)")
    assert len(out) == 10


@pytest.mark.gdb
def test_sframe_only_stops_in_libc(deep_cores: dict[str, Cores]) -> None:
    core, _, twin = deep_cores["bu2.40-v1"]
    data = sframe_json("backtrace", "--core", str(core), "--source", "sframe")
    assert _names(data) == ["stop_here", "f4", "f2", "f1", "main", "__libc_start_call_main"]
    stop = data["threads"][0]["stop"]
    assert stop["reason"] == "no_info"
    assert stop["detail"].endswith("libc.so.6")


@pytest.mark.gdb
def test_eh_frame_only_on_the_twin(deep_cores: dict[str, Cores]) -> None:
    _, core, twin = deep_cores["bu2.40-v1"]
    data = sframe_json("backtrace", "--core", str(core), "--source", "eh_frame")
    (pcs,) = twin.values()
    assert list(our_pcs(data).values()) == [pcs]
    assert {f["source"] for f in data["threads"][0]["frames"][:-1]} == {"eh_frame"}


@pytest.mark.gdb
def test_exe_and_sysroot_find_a_moved_executable(tmp_path: Path) -> None:
    moved = tmp_path / "run" / "deep.noeh"
    moved.parent.mkdir()
    shutil.copy2(_fixture("bu2.40-v1", "deep.noeh"), moved)
    core = tmp_path / "moved.core"
    gdb_run(moved, ["deep"], tmp_path, core=core, pcs=False)
    # The sysroot holds the executable at its recorded path, and links to the libraries.
    sysroot = tmp_path / "sysroot"
    with open_core(str(core)) as opened:
        paths = {m.path for m in opened.mappings}
    for path in paths:
        target = sysroot / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if path == str(moved):
            shutil.copy2(moved, target)
        else:
            os.symlink(path, target)
    kept = tmp_path / "kept.noeh"
    moved.rename(kept)
    gone = sframe_json("backtrace", "--core", str(core))
    assert gone["threads"][0]["stop"]["reason"] == "no_info"
    assert _names(gone) == [None]
    want = ["stop_here", "f4", "f2", "f1", "main", *LIBC_TAIL, "_start"]
    assert _names(sframe_json("backtrace", "--core", str(core), "--exe", str(kept))) == want
    with_root = sframe_json("backtrace", "--core", str(core), "--sysroot", str(sysroot))
    assert _names(with_root) == want
    assert with_root["threads"][0]["frames"][0]["module"] == str(moved)


# -- errors ---------------------------------------------------------------------


def test_missing_core(tmp_path: Path) -> None:
    missing = tmp_path / "nope.core"
    assert one_line_error("backtrace", "--core", str(missing)) == \
        f"sframe: {missing}: No such file or directory"


def test_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "text.core"
    text.write_text("hello\n")
    assert one_line_error("backtrace", "--core", str(text)) == f"sframe: {text}: not an ELF file"


def test_not_a_core() -> None:
    exe = _fixture("bu2.40-v1", "deep.noeh")
    assert one_line_error("backtrace", "--core", str(exe)) == \
        f"sframe: {exe}: not a core file (ELF type ET_DYN)"


@pytest.mark.gdb
def test_truncated_notes(deep_cores: dict[str, Cores], tmp_path: Path) -> None:
    core = deep_cores["bu2.40-v1"].noeh
    data = bytearray(core.read_bytes())
    # Find PT_NOTE and claim one note is far longer than the segment.
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phnum, = struct.unpack_from("<H", data, 0x38)
    for i in range(phnum):
        base = phoff + 56 * i
        if struct.unpack_from("<I", data, base)[0] == 4:
            note = struct.unpack_from("<Q", data, base + 8)[0]
            struct.pack_into("<I", data, note + 4, 0x7FFFFFF0)
            break
    bad = tmp_path / "bad.core"
    bad.write_bytes(bytes(data))
    assert one_line_error("backtrace", "--core", str(bad)) == \
        f"sframe: {bad}: corrupt note: note of type 0x3 at offset 0x0 is truncated"
    cut = tmp_path / "cut.core"
    cut.write_bytes(core.read_bytes()[:0x2000])
    with pytest.raises(FileError, match=r"the notes are truncated"):
        open_core(str(cut))


def test_bad_source_is_a_usage_error() -> None:
    out = sframe("backtrace", "--core", "x", "--source", "dwarf", check=False)
    assert out.returncode == 2
    assert "invalid source list value: 'dwarf'" in out.stderr


# -- the memory of a core -----------------------------------------------------


@pytest.mark.gdb
def test_memory_reads_text_from_the_file_and_stack_from_the_core(deep_cores: dict[str, Cores]) -> None:
    core = deep_cores["bu2.40-v1"].noeh
    with open_core(str(core)) as opened:
        thread = opened.threads[0]
        libc = next(m for m in opened.mappings if m.path.endswith("libc.so.6") and m.file_offset)
        with open(libc.path, "rb") as stream:
            stream.seek(libc.file_offset)
            assert opened.memory.read(libc.start, 16) == stream.read(16)
        sp = thread.regs[7]
        assert opened.memory.read(sp, 8) is not None
        assert opened.memory.read(sp, 0) is None
        assert opened.memory.read(0x10, 8) is None
        assert opened.memory.read(sp, (1 << 20) + 1) is None
        # A read that runs off the end of the stack into unmapped memory fails whole.
        stack = next(s for s in opened.memory._segments if s.start <= sp < s.end)
        assert opened.memory.read(stack.end - 8, 8) is not None
        assert opened.memory.read(stack.end - 4, 8) is None
