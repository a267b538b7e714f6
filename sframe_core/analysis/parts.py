"""The callee-saved registers in parts of functions entered by jumps (gcc's ``NAME.cold``).

gcc at ``-O2`` (``-freorder-blocks-and-partition``) moves a function's
unlikely paths into a part of its own, ``NAME.cold`` in ``.text.unlikely``,
with an FDE of its own. Nothing calls that part: the hot part jumps into it
with the callee-saved registers already pushed, so ``saved.analyse`` cannot
start it from a function entry. When a whole module is converted (the
symbol-file generator), every function's branches out of itself are known
(``records.Exit``), and a part is analysed from the state those branches carry
(``records.Entry``) when all of this holds:

- every function of the module was decoded (one that was not, or an FDE
  with no row, which is not analysed, could be a hot part and branch
  anywhere: then no part gets an entry); code that no SFrame FDE covers is
  taken not to jump into parts, as ``saved.py`` takes all code not to jump
  into a function's middle;
- at least one branch goes to the part's start, and every branch there has a
  known state (a branch from code no path reaches, from a part that is not
  analysed, or a call, has none); the entry is their meet, so a register the
  branches disagree on is unknown;
- no branch of the module (jump, call, jump-table entry) lands inside the
  part other than at its start;
- the part cannot be run into from the code before it: it starts an
  executable section, or the FDE before it ends at most ``GAP`` bytes
  before it, no branch lands in between, and the last instruction of that
  FDE and the padding after it, ignoring nops, does not fall through (a
  jump, a return, a trap, or a call: a call as an FDE's last instruction
  does not return, as its return address would be outside the function
  that made it, which compilers do only for ``noreturn`` callees);
- SFrame's CFA rule at the part's start is the entering state's (checked by
  ``analyse``).

Indirect jumps. ``saved.py`` assumes, as ``.eh_frame`` consumers do, that
code is entered at a function's start or by its own branches, and that an
indirect jump whose table it cannot read goes to an instruction of its own
function whose CFA rule fits the jump's (or to a function's start, a tail
call). A part split from a function is still that function's code for the
compiler: a switch table of the hot part may hold cold targets. So the
states of the unread tables' jumps of every function that branches into the
part (its hot part: the code that jumps into a part is its own function's)
are met into every instruction of the part whose CFA rule fits them, exactly
as within one function; a read table's targets in the part are branches like
the others (a table's entry inside the part refuses it, above). PC-mask FDEs
(PLT stubs, which jump through the GOT or to the PLT's first entry) are not
decoded and taken not to jump into parts.

The hot part's own analysis does not see the jumps back from the part into
it: it assumes, as for every branch above, that the part keeps what the hot part knows
(the compiler's code does: a jump back carries the state of the jump out,
with any register the part wrote saved first).

The lazy per-PC lookups (the gdb Python unwinder) analyse one function at a
time and have no entries: parts keep no rules there.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..base.rows import CFARule, Row
from ..format.errata import correct_cfa
from ..format.rules import fre_rules
from .decoders import decoder_for
from .effects import Effect, Flow
from .records import MAX_BYTES, Analysis, Entry, State, entry_cfa, meet, meet_states
from .section import analysis_of

if TYPE_CHECKING:
    from ..format.records import FDE
    from ..format.section import SFrameSection

__all__ = ["Exits", "Collector", "merge", "entries", "enter_module", "GAP"]

# The most bytes of padding between the FDE before a part and the part.
GAP = 64

Key = tuple["int | None", "int | None"]


class Exits(NamedTuple):
    """The branches out of the functions of (part of) a module.

    ``targets``: target -> the met state of the branches to it (None: one has
    no known state), kept for targets inside a part or inside no FDE;
    ``sources``: target -> the starts of the functions that branch to it;
    ``indirect``: function start -> (SP, FP offsets) -> the met state of its
    unread tables' jumps (functions that branch into a part or into no FDE);
    ``opaque``: starts of functions whose code was not decoded."""

    targets: dict[int, State | None]
    sources: dict[int, set[int]]
    indirect: dict[int, dict[Key, State]]
    opaque: list[int]


def merge(into: Exits, other: Exits) -> None:
    """``other``'s branches added to ``into`` (meets commute: any order, same result)."""
    for target, state in other.targets.items():
        into.targets[target] = meet(into.targets[target], state) \
            if target in into.targets else state
    for target, starts in other.sources.items():
        into.sources.setdefault(target, set()).update(starts)
    for start, states in other.indirect.items():
        mine = into.indirect.setdefault(start, {})
        for key, state in states.items():
            known = mine.get(key)
            mine[key] = state if known is None else meet_states(known, state)
    into.opaque.extend(other.opaque)


def _first_cfa(section: SFrameSection, fde: FDE) -> CFARule | None:
    """SFrame's CFA rule at the FDE's first byte, as ``SectionAnalysis.rules`` reads it."""
    fres = section.get_fres(fde)
    if not fres or fres[0].start != 0:
        return None
    return correct_cfa(section.arch, fde, fre_rules(section.header, fde, fres[0], section.arch).cfa)


