"""Where a function keeps its caller's callee-saved registers, PC by PC.

SFrame records the CFA, RA and FP rules only; the other callee-saved
registers (amd64 rbx, r12-r15; aarch64 x19-x28, d8-d15) are saved and
restored by the function's machine code. This module runs a forward
dataflow analysis over that code (instruction effects from ``effects.py``)
and gives, for every PC of the function, a rule per register in the row
model: ``AT_CFA`` (saved in a stack slot at CFA + offset), ``SAME_VALUE``
(the register still holds the caller's value: never written since entry, or
restored) or nothing (unknown).

Unknown is always allowed; a wrong rule never is. So:

- the state holds, per register, the CFA offset of a slot that provably holds
  the caller's value, and whether the register itself still does; states meet
  at control-flow joins and any disagreement becomes unknown;
- the simulated SP (and FP) is checked against SFrame's CFA rule at every
  instruction; a mismatch forgets every register (SFrame's CFA is what the
  unwinder trusts, so it anchors the stack offsets);
- a store through SP/FP at a known offset forgets the slots it overlaps; one
  at an offset it cannot place (an index register, SP unknown after alloca)
  forgets every slot whose register holds its value again (restored: the
  slot may be reused); a register saved through any other base is not a save;
- an indirect jump's state is met into every instruction of the function
  whose SFrame CFA rule is consistent with it (a jump table's targets), so a
  block reached only that way is never more precise than its jumps;
- a direct jump or call into the middle of an instruction, an undecodable
  instruction, an FDE whose first row is not a function entry (unless it
  is given the state it is entered in: a part of a function entered by
  jumps, gcc's ``NAME.cold``, which ``parts.py`` proves for a whole
  module), or a function larger than ``MAX_INSNS``: the whole function is
  unknown;
- the branches out of the function are reported with the state along each
  (``Analysis.exits``), for ``parts.py``.

Precondition the analysis relies on, as ``.eh_frame`` does: code does not
write into a save slot it will still restore from, except through the known
SP/FP offsets above; callees keep the callee-saved registers and the caller's
stack above their CFA (the ABI).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ..base.abi import Arch
from ..base.rows import SAME, CFARule, Rule, RuleKind
from . import native as c_analysis
from .aarch64 import aarch64_jump_tables
from .amd64 import amd64_jump_tables
from .decoders import decoder_for
from .effects import Base, Effect, Flow
from .records import (
    ENTRY_CFA,
    LOST,
    MAX_BYTES,
    MAX_INSNS,
    RED_ZONE,
    Analysis,
    Anchor,
    Entry,
    Exit,
    Reg,
    Regs,
    Span,
    State,
    anchor,
    entry_cfa,
    meet,
    meet_states,
    new_record,
)
from .results import (
    INDIRECT,
    UNREAD,
    Kept,
    Reads,
    ResultStore,
    flow_key,
    index_key,
    masked_key,
    masks_of,
    read_key,
)
from .s390x import s390x_jump_table

__all__ = ["Span", "analyse", "MAX_INSNS", "MAX_BYTES", "Analysis", "Entry", "Exit", "meet",
           "entry_cfa"]


def _anchors(effects: list[Effect], rows: Sequence[tuple[int, CFARule | None]],
             arch: Arch) -> list[Anchor]:
    """Each instruction's anchor from the rows ``cfa_at`` answers from (in
    address order): one walk, and one anchor per row, rather than a search
    and an anchor per instruction."""
    out: list[Anchor] = []
    k, count = 0, len(rows)
    fixed: Anchor = (None, None)
    for eff in effects:
        while k < count and rows[k][0] <= eff.address:
            fixed = anchor(rows[k][1], arch)
            k += 1
        out.append(fixed)
    return out


def _reconcile(state: State, fixed: Anchor) -> State:
    sp, fp = fixed
    if (sp is not None and state.sp is not None and sp != state.sp) or (
            fp is not None and state.fp is not None and fp != state.fp):
        # The simulation and SFrame disagree: trust neither for the registers.
        return new_record(State, (sp, fp, tuple(LOST for _ in state.regs), None))
    if (sp is not None and state.sp is None) or (fp is not None and state.fp is None):
        return new_record(State, (sp if sp is not None else state.sp,
                             fp if fp is not None else state.fp, state.regs, state.alt))
    return state


def _address(base: Base, disp: int, state: State) -> int | None:
    if base is Base.SP:
        return None if state.sp is None else state.sp + disp
    if base is Base.FP:
        return None if state.fp is None else state.fp + disp
    if base is Base.ALT:
        return None if state.alt is None else state.alt + disp
    return None


def _transfer(state: State, eff: Effect, index: dict[int, int]) -> State:
    sp, fp, regs_t, alt = state
    regs = list(regs_t)
    for store in eff.stores:
        if store.base is Base.OTHER or (store.base is Base.FP and state.fp is None) or (
                store.base is Base.ALT and state.alt is None):
            continue  # a pointer not known to point into the frame (rbp as a general register)
        at = _address(store.base, store.disp, state)
        if at is None:
            # Somewhere in the frame (an array indexed by a register, or SP
            # unknown after alloca). A slot the function will still restore
            # from is not overwritten (the precondition); one whose register
            # was restored already may be reused, so it is forgotten.
            regs = [reg if pinned else (None, live, False, held) for reg in regs
                    for _, live, pinned, held in (reg,)]
            continue
        end = None if store.size is None else at + store.size
        for i, (slot, live, _, held) in enumerate(regs):
            if slot is not None and slot + 8 > at and (end is None or slot < end):
                regs[i] = (None, live, False, held)
        if store.reg is not None:
            i = index[store.reg]
            slot, live, pinned, held = regs[i]
            if live and store.size is not None and store.size >= 8:
                regs[i] = (slot, True, pinned, held) if slot is not None else (at, True, True, held)
    for load in eff.loads:
        i = index[load.reg]
        slot, _, pinned, held = regs[i]
        at = _address(load.base, load.disp, state)
        if slot is not None and at == slot and load.size == 8:
            regs[i] = (slot, True, False, held)  # restored: the slot may be reused from now on
        else:
            regs[i] = (slot, False, pinned, held)
    for reg in eff.clobbers:
        k = index.get(reg)
        if k is not None:
            regs[k] = (regs[k][0], False, regs[k][2], regs[k][3])
    if eff.others or eff.moves or any(r[3] is not None for r in regs):
        regs = _moves(regs, regs_t, eff, index)
    if eff.sp is not None:
        sp = _pointer(eff.sp.from_, eff.sp.add, state)
    if eff.fp is not None:
        fp = _pointer(eff.fp.from_, eff.fp.add, state)
    if eff.alt is not None:
        alt = _pointer(eff.alt.from_, eff.alt.add, state)
    return new_record(State, (sp, fp, tuple(regs), alt))


def _moves(regs: list[Reg], before: tuple[Reg, ...], eff: Effect,
           index: dict[int, int]) -> list[Reg]:
    """Copies to and from other registers: a register written forgets the
    values it held; ``(dst, src)`` with ``src`` a tracked register holding the
    caller's value (before the instruction) makes ``dst`` hold it; with ``dst``
    tracked and ``src`` what holds its caller's value, ``dst`` has it again."""
    written = eff.others | eff.clobbers | {ld.reg for ld in eff.loads} | {d for d, _ in eff.moves}
    regs = [(slot, live, pinned, None if held in written else held)
            for slot, live, pinned, held in regs]
    for dst, src in eff.moves:
        j, k = index.get(src), index.get(dst)
        if j is not None and k is None and before[j][1]:
            slot, live, pinned, _ = regs[j]
            regs[j] = (slot, live, pinned, dst)
        elif k is not None and j is None and before[k][3] == src:
            slot, _, pinned, _ = regs[k]
            regs[k] = (slot, True, pinned, None if src in written else src)
    return regs


