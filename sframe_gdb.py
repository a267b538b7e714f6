"""sframe_gdb: let GDB unwind stacks from SFrame (``.sframe``) sections.

Load it with ``source /path/to/sframe_gdb.py`` (GDB 13 to 18); ``sframe
gdbinit`` prints the line for ``~/.gdbinit``.

This file is the GDB adapter of sframe-gdb and holds no format or unwind
logic: it turns GDB's registers, memory and objfiles into ``sframe_core``'s
types (``Frame``, ``Memory``, ``Module``) and the core's answer (a caller
frame, or a reason to stop) back into a ``gdb.UnwindInfo``.

Design, in the order GDB meets it:

* Loading. GDB embeds the system's Python, not the project's virtualenv, so
  the loader puts the directory of this file on ``sys.path`` (``sframe_core``
  sits beside it, in a checkout and in site-packages) and, when pyelftools
  cannot be imported, ``site.addsitedir``s the usual candidates (virtualenv,
  the checkout's ``.venv``, user and site directories). When that fails it
  prints one line saying what to install, for which Python.

* Objfiles. GDB's Python API exposes no section addresses, so the runtime
  address of each objfile's ``.sframe`` and code sections comes from ``maint
  info sections -all-objects``, parsed in event handlers (``new_objfile``,
  ``free_objfile``, ``clear_objfiles``, stops, ``before_prompt``), never inside
  the unwinder, which may not call ``gdb.execute``. The load bias is that
  address minus the section's ``sh_addr`` on disk (debugger-apis.md A2: never
  from ``info sharedlibrary``). ELF headers and SFrame tables are read only
  when a PC inside the objfile is first unwound through, then cached in a
  ``sframe_core.modules.Module`` per objfile. A file whose section headers
  were stripped shows GDB no sections: its ``PT_GNU_SFRAME`` segment is
  placed by ``info proc mappings`` instead.

* The hot path. GDB calls the unwinder once per frame of every backtrace;
  what a walk reuses (the section table, a page cache of target memory)
  lives in a ``_Walk`` made at level 0, and register handles and frame-id
  forms are found once. This keeps ``bt`` as fast as GDB's own DWARF
  unwinder (``bench/bench_gdb.py``).

* The unwinder, a global ``gdb.unwinder.Unwinder`` named ``sframe``. It claims
  a frame when its PC lies in an objfile whose ``.sframe`` covers it and, in
  ``auto`` mode, no ``.eh_frame``/``.debug_frame`` FDE does. The caller gets
  ``pc``, ``sp``, the frame pointer and whatever else the row gives; other
  registers are left out and read ``<not saved>``. The frame id is
  ``(CFA, function start)``, like GDB's DWARF unwinder.

* When the rows cannot explain the stack (``sframe_core.unwind.Stop``), the
  frame is still claimed, without a saved PC and with an id inner to its
  callee's: GDB then ends the backtrace with "Backtrace stopped: previous
  frame inner to this frame (corrupt stack?)" instead of letting its
  prologue analyzer invent frames (which, in a binary without ``.eh_frame``,
  it does). A PC no FDE covers is left to GDB, except amd64's ``_start``
  (the entry function, rbp 0), whose callers GDB would invent.

* Errors. Anything raised inside the unwinder is caught, reported once per
  objfile as ``warning: sframe: PATH: ...``, and the frame is declined.
"""

from __future__ import annotations

import bisect
import glob
import os
import re
import site
import sys

import gdb  # type: ignore[import-not-found]
import gdb.unwinder  # type: ignore[import-not-found]

__all__ = ["LOADED_LINE", "SFrameUnwinder"]

# Printed once the plugin is ready: tests wait for it, users see what loaded.
LOADED_LINE = "sframe: SFrame unwinder ready (help sframe)"

_HERE = os.path.dirname(os.path.realpath(os.path.abspath(__file__)))
_PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"


# -- loading ------------------------------------------------------------------


def _site_candidates() -> list[str]:
    """Site-packages directories that may hold pyelftools, best first."""
    found: list[str] = []
    venvs = [os.environ.get("VIRTUAL_ENV") or "", os.path.join(_HERE, ".venv"),
             os.path.join(os.path.dirname(_HERE), ".venv")]
    for venv in venvs:
        if not venv:
            continue
        # The matching Python first; pyelftools is pure Python, so another 3.x also does.
        found += glob.glob(os.path.join(venv, "lib", f"python{_PYVER}", "site-packages"))
        found += sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    try:
        found.append(site.getusersitepackages())
    except Exception:  # noqa: BLE001 - site is optional in embedded Pythons
        pass
    try:
        found += site.getsitepackages()
    except Exception:  # noqa: BLE001
        pass
    found.append(_HERE)  # pip-installed: .pth files of an editable install live here
    seen: list[str] = []
    for path in found:
        if path and os.path.isdir(path) and path not in seen:
            seen.append(path)
    return seen