class Collector:
    """Gathers ``Exits`` while a module's rows are made: ``rows`` stands in for
    ``section.fde_rows`` (``debug_frame.functions``'s ``rows_for``)."""

    def __init__(self, section: SFrameSection) -> None:
        self.section = section
        self.analysis = analysis_of(section)
        self.exits = Exits({}, {}, {}, [])
        self._parts: dict[int, bool] = {}  # FDE index -> it is a part (not entered at an entry)
        self._entry = entry_cfa(section.arch)

    def rows(self, fde: FDE, block: int) -> list[Row]:
        rows = self.section.fde_rows(fde, block)
        analysis = self.analysis.analysed(fde)
        if analysis is not None:
            self.add(fde, analysis)
        return rows

    def _kept(self, target: int) -> bool:
        fde = self.section.find_fde(target)
        if fde is None:
            return True  # in no FDE: it matters if it is the padding before a part
        if fde.is_pcmask:
            return False
        part = self._parts.get(fde.index)
        if part is None:
            part = self._parts[fde.index] = _first_cfa(self.section, fde) != self._entry
        return part

    def add(self, fde: FDE, analysis: Analysis) -> None:
        exits = self.exits
        if analysis.exits is None:
            exits.opaque.append(fde.start)
            return
        unread: dict[Key, State] = {}
        kept = False
        for target, state in analysis.exits:
            if target is None:
                if state is not None:
                    key = (state.sp, state.fp)
                    known = unread.get(key)
                    unread[key] = state if known is None else meet_states(known, state)
            elif self._kept(target):
                kept = True
                exits.targets[target] = meet(exits.targets[target], state) \
                    if target in exits.targets else state
                exits.sources.setdefault(target, set()).add(fde.start)
        if kept and unread:
            exits.indirect[fde.start] = unread


def _key(key: Key) -> tuple[bool, int, bool, int]:
    sp, fp = key
    return (sp is None, sp or 0, fp is None, fp or 0)


def entries(section: SFrameSection, exits: Exits, section_starts: set[int]) -> dict[int, Entry]:
    """Part start -> how it is entered, for the parts the module proves (module docstring)."""
    if exits.opaque or section.code is None:
        return {}
    targets = sorted(exits.targets)
    entry = entry_cfa(section.arch)
    out: dict[int, Entry] = {}
    for target in targets:
        fde = section.find_fde(target)
        state = exits.targets[target]
        if fde is None or fde.start != target or fde.is_pcmask or state is None \
                or _first_cfa(section, fde) == entry:
            continue
        k = bisect_right(targets, target)
        if k < len(targets) and targets[k] < fde.end:
            continue  # a branch into its middle
        if _may_run_into(section, fde, targets, section_starts):
            continue
        unread: dict[Key, State] = {}
        for source in exits.sources.get(target, ()):
            for key, found in exits.indirect.get(source, {}).items():
                known = unread.get(key)
                unread[key] = found if known is None else meet_states(known, found)
        out[target] = Entry(state, tuple(unread[key] for key in sorted(unread, key=_key)))
    if out and any(fde.size and not fde.num_fres for fde in section.iter_fdes()):
        return {}  # code with an FDE but no row is not analysed: it could be a hot part
    return out


def _padding(eff: Effect) -> bool:
    return eff.flow is Flow.FALL and eff.text.startswith("nop") and not (
        eff.stores or eff.loads or eff.clobbers or eff.sp or eff.fp or eff.alt)


# A last instruction after which nothing runs on (see the module docstring on calls).
_ENDS = (Flow.JUMP, Flow.RETURN, Flow.STOP, Flow.INDIRECT, Flow.CALL)


def _may_run_into(section: SFrameSection, fde: FDE, targets: list[int],
                  section_starts: set[int]) -> bool:
    """Whether the code before the part at ``fde`` may run on into it."""
    start = fde.start
    if start in section_starts:
        return False
    find: Callable[[int], FDE | None] = section.find_fde
    before = next((f for back in range(1, GAP + 1) if (f := find(start - back)) is not None),
                  None)
    if before is None or before.end > start or start - before.start > MAX_BYTES:
        return True
    k = bisect_left(targets, before.end)
    if k < len(targets) and targets[k] < start:
        return True  # a branch into the padding between
    size = start - before.start
    assert section.code is not None
    try:
        code = section.code(before.start, size)
    except OSError:
        return True
    decoder = decoder_for(section.arch)
    if code is None or len(code) != size or decoder is None:
        return True
    last: Effect | None = None
    for eff in decoder.effects(code, before.start):
        if eff is None:
            return True
        if not _padding(eff):
            last = eff
    return last is None or last.address >= before.end or last.flow not in _ENDS


def enter_module(section: SFrameSection, section_starts: set[int]) -> dict[int, Entry]:
    """Give ``section`` the entries the symbol-file generator proves for the
    whole module (its two passes, without encoding), and return them: for
    comparing a section's rows with the file that generator wrote."""
    from ..dwarf.debug_frame import functions

    collector = Collector(section)
    for _ in functions(section, collector.rows):
        pass
    found = entries(section, collector.exits, section_starts)
    analysis_of(section).enter_parts(found)
    return found
