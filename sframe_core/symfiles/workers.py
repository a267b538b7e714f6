"""The FDEs of a symbol file's ``.debug_frame``, encoded in this process or
split between worker processes, with the analysis results kept across
builds attached.

Apart from ``frames`` (what the file's CFI holds) because a worker imports
this module alone: it opens the module itself, makes its share of the FDEs
and sends them back, and needs neither the cache nor the ELF writer. The
bytes are the same however the FDEs are split (docs/dwarf.md, "Cost").
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from ..base import settings
from ..base.errors import SFrameError
from ..base.files import file_identity
from ..format.elf import read_elf
from ..version import GENERATOR

if TYPE_CHECKING:
    from ..analysis.parts import Exits
    from ..dwarf.debug_frame import Encoded, Function
    from ..format.section import SFrameSection
    from .analysis_store import AnalysisStore, StoreKept

__all__ = ["Progress", "covers", "uncovered", "attach_store", "PARALLEL_MIN_FDES",
           "NATIVE_SPLIT_MIN_FDES", "SPLIT_ENV", "split_min", "default_jobs", "encode_fdes",
           "encode_in_workers"]

_T = TypeVar("_T")

# Told how far the FDEs are (done, of): a worker's progress, for the
# debugger deciding whether to wait for it (``jobs.Job.remaining``).
Progress = Callable[[int, int], None]
# FDEs between two reports in-process (parts report as they come back).
_PROGRESS_FDES = 64


def _reporting(items: Iterable[_T], total: int, progress: Progress | None) -> Iterator[_T]:
    """``items`` (one per FDE, in order), telling ``progress`` every ``_PROGRESS_FDES``."""
    if progress is None:
        yield from items
        return
    for done, item in enumerate(items, 1):
        yield item
        if done % _PROGRESS_FDES == 0 and done < total:
            progress(done, total)


def covers(ranges: list[tuple[int, int]], starts: list[int], address: int) -> bool:
    """Is ``address`` in one of ``ranges`` (sorted, ``starts`` their starts)?"""
    pos = bisect.bisect_right(starts, address) - 1
    return any(lo <= address < hi for lo, hi in ranges[max(pos - 8, 0):pos + 1])


def uncovered(funcs: Iterable[Function], covered: list[tuple[int, int]]) -> Iterable[Function]:
    """``funcs`` but those a compiler's own ``.debug_frame`` covers already."""
    if not covered:
        return funcs
    starts = [start for start, _ in covered]
    return (f for f in funcs if not covers(covered, starts, f.start))


def attach_store(section: SFrameSection, store_file: str | None) -> AnalysisStore | None:
    """The analysis results kept for the module (``analysis_store``), attached
    to ``section``; None when none are kept (turned off, a small module, no
    saved-register analysis)."""
    from . import analysis_store

    if store_file is None or not section.saves_registers \
            or section.num_fdes < analysis_store.MIN_FDES \
            or not analysis_store.enabled():
        return None
    from ..analysis.section import analysis_of

    store = analysis_store.AnalysisStore.load(store_file, f"sframe-gdb symbol file {GENERATOR}")
    analysis_of(section).store = store  # an AnalysisStore is a ResultStore
    return store


# Below this many FDEs a module is done in-process: forked workers (each
# with a cold decoder memo) would cost about what they save (figures:
# docs/dwarf.md, "Cost").
PARALLEL_MIN_FDES = 512
# The same where the C makes the FDEs (``native_fdes``): starting the
# workers, reading the module in each and sending the FDEs back costs about
# 0.1 s, and each worker learns the module's encodings again (``amd64.c``'s
# memo), against about 10 us per function made.
NATIVE_SPLIT_MIN_FDES = 16384
# The line a session splits from, if set (tests send a small program to
# workers with it, as ``jobs.FOREGROUND_ENV`` does for the worker itself).
SPLIT_ENV = "SFRAME_SPLIT_MIN_FDES"
# FDEs per part handed to a worker (at least; parts are jobs * 4 for balance).
_PART_MIN = 128


def split_min(section: SFrameSection) -> int:
    """From how many FDEs on ``section``'s symbol file is worth splitting
    between processes (``PARALLEL_MIN_FDES``, ``NATIVE_SPLIT_MIN_FDES``)."""
    from .native_fdes import serves

    given = settings.number(SPLIT_ENV)
    if given is not None:
        return int(given)
    return max(PARALLEL_MIN_FDES, NATIVE_SPLIT_MIN_FDES if serves(section) else 0)