def _setup_imports() -> str | None:
    """Make sframe_core and pyelftools importable; a one-line problem, or None."""
    if os.path.isdir(os.path.join(_HERE, "sframe_core")) and _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    try:
        import elftools  # noqa: F401
    except ImportError:
        for path in _site_candidates():
            site.addsitedir(path)
            try:
                import elftools  # noqa: F401,F811
                break
            except ImportError:
                continue
        else:
            return ("cannot import pyelftools; run: python3 -m pip install --user pyelftools "
                    f"(for the Python gdb embeds, {_PYVER}: {sys.executable or 'python3'})")
    try:
        import sframe_core  # noqa: F401
    except ImportError as exc:
        return (f"cannot import sframe_core ({exc}); keep sframe_gdb.py next to the "
                "sframe_core directory, or pip install sframe-gdb")
    return None


_PROBLEM = _setup_imports()

if _PROBLEM is None:
    from sframe_core.abi import Arch
    from sframe_core.describe import lookup_text
    from sframe_core.errors import SFrameError
    from sframe_core.memory import PageCache
    from sframe_core.modules import Mapping, Module, load_bias
    from sframe_core.unwind import DEFAULT_PAC_MASK, StopReason, caller_registers, stop_without_row


# -- small helpers --------------------------------------------------------------


def _warn(text: str) -> None:
    gdb.write(f"warning: sframe: {text}\n", gdb.STDERR)


class _FrameId:
    """A frame id as GDB reads it: any object with ``sp`` and ``pc`` will do
    (GDB 13 has no gdb.unwinder.FrameId; this one is also cheaper to build)."""

    __slots__ = ("sp", "pc")

    def __init__(self, sp: object, pc: object) -> None:
        self.sp = sp
        self.pc = pc


def _memory_reader(inferior):  # type: ignore[no-untyped-def]
    """``read(address, size)`` over an inferior (live or core); None where unreadable."""
    read_memory = inferior.read_memory

    def read(address: int, size: int) -> bytes | None:
        try:
            return bytes(read_memory(address, size))
        except (gdb.MemoryError, gdb.error, ValueError, OverflowError):
            return None
    return read


# The instructions of the Linux signal-return trampolines, as GDB's own
# sigtramp sniffers match them (amd64-linux-tdep.c, aarch64-linux-tdep.c).
_SIGTRAMPS = {
    "i386:x86-64": b"\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05",  # mov $15,%rax; syscall
    "aarch64": b"\x68\x11\x80\xd2\x01\x00\x00\xd4",  # mov x8,#139; svc #0
}


# GDB architectures whose prologue analyzer has no outermost rule: from a
# _start without unwind information it reads callers off the stack. (The
# aarch64 one stops at x29 = 0 by itself, and is left to do so.)
_INVENTS_PAST_START = frozenset({"i386:x86-64"})


# -- the section table GDB reports --------------------------------------------

_HEADER = re.compile(r"^(Exec file|Object file|Core file): [`'](.*)', file type")
# A line of `info proc mappings`: start, end, size, offset, [perms,] objfile.
_MAPPING = re.compile(r"^\s*(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)"
                      r"(?:\s+[-r][-w][-x][-ps])?\s+(/.*)$", re.M)
_SECTION = re.compile(r"^\s*\[\s*\d+\]\s+(0x[0-9a-fA-F]+)->(0x[0-9a-fA-F]+) at 0x[0-9a-fA-F]+: "
                      r"(\S+)(.*)$")