def _pointer(from_: str, add: int, state: State) -> int | None:
    if from_ == "sp" and state.sp is not None:
        return state.sp + add
    if from_ == "fp" and state.fp is not None:
        return state.fp + add
    if from_ == "alt" and state.alt is not None:
        return state.alt + add
    return None


def _rules(state: State, tracked: Sequence[int], red_zone: int) -> Regs:
    out: list[tuple[int, Rule]] = []
    sp = state.sp
    for reg, (slot, live, _, held) in zip(tracked, state.regs, strict=True):
        if slot is not None and (sp is None or slot >= sp - red_zone):
            out.append((reg, Rule(RuleKind.AT_CFA, slot)))
        elif live:
            out.append((reg, SAME))
        elif held is not None:
            out.append((reg, Rule(RuleKind.IN_REG, 0, held)))
    return tuple(out)


def analyse(arch: Arch, code: bytes, start: int, cfa_at: Callable[[int], CFARule | None],
            read: Callable[[int, int], bytes | None] | None = None,
            absolute_tables: bool = False,
            pointers: Callable[[int, int], list[int] | None] | None = None,
            entry: Entry | None = None,
            store: ResultStore | None = None,
            rows: Sequence[tuple[int, CFARule | None]] | None = None,
            native: bool = False) -> Analysis:
    """Rules for the callee-saved registers over ``[start, start + len(code))``.

    ``cfa_at(pc)`` gives SFrame's CFA rule at a PC of the function (None
    where it has none); ``read(address, size)`` the file's bytes (jump
    tables). ``absolute_tables``: tables of absolute addresses in the file are
    final (a non-PIE executable: no load bias, no dynamic relocations);
    ``pointers(address, count)`` the code addresses a table will hold once
    loaded (amd64 computed gotos, PIEs included). ``entry``: the code is not
    a function entered at its first instruction but a part entered by jumps
    (gcc's ``NAME.cold``), in that state (``parts.py`` proves it); its CFA
    must be the one SFrame gives at ``start``. The
    result's spans cover the decoded instructions; PCs outside them have no
    rules. Its exits are the branches that leave the code (``Exit``), with
    the state along each where the analysis ran.
    ``store``: results kept from earlier runs (another build of the program),
    by ``flow_key`` (a part given its ``entry`` by that and the entry,
    ``_qualified``); the dataflow, the costly part, runs only on a miss.
    ``rows``: the (address, CFA rule) rows ``cfa_at`` answers from, which
    amd64's keys from the bytes need (``results.masked_key``).
    ``native``: ask the C first (``SectionAnalysis.native``); without it the
    Python alone answers.
    """
    # The same analysis in C where it covers the function (``native``: a
    # fraction of the time; it declines the rest). Its result is the one
    # below, so no kept result is looked up or kept for it, and the Python
    # decoder is not made for it (capstone's binding imported, two handles).
    if native and arch.name == "amd64" and entry is None and rows is not None \
            and len(code) <= MAX_BYTES and cfa_at(start) == entry_cfa(arch):
        served = c_analysis.analyse(code, start, rows, read)
        if served is not None:
            return served
    decoder = decoder_for(arch)
    if decoder is None:
        return Analysis((), "no instruction decoder for this ABI")
    if len(code) > MAX_BYTES:
        return Analysis((), f"function larger than {MAX_BYTES} bytes")
    # amd64: keys from the bytes, with the fields other builds found masked
    # (``results.masked_key``): no detailed decoding on a hit. Not for a part
    # given its entry: that is in its ``flow_key`` only (``_qualified``).
    index = None if store is None or rows is None or entry is not None \
        else index_key(arch, len(code), start, rows)
    context = f"{read is None} {pointers is None} {absolute_tables}"  # what the table readers get
    if index is not None and store is not None:
        for masks in store.masks(index):
            quick = masked_key(index, masks, code, start)
            if quick is None:
                continue
            moved_to = _byte_targets(masks, code, start)
            if masks[:1] in ((INDIRECT,), (UNREAD,)):
                # Asked again of the file as it is now (``results.read_key``).
                for known in store.reads(quick):
                    now = _answers(known, read, pointers)
                    hit = None if now is None else _moved(
                        store.get(read_key(quick, known, now, context)), start, len(code), moved_to)
                    if hit is not None:
                        return hit
                continue
            hit = _moved(store.get(quick), start, len(code), moved_to)
            if hit is not None:
                return hit
    effects: list[Effect] = []
    # All or nothing: code not decoded could jump back into the rest.
    for eff in decoder.effects(code, start):
        if eff is None:
            return Analysis((), f"undecodable instruction after {len(effects)} instructions")
        if len(effects) >= MAX_INSNS:
            return Analysis((), f"more than {MAX_INSNS} instructions")
        effects.append(eff)
    if not effects:
        return Analysis((), "no instruction decoded")
    end = start + len(code)

    def unknown_exits() -> tuple[Exit, ...]:
        # The direct branches out, in no known state: the code was decoded, not analysed.
        return tuple((eff.target, None) for eff in effects
                     if eff.flow in _BRANCHES and eff.target is not None
                     and not start <= eff.target < end)

    first_cfa = cfa_at(start)
    if entry is None and first_cfa != entry_cfa(arch):
        return Analysis((), "the first row is not a function entry", unknown_exits())
    anchor0 = anchor(first_cfa, arch)
    if entry is not None and (anchor0 == (None, None) or any(
            want is not None and have != want
            for want, have in zip(anchor0, (entry.state.sp, entry.state.fp), strict=True))):
        return Analysis((), "the entering state's CFA is not SFrame's", unknown_exits())
    at: dict[int, int] = {eff.address: i for i, eff in enumerate(effects)}
    sites: list[int] = []  # the indirect jumps
    leaving: list[int] = []  # what may branch out (``_exits``): those and direct branches out
    # Branch targets inside the function must be instruction starts.
    for i, eff in enumerate(effects):
        target = eff.target
        if target is not None:
            if start <= target < end:
                if target not in at:
                    return Analysis((), f"branch at {eff.address:#x} into the middle of an "
                                    "instruction", unknown_exits())
                if eff.flow is Flow.CALL and start < target:
                    return Analysis((), f"call at {eff.address:#x} into its own function",
                                    unknown_exits())
            elif eff.flow in _BRANCHES:
                leaving.append(i)
        if eff.flow is Flow.INDIRECT:
            sites.append(i)
            leaving.append(i)
    # Indirect jumps through a jump table the decoder recognises go to its
    # entries only; the others may go anywhere (see the module docstring).
    tables: dict[int, list[int]] = {}
    table_exits: dict[int, tuple[int, ...]] = {}  # a table's targets out of the function
    asked: list[tuple[int, int, int]] = []  # what the jump-table readers asked, in order
    answers: list[bytes | list[int] | None] = []
    if read is not None and sites and arch.name in ("amd64", "aarch64", "s390x"):
        if index is not None:
            read, pointers = _logged(read, pointers, asked, answers)
        leaders = {eff.target for eff in effects if eff.target is not None}
        sources: dict[int, list[int]] = {}
        for i, eff in enumerate(effects):
            if eff.target is not None:
                sources.setdefault(eff.target, []).append(i)
        if arch.name == "amd64":
            found = amd64_jump_tables(effects, sites, leaders, read, pointers)
        elif arch.name == "s390x":
            found = {i: t for i in sites if (t := s390x_jump_table(effects, i, read)) is not None}
        else:
            found = aarch64_jump_tables(effects, sites, sources, read, absolute_tables)
        for i, targets in found.items():
            if all(t in at or not start <= t < end for t in targets):
                tables[i] = [at[t] for t in targets if t in at]
                outside = tuple(t for t in targets if not start <= t < end)
                if outside:
                    table_exits[i] = outside
    tracked = decoder.tracked
    anchors = _anchors(effects, rows, arch) if rows is not None \
        else [anchor(cfa_at(eff.address), arch) for eff in effects]
    # Everything from here on reads only what the key holds (see ``flow_key``):
    # a result kept for the same key is the one the dataflow would give.
    if store is None:
        return _dataflow(arch, tracked, effects, start, end, at, tables, table_exits, anchors,
                         entry, leaving)[0]
    key = _qualified(flow_key(arch, tracked, effects, start, end, tables, anchors),
                     table_exits, entry, start)
    reused = None if key is None else store.get(key)
    result = None if reused is None else \
        _moved(reused, start, len(code), _effect_targets(effects, at, start, end))
    if result is not None and reused is not None:
        # Kept again with this function's own targets: its bytes' key below
        # reads an unmasked branch's target as the offset kept.
        kept = _relative(result, [start + off for off, _, _ in reused.exits], start)
    else:
        result, sites_out = _dataflow(arch, tracked, effects, start, end, at, tables, table_exits,
                                      anchors, entry, leaving)
        kept = _relative(result, sites_out, start)
        if key is not None:
            store.put(key, kept)
    if index is not None and (not sites or read is not None):
        # Without indirect jumps nothing was read from the file: the bytes say
        # it all; with them, the bytes at this address and what was read.
        masks = masks_of(effects, code, start, bool(sites), bool(asked))
        quick = masked_key(index, masks, code, start)
        if quick is not None:
            if sites:
                reads: Reads = tuple(asked)
                store.put(read_key(quick, reads, answers, context), kept)
                store.add_reads(quick, reads)
            else:
                store.put(quick, kept)
            store.add_masks(index, masks)
    return result


