"""Parts of functions entered by jumps (sframe_core.analysis.parts): when a
``.cold`` part gets an entry state, and when it must not.

On the real lua5.4 build (busid-v3, gcc -O2): its four ``.cold`` parts whose
first row is not a function entry are entered; each condition of the
module docstring, broken on purpose (a branch into a part's middle, a branch
with no known state, a function not decoded, code that runs on into a part,
branches that disagree, an unread table's jump, a CFA that differs),
refuses the part or narrows its rules, never more.
"""

from __future__ import annotations

import pytest
from helpers import realprogs as rp

from sframe_core.analysis.parts import Collector, Exits, entries
from sframe_core.analysis.records import LOST, Entry, meet
from sframe_core.analysis.section import SectionAnalysis, analysis_of
from sframe_core.base.rows import Rule, RuleKind
from sframe_core.dwarf.debug_frame import functions
from sframe_core.format.elf import read_elf
from sframe_core.format.section import SFrameSection
from sframe_core.symfiles.elfsyms import executable_sections
from sframe_core.symfiles.symfile import read_module

# luaD_throw.cold, reallymarkobject.cold, propagatemark.cold, statement.cold
PARTS = (0x7600, 0x760F, 0x7620, 0x7634)
RBX = 3


def _lua() -> str:
    return str(rp.LUA.path("busid-v3"))


def _section() -> SFrameSection:
    section = read_elf(_lua()).open(analyser=SectionAnalysis)
    assert section is not None
    return section


@pytest.fixture(scope="module")
def collected() -> tuple[Exits, set[int]]:
    section = _section()
    collector = Collector(section)
    for _ in functions(section, collector.rows):
        pass
    starts = {addr for _, addr, _ in executable_sections(read_module(_lua()).sections)}
    return collector.exits, starts


def _copy(exits: Exits) -> Exits:
    return Exits(dict(exits.targets), {k: set(v) for k, v in exits.sources.items()},
                 {k: dict(v) for k, v in exits.indirect.items()}, list(exits.opaque))


def test_lua_parts_are_entered(collected: tuple[Exits, set[int]]) -> None:
    exits, starts = collected
    assert exits.opaque == []
    assert sorted(entries(_section(), exits, starts)) == list(PARTS)


def test_a_branch_into_a_part_refuses_it(collected: tuple[Exits, set[int]]) -> None:
    exits, starts = collected
    broken = _copy(exits)
    broken.targets[0x7636] = broken.targets[0x7634]  # statement.cold's second instruction
    assert sorted(entries(_section(), broken, starts)) == [0x7600, 0x760F, 0x7620]


def test_a_branch_of_unknown_state_refuses_it(collected: tuple[Exits, set[int]]) -> None:
    exits, starts = collected
    broken = _copy(exits)
    broken.targets[0x7620] = None  # e.g. from code no path reaches, or a call
    assert sorted(entries(_section(), broken, starts)) == [0x7600, 0x760F, 0x7634]


def test_a_function_not_decoded_refuses_every_part(collected: tuple[Exits, set[int]]) -> None:
    exits, starts = collected
    broken = _copy(exits)
    broken.opaque.append(0x8000)
    assert entries(_section(), broken, starts) == {}


def _patched(section: SFrameSection, at: int, old: bytes, new: bytes) -> SFrameSection:
    """``section`` reading ``new`` at ``at`` where the file has ``old``."""
    code = section.code
    assert code is not None and code(at, len(old)) == old

    def read(address: int, size: int) -> bytes | None:
        data = code(address, size)
        if data is None or not (address < at + len(new) and at < address + size):
            return data
        buf = bytearray(data)
        for k, byte in enumerate(new):
            if 0 <= at + k - address < size:
                buf[at + k - address] = byte
        return bytes(buf)

    section.code = read
    return section


def test_code_that_may_run_on_into_a_part_refuses_it(collected: tuple[Exits, set[int]]) -> None:
    """genlink.cold (before reallymarkobject.cold) ends with ud2; made two
    nops, its last instruction is a store that runs on into the part."""
    exits, starts = collected
    section = _patched(_section(), 0x760D, b"\x0f\x0b", b"\x90\x90")
    assert sorted(entries(section, exits, starts)) == [0x7600, 0x7620, 0x7634]


def test_the_code_before_a_section_start(collected: tuple[Exits, set[int]]) -> None:
    """luaD_throw.cold starts .text, after .plt.got's last stub (an indirect
    jump, a nop) and 8 zero bytes. Not told that .text starts there, the code
    before it is read: the zero bytes decode as stores that run on, so the
    part is refused; were they nops, it is entered, unless a branch lands
    among them."""
    exits, starts = collected
    assert 0x7600 in entries(_section(), exits, starts)
    assert 0x7600 not in entries(_section(), exits, set())
    nops = _patched(_section(), 0x75F8, bytes(8), b"\x90" * 8)
    assert 0x7600 in entries(nops, exits, set())
    broken = _copy(exits)
    broken.targets[0x75FC] = None
    assert 0x7600 not in entries(nops, broken, set())


def _regs_at(section: SFrameSection, start: int, entry: Entry) -> dict[int, Rule]:
    analysis_of(section).enter_parts({start: entry})
    fde = section.find_fde(start)
    assert fde is not None
    analysis = analysis_of(section).rules(fde)
    assert analysis.note == "", analysis.note
    return dict(analysis.regs_at(start)[0])


def test_branches_that_disagree_lose_that_register(collected: tuple[Exits, set[int]]) -> None:
    exits, _ = collected
    state = exits.targets[0x7634]
    assert state is not None
    section = _section()
    full = _regs_at(section, 0x7634, Entry(state))
    assert full[RBX] == Rule(RuleKind.AT_CFA, -56)
    other = state._replace(regs=(LOST, *state.regs[1:]))
    met = meet(state, other)
    assert met is not None
    narrowed = _regs_at(section, 0x7634, Entry(met))
    assert RBX not in narrowed and {k: v for k, v in full.items() if k != RBX} == narrowed
    # An unread table's jump of the hot part, in the same frame: met in the same way.
    assert _regs_at(section, 0x7634, Entry(state, (other,))) == narrowed
    # ... in another frame (its SP offset fits no instruction of the part): not met.
    assert _regs_at(section, 0x7634, Entry(state, (other._replace(sp=-8),))) == full


def test_an_entering_cfa_that_is_not_sframes_refuses(collected: tuple[Exits, set[int]]) -> None:
    exits, _ = collected
    state = exits.targets[0x7634]
    assert state is not None and state.sp is not None
    section = _section()
    analysis_of(section).enter_parts({0x7634: Entry(state._replace(sp=state.sp + 8))})
    fde = section.find_fde(0x7634)
    assert fde is not None
    analysis = analysis_of(section).rules(fde)
    assert (analysis.spans, analysis.note) == ((), "the entering state's CFA is not SFrame's")


def test_lazy_lookups_keep_parts_unknown() -> None:
    """A section opened for PC-by-PC lookups (the gdb Python unwinder) has no
    entries: the part's rows carry no register rule, as before."""
    section = _section()
    hit = section.lookup(0x7634)
    assert hit is not None and hit.row.regs == ()