class _Entry:
    """One objfile with a ``.sframe`` section, at the addresses GDB reports."""

    def __init__(self, path: str, sframe_address: int) -> None:
        self.path = path
        self.sframe_address = sframe_address  # runtime address of .sframe
        self.code: list[tuple[int, int]] = []
        self.has_eh_frame = False
        self.has_debug_frame = False
        self.module: Module | None = None
        self.failed = False  # unreadable or corrupt: reported, then ignored
        self.section = None  # the SFrameSection, once opened
        self._start: tuple[int, int] | None | bool = False  # not looked for yet
        self.regs: _Regs | None = None  # this objfile's register handles

    def get_module(self, plugin: SFrameUnwinder) -> Module | None:
        if self.module is None and not self.failed:
            from sframe_core.elf import read_elf
            try:
                info = read_elf(self.path)
                if info.sframe_address is None:
                    raise SFrameError("no .sframe section in the file on disk")
            except SFrameError as exc:
                self.failed = True
                plugin.report(self.path, str(exc))
                return None
            self.module = Module(self.path, self.sframe_address - info.sframe_address,
                                 self.code or [(0, 0)], sources=("sframe",),
                                 on_error=lambda m, exc: plugin.report(m.path, str(exc)),
                                 elf=info)
        return self.module

    def sframe(self, plugin: SFrameUnwinder):  # type: ignore[no-untyped-def]
        module = self.get_module(plugin)
        if module is None:
            return None
        section = module.sframe
        if section is None or module.error is not None:
            self.failed = True
            return None
        self.section = section
        return section

    def start_function(self) -> tuple[int, int] | None:
        """The span of ``_start`` when this is an executable without an FDE for it."""
        if self._start is False:
            self._start = self.module.entry_function() if self.module is not None else None
        return self._start  # type: ignore[return-value]

    def covered_by_cfi(self, plugin: SFrameUnwinder, pc: int) -> bool:
        """Does an ``.eh_frame``/``.debug_frame`` FDE of this file cover ``pc``?"""
        if not (self.has_eh_frame or self.has_debug_frame):
            return False
        module = self.get_module(plugin)
        if module is None:
            return True  # cannot tell: leave the frame to GDB
        table = module.cfi
        if table is None:
            return module.error is not None or self.has_eh_frame
        return bool(table.has_fde(pc))


class _Table:
    """PC -> ``_Entry`` for one program space, parsed from GDB's section list."""

    def __init__(self, entries: list[_Entry], code: list[tuple[int, int]] | None = None) -> None:
        self.entries = entries
        # The code sections of every objfile (with SFrame or not, the vdso
        # included): a return address outside them ends the backtrace.
        self.code = sorted(code or [])
        self._code_starts = [lo for lo, _ in self.code]
        spans = sorted((lo, hi, e) for e in entries for lo, hi in e.code)
        self._starts = [s[0] for s in spans]
        self._spans = spans

    def find(self, pc: int) -> _Entry | None:
        # Code sections of different objfiles do not overlap.
        i = bisect.bisect_right(self._starts, pc) - 1
        if i >= 0:
            lo, hi, entry = self._spans[i]
            if lo <= pc < hi:
                return entry
        return None

    def is_code(self, pc: int) -> bool:
        i = bisect.bisect_right(self._code_starts, pc) - 1
        return i >= 0 and self.code[i][0] <= pc < self.code[i][1]

    @classmethod
    def parse(cls, text: str, wanted: set[str], old: dict[tuple[str, int], _Entry]) -> _Table:
        entries: list[_Entry] = []
        code: list[tuple[int, int]] = []
        path = None
        sections: list[tuple[int, int, str, str]] = []

        def flush() -> None:
            if path is None:
                return
            code.extend((lo, hi) for lo, hi, _, flags in sections
                        if "CODE" in flags and "HAS_CONTENTS" in flags and hi > lo)
            if path not in wanted:
                return
            sframe = [s for s in sections if s[2] == ".sframe" and "HAS_CONTENTS" in s[3]]
            if not sframe:
                return
            start = sframe[0][0]
            entry = old.get((path, start)) or _Entry(path, start)
            entry.code = [(lo, hi) for lo, hi, _, flags in sections if "CODE" in flags and hi > lo]
            entry.has_eh_frame = any(s[2] == ".eh_frame" and s[1] > s[0] for s in sections)
            entry.has_debug_frame = any(s[2] == ".debug_frame" and s[1] > s[0] for s in sections)
            entries.append(entry)

        for line in text.splitlines():
            m = _HEADER.match(line)
            if m:
                flush()
                path = m.group(2) if m.group(1) != "Core file" else None
                sections = []
                continue
            m = _SECTION.match(line)
            if m and path is not None:
                sections.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4)))
        flush()
        return cls(entries, code)


# -- the unwinder ----------------------------------------------------------------

MODES = ("auto", "always", "off")
_SIGNED_LIMIT = 1 << 63
_HAS_PC = hasattr(gdb.PendingFrame, "pc")  # GDB 14+: the PC without a gdb.Value
# Stops that are the normal end of a stack, not a sign of corruption.
_ENDS = frozenset((StopReason.OUTERMOST, StopReason.RA_ZERO)) if _PROBLEM is None else frozenset()