def _qualified(key: bytes | None, table_exits: dict[int, tuple[int, ...]], entry: Entry | None,
               start: int) -> bytes | None:
    """``key`` with what ``flow_key`` leaves out but a result holds: a read
    table's targets out of the function (exits, offsets from ``start``) and
    the state a part is entered in (``entry``)."""
    if key is None or (not table_exits and entry is None):
        return key
    outside = sorted((i, tuple(t - start for t in targets)) for i, targets in table_exits.items())
    text = f"exits {outside!r}\nentry {None if entry is None else tuple(entry)!r}"
    return hashlib.sha256(key + text.encode()).digest()[:20]


def _answers(reads: Reads, read: Callable[[int, int], bytes | None] | None,
             pointers: Callable[[int, int], list[int] | None] | None,
             ) -> list[bytes | list[int] | None] | None:
    """What the file answers now to the questions ``reads`` (None: one cannot be asked)."""
    out: list[bytes | list[int] | None] = []
    for kind, address, size in reads:
        if kind == 0 and read is not None:
            out.append(read(address, size))
        elif kind == 1 and pointers is not None:
            found = pointers(address, size)
            out.append(None if found is None else list(found))
        else:
            return None
    return out


def _logged(read: Callable[[int, int], bytes | None],
            pointers: Callable[[int, int], list[int] | None] | None,
            asked: list[tuple[int, int, int]], answers: list[bytes | list[int] | None],
            ) -> tuple[Callable[[int, int], bytes | None],
                       Callable[[int, int], list[int] | None] | None]:
    """``read`` and ``pointers`` writing down what they are asked and answer."""
    def logged_read(address: int, size: int) -> bytes | None:
        found = read(address, size)
        asked.append((0, address, size))
        answers.append(found)
        return found

    def logged_pointers(address: int, count: int) -> list[int] | None:
        assert pointers is not None
        found = pointers(address, count)
        asked.append((1, address, count))
        answers.append(None if found is None else list(found))
        return found
    return logged_read, (None if pointers is None else logged_pointers)


