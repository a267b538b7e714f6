"""What makes symbol files fast changes none of their bytes (issue 17).

- the decoder's memo (``effects._Decoder._lite_effect``: each distinct
  encoding decoded in detail once, reused with its address, text and branch
  target moved), and amd64's effects from the text alone (``AMD64Decoder._quick``),
  give the effects a detailed decode of every instruction gives, on whole
  real programs (ten amd64 builds);
- worker processes (``workers.encode_in_workers``, ``to-dwarf --jobs``) write the
  bytes one process writes, and so does the in-process fallback when workers
  cannot start.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES, ROOT

from sframe_core.analysis import effects
from sframe_core.analysis.decoders import decoder_for
from sframe_core.analysis.effects import Base, Effect
from sframe_core.dwarf import debug_frame
from sframe_core.format.elf import read_elf
from sframe_core.symfiles import symfile, workers

LUA_X86 = FIXTURES / "realprogs" / "lua5.4" / "busid-v3" / "lua5.4.noeh"
LUA_A64 = FIXTURES / "realprogs-aarch64" / "lua5.4" / "lua5.4.noeh"
BZIP2_S390X = FIXTURES / "realprogs" / "s390x" / "bzip2" / "bzip2"


def _detailed(decoder: Any, code: bytes, address: int) -> Iterator[Effect | None]:
    """Every instruction decoded in detail, one by one: what the decoders did before the memo."""
    if decoder.tracked == effects.CALLEE_SAVED["aarch64"]:
        for off in range(0, len(code) - 3, 4):
            insns = list(decoder._cs.disasm(code[off:off + 4], address + off, 1))
            yield decoder._effect(insns[0]) if insns else None
        return
    end, pos = address + len(code), address
    if decoder.tracked == effects.CALLEE_SAVED["s390x"]:
        off = 0
        while off + 2 <= len(code):
            for insn in decoder._cs.disasm(code[off:], address + off):
                yield decoder._effect(insn)
                off += insn.size
            if off + 2 <= len(code):
                yield None
                off += (2, 4, 4, 6)[code[off] >> 6]
        if off < len(code):
            yield None
        return
    for insn in decoder._cs.disasm(code, address):
        pos = insn.address + insn.size
        yield decoder._effect(insn)
    if pos < end:
        yield None


# amd64's builds of both real programs: -O2, -Os, -O2 with frame pointers, three binutils.
_X86_BUILDS = [FIXTURES / "realprogs" / name / build / f"{name}.noeh"
               for name in ("lua5.4", "bzip2")
               for build in ("busid-v3", "busid-v3-Os", "busid-v3-fp", "bu2.44-v2", "bu2.40-v1")]


@pytest.mark.parametrize("path", [*_X86_BUILDS, LUA_A64, BZIP2_S390X],
                         ids=[*(f"amd64-{p.parent.parent.name}-{p.parent.name}" for p in _X86_BUILDS),
                              "aarch64", "s390x"])
def test_memo_gives_the_detailed_effects(path: Path) -> None:
    section = read_elf(str(path)).open()
    assert section is not None and section.code is not None
    decoder = decoder_for(section.arch)
    assert decoder is not None
    decoder._memo.clear()  # type: ignore[attr-defined]  # (so that its size counts this program)
    functions = instructions = 0
    for fde in section.iter_fdes():
        code = section.code(fde.start, fde.size)
        if not code:
            continue
        memo = list(decoder.effects(code, fde.start))
        assert memo == list(_detailed(decoder, code, fde.start)), f"{path} at {fde.start:#x}"
        functions += 1
        instructions += len(memo)
    reused = instructions - len(decoder._memo)  # type: ignore[attr-defined]
    assert functions > 50 and reused > instructions // 2, (functions, instructions, reused)


@pytest.mark.parametrize("threads", [1, 2], ids=["fork", "spawn"])
def test_workers_write_the_same_bytes(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """Forked workers (a process without other threads) and spawned ones alike."""
    import threading

    one = symfile.symbol_file_bytes(str(LUA_X86))
    monkeypatch.setattr(workers, "PARALLEL_MIN_FDES", 1)
    monkeypatch.setattr(workers, "NATIVE_SPLIT_MIN_FDES", 1)
    monkeypatch.setattr(workers, "_PART_MIN", 64)  # lua5.4: 797 FDEs, 13 parts
    monkeypatch.setattr(threading, "active_count", lambda: threads)
    here: list[range] = []  # parts the parent made itself (the fallback)
    functions = debug_frame.functions

    def parent_functions(section: Any, rows_for: Any = None, fdes: range | None = None) -> Any:
        if fdes is not None:
            here.append(fdes)
        return functions(section, rows_for, fdes)

    monkeypatch.setattr(debug_frame, "functions", parent_functions)
    assert symfile.symbol_file_bytes(str(LUA_X86), jobs=2) == one
    # The parent makes only the four .cold parts entered by jumps again
    # itself, once the workers' exits are in (``_with_parts``).
    assert len(here) == 4 and all(len(r) == 1 for r in here), here


def test_no_workers_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that cannot start (an embedded interpreter): done in-process."""
    import concurrent.futures

    one = symfile.symbol_file_bytes(str(LUA_X86))

    class NoPool:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise OSError("no processes here")

    monkeypatch.setattr(workers, "PARALLEL_MIN_FDES", 1)
    monkeypatch.setattr(workers, "NATIVE_SPLIT_MIN_FDES", 1)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", NoPool)
    assert symfile.symbol_file_bytes(str(LUA_X86), jobs=4) == one


