"""The scripted frame provider (LLDB 22+): plain ``bt`` through SFrame.

Frames LLDB's own unwinder got right are passed through untouched (an int:
the input frame's index). At the first frame whose PC lies where only SFrame
describes the code (SFrame FDE, no ``.eh_frame``/``.debug_frame`` FDE), that
frame is still passed through (its own PC and registers are right), and from
its caller on the core's ``walk`` takes over, through SFrame and DWARF CFI
rows alike, to the outermost frame. Those frames are dicts ``{"idx", "pc"}``:
register contexts crash LLDB 22.1.0 and 23.1.0 (see docs/lldb.md), so none
are returned, and ``frame variable`` shows nothing useful in them.

Every entry point is wrapped: a failure is said once, in one line, and the
backtrace then ends (or the input frame is passed through) - never a
traceback, a hang, or an exception for LLDB to swallow.
"""

from __future__ import annotations

from collections.abc import Iterator

import lldb
from lldb.plugins.scripted_frame_provider import ScriptedFrameProvider

from sframe_core.unwind import Frame, Stop, StopReason, walk

from . import state
from .target import INVALID, ProcessMemory, frame_registers, info_for, warn_once

__all__ = ["SFrameFrameProvider", "CLASS_NAME", "NORMAL_ENDS"]

CLASS_NAME = f"{__name__}.SFrameFrameProvider"
DESCRIPTION = "SFrame unwinder (sframe-gdb): frames where .eh_frame is missing"

# Ends of a walk that are not worth a message: the stack really ends there,
# or nothing describes the code (the native unwinder would not do better).
NORMAL_ENDS = (StopReason.OUTERMOST, StopReason.RA_ZERO, StopReason.NO_INFO)


class SFrameFrameProvider(ScriptedFrameProvider):
    instances = 0  # how many were made: tells whether a registration took effect
    @staticmethod
    def get_description() -> str:
        return DESCRIPTION

    @staticmethod
    def applies_to_thread(thread: lldb.SBThread) -> bool:
        return True

    def __init__(self, input_frames: lldb.SBFrameList, args: lldb.SBStructuredData) -> None:
        super().__init__(input_frames, args)
        SFrameFrameProvider.instances += 1
        self._frames: list[int | dict[str, int]] = []
        self._gen: Iterator[int | dict[str, int]] | None = None
        self._done = False
        self._took_over = False
        self._busy = False

    # -- LLDB's entry point -------------------------------------------------

    def get_frame_at_index(self, index: int) -> int | dict[str, int] | None:
        if self._busy:
            # LLDB asked again while this provider was computing (it can, when
            # the provider reads its input frames): answer with LLDB's own frame.
            return self._native(index)
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

    def _frame_at(self, index: int) -> int | dict[str, int] | None:
        try:
            while len(self._frames) <= index and not self._done:
                if self._gen is None:
                    self._gen = self._generate()
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

    def _generate(self) -> Iterator[int | dict[str, int]]:
        if self.input_frames is None or self.target is None or self.process is None:
            return
        if state.in_stop_hook:
            yield from self._passthrough()
            return
        info = info_for(self.target)
        arch = info.arch
        i = 0
        previous_lookup: int | None = None
        while True:
            frame = self.input_frames.GetFrameAtIndex(i)
            if not frame.IsValid():
                return  # LLDB's own unwind ended where nothing needed SFrame
            pc = frame.GetPC()
            if pc == INVALID:
                return
            yield i
            if arch is None:
                i += 1
                continue
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
        assert arch is not None
        self._took_over = True
        # Only SP, FP (and the RA register): reading other registers of an
        # input frame from inside a provider hangs LLDB 23.1.0 (seen: rbx).
        start = Frame(pc, frame_registers(frame, arch, all_registers=False),
                      interrupted=interrupted)
        memory = ProcessMemory(self.process)
        idx = i + 1
        first = True
        for item in walk(start, info.table, memory, arch):
            if isinstance(item, Stop):
                if item.reason not in NORMAL_ENDS:
                    warn_once(("stop", item.reason, str(item)),
                              f"backtrace ends at frame #{idx - 1}: {item}")
                return
            if first:
                first = False
                continue
            yield {"idx": idx, "pc": item.pc}
            idx += 1


    def _passthrough(self) -> Iterator[int]:
        i = 0
        while self.input_frames.GetFrameAtIndex(i).IsValid():
            yield i
            i += 1

