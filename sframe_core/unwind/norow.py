"""Frames no row covers that a walk can still place: a signal trampoline and
the program's entry function.

Debuggers decline such frames to their own unwinders, but two cases need a
rule of ours. A signal trampoline (``__restore_rt``) is unwound by the
debugger's sigtramp unwinder; its caller's PC is the interrupted instruction,
not a return address, so that frame's rows are looked up at ``pc``, not at
``pc - 1``. And ``_start`` has no unwind information at all: where the ABI
marks the outermost frame with a frame pointer of 0, that ends the stack
(``unwind.stop_without_row``), where a prologue analyzer would invent callers.
"""

from __future__ import annotations

from collections.abc import Callable

from ..base.abi import Arch
from .step import Memory, Stop, StopReason, stop_without_row

__all__ = ["is_sigreturn", "entry_stop"]


def is_sigreturn(arch: Arch, memory: Memory, pc: int) -> bool:
    """Does ``pc`` start the Linux rt_sigreturn trampoline (``Arch.sigreturn``)?"""
    pattern = arch.sigreturn
    return bool(pattern) and memory.read(pc, len(pattern)) == pattern


def entry_stop(pc: int, lookup_pc: int, entry: tuple[int, int] | None,
               read_fp: Callable[[], int | None], arch: Arch) -> Stop | None:
    """The outermost frame's Stop for a PC no row covers inside the
    executable's entry function (``modules.Module.entry_function``), with the
    frame pointer the ABI gives the outermost frame; None anywhere else.
    ``read_fp`` is called only inside the entry function."""
    if entry is None or not entry[0] <= lookup_pc < entry[1]:
        return None
    fp = read_fp()
    if fp is None:
        return None
    stop = stop_without_row(pc, {arch.fp: fp}, arch)
    return stop if stop.reason is StopReason.OUTERMOST else None
