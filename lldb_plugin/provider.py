"""The scripted frame provider (LLDB 22+): plain ``bt`` through SFrame.

Frames LLDB's own unwinder got right are passed through untouched (an int:
the input frame's index). At the first frame whose PC lies where only SFrame
describes the code (SFrame FDE, no ``.eh_frame``/``.debug_frame`` FDE), that
frame is still passed through (its own PC and registers are right), and from
its caller on the core's ``walk`` takes over, through SFrame and DWARF CFI
rows alike, to the outermost frame. Those frames are ``CallerFrame``
objects (LLDB's ``ScriptedFrame``) that carry their symbol context, looked
up as LLDB does for its own caller frames: at pc - 1 (pc for an interrupted
frame), with a frame for each inlined function there (so ``bt`` shows the
twin's functions, inlined frames and file:line:column). They have no
register context: one crashes LLDB 22.1.0 and 23.1.0 (see docs/lldb.md), so
variables in them are unavailable, never another frame's value.

Every entry point is wrapped: a failure is said once, in one line, and the
backtrace then ends (or the input frame is passed through) - never a
traceback, a hang, or an exception for LLDB to swallow.
"""

from __future__ import annotations

from collections.abc import Iterator

import lldb
from lldb.plugins.scripted_frame_provider import ScriptedFrameProvider
from lldb.plugins.scripted_process import ScriptedFrame

from sframe_core.base.abi import Arch
from sframe_core.targets.backtrace import describe_stop
from sframe_core.unwind.step import MAX_FRAMES, NORMAL_ENDS, OUTERMOST_ENDS, Frame, Stop, StopReason, walk

from . import state
from .state import remember, target_key, warn_once
from .target import INVALID, frame_registers, info_for, process_memory

__all__ = ["SFrameFrameProvider", "CallerFrame", "CLASS_NAME", "registration_args",
           "registration_key"]

CLASS_NAME = f"{__name__}.SFrameFrameProvider"
# (target, thread id) -> the frames of a core file's thread (``precompute``).
_precomputed: dict[tuple[object, int], tuple[Provided, ...]] = {}
DESCRIPTION = "SFrame unwinder (sframe-gdb): frames where .eh_frame is missing"

# How many of LLDB's input frames above the take-over point are read (before
# any frame is returned) to find the frame where the core's walk stopped.
RESYNC_SEARCH = 256


def registration_args(target: lldb.SBTarget) -> lldb.SBStructuredData:
    """The arguments the provider is registered with: the target's key, which
    its constructor reads without an SB call that locks (``registration_key``)."""
    import json
    data = lldb.SBStructuredData()
    data.SetFromJSON(json.dumps({"target": str(target_key(target))}))
    return data


def registration_key(args: lldb.SBStructuredData | None) -> str | None:
    if args is None or not args.IsValid():
        return None
    value = args.GetValueForKey("target")
    return value.GetStringValue(4096) if value.IsValid() else None


class CallerFrame(ScriptedFrame):
    """A frame the core's walk found, symbolicated as LLDB symbolicates its own.

    LLDB makes a provider's ``{"pc"}`` dict into a frame whose symbol context
    is looked up at pc itself: a caller frame then showed the line after the
    call (33:15 where the twin shows 33:18), and where the call was the last
    instruction of an inlined block, the next function. A ``ScriptedFrame``
    hands LLDB its symbol context instead. ``ScriptedFrame.__init__`` is not
    called: it makes SB calls that take the target's API lock (see
    ``SFrameFrameProvider.__init__``); everything is worked out before.
    """

    def __init__(self, index: int, pc: int, context: lldb.SBSymbolContext) -> None:
        self.id = index
        self.pc = pc
        self.context = context
        self.register_info = None
        self.register_ctx: dict[str, int] = {}
        self.variables: list[lldb.SBValue] = []
        self.name = None

    def get_id(self) -> int:
        return self.id

    def get_pc(self) -> int:
        return self.pc

    def get_symbol_context(self) -> lldb.SBSymbolContext:
        return self.context

    def is_artificial(self) -> bool:
        return False

    def get_register_info(self) -> None:
        return None  # none: see the module's docstring

    def get_register_context(self) -> None:
        return None


