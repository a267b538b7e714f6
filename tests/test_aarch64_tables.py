"""aarch64 jump tables (``aarch64.aarch64_jump_table``): the shapes gcc emits and
the near misses that must stay unresolved (an unresolved jump only costs
precision; a wrong table would make the saved-register rules wrong).

Hand-written instruction sequences in capstone's text form (what the matcher
reads); the same shapes in real code are covered by the aarch64 lua5.4 and
bzip2 fixtures (tests/test_saved.py, tests/test_cross_values.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from sframe_core.analysis.aarch64 import aarch64_jump_table, aarch64_jump_tables
from sframe_core.analysis.effects import Effect, Flow

BASE = 0x400000
TABLE = 0x4b0000


def _flow(text: str) -> tuple[Flow, int | None]:
    mnem, _, rest = text.partition(" ")
    target = int(rest.split("#")[-1], 16) if mnem.startswith(("b", "cb")) and "#" in rest else None
    if mnem == "b":
        return Flow.JUMP, target
    if mnem.startswith("b.") or mnem in ("cbz", "cbnz"):
        return Flow.COND, target
    if mnem == "bl":
        return Flow.CALL, target
    if mnem == "br":
        return Flow.INDIRECT, None
    if mnem == "ret":
        return Flow.RETURN, None
    return Flow.FALL, None


def _effects(lines: list[str]) -> tuple[list[Effect], dict[int, list[int]]]:
    effects = []
    for k, text in enumerate(lines):
        flow, target = _flow(text)
        effects.append(Effect(BASE + 4 * k, 4, flow, target, text=text))
    sources: dict[int, list[int]] = {}
    for k, eff in enumerate(effects):
        if eff.target is not None:
            sources.setdefault(eff.target, []).append(k)
    return effects, sources


def _reader(fmt: str, entries: list[int]) -> Callable[[int, int], bytes | None]:
    data = struct.pack(f"<{len(entries)}{fmt}", *entries)

    def read(address: int, size: int) -> bytes | None:
        off = address - TABLE
        return data[off:off + size] if 0 <= off and off + size <= len(data) else None

    return read


def _at(k: int) -> str:
    return f"#{BASE + 4 * k:#x}"


def _resolve(lines: list[str], read: Callable[[int, int], bytes | None],
             absolute: bool = False) -> list[int] | None:
    effects, sources = _effects(lines)
    site = next(k for k, e in enumerate(effects) if e.flow is Flow.INDIRECT)
    return aarch64_jump_table(effects, site, sources, read, absolute)


# gcc 12 -O2 switch: cmp/b.hi falling into the dispatch, adrp/add of the table
# scheduled around other instructions, halfword entries from the adr base.
SWITCH = [
    "stp x29, x30, [sp, #-0x20]!",          # 0
    "sub w0, w0, #0x101",                   # 1
    "cmp w0, #2",                           # 2
    f"b.hi {_at(13)}",                      # 3: default
    "adrp x1, #0x4b0000",                   # 4
    "mov x2, x19",                          # 5: unrelated
    "add x1, x1, #0",                       # 6
    "ldrh w1, [x1, w0, uxtw #1]",           # 7
    f"adr x0, {_at(11)}",                   # 8
    "add x1, x0, w1, sxth #2",              # 9
    "br x1",                                # 10
    "nop",                                  # 11: case 0
    "nop",                                  # 12: case 1
    "ret",                                  # 13: default, case 2
]
SWITCH_TABLE = _reader("h", [0, 1, 2])


def test_switch_fall_through_form() -> None:
    assert _resolve(SWITCH, SWITCH_TABLE) == [BASE + 4 * 11, BASE + 4 * 12, BASE + 4 * 13]


def test_index_changed_after_the_bound_is_not_a_table() -> None:
    lines = list(SWITCH)
    lines[5] = "add w0, w0, #1"  # the index no longer what cmp bounded
    assert _resolve(lines, SWITCH_TABLE) is None


def test_bound_branch_that_does_not_bound() -> None:
    lines = list(SWITCH)
    lines[3] = f"b.eq {_at(13)}"
    assert _resolve(lines, SWITCH_TABLE) is None
    lines[3] = f"b.hs {_at(13)}"  # index < 2: two entries
    assert _resolve(lines, SWITCH_TABLE) == [BASE + 4 * 11, BASE + 4 * 12]


def test_branch_into_the_dispatch_block_is_not_a_table() -> None:
    lines = list(SWITCH)
    lines[11] = f"b {_at(6)}"  # another way into the block, past the bound check
    assert _resolve(lines, SWITCH_TABLE) is None


# the dispatch block out of line, entered only by b.ls; the table address and
# the bound are computed before the branch (bzip2's main).
OUT_OF_LINE = [
    "adrp x3, #0x4b0000",                   # 0
    "add x3, x3, #0",                       # 1
    "cmp w1, #1",                           # 2
    f"b.ls {_at(5)}",                       # 3
    "ret",                                  # 4
    "ldrb w1, [x3, w1, uxtw]",              # 5
    f"adr x5, {_at(9)}",                    # 6
    "add x1, x5, w1, sxtb #2",              # 7
    "br x1",                                # 8
    "nop",                                  # 9
    "ret",                                  # 10
]


def test_block_entered_by_its_bounding_branch() -> None:
    assert _resolve(OUT_OF_LINE, _reader("b", [0, 1])) == [BASE + 4 * 9, BASE + 4 * 10]


def test_block_that_something_falls_into_is_not_a_table() -> None:
    lines = list(OUT_OF_LINE)
    lines[4] = "bl #0x500000"  # a call that may return falls into the block
    assert _resolve(lines, _reader("b", [0, 1])) is None


# luaV_execute: goto *disptab[op & 0x7f] with the table base kept in x21.
COMPUTED = [
    "stp x21, x22, [sp, #0x20]",            # 0
    "adrp x21, #0x4b0000",                  # 1
    "add x21, x21, #0",                     # 2
    "ldr w19, [x23], #4",                   # 3: the loop
    "and x0, x19, #1",                      # 4
    "ldr x2, [x21, x0, lsl #3]",            # 5
    "br x2",                                # 6
    f"cbnz w0, {_at(3)}",                   # 7: op 0
    "ldp x21, x22, [sp, #0x20]",            # 8: op 1, the epilogue
    "ret",                                  # 9
]
COMPUTED_TABLE = _reader("Q", [BASE + 4 * 7, BASE + 4 * 8])


def test_computed_goto_only_in_executables() -> None:
    # In a PIE the file holds no final addresses (dynamic relocations).
    assert _resolve(COMPUTED, COMPUTED_TABLE) is None
    assert _resolve(COMPUTED, COMPUTED_TABLE, absolute=True) == [BASE + 4 * 7, BASE + 4 * 8]


def test_hoisted_base_restored_on_a_path_back_to_the_jump_is_not_a_table() -> None:
    lines = list(COMPUTED)
    lines[9] = f"b {_at(3)}"  # after the restore x21 is the caller's: loops to the load
    assert _resolve(lines, COMPUTED_TABLE, absolute=True) is None


def test_caller_saved_base_across_a_call_is_not_a_table() -> None:
    lines = [line.replace("x21", "x9") for line in COMPUTED]
    assert _resolve(lines, COMPUTED_TABLE, absolute=True) == [BASE + 4 * 7, BASE + 4 * 8]
    lines[7] = "bl #0x500000"  # may change x9 before the loop reaches the load again
    lines.insert(8, f"b {_at(3)}")
    assert _resolve(lines, COMPUTED_TABLE, absolute=True) is None


def test_table_jumping_into_a_dispatch_block_unresolves_it() -> None:
    """A table whose entry lands between the bound check and the jump (here its
    own: entry -4 is the ldrh): the block is not straight-line, so the second
    round of aarch64_jump_tables drops it."""
    effects, sources = _effects(SWITCH)
    read = _reader("h", [-4, 1, 2])
    assert aarch64_jump_table(effects, 10, sources, read) == [BASE + 4 * 7, BASE + 4 * 12,
                                                              BASE + 4 * 13]
    assert aarch64_jump_tables(effects, [10], sources, read) == {}
    assert aarch64_jump_tables(effects, [10], sources, SWITCH_TABLE) == {
        10: [BASE + 4 * 11, BASE + 4 * 12, BASE + 4 * 13]}