# ``_moved``'s answer for a kept exit whose branch is not where it was.
_MISS = -1
# A kept exit's target now: (offset of its branch instruction, its target
# then minus the function's start) -> the target, or ``_MISS``.
Targets = Callable[[int, int], int]


def _byte_targets(masks: Sequence[tuple[int, int, int]], code: bytes, start: int) -> Targets:
    """Targets read from the bytes (a hit on ``masked_key``): a masked branch's
    from its displacement now; any other is the same bytes, so the same offset."""
    # A masked branch's offset -> (its end, its displacement's width).
    branches = {off: (off + length, 4 if kind == 1 else 1)
                for kind, off, length in masks if kind in (1, 2)}

    def target(off: int, rel: int) -> int:
        found = branches.get(off)
        if found is None:
            return start + rel
        end, width = found
        return start + end + int.from_bytes(code[end - width:end], "little", signed=True)
    return target


def _effect_targets(effects: list[Effect], at: dict[int, int], start: int, end: int) -> Targets:
    """Targets from the decoded instructions (a hit on ``flow_key``); a read
    table's are in the key (``_qualified``), so the same offsets."""
    def target(off: int, rel: int) -> int:
        i = at.get(start + off)
        if i is None:
            return _MISS
        if effects[i].flow is Flow.INDIRECT:
            return start + rel
        found = effects[i].target
        return _MISS if found is None or start <= found < end else found
    return target