def default_jobs() -> int:
    """Worker processes for a whole module: the CPUs this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _encode_part(path: str, fdes: range, covered: list[tuple[int, int]], saved: bool,
                 store_file: str | None = None,
                 ) -> tuple[list[Encoded], Exits, StoreKept] | None:
    """A worker's share: the FDEs of ``fdes`` encoded, with their branches out
    (``parts.Exits``) and the analysis results it used and made
    (``store_file``: the kept ones it reads), or None when one of them is
    corrupt (the parent then does the part itself, to raise what it says)."""
    try:
        section = _worker_section(path, saved)
        if section is None:
            return None
        store = attach_store(section, store_file)
        items, exits = encode_fdes(section, fdes, covered)
        return items, exits, (({}, {}, {}) if store is None else store.kept())
    except SFrameError:
        return None


# The module a worker process was last handed a part of, opened once for
# all its parts: (realpath, size, mtime, saved-register switch) -> section.
_worker_module: dict[tuple[bytes, bool], SFrameSection | None] = {}


def _worker_section(path: str, saved: bool) -> SFrameSection | None:
    """``path``'s section, read whole (``open(whole=True)``), for a worker's part."""
    from ..analysis.section import SectionAnalysis, analysis_of

    key = (file_identity(path), saved)
    if key not in _worker_module:
        _worker_module.clear()
        section = read_elf(path).open(whole=True, analyser=SectionAnalysis)
        if section is not None:
            section.saved_registers = saved
        _worker_module[key] = section
    section = _worker_module[key]
    if section is not None:
        analysis_of(section).store = None  # each part attaches the store it reads
    return section


def encode_fdes(section: SFrameSection, fdes: range, covered: list[tuple[int, int]],
                 progress: Progress | None = None) -> tuple[list[Encoded], Exits]:
    """The FDEs of ``fdes`` encoded, in order, and their branches out: made
    in C where it was built (``native_fdes``), the Python making those it
    declines, else all by the Python; the same bytes either way."""
    from ..analysis.parts import Collector
    from ..dwarf.debug_frame import encoded, functions
    from .native_fdes import fdes_maker

    collector = Collector(section)
    make = fdes_maker(section)
    if make is None:
        made = _reporting(functions(section, collector.rows, fdes=fdes), len(fdes), progress)
        return list(encoded(uncovered(made, covered), section.arch)), collector.exits
    items: list[Encoded] = []
    starts = [start for start, _ in covered]
    for lo in range(fdes.start, fdes.stop, _PROGRESS_FDES):
        chunk = range(lo, min(lo + _PROGRESS_FDES, fdes.stop))
        for index, answer in zip(chunk, make(chunk), strict=True):
            if answer is None:  # declined: the Python's, with its errors
                items.extend(encoded(uncovered(functions(section, collector.rows,
                                                         fdes=range(index, index + 1)), covered),
                                     section.arch))
                continue
            item, analysis = answer
            if analysis is not None:
                collector.add(section.get_fde(index), analysis)
            if item is not None and not (covered and covers(covered, starts, item.start)):
                items.append(item)
        if progress is not None and chunk.stop - fdes.start < len(fdes):
            progress(chunk.stop - fdes.start, len(fdes))
    return items, collector.exits


def encode_in_workers(path: str, section: SFrameSection, covered: list[tuple[int, int]],
                      jobs: int, store: AnalysisStore | None = None,
                      progress: Progress | None = None) -> tuple[list[Encoded], Exits]:
    """Every FDE of ``section`` encoded by worker processes, in FDE order, and
    their branches out (merged: the parent makes the parts entered by jumps
    again itself, ``_with_parts``, as in-process).

    Each worker opens the module itself and makes the rows of its FDEs as the
    in-process path does (the saved-register switch passed explicitly, since
    a spawned worker does not inherit it), so the bytes are the same; a part
    that fails, or workers that cannot start (no ``fork``/``spawn``, an
    embedded interpreter whose ``sys.executable`` is not Python), are done
    in-process, where a corrupt FDE raises the error it always raised (the
    first part in order that fails holds the first bad FDE).
    """
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from ..analysis.parts import Exits, merge

    count = section.num_fdes
    size = max(_PART_MIN, -(-count // (jobs * 4)))
    parts = [range(lo, min(lo + size, count)) for lo in range(0, count, size)]
    saved = section.saves_registers
    # fork when nothing else runs in this process (the command line): no
    # re-import per worker; else spawn, which is safe with threads.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() \
        and threading.active_count() == 1 else "spawn"
    results: list[tuple[list[Encoded], Exits, StoreKept] | None] = []
    store_file = None if store is None else store.path
    try:
        with ProcessPoolExecutor(min(jobs, len(parts)),
                                 mp_context=multiprocessing.get_context(method)) as pool:
            for result in pool.map(_encode_part, [path] * len(parts), parts,
                                   [covered] * len(parts), [saved] * len(parts),
                                   [store_file] * len(parts)):
                results.append(result)
                if progress is not None and len(results) < len(parts):
                    progress(parts[len(results) - 1].stop, count)
    except (OSError, BrokenProcessPool, RuntimeError, ImportError):
        results = [None] * len(parts)
    items: list[Encoded] = []
    exits = Exits({}, {}, {}, [])
    for part, result in zip(parts, results, strict=True):
        if result is None:
            result = (*encode_fdes(section, part, covered), ({}, {}, {}))
        items.extend(result[0])
        merge(exits, result[1])
        if store is not None:
            store.absorb(result[2])
    return items, exits
