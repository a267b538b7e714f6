"""What the core needs from LLDB: modules, memory, registers (SB API only).

Nothing here knows the SFrame format or how to unwind; it turns an
``SBTarget`` into a ``sframe_core.targets.modules.ModuleTable`` (section bytes from
``SBSection.GetSectionData``, which works for core files; bias = load
address - file address), an ``SBProcess`` into a ``Memory`` and an
``SBFrame`` into a register map by DWARF number (names from ``abi.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import lldb

from sframe_core.base.abi import AARCH64_BE, AARCH64_LE, AMD64, S390X, Arch
from sframe_core.base.errors import SFrameError
from sframe_core.base.memory import PageCache
from sframe_core.targets.modules import Module, ModuleTable
from sframe_core.unwind.addresses import AddressMap, Region, name_stacks
from sframe_core.unwind.step import Frame

from .state import is_native, remember, routes, target_key, warn_once

__all__ = ["TargetInfo", "process_memory", "info_for", "frame_registers", "arch_for_triple", "INVALID",
           "is_core", "is_live_remote"]

INVALID = getattr(lldb, "LLDB_INVALID_ADDRESS", 0xFFFF_FFFF_FFFF_FFFF)

def arch_for_triple(triple: str) -> Arch | None:
    cpu = (triple or "").split("-", 1)[0].lower()
    if cpu in ("x86_64", "amd64", "x86_64h"):
        return AMD64
    if cpu in ("aarch64", "arm64"):
        return AARCH64_LE
    if cpu in ("aarch64_be", "arm64_be"):
        return AARCH64_BE
    if cpu == "s390x":
        return S390X
    return None


def process_memory(process: lldb.SBProcess) -> PageCache:
    """``Memory`` over ``SBProcess.ReadMemory``, a page at a time, for one walk."""

    def read(address: int, size: int) -> bytes | None:
        error = lldb.SBError()
        data = process.ReadMemory(address, size, error)
        if not error.Success() or data is None or len(data) != size:
            return None
        return bytes(data)
    return PageCache(read)


def _section_loader(section: lldb.SBSection, target: lldb.SBTarget
                    ) -> Callable[[], tuple[bytes, int] | None]:
    def load() -> tuple[bytes, int] | None:
        load_address = section.GetLoadAddress(target)
        if load_address == INVALID:
            return None
        data = section.GetSectionData()
        error = lldb.SBError()
        raw = data.ReadRawData(error, 0, data.GetByteSize()) if data.GetByteSize() else b""
        if not error.Success() or not raw:
            raise SFrameError(f"cannot read .sframe: {error.GetCString() or 'no data'}")
        return bytes(raw), load_address
    return load


def _loaded_ranges(module: lldb.SBModule, target: lldb.SBTarget) -> list[tuple[int, int]]:
    ranges = []
    for i in range(module.GetNumSections()):
        section = module.GetSectionAtIndex(i)
        size = section.GetByteSize()
        load = section.GetLoadAddress(target)
        if size and load != INVALID:
            ranges.append((load, load + size))
    return ranges


def _code_regions(module: lldb.SBModule, target: lldb.SBTarget) -> list[Region]:
    regions = []
    name = module.GetFileSpec().fullpath or ""
    for i in range(module.GetNumSections()):
        section = module.GetSectionAtIndex(i)
        size = section.GetByteSize()
        load = section.GetLoadAddress(target)
        if size and load != INVALID and section.GetPermissions() & lldb.ePermissionsExecutable:
            regions.append(Region(load, load + size, True, name))
    return regions


class LLDBModule(Module):
    """A core ``Module`` plus what LLDB knows about its sections."""

    has_eh_section: bool = False
    sframe_section: lldb.SBSection | None = None
    native_cfi: bool = False  # LLDB reads our .debug_frame for it (``symfiles``)

    def any_sframe_only(self) -> bool:
        """Whether ``sframe_only`` holds at some SFrame function's start: asked of
        every function at once (``CFITable.uncovered``), as a module with both
        SFrame and CFI is at its first stop."""
        section = self.sframe
        if self.native_cfi or section is None:
            return False
        starts = []
        for start, size in section.extents():
            if size > 0:
                starts.append(start)  # SFrame covers it: the FDE itself
            elif self.sframe_only(start):
                return True
        cfi = self.cfi if self.has_eh_section else None
        if cfi is None:
            return bool(starts)
        return next(cfi.uncovered(starts), None) is not None

    def sframe_only(self, pc: int) -> bool:
        """SFrame covers ``pc`` and no DWARF CFI does (LLDB's unwinder has nothing)."""
        if self.native_cfi:
            return False
        section = self.sframe
        if section is None or section.find_fde(pc) is None:
            return False
        if not self.has_eh_section:
            return True
        cfi = self.cfi
        return cfi is None or not cfi.has_fde(pc)


def _on_error(module: Module, exc: SFrameError) -> None:
    warn_once(("module", module.name), f"{module.name}: {exc} (its unwind data is ignored)")


class TargetInfo:
    """The module table of one target, as loaded at one stop."""

    def __init__(self, target: lldb.SBTarget) -> None:
        self.arch = arch_for_triple(target.GetTriple())
        modules = []
        # Every module's executable sections (the vdso's too): code, for
        # telling a return address from a corrupt stack's garbage.
        self.code: list[Region] = []
        for module in target.module_iter():
            built = self._module(module, target)
            if built is not None:
                modules.append(built)
            self.code += _code_regions(module, target)
        self.modules: list[LLDBModule] = modules
        self.table = ModuleTable(modules)

    def addresses(self, process: lldb.SBProcess, sp: int | None = None) -> AddressMap:
        """What is mapped where (``sframe_core.unwind.addresses``): the modules' code,
        then LLDB's memory regions (live processes and cores), one lookup
        per page outside it. An unnamed region holding ``sp`` is the stack."""
        def find(address: int) -> Region | None:
            region = lldb.SBMemoryRegionInfo()
            if not process.GetMemoryRegionInfo(address, region).Success():
                return None
            start, end = region.GetRegionBase(), region.GetRegionEnd()
            if not start <= address < end:
                return None
            if not region.IsMapped():
                return Region(start, end, False, mapped=False)
            found = Region(start, end, bool(region.IsExecutable()), region.GetName() or "")
            return name_stacks([found], [sp])[0]
        return AddressMap(self.code, find=find)

    @staticmethod
    def _module(module: lldb.SBModule, target: lldb.SBTarget) -> LLDBModule | None:
        spec = module.GetFileSpec()
        path = spec.fullpath or ""
        ranges = _loaded_ranges(module, target)
        if not ranges:
            return None
        sframe = module.FindSection(".sframe")
        has_sframe = bool(sframe.IsValid() and sframe.GetByteSize())
        on_disk = bool(path) and os.path.isfile(path)
        if not has_sframe and not on_disk:
            return None  # [vdso] and friends: LLDB's own unwinder handles them
        if has_sframe:
            bias = sframe.GetLoadAddress(target) - sframe.GetFileAddress()
        else:
            header = module.GetObjectFileHeaderAddress()
            bias = header.GetLoadAddress(target) - header.GetFileAddress()
        eh = module.FindSection(".eh_frame")
        dbg = module.FindSection(".debug_frame")
        built = LLDBModule(path or spec.GetFilename() or "?", bias, ranges,
                           name=spec.GetFilename() or path,
                           sources=("sframe", "eh_frame") if on_disk else ("sframe",),
                           on_error=_on_error,
                           sframe_loader=_section_loader(sframe, target) if has_sframe else None)
        built.has_eh_section = bool((eh.IsValid() and eh.GetByteSize())
                                    or (dbg.IsValid() and dbg.GetByteSize()))
        built.sframe_section = sframe if has_sframe else None
        built.native_cfi = is_native(target, path)
        return built

    def module_for(self, pc: int) -> LLDBModule | None:
        return self.table.module_for(pc)  # type: ignore[return-value]

    def sframe_only(self, pc: int) -> bool:
        module = self.module_for(pc)
        return module is not None and module.sframe_only(pc)


def _signature(target: lldb.SBTarget) -> tuple[object, ...]:
    sig: list[tuple[object, ...]] = []
    for module in target.module_iter():
        header = module.GetObjectFileHeaderAddress()
        sig.append((module.GetFileSpec().fullpath, module.GetUUIDString(),
                    header.GetLoadAddress(target)))
    # A symbol file added (or a pending module's route settled) changes the table.
    sig.append(("routes", tuple(sorted(route.kind for route in routes(target).values()))))
    return tuple(sig)


_cache: dict[object, tuple[tuple[object, ...], TargetInfo]] = {}


def info_for(target: lldb.SBTarget) -> TargetInfo:
    """The target's module table, rebuilt only when its module list changed."""
    key = target_key(target)
    sig = _signature(target)
    hit = _cache.get(key)
    if hit is not None and hit[0] == sig:
        return hit[1]
    info = TargetInfo(target)
    remember(_cache, key, (sig, info))
    return info


_FLOATING = frozenset(getattr(lldb, name) for name in (
    "eBasicTypeFloat", "eBasicTypeDouble", "eBasicTypeLongDouble", "eBasicTypeHalf")
    if hasattr(lldb, name))


def frame_registers(frame: lldb.SBFrame, arch: Arch, *, all_registers: bool = True
                    ) -> dict[int, int]:
    """The frame's known registers, by DWARF number.

    With ``all_registers=False`` only SP, FP and the RA
    register are read: what SFrame rows need. Reading other registers of an
    input frame from inside a frame provider hangs LLDB 23.1.0 (rbx, frame 0).
    """
    regs: dict[int, int] = {}
    if not all_registers:
        sp, fp = frame.GetSP(), frame.GetFP()
        if sp != INVALID:
            regs[arch.sp] = sp
        if fp != INVALID:
            regs[arch.fp] = fp
        if arch.ra_reg is None:
            return regs
    wanted = None if all_registers else {arch.ra_reg}
    for number, name in arch.reg_names:
        if wanted is not None and number not in wanted:
            continue
        value = frame.FindRegister(name)
        if not value.IsValid() or value.GetType().GetBasicType() in _FLOATING:
            # A floating-point register's value would be converted, not its
            # bits: unknown (rules can name them: s390x r6-r13 kept in f0-f7).
            continue
        error = lldb.SBError()
        number_value = value.GetValueAsUnsigned(error, 0)
        if error.Success():
            regs[number] = number_value
    if arch.sp not in regs:
        sp = frame.GetSP()
        if sp != INVALID:
            regs[arch.sp] = sp
    return regs


def innermost(thread: lldb.SBThread, arch: Arch) -> Frame | None:
    """Frame 0 of ``thread`` as the core sees it (interrupted: pc is the next instruction)."""
    frame = thread.GetFrameAtIndex(0)
    if not frame.IsValid():
        return None
    pc = frame.GetPC()
    if pc == INVALID:
        return None
    return Frame(pc, frame_registers(frame, arch), interrupted=True)


def is_core(target: lldb.SBTarget) -> bool:
    process = target.GetProcess()
    if not process.IsValid():
        return False
    if hasattr(process, "IsLiveDebugSession"):
        return not process.IsLiveDebugSession()
    name = process.GetPluginName() if hasattr(process, "GetPluginName") else ""
    return "core" in (name or "").lower()


def is_live_remote(target: lldb.SBTarget) -> bool:
    """A process LLDB connected or attached to through a stub, that is still alive."""
    process = target.GetProcess()
    if not process.IsValid():
        return False
    name = (process.GetPluginName() if hasattr(process, "GetPluginName") else "") or ""
    if "remote" not in name.lower():
        return False
    if process.GetState() in (lldb.eStateInvalid, lldb.eStateUnloaded, lldb.eStateExited,
                              lldb.eStateDetached):
        return False
    # On Linux a local 'run' also talks gdb-remote (to lldb-server); it is
    # told apart by the host platform and the parent pid that lldb-server
    # reports. A stub on another platform, or one that reports no parent
    # (qemu-user, ...), is treated as remote.
    platform = target.GetPlatform()
    if not platform.IsValid() or (platform.GetName() or "") != "host":
        return True
    return not process.GetProcessInfo().GetParentProcessID()