class _Regs:
    """How this GDB names one SFrame ABI's registers, found once per architecture.

    Register descriptors (GDB 11+) spare GDB a name lookup per read; plain
    names work everywhere.
    """

    def __init__(self, gdb_arch, arch: Arch) -> None:  # type: ignore[no-untyped-def]
        self.u64 = gdb_arch.integer_type(64, False)
        try:
            descriptors = {r.name: r for r in gdb_arch.registers()}
        except Exception:  # noqa: BLE001
            descriptors = {}
        self.has_pauth = "pauth_cmask" in descriptors
        handles: dict[int, object] = {n: descriptors.get(name, name) for n, name in arch.reg_names}
        handles[arch.sp] = descriptors.get(arch.reg_name(arch.sp), "sp")
        self.handles = handles
        self.pc = descriptors.get("rip" if arch.name == "amd64" else "pc", "pc")
        self.arch = arch
        # (CFA base register, interrupted) -> ((DWARF number, handle), ...)
        self.wanted: dict[tuple[object, bool], tuple[tuple[int, object], ...]] = {}

    def handle(self, regno: int) -> object:
        return self.handles.get(regno) or self.arch.reg_name(regno)

    def value(self, x: int):  # type: ignore[no-untyped-def]
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


class _Walk:
    """What one backtrace reuses from frame to frame.

    GDB unwinds a stack from level 0 up, and flushes its frame cache (so
    starts again at level 0) whenever the target runs, memory or registers
    are written, or another thread is selected; a walk therefore starts
    at level 0 and its page cache cannot go stale under it.
    """

    __slots__ = ("table", "memory", "after_sigtramp")

    def __init__(self, table: _Table | None) -> None:
        self.table = table
        self.memory = PageCache(_memory_reader(gdb.selected_inferior()))
        # Levels whose inner frame is a signal trampoline.
        self.after_sigtramp: set[int] = set()


