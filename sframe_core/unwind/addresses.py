"""What is mapped where, and whether a value can be a return address.

A corrupt stack shows itself in the value the rows say is the return
address: a pointer into the stack or the heap, into nothing, a non-canonical
number, a small integer. Rows cannot tell (they only say where the RA is
stored); the address space can. Every front end asks ``return_address_problem``
with whatever it knows of the target's memory (a core's segments, a process's
``/proc/PID/maps``, a debugger's regions and code sections) and ends the walk
with its answer, instead of showing one more frame that is not one.

The check is only ever made for *return addresses*: an interrupted frame's PC
(frame 0, the caller of a signal trampoline) is where the CPU was, whatever
that is, and is shown as it is.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..base.abi import Arch

__all__ = ["Region", "AddressMap", "return_address_problem", "regions_from_maps", "name_stacks",
           "LOWEST_CODE"]

# No Linux process maps code below the first page (vm.mmap_min_addr is 4096
# at the very least): a smaller "return address" is a small integer.
LOWEST_CODE = 4096


class Region(NamedTuple):
    """``[start, end)`` of the address space; ``executable`` None where not known
    (a file a core maps, whose permissions the core does not record).
    ``mapped`` is False for a gap a debugger reports as such."""

    start: int
    end: int
    executable: bool | None
    name: str = ""
    mapped: bool = True


class AddressMap:
    """The target's regions, for deciding whether an address holds code.

    :param regions: what is known to be mapped. Where regions overlap, one
        that is executable (or not known not to be) wins: a debugger's
        module sections describe code that a core left out.
    :param complete: the regions are everything that is mapped (a core's
        segments, ``/proc/PID/maps``), so an address in none is in no mapping.
    :param find: asked for an address no region covers (a debugger that
        looks regions up one at a time): the region, one with ``mapped``
        False for a gap, or None when it cannot tell; remembered per page.
    """

    def __init__(self, regions: Iterable[Region] = (), *, complete: bool = False,
                 find: Callable[[int], Region | None] | None = None) -> None:
        self._regions: list[Region] = sorted((r for r in regions if r.end > r.start),
                                             key=lambda r: r.start)
        self._starts = [r.start for r in self._regions]
        # Regions may overlap: the longest one seen so far bounds how far back
        # a region containing an address can start.
        self._reach = max((r.end - r.start for r in self._regions), default=0)
        self.complete = complete
        self._find = find
        self._found: dict[int, Region | None] = {}

    def with_find(self, find: Callable[[int], Region | None] | None) -> AddressMap:
        """The same regions with another ``find`` (and nothing it found yet):
        a debugger keeps the map of its modules and asks the live process
        anew for each walk."""
        other = AddressMap.__new__(AddressMap)
        other._regions, other._starts, other._reach = self._regions, self._starts, self._reach
        other.complete = self.complete
        other._find = find
        other._found = {}
        return other

    def regions_at(self, address: int) -> list[Region]:
        i = bisect.bisect_right(self._starts, address) - 1
        hits = []
        while i >= 0 and self._regions[i].start + self._reach > address:
            region = self._regions[i]
            if region.start <= address < region.end:
                hits.append(region)
            i -= 1
        if not hits and self._find is not None:
            page = address & ~(LOWEST_CODE - 1)
            if page not in self._found:
                self._found[page] = self._find(address)
            found = self._found[page]
            if found is not None and found.start <= address < found.end:
                hits.append(found)
        return hits


def return_address_problem(address: int, arch: Arch, space: AddressMap | None = None) -> str | None:
    """Why ``address`` cannot be a return address, or None when it can.

    Without an address map only the arithmetic rules apply (too low, not a
    user-space address of the ABI); with one, the address must also lie in a
    region that may be executable.
    """
    regions = space.regions_at(address) if space is not None else []
    if any(r.executable is not False for r in regions):
        return None
    if address < LOWEST_CODE:
        return f"{address:#x} is below {LOWEST_CODE:#x}, where nothing is ever mapped"
    bits = arch.user_address_bits
    if bits is not None and address >> bits:
        return (f"{address:#x} is not a canonical user-space address "
                f"({arch.name}: below {1 << bits:#x})")
    mapped = [r for r in regions if r.mapped]
    if mapped:
        region = mapped[0]
        where = region.name or f"the mapping {region.start:#x}-{region.end:#x}"
        return f"{address:#x} is in {where}, which is not executable"
    if regions or (space is not None and space.complete):
        return f"{address:#x} is in no mapping"
    return None


def regions_from_maps(text: str) -> list[Region]:
    """The regions of a ``/proc/PID/maps`` text (every line: anonymous ones too)."""
    out = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        lo, _, hi = parts[0].partition("-")
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            continue
        perms = parts[1]
        out.append(Region(start, end, len(perms) > 2 and perms[2] == "x",
                          parts[5].strip() if len(parts) > 5 else ""))
    return out


def name_stacks(regions: Iterable[Region], stack_pointers: Iterable[int | None]) -> list[Region]:
    """Name the unnamed regions that hold a thread's SP ``[stack]``: a core
    does not name its segments, and ``/proc/PID/maps`` only the main thread's."""
    sps = [sp for sp in stack_pointers if sp is not None]
    return [Region(r.start, r.end, r.executable, "[stack]")
            if not r.name and any(r.start <= sp < r.end for sp in sps) else r
            for r in regions]