def _moved(kept: Kept | None, start: int, size: int, targets: Targets) -> Analysis | None:
    """A kept result (spans and exits relative to its function's start) for
    the function at ``start``; None when there is none, it does not fit in
    ``size`` bytes or an exit's branch is not there."""
    if kept is None:
        return None
    spans, kept_exits = kept
    if spans and (spans[0][0] < 0 or spans[-1][1] > size):
        return None
    exits: list[Exit] = []
    for off, rel, state in kept_exits:
        target = None  # an unread table's jump: no target to move
        if rel is not None:
            target = targets(off, rel) if 0 <= off < size else _MISS
            if target == _MISS:
                return None
        exits.append((target, None if state is None else State(*state)))
    return Analysis(tuple(Span(start + lo, start + hi, regs) for lo, hi, regs in spans), "",
                    tuple(exits))


def _relative(result: Analysis, sites: Sequence[int], start: int) -> Kept:
    """``result`` relative to ``start``, its exits with their branches' offsets (``sites``)."""
    spans = tuple(Span(lo - start, hi - start, regs) for lo, hi, regs in result.spans)
    exits = tuple((site - start, None if target is None else target - start, state)
                  for site, (target, state) in zip(sites, result.exits or (), strict=True))
    return Kept(spans, exits)


# The flows the dataflow's loop tells apart, as module names (not class attributes).
_INDIRECT, _RETURN, _STOP, _JUMP, _COND = Flow.INDIRECT, Flow.RETURN, Flow.STOP, Flow.JUMP, Flow.COND