class SFrameUnwinder(gdb.unwinder.Unwinder):
    """Unwinds frames whose PC only SFrame describes."""

    def __init__(self) -> None:
        super().__init__("sframe")
        self.mode = "auto"
        self._tables: dict[object, _Table] = {}  # progspace -> table
        self._dirty: set[object] = set()  # progspaces whose table must be re-read
        self._reported: set[str] = set()
        self._busy = False
        self._walk: _Walk | None = None
        self._regs: dict[tuple[str, str], _Regs] = {}
        self._pc_handles: dict[object, object] = {}
        self._no_segment_sframe: set[tuple[str, int]] = set()  # (path, mtime): no PT_GNU_SFRAME
        self._int_ids = True  # GDB 14+ takes plain ints in frame ids; 13 wants gdb.Values

    # Tables ---------------------------------------------------------------

    def report(self, path: str, text: str) -> None:
        """One warning per objfile, however many frames hit the problem."""
        if path in self._reported:
            return
        self._reported.add(path)
        if text.startswith(path):
            text = text[len(path):].lstrip(": ")
        _warn(f"{path}: {text}")

    def mark_dirty(self, progspace: object = None) -> None:
        if progspace is None:
            self._dirty.update(self._tables)
            self._dirty.add(gdb.current_progspace())
        else:
            self._dirty.add(progspace)

    def forget(self, progspace: object) -> None:
        self._tables.pop(progspace, None)
        self._dirty.discard(progspace)

    def refresh(self, force: bool = False) -> None:
        """Re-read the current program space's section table if it changed.

        Runs ``maint info sections``: never call this from the unwinder.
        """
        if self._busy:
            return
        progspace = gdb.current_progspace()
        if not force and progspace in self._tables and progspace not in self._dirty:
            return
        self._dirty.discard(progspace)
        wanted = set()
        for objfile in progspace.objfiles():
            if objfile.owner is not None or not getattr(objfile, "is_file", True):
                continue  # separate debug files, the vdso
            wanted.add(objfile.filename)
        old = {(e.path, e.sframe_address): e for e in self.tables_entries(progspace)}
        if not wanted:
            self._tables[progspace] = _Table([])
            return
        try:
            text = gdb.execute("maint info sections -all-objects .sframe .text .eh_frame "
                               ".debug_frame CODE", to_string=True)
        except gdb.error as exc:
            _warn(f"cannot read the section table: {exc}")
            return
        table = _Table.parse(text, wanted, old)
        found = {e.path for e in table.entries}
        extra = self._segment_entries(wanted - found, old)
        if extra:
            table = _Table(table.entries + extra,
                           table.code + [span for e in extra for span in e.code])
        self._tables[progspace] = table

    def _segment_entries(self, paths: set[str], old: dict[tuple[str, int], _Entry]
                         ) -> list[_Entry]:
        """Entries for objfiles GDB shows no sections of (section headers
        stripped) whose file has a PT_GNU_SFRAME segment, placed by the
        process's mappings (``info proc mappings``: live processes and cores)."""
        from sframe_core.elf import read_elf
        candidates = {}
        for path in paths:
            try:
                key = (path, os.stat(path).st_mtime_ns)
            except OSError:
                continue
            if key in self._no_segment_sframe:
                continue
            try:
                info = read_elf(path)
            except SFrameError:
                info = None
            if info is None or not info.from_segment or info.sframe_address is None:
                self._no_segment_sframe.add(key)
                continue
            candidates[path] = info
        if not candidates:
            return []
        try:
            text = gdb.execute("info proc mappings", to_string=True)
        except gdb.error:
            return []  # no process yet, or a target without mappings
        mappings = [Mapping(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16),
                            m.group(4).strip()) for m in _MAPPING.finditer(text)]
        entries = []
        for path, info in candidates.items():
            bias = load_bias(info, (m for m in mappings if m.path == path))
            if bias is None:
                continue
            start = info.sframe_address + bias
            entry = old.get((path, start)) or _Entry(path, start)
            entry.code = [(seg.vaddr + bias, seg.vaddr + seg.memsz + bias)
                          for seg in info.segments if seg.executable and seg.memsz]
            # Without section headers GDB reads no .eh_frame either.
            entry.has_eh_frame = entry.has_debug_frame = False
            entries.append(entry)
        return entries

    def tables_entries(self, progspace: object) -> list[_Entry]:
        table = self._tables.get(progspace)
        return table.entries if table else []

    def table(self) -> _Table | None:
        return self._tables.get(gdb.current_progspace())

    # Unwinding --------------------------------------------------------------

    def end_walk(self, event: object = None) -> None:
        """Forget the walk's cached memory (the target ran or was written)."""
        self._walk = None

    def _regs_for(self, entry: _Entry, pending_frame, arch: Arch) -> _Regs:  # type: ignore[no-untyped-def]
        gdb_arch = pending_frame.architecture()
        key = (gdb_arch.name(), arch.name)
        regs = self._regs.get(key)
        if regs is None:
            regs = self._regs[key] = _Regs(gdb_arch, arch)
            # GDB keeps one gdb.Architecture per gdbarch: a cheap key for
            # the PC's register handle (GDB 13 has no PendingFrame.pc()).
            self._pc_handles[gdb_arch] = regs.pc
        entry.regs = regs
        return regs

    def __call__(self, pending_frame):  # type: ignore[no-untyped-def]
        if self.mode == "off" or self._busy:
            return None
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

    _last_entry: _Entry | None = None

    def _unwind(self, pending_frame):  # type: ignore[no-untyped-def]
        # The hot path of every backtrace: GDB calls it once per frame.
        self._last_entry = None
        level = pending_frame.level()
        walk = self._walk
        if level == 0 or walk is None:
            walk = self._walk = _Walk(self.table())
        pc = pending_frame.pc() if _HAS_PC else int(pending_frame.read_register(
            self._pc_handles.get(pending_frame.architecture(), "pc")))
        table = walk.table
        entry = table.find(pc) if table is not None else None
        if entry is None or entry.failed:
            self._note_sigtramp(pending_frame, walk, pc, level)
            return None
        self._last_entry = entry
        interrupted = level == 0 or level in walk.after_sigtramp
        lookup_pc = pc if interrupted else pc - 1
        if self.mode == "auto" and entry.covered_by_cfi(self, lookup_pc):
            return None
        section = entry.section or entry.sframe(self)
        if section is None:
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
            start = entry.start_function()
            if (start is None or not start[0] <= lookup_pc < start[1]
                    or pending_frame.architecture().name() not in _INVENTS_PAST_START):
                return None
            return self._outermost(pending_frame, pc, arch, regs_info)
        regs: dict[int, int] = {}
        read_register = pending_frame.read_register
        cfa_rule = row.cfa
        key = (cfa_rule.reg if cfa_rule is not None else None, interrupted)
        for regno, handle in regs_info.wanted.get(key) or regs_info.find_wanted(key):
            try:
                regs[regno] = int(read_register(handle))
            except (gdb.error, ValueError):
                pass  # not saved by the inner frame's unwinder: unknown here
        pac_mask = DEFAULT_PAC_MASK
        if row.ra_signed and regs_info.has_pauth:
            try:
                pac_mask = int(read_register("pauth_cmask"))
            except (gdb.error, ValueError):
                pass
        result = caller_registers(row, pc, regs, interrupted, walk.memory, arch, pac_mask)
        func_start = row.func_start
        if type(result) is not tuple:
            corrupt = result.reason not in _ENDS  # type: ignore[union-attr]
            return self._stop(pending_frame, regs.get(arch.sp), func_start, regs_info, corrupt)
        cfa, caller_pc, caller_regs = result
        caller_interrupted = row.signal
        if not table.is_code(caller_pc if caller_interrupted else caller_pc - 1):  # type: ignore[union-attr]
            # A return address outside all code: the stack is corrupt (or
            # the code was generated at run time).
            return self._stop(pending_frame, regs.get(arch.sp), func_start, regs_info, True)
        info = self._unwind_info(pending_frame, cfa, func_start, regs_info)
        value = regs_info.value
        info.add_saved_register(regs_info.pc, value(caller_pc))
        handle = regs_info.handle
        for regno, val in caller_regs.items():
            try:
                info.add_saved_register(handle(regno), value(val))
            except ValueError:
                pass  # a register this GDB architecture does not have
        if caller_interrupted:
            walk.after_sigtramp.add(level + 1)
        return info

    def _outermost(self, pending_frame, pc: int, arch: Arch, regs_info: _Regs):  # type: ignore[no-untyped-def]
        """Claim a frame no row covers when the core says it is the outermost."""
        try:
            fp = int(pending_frame.read_register(regs_info.handle(arch.fp)))
        except (gdb.error, ValueError):
            return None
        if stop_without_row(pc, {arch.fp: fp}, arch).reason is not StopReason.OUTERMOST:
            return None
        try:
            sp: int | None = int(pending_frame.read_register(regs_info.handle(arch.sp)))
        except (gdb.error, ValueError):
            sp = None
        return self._stop(pending_frame, sp, pc, regs_info, False)

    def _stop(self, pending_frame, sp: int | None, func_start: int, regs_info: _Regs,  # type: ignore[no-untyped-def]
              corrupt: bool):
        """Claim a frame the rows cannot unwind, so that GDB ends the
        backtrace with it rather than let a prologue analyzer guess a caller.

        The frame gets no saved PC. Where the stack looks corrupt, its id
        also lies just below the SP, that is inner to the frame it was
        called from: GDB (13 and later) then ends the backtrace after it with
        "Backtrace stopped: previous frame inner to this frame (corrupt
        stack?)". Where the rows say this is the outermost frame, there is
        no such line (GDB 15+ still print "frame did not save the PC").
        """
        if sp is None:
            sp = 1
        return self._unwind_info(pending_frame, sp - 1 if corrupt else sp, func_start, regs_info)

    def _unwind_info(self, pending_frame, sp: int, pc: int, regs_info: _Regs):  # type: ignore[no-untyped-def]
        """``create_unwind_info`` with a (CFA, function start) frame id."""
        if self._int_ids:
            try:
                return pending_frame.create_unwind_info(_FrameId(sp, pc))
            except ValueError:
                self._int_ids = False  # GDB 13: "frame_id should have 'sp' attribute."
        return pending_frame.create_unwind_info(_FrameId(regs_info.value(sp), regs_info.value(pc)))

    def _note_sigtramp(self, pending_frame, walk: _Walk, pc: int, level: int) -> None:  # type: ignore[no-untyped-def]
        """Remember that the frame above ``level`` was interrupted by a signal.

        GDB's own sigtramp unwinder handles the trampoline frame (we decline
        it); its caller's PC is the interrupted instruction, not a return
        address, so it is looked up at ``pc``, not ``pc - 1``.
        """
        pattern = _SIGTRAMPS.get(pending_frame.architecture().name())
        if pattern is None:
            return
        if walk.memory.read(pc, len(pattern)) == pattern:
            walk.after_sigtramp.add(level + 1)


