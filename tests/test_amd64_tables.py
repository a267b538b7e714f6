"""amd64 indirect jumps (``amd64.amd64_jump_tables``): computed gotos
(gcc's labels-as-values dispatch) and table bases set out of the jump's block,
traced back over the function's paths; the near misses that must stay
unresolved (an unresolved jump only costs precision, a wrong table would make
the saved-register rules wrong). Then the same on real code: lua5.4 built
with -fno-omit-frame-pointer (a PIE, whose dispatch table only gets its
addresses from relative relocations), read independently with pyelftools.

The hand-written sequences are in capstone's text form, with the register
writes the decoder would report for the tracked (callee-saved) registers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from helpers import realprogs as rp

from sframe_core.analysis.amd64 import amd64_jump_tables
from sframe_core.analysis.decoders import decoder_for
from sframe_core.analysis.effects import Effect, Flow
from sframe_core.format.elf import read_elf

BASE = 0x10000
SIZE = 4  # every hand-written instruction takes 4 bytes
TABLE = 0x40000  # what "lea REG, T" loads
TABLE2 = 0x50000  # what "lea REG, T2" loads
TRACKED = {"r14": 14, "r12": 12}


def _fn(lines: list[str]) -> list[Effect]:
    """One Effect a line, as the decoder would give it: ``@k`` in a branch is
    the address of line k; ``T``/``T2`` in a lea its rip-relative table; the
    tracked registers a line writes are in ``clobbers``."""
    effects = []
    for k, line in enumerate(lines):
        address = BASE + SIZE * k
        mnem, _, ops = line.partition(" ")
        target = BASE + SIZE * int(ops[1:]) if ops.startswith("@") else None
        text = line if target is None else f"{mnem} {target:#x}"
        for name, value in (("T2", TABLE2), ("T", TABLE)):
            if ops.endswith(f", {name}"):
                text = f"{mnem} {ops.split(',')[0]}, [rip + {value - address - SIZE:#x}]"
                break
        if mnem == "jmp":
            flow = Flow.INDIRECT if target is None else Flow.JUMP
        else:
            flow = {"ja": Flow.COND, "je": Flow.COND, "ret": Flow.RETURN}.get(mnem, Flow.FALL)
        dst = ops.split(",")[0]
        clobbers = frozenset(reg for name, reg in TRACKED.items()
                             if mnem not in ("cmp", "test") and dst in (name, name + "d"))
        effects.append(Effect(address, SIZE, flow, target, clobbers=clobbers, text=text))
    return effects


def _pointers(entries: list[int], at: int = TABLE) -> Callable[[int, int], list[int] | None]:
    def read(address: int, count: int) -> list[int] | None:
        return entries if address == at and count == len(entries) else None

    return read


def _no_bytes(address: int, size: int) -> bytes | None:
    return None


def _tables(effects: list[Effect], pointers: Callable[[int, int], list[int] | None],
            read: Callable[[int, int], bytes | None] = _no_bytes) -> dict[int, list[int]]:
    sites = [k for k, eff in enumerate(effects) if eff.flow is Flow.INDIRECT]
    leaders = {eff.target for eff in effects if eff.target is not None}
    return amd64_jump_tables(effects, sites, leaders, read, pointers)


def _dispatch(before: list[str], mask: str = "0x3", last: tuple[str, ...] = ("ret",),
              ) -> tuple[list[Effect], list[int]]:
    """``before``, then gcc's dispatch loop through r14 and its four entries
    (two labels: one works and loops back, one ends with ``last``)."""
    at = len(before)
    effects = _fn([*before,
                   "mov eax, r12d",
                   f"and eax, {mask}",
                   "mov rax, qword ptr [r14 + rax*8]",
                   "jmp rax",
                   "add r12d, 1",
                   f"jmp @{at}",
                   *last])
    work, other = effects[at + 4].address, effects[at + 6].address
    return effects, [work, work, other, work]


def test_computed_goto_through_a_hoisted_base() -> None:
    effects, entries = _dispatch(["lea r14, T"])
    assert _tables(effects, _pointers(entries)) == {4: entries}


def test_the_mask_bounds_the_table_and_every_entry_must_be_known() -> None:
    effects, entries = _dispatch(["lea r14, T"])
    assert _tables(effects, _pointers(entries[:3])) == {}  # four asked for, three known
    effects, entries = _dispatch(["lea r14, T"], mask="0x5")  # not 2**n - 1: no bound
    assert _tables(effects, lambda address, count: [entries[0]] * count) == {}


def test_a_base_the_entry_reaches_unset_is_no_table() -> None:
    # The lea is on one path only: the other reaches the dispatch with the caller's r14.
    effects, entries = _dispatch(["test edi, edi", "je @3", "lea r14, T"])
    assert _tables(effects, _pointers(entries)) == {}


def test_another_write_of_the_base_that_reaches_the_jump_is_no_table() -> None:
    # The second label writes r14 and goes back to the dispatch.
    effects, entries = _dispatch(["lea r14, T"], last=("xor r14d, r14d", "jmp @1"))
    assert _tables(effects, _pointers(entries)) == {}
    # The same write on a path that returns changes nothing.
    effects, entries = _dispatch(["lea r14, T"], last=("xor r14d, r14d", "ret"))
    assert _tables(effects, _pointers(entries)) == {4: entries}


def test_an_unknown_jump_on_the_way_is_no_table_a_known_one_is() -> None:
    # r14 is written, then an indirect jump: were it to go to the dispatch,
    # r14 would not hold T there.
    effects, entries = _dispatch(["lea r14, T", "xor r14d, r14d", "jmp rcx", "lea r14, T"])
    assert _tables(effects, _pointers(entries)) == {}
    # A jump table (one entry: the lea before the dispatch) instead: known
    # from the first round on, so the dispatch resolves in the second.
    effects, entries = _dispatch(["lea r14, T", "xor r14d, r14d", "cmp ecx, 0", "ja @8",
                                  "lea rdx, T2", "movsxd rcx, dword ptr [rdx + rcx*4]",
                                  "add rcx, rdx", "jmp rcx", "lea r14, T"])
    switch = struct.pack("<i", effects[8].address - TABLE2)

    def read(address: int, size: int) -> bytes | None:
        return switch if (address, size) == (TABLE2, 4) else None

    assert _tables(effects, _pointers(entries), read) == {7: [effects[8].address], 12: entries}


# -- real code -----------------------------------------------------------------

LUA_FP = rp.LUA.path("busid-v3-fp")


def _relative_relocs(path: str) -> dict[int, int]:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        out = {}
        for section in elf.iter_sections():
            if isinstance(section, RelocationSection) and section["sh_flags"] & 2:
                for rel in section.iter_relocations():
                    if rel["r_info_type"] == 8:  # R_X86_64_RELATIVE
                        out[rel["r_offset"]] = rel["r_addend"]
        return out


def _symbol(path: str, name: str) -> tuple[int, int]:
    with open(path, "rb") as stream:
        sym = ELFFile(stream).get_section_by_name(".symtab").get_symbol_by_name(name)[0]
        return sym["st_value"], sym["st_size"]


def test_pie_table_words_are_read_as_loaded() -> None:
    """lua's dispatch table (``disptab``, 83 entries) in a PIE: each word is
    its relative relocation's addend plus the load bias; a word after it with
    no relocation reads as the file holds it."""
    path = str(LUA_FP)
    relocs = _relative_relocs(path)
    table, size = _symbol(path, "disptab.0")
    count = size // 8
    want = [relocs[table + 8 * k] for k in range(count)]
    info = read_elf(path)
    section = info.open()
    assert section is not None and section.pointers is not None
    assert section.pointers(table, count) == want
    bias = 0x555555554000
    moved = info.pointer_reader(bias)
    assert moved is not None
    assert moved(table + bias, count) == [w + bias for w in want]
    after = table + size
    assert after not in relocs
    raw = struct.unpack("<Q", section.code(after, 8) or b"")[0]
    assert section.pointers(after, 1) == [raw]


def test_pie_word_with_another_relocation_is_unknown() -> None:
    path = str(LUA_FP)
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        other = next(rel["r_offset"] for section in elf.iter_sections()
                     if isinstance(section, RelocationSection) and section["sh_flags"] & 2
                     for rel in section.iter_relocations() if rel["r_info_type"] != 8)
    section = read_elf(path).open()
    assert section is not None and section.pointers is not None
    assert section.pointers(other, 1) is None


def test_lua_dispatch_resolves_to_its_table() -> None:
    """Every ``jmp rax`` of luaV_execute's computed gotos resolves (through r14,
    set once in the prologue, the function's own calls in between), and its
    targets are the 83 disptab entries (plus what the 7-bit mask reaches past
    the table, outside the function)."""
    path = str(LUA_FP)
    relocs = _relative_relocs(path)
    table, size = _symbol(path, "disptab.0")
    labels = {relocs[table + 8 * k] for k in range(size // 8)}
    start, length = _symbol(path, "luaV_execute")
    section = read_elf(path).open()
    assert section is not None and section.code is not None
    decoder = decoder_for(section.arch)
    assert decoder is not None
    effects = [e for e in decoder.effects(section.code(start, length) or b"", start)
               if e is not None]
    assert section.pointers is not None
    found = _tables(effects, section.pointers, section.code)
    gotos = [i for i, eff in enumerate(effects) if eff.text == "jmp rax"]
    assert len(gotos) == 3  # gcc 12 keeps three copies of the dispatch jump here
    for i in gotos:
        assert i in found, effects[i].text
        inside = {t for t in found[i] if start <= t < start + length}
        assert inside == labels, hex(effects[i].address)