def _dataflow(arch: Arch, tracked: tuple[int, ...], effects: list[Effect], start: int, end: int,
              at: dict[int, int], tables: dict[int, list[int]],
              table_exits: dict[int, tuple[int, ...]], anchors: list[Anchor],
              entry: Entry | None, leaving: list[int]) -> tuple[Analysis, list[int]]:
    """The dataflow over a decoded function (``analyse``): its spans of rules
    and exits, and the address of each exit's branch (``leaving``: the
    instructions that may branch out, in order)."""
    index = {reg: i for i, reg in enumerate(tracked)}
    first = State(-ENTRY_CFA[arch.name], None,
                   tuple((None, True, False, None) for _ in tracked)) if entry is None \
        else entry.state
    begin = _reconcile(first, anchors[0])
    # Whether ``_transfer`` gives back the state it is given: no store, load,
    # register write, copy or pointer change (then no held value is
    # overwritten either, so ``_moves`` keeps every register as it is).
    inert = [not (e.stores or e.loads or e.clobbers or e.others or e.moves)
             and e.sp is None and e.fp is None and e.alt is None for e in effects]
    states: list[State | None] = [None] * len(effects)
    states[0] = begin
    work = [0]
    pending = {0}
    indirect: dict[int, State] = {}  # site -> its state
    if entry is not None:  # its hot part's unread tables may lead here too (parts.py)
        for k, foreign in enumerate(entry.indirect):
            indirect[-1 - k] = foreign

    def flow_to(i: int, state: State) -> None:
        state = _reconcile(state, anchors[i])
        old = states[i]
        new = state if old is None else meet_states(old, state)
        if new != old:
            states[i] = new
            if i not in pending:
                pending.add(i)
                work.append(i)

    count = len(effects)
    while True:
        while work:
            i = work.pop()
            pending.discard(i)
            while True:
                state = states[i]
                assert state is not None
                eff = effects[i]
                # Most instructions touch no tracked register, slot or pointer:
                # their transfer is the identity (``inert``), skipped.
                out = state if inert[i] else _transfer(state, eff, index)
                flow = eff.flow
                if flow is _INDIRECT:
                    if i in tables:
                        for k in tables[i]:
                            flow_to(k, out)
                    else:
                        indirect[i] = out
                    break
                if flow is _RETURN or flow is _STOP:
                    break
                if flow is _JUMP or flow is _COND:
                    target = eff.target
                    if target is not None and start <= target < end:
                        flow_to(at[target], out)
                    if flow is _JUMP:
                        break
                i += 1
                if i >= count:
                    break
                # flow_to(i, out), inlined: the next instruction would be
                # pushed last and so popped next; it runs here at once instead
                # (the same order), unless it is already waiting.
                sp, fp = anchors[i]
                if (sp is not None and sp != out.sp) or (fp is not None and fp != out.fp):
                    out = _reconcile(out, anchors[i])
                old = states[i]
                new = out if old is None else meet_states(old, out)
                if new == old:
                    break
                states[i] = new
                if i in pending:
                    break
        if not indirect:
            break
        # A jump table's targets: every instruction whose CFA rule fits the jump
        # (sites with the same SP/FP offsets are met first: interpreters have many).
        by_frame: dict[tuple[int | None, int | None], State] = {}
        for site_state in indirect.values():
            key = (site_state.sp, site_state.fp)
            known = by_frame.get(key)
            by_frame[key] = site_state if known is None else meet_states(known, site_state)
        for site_state in by_frame.values():
            for i, (sp, fp) in enumerate(anchors):
                if (sp is not None and site_state.sp is not None and sp != site_state.sp) or (
                        fp is not None and site_state.fp is not None and fp != site_state.fp):
                    continue
                flow_to(i, site_state)
        if not work:
            break
    red_zone = RED_ZONE.get(arch.name, 0)
    spans: list[Span] = []
    # Neighbouring instructions mostly share a state: its rules are made once.
    made: dict[tuple[int | None, tuple[Reg, ...]], Regs] = {}
    lo = hi = -1
    current: Regs = ()
    last: State | None = None  # the state ``regs`` were made of (inert runs share one)
    regs: Regs = ()
    for eff, state in zip(effects, states, strict=True):
        if state is None:
            regs = ()
        elif state is not last:
            shape = (state.sp, state.regs)  # all that _rules reads
            rules = made.get(shape)
            if rules is None:
                rules = made[shape] = _rules(state, tracked, red_zone)
            regs = rules
        last = state
        if hi == eff.address and regs == current:
            hi += eff.size
            continue
        if hi >= 0:
            spans.append(new_record(Span, (lo, hi, current)))
        lo, hi, current = eff.address, eff.address + eff.size, regs
    spans.append(Span(lo, hi, current))
    exits, sites_out = _exits(effects, states, inert, tables, table_exits, index, leaving)
    return Analysis(tuple(spans), "", exits), sites_out