def test_to_dwarf_jobs(tmp_path: Path) -> None:
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.debug"
        done = subprocess.run([sys.executable, "-m", "sframe_core", "to-dwarf", str(LUA_X86),
                               "-o", str(out), "--jobs", jobs], cwd=ROOT, capture_output=True,
                              text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"{out}\n", "")
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == symfile.symbol_file_bytes(str(LUA_X86))
    bad = subprocess.run([sys.executable, "-m", "sframe_core", "to-dwarf", str(LUA_X86), "-j", "0"],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[-1] == ("sframe to-dwarf: error: argument -j/--jobs: invalid "
                                           "positive integer value: '0'")


def test_printed_targets() -> None:
    """The branch targets the memo moves are checked against capstone's text."""
    assert effects._bare_target("0x401000") == 0x401000
    assert effects._bare_target("#0x10") == 0x10
    assert effects._bare_target("0xffffffffffffffff") == -1  # capstone's imm is signed 64-bit
    assert effects._bare_target("rax") is None
    assert effects._bare_target("%r14, 0x1000") is None
    assert effects._printed("w0, #3, #0x401000", 0x401000)
    assert effects._printed("0xffffffffffffffff", -1)
    assert not effects._printed("0x10", 0x11)
    assert not effects._printed("qword ptr [rip + 0x10]", 0x10)


def test_s390x_trap_jump_is_not_a_moved_jump() -> None:
    """``j .+2`` traps (its target is inside it): no other ``j`` of its length stands for it."""
    from sframe_core.base.abi import S390X

    decoder = decoder_for(S390X)
    assert decoder is not None
    jump = list(decoder.effects(bytes.fromhex("a7f40010"), 0x1000))[0]
    trap = list(decoder.effects(bytes.fromhex("a7f40001"), 0x2000))[0]
    assert jump is not None and (jump.flow, jump.target) == (effects.Flow.JUMP, 0x1020)
    assert trap is not None and (trap.flow, trap.target) == (effects.Flow.STOP, None)


def test_to_dwarf_cache_is_the_plugins_cache(tmp_path: Path) -> None:
    """``to-dwarf --cache``: made by a process of its own, found by ``symbol_file_for``."""
    bzip2 = FIXTURES / "realprogs" / "bzip2" / "busid-v3" / "bzip2.noeh"
    cache = tmp_path / "cache"
    runs = [subprocess.run([sys.executable, "-m", "sframe_core", "to-dwarf", str(bzip2), "--cache",
                            str(cache)], cwd=ROOT, capture_output=True, text=True)
            for _ in range(2)]
    assert [(r.returncode, r.stderr) for r in runs] == [(0, ""), (0, "")]
    path = runs[0].stdout.strip()
    assert runs[1].stdout.strip() == path and Path(path).parent == cache
    found = symfile.symbol_file_for(str(bzip2), cache=str(cache))
    assert (found.path, found.cached) == (path, True)
    assert Path(path).read_bytes() == symfile.symbol_file_bytes(str(bzip2))
    both = subprocess.run([sys.executable, "-m", "sframe_core", "to-dwarf", str(bzip2), "--cache",
                           "-o", str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True)
    assert both.returncode == 2
    assert both.stderr.splitlines()[-1] == ("sframe: error: give one of -o OUT, --build-id-dir DIR "
                                            "and --cache")


@pytest.mark.parametrize("code,text,stores", [
    # capstone 5.0.7 reports this movq's memory operand (66 0F D6) as read: a
    # move writes its first operand whatever it says.
    ("660fd6442418", "movq qword ptr [rsp + 0x18], xmm0", [(Base.SP, 0x18, 8, None)]),
    ("66480f7e442418", "movq qword ptr [rsp + 0x18], xmm0", [(Base.SP, 0x18, 8, None)]),
    ("f20f11442418", "movsd qword ptr [rsp + 0x18], xmm0", [(Base.SP, 0x18, 8, None)]),
    ("48895c2408", "mov qword ptr [rsp + 8], rbx", [(Base.SP, 8, 8, 3)]),
    ("48895df8", "mov qword ptr [rbp - 8], rbx", [(Base.FP, -8, 8, 3)]),
    ("0f1104 24", "movups xmmword ptr [rsp], xmm0", [(Base.SP, 0, 16, None)]),
    ("48891c24", "mov qword ptr [rsp], rbx", [(Base.SP, 0, 8, 3)]),
    ("48891c04", "mov qword ptr [rsp + rax], rbx", [(Base.FRAME, 0, 8, 3)]),
    # and capstone's store of a compare through SP is kept (decoded in detail)
    ("8444240f", "test byte ptr [rsp + 0xf], al", [(Base.SP, 0xf, 1, None)]),
    ("48895808", "mov qword ptr [rax + 8], rbx", []),  # not through SP or FP: no slot
])
def test_frame_stores_from_the_text_and_in_detail(code: str, text: str,
                                                  stores: list[tuple[Base, int, int, int]]) -> None:
    """The stores ``AMD64Decoder._quick`` reads from the text are the detailed decode's."""
    from sframe_core.analysis.amd64 import AMD64Decoder

    raw = bytes.fromhex(code.replace(" ", ""))
    decoder = AMD64Decoder()
    (quick,) = decoder.effects(raw, 0x1000)
    (insn,) = decoder._cs.disasm(raw, 0x1000)
    assert quick.text == text
    assert quick == decoder._effect(insn)
    assert [tuple(s) for s in quick.stores] == stores