# -- commands ----------------------------------------------------------------------


def _parse_address(arg: str) -> int:
    arg = arg.strip()
    if not arg:
        raise gdb.GdbError("an address is required, e.g. `info sframe $pc'")
    try:
        value = gdb.parse_and_eval(arg)
        if value.type.code == gdb.TYPE_CODE_FUNC:
            value = value.address
        return int(value.cast(gdb.lookup_type("unsigned long")))
    except gdb.error as exc:
        raise gdb.GdbError(str(exc)) from None


def _lookup_lines(plugin: SFrameUnwinder, address: int) -> list[str]:
    plugin.refresh()
    table = plugin.table()
    entry = table.find(address) if table is not None else None
    if entry is None:
        raise gdb.GdbError(f"sframe: no objfile with a .sframe section covers 0x{address:x}")
    section = entry.sframe(plugin)
    if section is None:
        raise gdb.GdbError(f"sframe: {entry.path}: .sframe unusable (see the warning above)")
    try:
        hit = section.lookup(address)
    except SFrameError as exc:
        raise gdb.GdbError(f"sframe: {entry.path}: {exc}") from None
    head = f"{entry.path}: SFrame v{section.version}"
    if hit is None:
        fde = section.find_fde(address)
        if fde is None:
            return [head, f"address 0x{address:x} is not covered by any FDE"]
        return [head, f"address 0x{address:x} is in FDE [{fde.index}] but before its first FRE"]
    lines = lookup_text(section, hit, pc=address)
    if entry.has_eh_frame and entry.covered_by_cfi(plugin, address):
        lines.append(f"(.eh_frame also covers this address: the sframe unwinder "
                     f"{'uses SFrame here' if plugin.mode == 'always' else 'leaves it to gdb'} "
                     f"in mode {plugin.mode})")
    return [head] + lines