# The flows whose ``target`` is a branch: where it leaves the code, an exit.
_BRANCHES = (Flow.JUMP, Flow.COND, Flow.CALL)


def _exits(effects: list[Effect], states: list[State | None], inert: list[bool],
           tables: dict[int, list[int]], table_exits: dict[int, tuple[int, ...]],
           index: dict[int, int], leaving: list[int]) -> tuple[tuple[Exit, ...], list[int]]:
    """The branches out of the function (of ``leaving``: its indirect jumps and
    direct branches out): direct jumps and a read table's targets with the
    state along them (None from an instruction no path reaches), calls with
    none (they enter at a function entry), an unread table's jump with its
    state and no target; and each one's branch address."""
    out: list[Exit] = []
    sites: list[int] = []
    for i in leaving:
        eff = effects[i]
        flow = eff.flow
        if flow is Flow.INDIRECT:
            if i in tables and i not in table_exits:
                continue
            targets: tuple[int | None, ...] = table_exits.get(i, ()) if i in tables else (None,)
        else:
            targets = (eff.target,)
        state = states[i]
        if state is not None and flow is not Flow.CALL:
            after: State | None = state if inert[i] else _transfer(state, eff, index)
        else:
            after = None
        if after is None and targets == (None,):
            continue  # an unread table no path reaches: it is never taken
        out.extend((t, after) for t in targets)
        sites.extend(eff.address for _ in targets)
    return tuple(out), sites
