"""The unwinder: a global ``gdb.unwinder.Unwinder`` named ``sframe``, in
gdb's list only while some objfile needs it (``list_if_needed``).

It claims a frame when its PC lies in an objfile whose ``.sframe`` covers it
and, in ``auto`` mode, no ``.eh_frame``/``.debug_frame`` FDE does. The caller
gets ``pc``, ``sp``, the frame pointer and whatever else the row gives; other
registers are left out and read ``<not saved>``. The frame id is ``(CFA,
function start)``, like GDB's DWARF unwinder.

The hot path: GDB calls the unwinder once per frame of every backtrace; what
a walk reuses (the objfile table, a page cache of target memory) lives in a
``_Walk`` made at level 0, and register handles and frame-id forms are found
once. This keeps ``bt`` as fast as GDB's own DWARF unwinder
(``python -m bench.bench_gdb``).

When the rows cannot explain the stack (``sframe_core.unwind.step.Stop``), the
frame is still claimed, without a saved PC and with an id inner to its
callee's: GDB then ends the backtrace with "Backtrace stopped: previous frame
inner to this frame (corrupt stack?)" instead of letting its prologue
analyzer invent frames (which, in a binary without ``.eh_frame``, it does). A
PC no FDE covers is left to GDB, except amd64's ``_start`` (the entry
function, rbp 0), whose callers GDB would invent.

Anything raised inside the unwinder is caught, reported once per objfile as
``warning: sframe: PATH: ...`` (``messages.py``), and the frame is declined.
The objfile table is re-read in event handlers (``refresh``), never inside
the unwinder, which may not call ``gdb.execute``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gdb
import gdb.unwinder

from sframe_core.base.abi import AARCH64_LE, AMD64, Arch
from sframe_core.base.errors import SFrameError
from sframe_core.base.memory import PageCache
from sframe_core.unwind.addresses import AddressMap, return_address_problem
from sframe_core.unwind.calls import CALL_WINDOW, ends_with_call
from sframe_core.unwind.norow import entry_stop, is_sigreturn
from sframe_core.unwind.step import DEFAULT_PAC_MASK, NORMAL_ENDS, Stop, caller_registers

from .messages import OncePerObjfile, warn
from .objfiles import CommandFailed, ObjfileEntry, ObjfileTable, ObjfileTables, cli_text, live_regions
from .registers import Handles, RegisterCache, Registers
from .symfiles import Routes

if TYPE_CHECKING:
    from sframe_core.base.rows import Row
    from sframe_core.format.section import SFrameSection

_FLOAT = gdb.TYPE_CODE_FLT
_VALUE_CACHE = 4096
_PLAN_CACHE = 1024

__all__ = ["MODES", "SFrameUnwinder"]


class _FrameId:
    """A frame id as GDB reads it: any object with ``sp`` and ``pc`` will do
    (GDB 13 has no gdb.unwinder.FrameId; this one is also cheaper to build)."""

    __slots__ = ("sp", "pc")

    def __init__(self, sp: object, pc: object) -> None:
        self.sp = sp
        self.pc = pc


def _run(command: str) -> str:
    """What ``command`` prints, for ``ObjfileTables`` (which does not import gdb)."""
    try:
        return cli_text(gdb.execute(command, to_string=True))
    except gdb.error as exc:
        raise CommandFailed(str(exc)) from exc


def _memory_reader(inferior):
    """``read(address, size)`` over an inferior (live or core); None where unreadable."""
    read_memory = inferior.read_memory

    def read(address: int, size: int) -> bytes | None:
        try:
            return bytes(read_memory(address, size))
        except (gdb.MemoryError, gdb.error, ValueError, OverflowError):
            return None
    return read


# The ABI of a GDB architecture, for frames no objfile with SFrame covers
# (a signal trampoline in the vdso or libc).
_GDB_ARCHES = {"i386:x86-64": AMD64, "aarch64": AARCH64_LE}


# GDB architectures whose prologue analyzer has no outermost rule: from a
# _start without unwind information it reads callers off the stack. (The
# aarch64 one stops at x29 = 0 by itself, and is left to do so.)
_INVENTS_PAST_START = frozenset({"i386:x86-64"})


# -- the unwinder ----------------------------------------------------------------

MODES = ("auto", "always", "off")
_HAS_PC = hasattr(gdb.PendingFrame, "pc")  # GDB 14+: the PC without a gdb.Value


def _gdb_major() -> int:
    try:
        return int(gdb.VERSION.split(".")[0])
    except (AttributeError, ValueError):
        return 0


# Does GDB end a backtrace at a frame whose unwinder saved no PC (15 and
# later: "Backtrace stopped: frame did not save the PC"), or raise "PC not
# saved" when anything looks past it (13, 14)? A change in GDB's frame code
# (gdb commit "gdb/unwinders: better support for $pc not saved"), not in
# its Python API: the version is all that tells (see ``_stop``). A GDB 13 or
# 14 that a distribution patched takes the older way, which works there too.
_ENDS_WITHOUT_PC = _gdb_major() >= 15


def _below_inline_only(pc: int, level: int) -> bool:
    """Can the real frame at ``pc`` and ``level`` be the innermost one, under
    inline frames only?

    GDB numbers inline frames too: stopped at a PC inside an inlined call,
    frame 0 is the inline frame and the function's real frame is level 1 or
    more, with the same PC and the live registers. Its PC is the next
    instruction to run (look rows up at it), not a return address (at
    ``pc - 1``). Asked only for the first frame of a walk above level 0; true
    when the debug info has at least ``level`` inlined calls around ``pc``.
    (Frame objects cannot be read from inside an unwinder: GDB 13 aborts.)
    """
    try:
        block = gdb.block_for_pc(pc)
    except RuntimeError:
        return False
    depth = -1  # the real function's own block is not an inline frame
    while block is not None:
        if block.function is not None:
            depth += 1
        block = block.superblock
    return 0 < level <= depth


def _after_call(section: SFrameSection, pc: int) -> bool:
    """Could ``pc`` be a return address: does a call instruction end there?

    Checked on the file's bytes (``sframe_core.unwind.calls``); unknown
    counts as yes. A frame at such a PC is treated as a caller (rows at
    ``pc - 1``).
    """
    if section.code is None:
        return True
    try:
        code = section.code(pc - CALL_WINDOW, CALL_WINDOW)
    except OSError:
        return True
    if code is None:
        return True
    return ends_with_call(code, section.arch)


class _Walk:
    """What one backtrace reuses from frame to frame.

    GDB unwinds a stack from level 0 up, and flushes its frame cache (so
    starts again at level 0) whenever the target runs, memory or registers
    are written, or another thread is selected; a walk therefore starts
    at level 0 and its page cache cannot go stale under it.
    """

    __slots__ = ("table", "memory", "after_sigtramp", "first_level", "served", "handed",
                 "handed_level", "handed_pc", "handed_sp", "sp_handle", "values", "plans",
                 "return_addresses", "_addresses")

    def __init__(self, table: ObjfileTable | None, first_level: int = 0) -> None:
        self.table = table
        self.memory = PageCache(_memory_reader(gdb.selected_inferior()))
        # Levels whose inner frame is a signal trampoline.
        self.after_sigtramp: set[int] = set()
        # The level of the first frame this walk was asked for: above 0 when
        # GDB made frame 0 itself (an inline frame, or another unwinder's).
        self.first_level = first_level
        # Has this unwinder given a frame of this walk its caller? Until it
        # has, every frame is what gdb makes of the same stack on the twin.
        self.served = False
        # What the last step handed to GDB (DWARF number -> value, and the
        # PC): the registers GDB has for the frame above ``handed_level``.
        # The next step starts from them instead of asking GDB, when its
        # frame has that level and the SP handed (the same thread's stack).
        self.handed: dict[int, int] = {}
        self.handed_level = -2
        self.handed_pc = 0
        self.handed_sp: int | None = None
        self.sp_handle: object = None  # GDB's handle of the SP handed
        # gdb.Value by integer: a deep recursion hands the same values again and again.
        self.values: dict[int, object] = {}
        # (PC, interrupted) -> (entry, row, Registers, hands): what a step at
        # that PC found the first time; a recursion comes back to it.
        self.plans: dict[tuple[int, bool], tuple[ObjfileEntry, Row, Registers, Handles]] = {}
        # Return addresses ``return_address_problem`` found nothing wrong with.
        self.return_addresses: set[int] = set()
        self._addresses: AddressMap | None = None

    @property
    def addresses(self) -> AddressMap:
        """What is mapped where, for ``return_address_problem``: the code of
        every objfile; a core's segments, or a live native process's
        ``/proc/PID/maps`` (read once per walk, and only for an address
        outside all objfile code)."""
        if self._addresses is None:
            table = self.table
            base = table.address_map() if table is not None else AddressMap()
            find = None if base.complete else live_regions(gdb.selected_inferior())
            self._addresses = base.with_find(find)
        return self._addresses


class SFrameUnwinder(gdb.unwinder.Unwinder):
    """Unwinds frames whose PC only SFrame describes."""

    def __init__(self) -> None:
        super().__init__("sframe")
        self.mode = "auto"
        # The objfiles with SFrame of each program space, read in event
        # handlers and commands (``refresh``), looked up per walk.
        self.objfiles = ObjfileTables(_run, warn)
        self._warnings = OncePerObjfile()
        self._busy = False
        self._walk: _Walk | None = None
        self._registers = RegisterCache()
        self._pc_handles = self._registers.pc_handles  # GDB 13's PC, read per frame: one lookup
        self._int_ids = True  # GDB 14+ takes plain ints in frame ids; 13 wants gdb.Values
        # A frame ``_stop`` claimed with itself as its caller: that echo,
        # one level up, gets the same frame id.
        self._echo: tuple[int, int, int, int] | None = None  # (level, pc, SP, function start)
        # The DWARF route (``symfiles.Routes``), set by ``plugin.register``:
        # frames in the objfiles it serves are gdb's own. Where it serves
        # every objfile with SFrame (or there is none), this unwinder looks
        # at no frame at all, so gdb is exactly what it is on the twin, as
        # fast (the guard against PCs that cannot be code, ``_not_code``,
        # then goes too: gdb treats a corrupt stack as it does the twin's).
        self.routes: Routes | None = None
        self._idle = self.objfiles.idle  # progspaces where it looks at no frame (per frame: no lookup)

    # Tables ---------------------------------------------------------------

    def report(self, path: str, text: str) -> None:
        """One warning per objfile, however many frames hit the problem."""
        self._warnings.report(path, text)

    def mark_dirty(self, progspace: object = None) -> None:
        """The objfiles of ``progspace`` (None: of every program space) changed."""
        if progspace is None:
            self.objfiles.mark_all_stale(gdb.current_progspace())
        else:
            self.objfiles.mark_stale(progspace)

    def forget(self, progspace: object) -> None:
        self.objfiles.forget(progspace)

    def idle_in(self, progspace: object) -> bool:
        """Does the unwinder look at no frame of ``progspace`` (``__call__``),
        whatever its table of objfiles says?"""
        return self.mode == "auto" and progspace in self._idle

    def route_changed(self, progspace: object) -> None:
        """The DWARF route took or gave up objfiles of ``progspace``."""
        self.objfiles.route_changed(progspace)
        self._walk = None

    def refresh(self, force: bool = False) -> None:
        """Re-read the current program space's section table if it changed,
        and be in gdb's list of unwinders only if some frame may need this
        one (``list_if_needed``).

        Runs ``maint info sections``: never call this from the unwinder.
        """
        if self._busy:
            return
        try:
            self.objfiles.read(gdb.current_progspace(), self.routes, force)
        finally:
            self.list_if_needed()

    def needed(self) -> bool:
        """May a frame need this unwinder? Only in a program space with a
        process (or a core) to unwind: mode ``auto``, where an objfile with
        SFrame has no unwind information of gdb's for some of its code (its
        symbol file pending or impossible, CFI for only part of it), or
        whose table is not read yet; mode ``always``, where any objfile has
        SFrame; mode ``off``, nowhere."""
        if self.mode == "off":
            return False
        live = {inferior.progspace for inferior in gdb.inferiors() if inferior.pid}
        current = gdb.current_progspace()
        if current in live and not self.objfiles.read_in(current):
            return True
        spaces = [p for p in self.objfiles.progspaces() if p in live]
        if self.mode == "always":
            return any(self.objfiles.entries(p) for p in spaces)
        return any(p not in self._idle for p in spaces)

    def listed(self) -> bool:
        """Is this unwinder in gdb's global list (``info unwinder``)?"""
        return any(unwinder is self for unwinder in gdb.frame_unwinders)

    def list_if_needed(self) -> None:
        """Be in gdb's global list of Python unwinders only while some frame
        may need this one (``needed``): where gdb's own unwinder serves every
        objfile, ``info unwinder`` and ``disable unwinder`` see what they see
        on the twin, and gdb calls no Python for its frames."""
        if self.needed() == self.listed():
            return
        if self.listed():
            gdb.frame_unwinders[:] = [u for u in gdb.frame_unwinders if u is not self]
        else:
            # As gdb.unwinder.register_unwinder does, without its line
            # under ``set verbose on`` each time.
            gdb.frame_unwinders.insert(0, self)
        gdb.invalidate_cached_frames()

    def tables_entries(self, progspace: object) -> list[ObjfileEntry]:
        return self.objfiles.entries(progspace)

    def table(self) -> ObjfileTable | None:
        return self.objfiles.get(gdb.current_progspace())

    # Unwinding --------------------------------------------------------------

    def end_walk(self, event: object = None) -> None:
        """Forget the walk's cached memory (a stop, a prompt)."""
        self._walk = None

    def forget_frames(self, event: object = None) -> None:
        """The target ran or was written: GDB's frames are gone, and what
        this unwinder knew of them too."""
        self._walk = None
        self._echo = None

    def _regs_for(self, entry: ObjfileEntry, pending_frame, arch: Arch) -> Registers:
        regs = entry.regs = self._registers.of(pending_frame, arch)
        return regs

    def __call__(self, pending_frame):
        if self.mode == "off" or self._busy:
            return None
        if self.mode == "auto" and gdb.current_progspace() in self._idle:
            return None  # gdb has unwind information for every objfile here
        self._busy = True
        try:
            return self._unwind(pending_frame)
        except Exception as exc:  # noqa: BLE001 - never a traceback in a backtrace
            entry = self._last_entry
            where = entry.path if entry is not None else "unwinder"
            self.report(where, f"{type(exc).__name__}: {exc} (frame left to gdb)")
            return None
        finally:
            self._busy = False

    _last_entry: ObjfileEntry | None = None

    def _unwind(self, pending_frame):
        # The hot path of every backtrace: GDB calls it once per frame.
        self._last_entry = None
        level = pending_frame.level()
        walk = self._walk
        if level == 0 or walk is None:
            walk = self._walk = _Walk(self.table(), level)
        handed_level = walk.handed_level
        walk.handed_level = -2  # passed on by a step that hands registers only
        known: dict[int, int] | None = None
        if handed_level >= 0 and handed_level == level - 1:
            # The frame below was ours: GDB's registers of this frame are the
            # values that step handed, if it is the same stack (the SP tells).
            try:
                sp = int(pending_frame.read_register(walk.sp_handle))
            except (gdb.error, ValueError):
                sp = None
            if sp is not None and sp == walk.handed_sp:
                known = walk.handed
                pc = walk.handed_pc
                interrupted = level in walk.after_sigtramp
                plan = walk.plans.get((pc, interrupted))
                if plan is not None:
                    self._last_entry = plan[0]
                    return self._step(pending_frame, walk, level, pc, plan[1], plan[2], known,
                                      interrupted, plan[3])
        if known is None:
            pc = pending_frame.pc() if _HAS_PC else int(pending_frame.read_register(
                self._pc_handles.get(pending_frame.architecture(), "pc")))
        stopped = self._echo
        if stopped is not None and level == stopped[0] + 1 and pc == stopped[1]:
            echo = self._echo_of(pending_frame, pc)
            if echo is not None:
                return echo
        table = walk.table
        entry = table.find(pc) if table is not None else None
        if entry is None or entry.failed:
            self._note_sigtramp(pending_frame, walk, pc, level)
            if entry is None:
                return self._not_code(pending_frame, walk, pc, level)
            return self._unusable(pending_frame, entry, pc, level)
        self._last_entry = entry
        if entry.native and self.mode == "auto":
            return None  # gdb's DWARF unwinder has this objfile's symbol file
        section = entry.section or entry.sframe(self)
        if section is None:
            return self._unusable(pending_frame, entry, pc, level)
        interrupted = level == 0 or level in walk.after_sigtramp or (
            level == walk.first_level and _below_inline_only(pc, level)
            and not _after_call(section, pc))
        lookup_pc = pc if interrupted else pc - 1
        if self.mode == "auto" and entry.covered_by_cfi(self, lookup_pc):
            self._note_sigtramp(pending_frame, walk, pc, level)
            return None
        try:
            row = section.row_at(lookup_pc)
        except SFrameError as exc:
            entry.failed = True
            self.report(entry.path, str(exc))
            return None
        arch: Arch = section.arch
        regs_info = entry.regs or self._regs_for(entry, pending_frame, arch)
        if row is None:
            # Not an SFrame PC (no FDE): GDB's own unwinders may know it,
            # unless it is _start (with FP 0), where they invent callers.
            self._note_sigtramp(pending_frame, walk, pc, level)
            if pending_frame.architecture().name() not in _INVENTS_PAST_START:
                return None
            return self._outermost(pending_frame, entry, pc, lookup_pc, arch, regs_info)
        reads, hands = regs_info.plan(row, interrupted)
        if known is None:
            known = {}
            read_register = pending_frame.read_register
            for regno, handle in reads:
                try:
                    value = read_register(handle)
                    if value.type.code == _FLOAT:
                        # int() would convert the number; its bits are what
                        # a rule moves (s390x f8-f15 unchanged, "r9 in f4").
                        # /z gives them on every GDB (Value.bytes is 14+).
                        known[regno] = int(value.format_string(format="z"), 16)
                        continue
                    known[regno] = int(value)
                except (gdb.error, ValueError):
                    pass  # not saved by the inner frame's unwinder: unknown here
        plans = walk.plans
        if len(plans) >= _PLAN_CACHE:
            plans.clear()
        plans[(pc, interrupted)] = (entry, row, regs_info, hands)
        return self._step(pending_frame, walk, level, pc, row, regs_info, known, interrupted,
                          hands)

    def _step(self, pending_frame, walk: _Walk, level: int, pc: int, row: Row,
              regs_info: Registers, regs: dict[int, int], interrupted: bool, hands: Handles):
        """Unwind the frame at ``pc`` with ``row`` from its known registers
        ``regs``, and hand GDB the caller's (``hands``: which, and how named).

        Everything handed is a value the rows give: the CFA, the RA, the FP
        and the callee-saved registers (sframe_core.analysis.saved), an unchanged one
        as this frame's own value. What a register's rule cannot give is not
        handed, and reads ``<not saved>`` in the caller.
        """
        arch = regs_info.arch
        pac_mask = DEFAULT_PAC_MASK
        if row.ra_signed and regs_info.has_pauth:
            try:
                pac_mask = int(pending_frame.read_register("pauth_cmask"))
            except (gdb.error, ValueError):
                pass
        result = caller_registers(row, pc, regs, interrupted, walk.memory, arch, pac_mask)
        if isinstance(result, Stop):
            corrupt = result.reason not in NORMAL_ENDS
            return self._stop(pending_frame, pc, regs.get(arch.sp), row.func_start, regs_info,
                              corrupt, level)
        cfa, caller_pc, caller_regs = result
        walk.served = True
        caller_interrupted = row.signal
        if not caller_interrupted and caller_pc not in walk.return_addresses:
            if return_address_problem(caller_pc, arch, walk.addresses):
                # A return address that cannot be one (sframe_core.unwind.addresses):
                # the stack is corrupt.
                return self._stop(pending_frame, pc, regs.get(arch.sp), row.func_start,
                                  regs_info, True, level)
            walk.return_addresses.add(caller_pc)
        values = walk.values
        if len(values) >= _VALUE_CACHE:
            values.clear()
        if self._int_ids:
            info = self._unwind_info(pending_frame, cfa, row.func_start, regs_info)
        else:  # GDB 13: the frame id as gdb.Values too (the CFA is the caller's SP)
            v = values.get(cfa)
            if v is None:
                v = values[cfa] = regs_info.value(cfa)
            start = values.get(row.func_start)
            if start is None:
                start = values[row.func_start] = regs_info.value(row.func_start)
            info = pending_frame.create_unwind_info(_FrameId(v, start))
        v = values.get(caller_pc)
        if v is None:
            v = values[caller_pc] = regs_info.value(caller_pc)
        add = info.add_saved_register
        add(regs_info.pc, v)
        handed: dict[int, int] = {}
        for regno, handle in hands:
            val = caller_regs.get(regno)
            if val is None:
                continue
            v = values.get(val)
            if v is None:
                v = values[val] = regs_info.value(val)
            try:
                add(handle, v)
            except (ValueError, gdb.error):
                continue  # a register this GDB architecture does not have
            handed[regno] = val
        if caller_interrupted:
            walk.after_sigtramp.add(level + 1)
        walk.handed = handed
        walk.handed_pc = caller_pc
        walk.handed_sp = handed.get(arch.sp)
        walk.sp_handle = regs_info.sp
        walk.handed_level = level
        return info

    def _outermost(self, pending_frame, entry: ObjfileEntry, pc: int, lookup_pc: int,
                   arch: Arch, regs_info: Registers):
        """Claim a frame no row covers when the core says it is the outermost."""
        def read_fp() -> int | None:
            try:
                return int(pending_frame.read_register(regs_info.handle(arch.fp)))
            except (gdb.error, ValueError):
                return None

        if entry_stop(pc, lookup_pc, entry.start_function(), read_fp, arch) is None:
            return None
        try:
            sp: int | None = int(pending_frame.read_register(regs_info.handle(arch.sp)))
        except (gdb.error, ValueError):
            sp = None
        return self._stop(pending_frame, pc, sp, pc, regs_info, False, pending_frame.level())

    def _stop(self, pending_frame, pc: int, sp: int | None, func_start: int,
              regs_info: Registers, corrupt: bool, level: int):
        """Claim a frame the rows cannot unwind, so that GDB ends the
        backtrace with it rather than let a prologue analyzer guess a caller.

        Where the stack looks corrupt, above level 0, the frame gets no
        saved PC and an id just below its SP, that is inner to the frame it
        was called from: GDB (13 and later) then ends the backtrace after it
        with "Backtrace stopped: previous frame inner to this frame (corrupt
        stack?)", before it looks for a PC.

        Where the rows say this is the outermost frame (``_start``), GDB 15
        and later take a frame without a saved PC as the end ("Backtrace
        stopped: frame did not save the PC"), at any level. GDB 13 and 14
        raise "PC not saved" instead wherever anything looks past such a
        frame (``bt``'s last line, MI ``-stack-list-frames``, GDB 13 and 14's
        own Python code at level 0), and no frame id says "outermost" from
        Python. There, and for a corrupt stack at level 0 (no frame is inner
        to it), the caller is the frame itself: same registers, same frame
        id (``_echo_of``); GDB drops it and ends the backtrace with "previous
        frame identical to this frame (corrupt stack?)".
        """
        if sp is None:
            sp = 1
        if level != 0 and corrupt:
            return self._unwind_info(pending_frame, sp - 1, func_start, regs_info)
        if not corrupt and _ENDS_WITHOUT_PC:
            return self._unwind_info(pending_frame, sp, func_start, regs_info)
        self._echo = (level, pc, sp, func_start)
        info = self._unwind_info(pending_frame, sp, func_start, regs_info)
        info.add_saved_register(regs_info.pc, regs_info.value(pc))
        info.add_saved_register(regs_info.sp, regs_info.value(sp))
        return info

    def _echo_of(self, pending_frame, pc: int):
        """The echo of a frame ``_stop`` claimed: the frame above it, same id."""
        assert self._echo is not None
        _, _, sp, func_start = self._echo
        arch = _GDB_ARCHES.get(pending_frame.architecture().name())
        if arch is None:
            return None
        regs_info = self._registers.of(pending_frame, arch)
        try:
            if int(pending_frame.read_register(regs_info.handle(arch.sp))) != sp:
                return None
        except (gdb.error, ValueError):
            return None
        return self._unwind_info(pending_frame, sp, func_start, regs_info)

    def _not_code(self, pending_frame, walk: _Walk, pc: int, level: int):
        """A frame whose PC is in no objfile with SFrame. Where that PC cannot
        be code (``return_address_problem``: the stack, the heap, nothing, a
        non-canonical or tiny value), whoever unwound to it was fooled by a
        corrupt stack: claim the frame and end the backtrace with it, rather
        than let GDB's heuristics read callers off the stack. At level 0 (a
        jump or a return into nonsense) only when the word at SP is no return
        address either: after a call through a bad pointer it is the caller's,
        which GDB's heuristics find. Above level 0 only in a walk where this
        unwinder gave a frame its caller. Anything else is left to GDB."""
        arch = _GDB_ARCHES.get(pending_frame.architecture().name())
        if arch is None or level in walk.after_sigtramp:
            # (A frame a signal interrupted at such a PC, whose trampoline this
            # walk did not see, is still shown; only its callers are not.)
            return None
        if level and not walk.served:
            # No frame of this stack was this unwinder's: gdb's own unwinders
            # made every frame up to here, as they do on the twin, and the
            # twin shows what they read from here on (ld.so's _start at an
            # exec catchpoint: the argument count as a return address).
            return None
        addresses = walk.addresses
        if return_address_problem(pc, arch, addresses) is None:
            return None
        found = self._sp_of(pending_frame, arch)
        if found is None:
            return None
        regs_info, sp = found
        if level == 0:
            word = walk.memory.read(sp, 8)
            if arch.ra_reg is not None or word is None or return_address_problem(
                    int.from_bytes(word, "big" if arch.big_endian else "little"), arch,
                    addresses) is None:
                return None
        return self._stop(pending_frame, pc, sp, pc, regs_info, True, level)

    def _unusable(self, pending_frame, entry: ObjfileEntry, pc: int, level: int):
        """A frame in an objfile whose .sframe is corrupt (said once, as a
        warning) and which has no CFI of its own: nothing tells its caller,
        and GDB's prologue analyzer would guess one (from the stack, wrongly
        as often as not). End the backtrace with the frame instead."""
        if entry.has_eh_frame or entry.has_debug_frame:
            return None  # GDB's own CFI may know the frame
        arch = _GDB_ARCHES.get(pending_frame.architecture().name())
        found = self._sp_of(pending_frame, arch) if arch is not None else None
        if found is None:
            return None
        regs_info, sp = found
        return self._stop(pending_frame, pc, sp, pc, regs_info, True, level)

    def _sp_of(self, pending_frame, arch: Arch) -> tuple[Registers, int] | None:
        """The frame's register handles and its SP, or None where GDB cannot read the SP."""
        regs_info = self._registers.of(pending_frame, arch)
        try:
            return regs_info, int(pending_frame.read_register(regs_info.handle(arch.sp)))
        except (gdb.error, ValueError):
            return None

    def _unwind_info(self, pending_frame, sp: int, pc: int, regs_info: Registers):
        """``create_unwind_info`` with a (CFA, function start) frame id."""
        if self._int_ids:
            try:
                return pending_frame.create_unwind_info(_FrameId(sp, pc))
            except ValueError:
                self._int_ids = False  # GDB 13: "frame_id should have 'sp' attribute."
        return pending_frame.create_unwind_info(_FrameId(regs_info.value(sp), regs_info.value(pc)))

    def _note_sigtramp(self, pending_frame, walk: _Walk, pc: int, level: int) -> None:
        """Remember that the frame above ``level`` was interrupted by a signal.

        GDB's own sigtramp unwinder handles the trampoline frame (we decline
        it); its caller's PC is the interrupted instruction, not a return
        address, so it is looked up at ``pc``, not ``pc - 1``.
        """
        arch = _GDB_ARCHES.get(pending_frame.architecture().name())
        if arch is not None and is_sigreturn(arch, walk.memory, pc):
            walk.after_sigtramp.add(level + 1)