def _register_commands(plugin: SFrameUnwinder) -> None:
    class SFramePrefix(gdb.Command):
        """Inspect and control the SFrame unwinder.

Usage: sframe lookup ADDRESS
       info sframe [ADDRESS]
       set sframe mode auto|always|off
       show sframe mode

The unwinder is a global Python unwinder named `sframe':
`info unwinder' lists it and `disable unwinder global sframe' turns it off.
In mode `auto' it unwinds frames whose PC lies in an objfile with a .sframe
section and no .eh_frame/.debug_frame FDE covering that PC; `always' uses
SFrame wherever it covers the PC; `off' never does.
Registers SFrame does not describe (everything but the PC, the stack pointer
and the frame pointer) show as <not saved> in caller frames."""

        def __init__(self) -> None:
            super().__init__("sframe", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, True)

    class SFrameLookup(gdb.Command):
        """Show the SFrame FDE and row that apply at an address.

Usage: sframe lookup ADDRESS
ADDRESS is any expression, e.g. $pc, f4, 0x5555555552a0.  The words are those
of the shell command `sframe lookup'."""

        def __init__(self) -> None:
            super().__init__("sframe lookup", gdb.COMMAND_STACK, gdb.COMPLETE_EXPRESSION)

        def invoke(self, arg: str, from_tty: bool) -> None:
            for line in _lookup_lines(plugin, _parse_address(arg)):
                gdb.write(line + "\n")

    class InfoSFrame(gdb.Command):
        """List objfiles with SFrame sections, or show the row at an address.

Usage: info sframe [ADDRESS]
Without ADDRESS: each objfile with a .sframe section, with its SFrame version,
ABI, number of FDEs, address range, whether it also has .eh_frame, and whether
the unwinder uses it in the current mode.  With ADDRESS: like `sframe lookup'."""

        def __init__(self) -> None:
            super().__init__("info sframe", gdb.COMMAND_STATUS, gdb.COMPLETE_EXPRESSION)

        def invoke(self, arg: str, from_tty: bool) -> None:
            if arg.strip():
                for line in _lookup_lines(plugin, _parse_address(arg)):
                    gdb.write(line + "\n")
                return
            plugin.refresh()
            entries = plugin.tables_entries(gdb.current_progspace())
            if not entries:
                gdb.write("No objfile has a .sframe section.\n")
                return
            gdb.write(f"sframe unwinder: mode {plugin.mode}, "
                      f"{'enabled' if plugin.enabled else 'disabled'}\n")
            for entry in entries:
                section = entry.sframe(plugin)
                if section is None:
                    gdb.write(f"{entry.path}: .sframe unusable\n")
                    continue
                lo = min((lo for lo, _ in entry.code), default=0)
                hi = max((hi for _, hi in entry.code), default=0)
                cfi = [n for n, f in ((".eh_frame", entry.has_eh_frame),
                                      (".debug_frame", entry.has_debug_frame)) if f]
                if plugin.mode == "off":
                    used = "not used (mode off)"
                elif plugin.mode == "always":
                    used = "used"
                elif cfi:
                    used = f"used only where {'/'.join(cfi)} has no FDE"
                else:
                    used = "used"
                gdb.write(f"{entry.path}\n"
                          f"  SFrame v{section.version}, ABI {section.arch.name}, "
                          f"{section.num_fdes} FDEs, code 0x{lo:x}-0x{hi:x}, "
                          f".sframe at 0x{entry.sframe_address:x}\n"
                          f"  {'has ' + ' and '.join(cfi) if cfi else 'no .eh_frame'}; {used}\n")

    class SetSFrame(gdb.Command):
        """Settings of the SFrame unwinder.

Usage: set sframe mode auto|always|off"""

        def __init__(self) -> None:
            super().__init__("set sframe", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)

    class ShowSFrame(gdb.Command):
        """Settings of the SFrame unwinder.

Usage: show sframe mode"""

        def __init__(self) -> None:
            super().__init__("show sframe", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)

    class ModeParameter(gdb.Parameter):
        """When the SFrame unwinder claims frames.

auto:   where the objfile's .sframe covers the PC and no .eh_frame or
        .debug_frame FDE does (the default).
always: wherever .sframe covers the PC, even where DWARF CFI exists.
off:    never (like `disable unwinder global sframe')."""

        set_doc = "Set when the SFrame unwinder claims frames."
        show_doc = "Show when the SFrame unwinder claims frames."

        def __init__(self) -> None:
            super().__init__("sframe mode", gdb.COMMAND_STACK, gdb.PARAM_ENUM, list(MODES))
            self.value = plugin.mode

        def get_set_string(self) -> str:
            if self.value != plugin.mode:
                plugin.mode = self.value
                gdb.invalidate_cached_frames()
            return ""

        def get_show_string(self, svalue: str) -> str:
            return f"The SFrame unwinder mode is \"{svalue}\"."

    SFramePrefix()
    SFrameLookup()
    InfoSFrame()
    SetSFrame()
    ShowSFrame()
    ModeParameter()


