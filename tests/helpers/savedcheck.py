"""The static proof for callee-saved registers: our rules against ``.eh_frame``'s, PC by PC.

For every PC an SFrame FDE covers and every callee-saved register the
analysis tracks (``sframe_core.analysis.effects.CALLEE_SAVED``), the rule the SFrame
row carries (``sframe_core.analysis.saved``) is compared with the ``.eh_frame`` row's.
Each (PC, register) pair lands in one class:

- ``match``: both say the same;
- ``miss``: ``.eh_frame`` has a rule, ours is unknown (allowed, costs coverage);
- ``same-eh-silent``: ours says "same value", ``.eh_frame`` says nothing
  (gcc emits no rule for a register before its save or after its restore
  when the restore is followed by a ``.cfi_restore``); nothing to check
  against;
- ``slot-after-restore``: ours says "at CFA+x", ``.eh_frame`` says nothing,
  and x is the slot ``.eh_frame`` names for that register elsewhere in the
  same FDE (gcc emits ``.cfi_restore`` after some pops, not after others; the
  slot still holds the value);
- ``same-proven-unwritten``: ours says "same value", ``.eh_frame`` names a
  slot (both right when the register was saved but not yet written: our
  analysis lost the slot, typically after an indirect jump it could not
  resolve); proven here independently of the analysis: no instruction that
  can run between the function's entry and the PC writes the register
  (capstone's register-write lists, over a control-flow graph in which an
  indirect jump goes to its jump table's entries when
  ``amd64.amd64_jump_table`` / ``aarch64_jump_tables`` read one, else to any
  instruction, and a call only falls through: a recursive call to the
  function's own start is another activation, not an edge to its entry),
  except ``pop`` instructions that
  read the slot ``.eh_frame`` names for it there (restores);
- ``unknown-both``;
- ``padding``: ``.eh_frame`` has a rule, ours is unknown, and the PC is in
  alignment padding that no path reaches (a run of nops right after a jump,
  return or trap, and no branch into it): the analysis has no state there
  because nothing runs there. Not counted in the coverage (``coverage_all``
  counts it as a miss);
- anything else is a disagreement: the test fails on any.

Rows are compared interval by interval (the two sources' row boundaries
merged), which is every PC at the cost of a few comparisons per row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from sframe_core.analysis.aarch64 import _A64_NAMES, aarch64_jump_tables
from sframe_core.analysis.amd64 import X86_NAMES, amd64_jump_table
from sframe_core.analysis.decoders import decoder_for
from sframe_core.analysis.effects import CALLEE_SAVED, Flow
from sframe_core.analysis.s390x import s390x_jump_table
from sframe_core.analysis.saved import Span
from sframe_core.analysis.section import SectionAnalysis, analysis_of
from sframe_core.base.rows import Row, Rule, RuleKind
from sframe_core.dwarf.cfi import CFITable
from sframe_core.format.elf import read_elf
from sframe_core.format.records import FDE
from sframe_core.format.section import SFrameSection

CLASSES = ("match", "miss", "same-eh-silent", "slot-after-restore", "same-proven-unwritten",
           "unknown-both", "padding")


class Result:
    def __init__(self, path: str) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        self.disagreements: list[str] = []
        self.notes: Counter[str] = Counter()  # functions analysed, by why they stopped

    @property
    def coverage(self) -> float:
        """Share of the (PC, register) pairs where .eh_frame has a rule that we match."""
        have = self.counts["match"] + self.counts["miss"] + len(self.disagreements)
        return self.counts["match"] / have if have else 1.0

    @property
    def coverage_all(self) -> float:
        """The same, counting unreachable padding as missed."""
        have = (self.counts["match"] + self.counts["miss"] + self.counts["padding"]
                + len(self.disagreements))
        return self.counts["match"] / have if have else 1.0

    def summary(self) -> str:
        counts = " ".join(f"{name}={self.counts[name]}" for name in CLASSES)
        return (f"{self.path}: coverage {self.coverage:.1%} "
                f"({self.coverage_all:.1%} with padding; {counts} "
                f"disagree={len(self.disagreements)})")


def _intervals(spans: tuple[Span, ...], rows: list[Row], lo: int, hi: int,
               ) -> Iterator[tuple[int, int, dict[int, Rule], dict[int, Rule]]]:
    cuts = {lo, hi}
    cuts.update(s.start for s in spans if lo < s.start < hi)
    cuts.update(s.end for s in spans if lo < s.end < hi)
    cuts.update(r.start for r in rows if lo < r.start < hi)
    cuts.update(r.end for r in rows if lo < r.end < hi)
    points = sorted(cuts)
    si = ri = 0
    for a, b in zip(points, points[1:], strict=False):
        while si < len(spans) and spans[si].end <= a:
            si += 1
        while ri < len(rows) and rows[ri].end <= a:
            ri += 1
        ours = dict(spans[si].regs) if si < len(spans) and spans[si].start <= a else None
        eh = dict(rows[ri].regs) if ri < len(rows) and rows[ri].start <= a else None
        if ours is None or eh is None:
            continue  # no code decoded here (padding) or no .eh_frame row
        yield a, b, ours, eh


def _graph(section: SFrameSection, table: CFITable, fde: FDE) -> tuple[list[int], dict[int, set[int]],
                                                      dict[int, set[int]]]:
    """(instruction addresses, predecessors, registers written) of one function."""
    import capstone

    code = section.code(fde.start, fde.size) if section.code else None
    assert code is not None
    if section.arch.name == "s390x":
        return _s390x_graph(section, table, fde, code)
    if section.arch.name == "amd64":
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        names = X86_NAMES
    else:
        md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
        names = _A64_NAMES
    md.detail = True
    insns = list(md.disasm(code, fde.start))
    addrs = [i.address for i in insns]
    preds: dict[int, set[int]] = {a: set() for a in addrs}
    writes: dict[int, set[int]] = {}
    indirect: list[int] = []
    for k, insn in enumerate(insns):
        _, written = insn.regs_access()
        regs = {names.get(insn.reg_name(r)) for r in written}
        for op in insn.operands:
            if op.type == 1 and op.access & 2:  # a register operand written
                regs.add(names.get(insn.reg_name(op.reg)))
        if section.arch.name != "amd64" and insn.operands and insn.operands[0].type == 1 \
                and not insn.mnemonic.startswith(("st", "cmp", "cmn", "tst", "cb", "tb", "b")):
            regs.add(names.get(insn.reg_name(insn.operands[0].reg)))
        written_regs = {r for r in regs if r is not None}
        if insn.mnemonic == "pop" and insn.operands[0].type == 1:
            # A restore, by .eh_frame's own rules: `pop R` reads CFA + x
            # where .eh_frame says the caller's R is saved.
            row = table.row_at(insn.address)
            popped = names.get(insn.reg_name(insn.operands[0].reg))
            if row is not None and row.cfa is not None and row.cfa.reg == 7 and not row.cfa.deref:
                rule = dict(row.regs).get(popped) if popped is not None else None
                if rule is not None and rule.kind is RuleKind.AT_CFA \
                        and rule.offset == -row.cfa.offset:
                    written_regs.discard(popped)
        writes[insn.address] = written_regs
        groups = set(insn.groups)
        falls = not (groups & {3, 5}) and insn.mnemonic not in ("ud2", "hlt", "brk", "b")
        target = None
        if groups & {1, 7} and 2 not in groups:  # a call falls through (recursion too)
            imms = [op.imm for op in insn.operands if op.type == 2]
            if imms:
                target = imms[-1]
            elif not groups & {2}:
                indirect.append(insn.address)
            if insn.mnemonic in ("jmp", "b", "br") or insn.mnemonic.endswith(" jmp"):
                falls = False
        if target is not None and target in preds:
            preds[target].add(insn.address)
        if falls and k + 1 < len(insns):
            preds[insns[k + 1].address].add(insn.address)
    tables: dict[int, list[int]] = {}
    if indirect:
        effects = list(decoder_for(section.arch).effects(code, fde.start))  # type: ignore[union-attr]
        if None not in effects:
            leaders = {e.target for e in effects if e is not None and e.target is not None}
            sources: dict[int, list[int]] = {}
            for k, e in enumerate(effects):
                if e is not None and e.target is not None:
                    sources.setdefault(e.target, []).append(k)
            index = {e.address: k for k, e in enumerate(effects) if e is not None}
            if section.arch.name == "amd64":
                for site in indirect:
                    found = amd64_jump_table(effects, index[site], leaders, section.code)  # type: ignore[arg-type]
                    if found is not None:
                        tables[site] = found
            else:
                resolved = aarch64_jump_tables(effects, [index[s] for s in indirect],  # type: ignore[arg-type]
                                               sources, section.code, section.absolute_tables)  # type: ignore[arg-type]
                tables = {effects[k].address: t for k, t in resolved.items()}  # type: ignore[union-attr]
    for site in indirect:
        for a in (tables[site] if site in tables else addrs):
            if a in preds:
                preds[a].add(site)
    return addrs, preds, writes


def _s390x_graph(section: SFrameSection, table: CFITable, fde: FDE, code: bytes,
                 ) -> tuple[list[int], dict[int, set[int]], dict[int, set[int]]]:
    """The s390x graph. Writes are over-stated on their own terms, not the
    decoder's (capstone 5 has no access data for s390x): every register an
    instruction names is written, with R + 1 for the even-odd pair
    instructions and R + 2 for extended (128-bit) FPR pairs, lmg/lm/vlm
    ranges whole; stores (``st*``) write none; every call writes r14 only
    (the ABI); ``ex``/``exrl`` write everything. As for ``pop`` on amd64, an
    ``lmg``/``lg``/``ld`` that reads the slot .eh_frame names for a register
    there (a restore) does not write it. Control flow is the decoder's (with
    the jump tables it reads)."""
    import capstone

    from sframe_core.analysis.s390x import _FPR_DWARF, _PAIRS
    from sframe_core.analysis.s390x import _reg as _s390x_reg

    arch = getattr(capstone, "CS_ARCH_SYSTEMZ", None) or capstone.CS_ARCH_SYSZ
    md = capstone.Cs(arch, capstone.CS_MODE_BIG_ENDIAN)
    md.detail = True

    def dwarf(kind: str, n: int) -> int | None:
        if kind == "r" and n < 16:
            return n
        return _FPR_DWARF.get(n) if kind in "fv" else None

    addrs: list[int] = []
    writes: dict[int, set[int]] = {}
    off = 0
    while off + 2 <= len(code):
        length = (2, 4, 4, 6)[code[off] >> 6]
        insn = next(md.disasm(code[off:off + length], fde.start + off, 1))
        off += length
        mnem = insn.mnemonic
        regs = [r for r in (_s390x_reg(insn.reg_name(op.reg) or "") for op in insn.operands
                            if op.type == 1) if r is not None]
        mems = [op.mem for op in insn.operands if op.type == 3]
        written: set[int | None] = set()
        if mnem in ("ex", "exrl"):
            written.update(range(16), _FPR_DWARF.values())
        elif mnem in ("brasl", "bras", "basr", "bas"):
            written.add(dwarf(*regs[0]) if regs else 14)
        elif mnem.startswith(("lm", "vlm")) and len(regs) >= 2:
            first, last = regs[0][1], regs[1][1]
            written.update(dwarf(regs[0][0], (first + k) % 16) for k in range((last - first) % 16 + 1))
        elif not mnem.startswith("st"):
            pair = mnem in _PAIRS or mnem.startswith(("km", "cu"))
            extended = "x" in mnem[1:]  # 128-bit floating point: FPR pairs n, n + 2
            for kind, n in regs:
                written.update((dwarf(kind, n), dwarf(kind, n + 1) if kind == "r" and pair else None,
                                dwarf(kind, n + 2) if kind != "r" and extended else None))
        if mnem in ("lmg", "lg", "ld", "ldy") and mems and regs \
                and _s390x_reg(insn.reg_name(mems[0].base) or "") == ("r", 15) and not mems[0].index:
            # A restore, by .eh_frame's own rules: the register loaded from
            # the slot .eh_frame names for it here.
            row = table.row_at(insn.address)
            if row is not None and row.cfa is not None and row.cfa.reg == 15 and not row.cfa.deref:
                rules = dict(row.regs)
                count = (regs[1][1] - regs[0][1]) % 16 + 1 if mnem == "lmg" and len(regs) >= 2 else 1
                for k in range(count):
                    reg = dwarf(regs[0][0], (regs[0][1] + k) % 16)
                    rule = rules.get(reg) if reg is not None else None
                    at = mems[0].disp + 8 * k - row.cfa.offset
                    if rule is not None and rule.kind is RuleKind.AT_CFA and rule.offset == at:
                        written.discard(reg)
        addrs.append(insn.address)
        writes[insn.address] = {r for r in written if r is not None}
    preds: dict[int, set[int]] = {a: set() for a in addrs}
    effects = list(decoder_for(section.arch).effects(code, fde.start))  # type: ignore[union-attr]
    assert None not in effects and [e.address for e in effects if e] == addrs
    index = {a: k for k, a in enumerate(addrs)}
    for k, eff in enumerate(effects):
        assert eff is not None
        succ: list[int] = []
        if eff.flow is Flow.INDIRECT:
            found = s390x_jump_table(effects, k, section.code)  # type: ignore[arg-type]
            succ = list(addrs) if found is None else found
        elif eff.flow not in (Flow.RETURN, Flow.STOP):
            if eff.target is not None and eff.flow is not Flow.CALL:
                succ.append(eff.target)
            if eff.flow is not Flow.JUMP and k + 1 < len(addrs):
                succ.append(addrs[k + 1])
        for a in succ:
            if a in index:
                preds[a].add(eff.address)
    return addrs, preds, writes


def _unwritten(section: SFrameSection, table: CFITable, fde: FDE, lo: int, hi: int,
               reg: int) -> bool:
    """No instruction that can run between the entry and any PC in [lo, hi) writes ``reg``."""
    key = (section.name, fde.start)
    graph = _GRAPHS.get(key)
    if graph is None:
        graph = _GRAPHS[key] = _graph(section, table, fde)
    addrs, preds, writes = graph
    todo = [a for a in addrs if lo <= a < hi]
    seen = set(todo)
    # The PCs inside [lo, hi) other than the first run before later ones.
    for a in todo[:-1]:
        if reg in writes[a]:
            return False
    while todo:
        a = todo.pop()
        for p in preds[a]:
            if reg in writes[p]:
                return False
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return True


_GRAPHS: dict[tuple[str, int], tuple[list[int], dict[int, set[int]], dict[int, set[int]]]] = {}


def _padding(section: SFrameSection, fde: FDE) -> list[tuple[int, int]]:
    """Runs of nops that follow a jump, return or trap and that no direct branch enters."""
    decoder = decoder_for(section.arch)
    assert decoder is not None and section.code is not None
    decoded = list(decoder.effects(section.code(fde.start, fde.end - fde.start), fde.start))
    effects = [eff for eff in decoded if eff is not None]
    if len(effects) != len(decoded):
        return []
    targets = {eff.target for eff in effects if eff.target is not None}
    runs: list[tuple[int, int]] = []
    ends = (Flow.JUMP, Flow.RETURN, Flow.STOP, Flow.INDIRECT)
    previous = None
    for eff in effects:
        nop = eff.text.split(" ", 1)[0] in ("nop", "nopr") and eff.flow is Flow.FALL
        if nop and eff.address not in targets:
            if runs and runs[-1][1] == eff.address:
                runs[-1] = (runs[-1][0], eff.address + eff.size)
            elif previous is not None and previous.flow in ends:
                runs.append((eff.address, eff.address + eff.size))
        previous = eff
    return runs


def check(path: str) -> Result:
    result = Result(path)
    info = read_elf(path)
    section = info.open(analyser=SectionAnalysis)
    assert section is not None, f"{path}: no .sframe"
    assert section.code is not None, f"{path}: no code reader"
    table = CFITable(path)
    tracked = CALLEE_SAVED[section.arch.name]
    for fde in section.iter_fdes():
        if fde.is_pcmask:
            continue
        analysis = analysis_of(section).rules(fde)
        result.notes[analysis.note or "analysed"] += 1
        rows = table.fde_rows(fde.start)
        slots: dict[int, set[int]] = {}
        for row in rows:
            for reg, rule in row.regs:
                if rule.kind is RuleKind.AT_CFA:
                    slots.setdefault(reg, set()).add(rule.offset)
        padding: list[tuple[int, int]] | None = None
        for a, b, ours, eh in _intervals(analysis.spans, rows, fde.start, fde.end):
            width = b - a
            for reg in tracked:
                mine, theirs = ours.get(reg), eh.get(reg)
                if theirs is not None and theirs.kind is RuleKind.UNDEFINED:
                    theirs = None
                if theirs is None:
                    if mine is None:
                        name = "unknown-both"
                    elif mine.kind is RuleKind.SAME_VALUE:
                        name = "same-eh-silent"
                    elif mine.kind is RuleKind.AT_CFA and mine.offset in slots.get(reg, ()):
                        name = "slot-after-restore"
                    else:
                        name = ""
                elif mine is None:
                    if padding is None:
                        padding = _padding(section, fde)
                    name = "padding" if any(p <= a and b <= q for p, q in padding) else "miss"
                elif mine == theirs:
                    name = "match"
                elif mine.kind is RuleKind.SAME_VALUE and _unwritten(section, table, fde, a, b, reg):
                    name = "same-proven-unwritten"
                else:
                    name = ""
                if name:
                    result.counts[name] += width
                else:
                    result.disagreements.append(
                        f"{a:#x}..{b:#x} {section.arch.reg_name(reg)}: ours {mine}, eh_frame {theirs}")
    return result