def symbolicated(target: lldb.SBTarget, pc: int, *, caller: bool, index: int) -> list[CallerFrame]:
    """The frames LLDB shows for a frame at ``pc``: the innermost inlined
    function's first, then each function it was inlined into (at the pc LLDB
    gives those, the start of the inlined block), the concrete one last."""
    address = lldb.SBAddress(pc - 1 if caller and pc > 0 else pc, target)
    context = target.ResolveSymbolContextForAddress(address, lldb.eSymbolContextEverything)
    frames = [CallerFrame(index, pc, context)]
    while len(frames) < 64:
        block = context.GetBlock()
        if not block.IsValid() or not block.GetContainingInlinedBlock().IsValid():
            break
        parent_address = lldb.SBAddress()
        parent = context.GetParentOfInlinedScope(address, parent_address)
        if not parent.IsValid() or not parent_address.IsValid():
            break
        address, context = parent_address, parent
        frames.append(CallerFrame(index + len(frames), parent_address.GetLoadAddress(target),
                                  context))
    return frames


Provided = int | CallerFrame  # an input frame's index, or a frame of ours


class SFrameFrameProvider(ScriptedFrameProvider):
    instances = 0  # how many were made: tells whether a registration took effect

    @staticmethod
    def get_description() -> str:
        return DESCRIPTION

    @staticmethod
    def applies_to_thread(thread: lldb.SBThread) -> bool:
        return True

    def __init__(self, input_frames: lldb.SBFrameList, args: lldb.SBStructuredData) -> None:
        # Not ScriptedFrameProvider.__init__: it asks ``if self.thread``
        # (SBThread.__bool__), which takes the target's API lock. LLDB makes
        # the provider while it holds the thread's frame-list lock, on
        # whichever thread first wants the frames (the event-handler thread,
        # printing a stop); another thread that holds the API lock and waits
        # for the frame list (an SB call from a command, a script, this
        # plugin's import) then deadlocks with it (seen on LLDB 23.1.0).
        # So the constructor makes only lock-free calls (SBFrameList.IsValid,
        # GetThread, SBThread.GetThreadID, SBStructuredData); the process
        # and target are looked up when a live thread's frames are worked out.
        valid = input_frames is not None and input_frames.IsValid()
        self.input_frames = input_frames if valid else None
        self.args = args
        self.thread = input_frames.GetThread() if valid else None
        self.target = None
        self.process = None
        SFrameFrameProvider.instances += 1
        self._reset()
        if self.thread is not None:
            # A core file's frames, found before the provider was registered
            # (see ``precompute``): answered without a single SB call.
            frames = _precomputed.get((registration_key(args), self.thread.GetThreadID()))
            if frames is not None:
                self._frames = list(frames)
                self._done = True
                self._took_over = True

    _frames: list[Provided]
    _gen: Iterator[Provided] | None
    input_frames: lldb.SBFrameList | None
    thread: lldb.SBThread | None
    target: lldb.SBTarget | None
    process: lldb.SBProcess | None

    def _reset(self) -> None:
        self._frames = []
        self._gen = None
        self._done = False
        self._took_over = False
        self._busy = False

    @classmethod
    def precompute(cls, target: lldb.SBTarget, thread: lldb.SBThread) -> list[int]:
        """Work out ``thread``'s frames now, for the provider LLDB makes later.

        For a core file LLDB builds frame lists on its event thread too, while
        the main thread may hold the target's API lock: a provider that then
        makes SB calls (memory, input frames) deadlocks LLDB 23.1.0. A core
        never changes, so its frames are computed here, on the caller's thread
        and before the provider exists, from LLDB's own frames
        (``SBThread.GetFrameAtIndex``, the provider's input frames).
        Returns the frames' PCs.
        """
        self = cls.__new__(cls)
        self._reset()
        self.input_frames = thread  # it has GetFrameAtIndex, as an SBFrameList does
        self.thread = thread
        self.process = thread.GetProcess()
        self.target = target
        self.args = None
        frames = []
        hooked, state.in_stop_hook = state.in_stop_hook, False  # no provider runs yet
        try:
            for index in range(MAX_FRAMES):
                frame = self._frame_at(index)
                if frame is None:
                    break
                frames.append(frame)
        finally:
            state.in_stop_hook = hooked
        remember(_precomputed, (str(target_key(target)), thread.GetThreadID()), tuple(frames),
                 lambda key: key[0])
        return [thread.GetFrameAtIndex(f).GetPC() if isinstance(f, int) else f.pc
                for f in frames]

    # -- LLDB's entry point -------------------------------------------------

    def get_frame_at_index(self, index: int) -> Provided | None:
        if self._busy:
            # LLDB asked again while this provider was computing (it can, when
            # the provider reads its input frames): answer with what is known,
            # LLDB's own frame only before the take-over point (past it, LLDB's
            # frames are the wrong ones this provider replaces).
            if index < len(self._frames):
                return self._frames[index]
            return None if self._took_over else self._native(index)
        self._busy = True
        try:
            return self._frame_at(index)
        finally:
            self._busy = False

    def _native(self, index: int) -> int | None:
        try:
            if self.input_frames is not None and self.input_frames.GetFrameAtIndex(index).IsValid():
                return index
        except Exception:  # noqa: BLE001
            pass
        return None

    def _frame_at(self, index: int) -> Provided | None:
        try:
            while len(self._frames) <= index and not self._done:
                if self._gen is None:
                    self._gen = self._symbolicate(self._generate())
                try:
                    self._frames.append(next(self._gen))
                except StopIteration:
                    self._done = True
            return self._frames[index] if index < len(self._frames) else None
        except Exception as exc:  # noqa: BLE001 - LLDB would only print "error displaying backtrace"
            self._done = True
            warn_once(("provider", type(exc).__name__, str(exc)),
                      f"frame provider failed at frame #{index}: {type(exc).__name__}: {exc}"
                      " (backtrace cut here)")
            if not self._took_over and self.input_frames is not None:
                frame = self.input_frames.GetFrameAtIndex(index)
                if frame.IsValid():
                    return index
            return None

    # -- the frames ---------------------------------------------------------

    def _symbolicate(self, found: Iterator[int | dict[str, int]]) -> Iterator[Provided]:
        """Input frames as they are; each frame of the walk as the frames LLDB shows for it."""
        for item in found:
            if isinstance(item, int):
                yield item
                continue
            assert self.target is not None
            yield from symbolicated(self.target, item["pc"], caller=bool(item["caller"]),
                                    index=len(self._frames))

    def _generate(self) -> Iterator[int | dict[str, int]]:
        if self.input_frames is None or self.thread is None:
            return
        if self.process is None or self.target is None:
            process = self.thread.GetProcess()
            self.process, self.target = process, process.GetTarget()
        if not self.target.IsValid():
            return
        # Every SB call on LLDB's input frames is made here, before the first
        # frame is returned (while LLDB asks for frame 0). After a frame has
        # been returned, such calls deadlocked LLDB 23.1.0: reading a register
        # of a returned frame, and SBFrame.IsValid when the frames were being
        # computed on LLDB's event thread (the SB call looks its frame up in
        # the frame list being built, whose lock LLDB holds while it calls the
        # provider). Memory reads (SBProcess) are safe later.
        if state.in_stop_hook:
            yield from range(len(self._scan(0, None)))
            return
        info = info_for(self.target)
        arch = info.arch
        if arch is None:
            yield from range(len(self._scan(0, None)))
            return
        inputs: list[tuple[int, int]] = []  # LLDB's input frames: (pc, SP)
        i = 0
        previous_lookup: int | None = None
        frame = None
        while True:
            frame = self.input_frames.GetFrameAtIndex(i)
            if not frame.IsValid() or frame.GetPC() == INVALID:
                # LLDB's own unwind ended where nothing needed SFrame
                yield from range(len(inputs))
                return
            pc = frame.GetPC()
            inputs.append((pc, frame.GetSP()))
            lookup = pc if i == 0 else pc - 1
            if info.sframe_only(lookup):
                break
            if not self.input_frames.GetFrameAtIndex(i + 1).IsValid():
                # LLDB's unwind ends here (it rejects a caller in code it has no
                # unwind info or symbols for): see whether the core goes on.
                break
            previous_lookup = lookup
            i += 1
        interrupted = i == 0
        if previous_lookup is not None:
            # The caller of a signal trampoline was interrupted, not calling.
            row = info.table.row_at(previous_lookup)
            interrupted = bool(row is not None and row.signal)
        # Only SP, FP (and the RA register) are read: what SFrame rows need.
        start = Frame(pc, frame_registers(frame, arch, all_registers=False),
                      interrupted=interrupted)
        # LLDB's frames above the take-over point, for resynchronising later.
        inputs += self._scan(i + 1, RESYNC_SEARCH)
        yield from range(i + 1)
        self._took_over = True
        memory = process_memory(self.process)
        idx = i + 1
        last = start  # the frame the walk is at
        pending: dict[str, int] | None = None  # ``last`` as a provided frame, not yet returned
        stop: Stop | None = None
        first = True
        for item in walk(start, info.table, memory, arch,
                         addresses=info.addresses(self.process, start.regs.get(arch.sp))):
            if isinstance(item, Stop):
                stop = item
                break
            if first:
                first = False
                continue
            if pending is not None:
                yield pending
                idx += 1
            # A return address is looked up at pc - 1; an interrupted pc, and
            # the start of a signal trampoline (its FDE starts a byte early), at pc.
            caller = not item.interrupted and not (item.row is not None and item.row.signal)
            pending = {"idx": idx, "pc": item.pc, "caller": int(caller)}
            last = item
        if stop is None or stop.reason in OUTERMOST_ENDS:
            if pending is not None:
                yield pending
            return
        # The core cannot go on from ``last``. If LLDB's own unwinder has that
        # same frame (same pc and SP), its frames from there on are LLDB's
        # (e.g. libc start code with no unwind info, which LLDB emulates):
        # pass them through. Otherwise, and always after a return address
        # that is no code (LLDB's next frame would be made of it), the
        # backtrace ends here.
        j = None if stop.reason is StopReason.BAD_RA else _index_of(
            inputs, last, arch, first=i + 1 if pending is not None else i)
        if j is None:
            if pending is not None:
                yield pending
            if stop.reason not in NORMAL_ENDS:
                frame = idx if pending is not None else idx - 1
                warn_once(("stop", stop.reason, str(stop)),
                          f"Backtrace stopped: {describe_stop(stop)} (after frame #{frame})")
            return
        if pending is None:
            j += 1  # ``last`` is frame i itself, already passed through
        yield from _sane_tail(inputs, j)

    def _scan(self, first: int, limit: int | None) -> list[tuple[int, int]]:
        """(pc, SP) of LLDB's input frames from ``first`` on, at most ``limit``."""
        found: list[tuple[int, int]] = []
        frames = self.input_frames
        j = first
        while frames is not None and (limit is None or len(found) < limit):
            frame = frames.GetFrameAtIndex(j)
            if not frame.IsValid() or frame.GetPC() == INVALID:
                break
            found.append((frame.GetPC(), frame.GetSP()))
            j += 1
        return found


def _sane_tail(inputs: list[tuple[int, int]], first: int) -> Iterator[int]:
    """Indices of LLDB's input frames from ``first`` on, up to the first one that
    repeats its predecessor's (pc, SP) or lies below it on the stack: LLDB's own
    unwinder, lost in code without unwind info, can repeat its last frame."""
    previous: tuple[int, int] | None = None
    for k in range(first, len(inputs)):
        pc, sp = inputs[k]
        if previous is not None and ((pc, sp) == previous or (
                sp != INVALID and previous[1] != INVALID and sp < previous[1])):
            return
        previous = (pc, sp)
        yield k


def _index_of(inputs: list[tuple[int, int]], frame: Frame, arch: Arch, *, first: int) -> int | None:
    """The index of the input frame with ``frame``'s pc and SP (searched from ``first``), or None."""
    sp = frame.regs.get(arch.sp)
    if sp is None:
        return None
    for j in range(first, len(inputs)):
        pc, input_sp = inputs[j]
        if pc == frame.pc and input_sp == sp:
            return j
        if input_sp != INVALID and input_sp > sp:
            return None  # the stack grows down: LLDB's frames are past it
    return None