# -- events ---------------------------------------------------------------------------


def _connect(plugin: SFrameUnwinder) -> None:
    events = gdb.events

    def on_new_objfile(event) -> None:  # type: ignore[no-untyped-def]
        objfile = event.new_objfile
        plugin.mark_dirty(objfile.progspace)
        # Refresh now: GDB may unwind (stop at a breakpoint, `finish') before
        # the next prompt, and the unwinder may not read the table itself.
        if objfile.progspace == gdb.current_progspace():
            try:
                plugin.refresh()
            except Exception as exc:  # noqa: BLE001
                _warn(f"cannot read the section table: {exc}")

    def on_free_objfile(event) -> None:  # type: ignore[no-untyped-def]
        plugin.mark_dirty(event.objfile.progspace)

    def on_clear_objfiles(event) -> None:  # type: ignore[no-untyped-def]
        plugin.mark_dirty(event.progspace)

    def on_free_progspace(event) -> None:  # type: ignore[no-untyped-def]
        plugin.forget(event.progspace)

    def on_anything(event=None) -> None:  # type: ignore[no-untyped-def]
        plugin.mark_dirty(None)

    def on_stop(event=None) -> None:  # type: ignore[no-untyped-def]
        plugin.end_walk()
        try:
            plugin.refresh()
        except Exception as exc:  # noqa: BLE001
            _warn(f"cannot read the section table: {exc}")

    handlers = [
        ("new_objfile", on_new_objfile),
        ("free_objfile", on_free_objfile),
        ("clear_objfiles", on_clear_objfiles),
        ("free_progspace", on_free_progspace),  # GDB 14+
        ("new_progspace", on_anything),  # GDB 14+
        ("executable_changed", on_anything),  # GDB 14+
        ("corefile_changed", on_anything),  # GDB 18
        ("exited", on_anything),
        ("cont", plugin.end_walk),
        ("memory_changed", plugin.end_walk),
        ("register_changed", plugin.end_walk),
        ("stop", on_stop),
        ("before_prompt", on_stop),
    ]
    old = getattr(gdb, "_sframe_gdb_handlers", [])
    for name, handler in old:
        try:
            getattr(events, name).disconnect(handler)
        except Exception:  # noqa: BLE001 - already gone
            pass
    connected = []
    for name, handler in handlers:
        registry = getattr(events, name, None)
        if registry is not None:
            registry.connect(handler)
            connected.append((name, handler))
    gdb._sframe_gdb_handlers = connected


def _register() -> SFrameUnwinder | None:
    if _PROBLEM is not None:
        _warn(_PROBLEM)
        return None
    previous = getattr(gdb, "_sframe_gdb_plugin", None)
    plugin = SFrameUnwinder()
    if previous is not None:
        plugin.mode = previous.mode
    gdb.unwinder.register_unwinder(None, plugin, replace=True)
    gdb._sframe_gdb_plugin = plugin
    _register_commands(plugin)
    _connect(plugin)
    plugin.mark_dirty(None)
    try:
        plugin.refresh()
    except Exception:  # noqa: BLE001 - no program yet
        pass
    gdb.write(LOADED_LINE + "\n")
    return plugin


_PLUGIN = _register()
