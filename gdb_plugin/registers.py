"""How this GDB names one SFrame ABI's registers: the handles the unwinder
reads and hands, found once per architecture (``RegisterCache``) and rule set.

Its own module, below both ``objfiles.py`` (an objfile keeps its handles)
and ``unwinder.py`` (which uses them).
"""

from __future__ import annotations

import gdb

from sframe_core.base.abi import Arch
from sframe_core.base.rows import Row, RuleKind

__all__ = ["Registers", "Handles", "RegisterCache"]

_SAME = RuleKind.SAME_VALUE
# Rules that read another register of the frame.
_BASED = frozenset((RuleKind.IN_REG, RuleKind.AT_REG))
_PLAN_CACHE = 1024
_SIGNED_LIMIT = 1 << 63
# (DWARF number, GDB register handle) pairs.
Handles = tuple[tuple[int, object], ...]


class Registers:
    """How this GDB names one SFrame ABI's registers, found once per architecture.

    Register descriptors (GDB 11+) spare GDB a name lookup per read; plain
    names work everywhere.
    """

    def __init__(self, gdb_arch, arch: Arch) -> None:
        self.u64 = gdb_arch.integer_type(64, False)
        try:
            descriptors = {r.name: r for r in gdb_arch.registers()}
        except Exception:  # noqa: BLE001
            descriptors = {}
        self.has_pauth = "pauth_cmask" in descriptors
        # Registers GDB keeps per frame (its "save" group): a Python unwinder
        # may only hand those. Pseudo registers (aarch64 d8-d15, views of
        # v8-v15) handed as saved corrupt the frame's other registers.
        try:
            saved = {r.name for r in gdb_arch.registers("save")}
        except Exception:  # noqa: BLE001 - no such group: the general registers only
            saved = set()
        self.raw = frozenset(n for n, name in arch.reg_names
                             if name in saved or (not saved and n < 32))
        handles: dict[int, object] = {n: descriptors.get(name, name) for n, name in arch.reg_names}
        handles[arch.sp] = descriptors.get(arch.reg_name(arch.sp), "sp")
        self.handles = handles
        self.pc = descriptors.get("rip" if arch.name == "amd64" else "pc", "pc")
        self.sp = handles[arch.sp]
        self.arch = arch
        # (CFA base register, interrupted) -> ((DWARF number, handle), ...)
        self.wanted: dict[tuple[object, bool], tuple[tuple[int, object], ...]] = {}
        # (CFA base register, interrupted, id(row.regs)) -> (row.regs, reads, hands)
        self._plans: dict[tuple[object, bool, int], tuple[object, Handles, Handles]] = {}

    def handle(self, regno: int) -> object:
        return self.handles.get(regno) or self.arch.reg_name(regno)

    def value(self, x: int):
        """``x`` as a register-sized gdb.Value: a plain one is a 64-bit long,
        which GDB 13 and 14+ both accept; only the top half needs the cast."""
        return gdb.Value(x) if x < _SIGNED_LIMIT else gdb.Value(x).cast(self.u64)

    def find_wanted(self, key: tuple[object, bool]) -> tuple[tuple[int, object], ...]:
        """The registers a step reads: SP, FP, the CFA base, and the RA
        register where it is live (the innermost or an interrupted frame)."""
        cfa_reg, interrupted = key
        arch = self.arch
        numbers = [arch.sp, arch.fp]
        if isinstance(cfa_reg, int) and cfa_reg not in numbers:
            numbers.append(cfa_reg)
        if arch.ra_reg is not None and interrupted:
            numbers.append(arch.ra_reg)
        found = self.wanted[key] = tuple((n, self.handle(n)) for n in numbers)
        return found

    def plan(self, row: Row, interrupted: bool) -> tuple[Handles, Handles]:
        """(reads, hands) for a step with ``row``: the registers it reads from
        GDB when the frame below was not this unwinder's (``find_wanted``,
        and those the callee-saved rules read: unchanged ones, base
        registers), and every register it may hand to GDB, in the order
        ``caller_registers`` can give them, GDB's own registers only
        (``raw``). Found once per rule set: the step itself filters nothing."""
        cfa_reg = row.cfa.reg if row.cfa is not None else None
        key = (cfa_reg, interrupted, id(row.regs))
        found = self._plans.get(key)
        if found is not None and found[0] is row.regs:
            return found[1], found[2]
        arch = self.arch
        raw = self.raw
        wanted = self.wanted.get(key[:2]) or self.find_wanted((cfa_reg, interrupted))
        extra = [rule.reg if rule.kind in _BASED else regno for regno, rule in row.regs
                 if rule.kind is _SAME or rule.kind in _BASED]
        known = {n for n, _ in wanted}
        reads = wanted + tuple((n, self.handle(n)) for n in dict.fromkeys(extra)
                               if n is not None and n in raw and n not in known)
        order = [regno for regno, _ in row.regs] + [arch.fp, arch.ra_reg, arch.sp]
        hands = tuple((n, self.handle(n)) for n in dict.fromkeys(order)
                      if n is not None and n in raw)
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        # The rules tuple is kept with its plan: its id cannot be reused meanwhile.
        self._plans[key] = (row.regs, reads, hands)
        return reads, hands


class RegisterCache:
    """The ``Registers`` of each (GDB architecture, SFrame ABI) a session
    meets, found at its first frame and kept."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], Registers] = {}
        # GDB keeps one gdb.Architecture per gdbarch: a cheap key for the
        # PC's register handle (GDB 13 has no PendingFrame.pc()).
        self.pc_handles: dict[object, object] = {}

    def of(self, pending_frame, arch: Arch) -> Registers:
        """The handles for ``arch`` in the architecture of ``pending_frame``."""
        gdb_arch = pending_frame.architecture()
        key = (gdb_arch.name(), arch.name)
        regs = self._found.get(key)
        if regs is None:
            regs = self._found[key] = Registers(gdb_arch, arch)
            self.pc_handles[gdb_arch] = regs.pc
        return regs
