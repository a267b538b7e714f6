"""Target memory read a page at a time, for the length of one backtrace.

Every frame of a walk reads a word or two from the stack, and the frames of
a deep stack sit next to each other: asking a debugger for each word costs
more than the unwind step itself (GDB: about 3 us a read). One read of the
whole page serves the next hundred frames. The cache must not outlive the
walk it was made for: the target runs, or the user writes memory, between
walks; the adapters make a new one where a walk starts.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["PageCache", "PAGE_SIZE"]

# The smallest page size of every supported ABI: a page-aligned block this
# size lies in one mapping, so it is readable whenever one word in it is.
PAGE_SIZE = 4096
_MAX_PAGES = 1024  # 4 MiB of stack; a walk deeper than that reads on


class PageCache:
    """A ``sframe_core.unwind.step.Memory`` over ``read(address, size)``.

    A page that cannot be read whole (the edge of a truncated core
    segment) is not cached; its words are then read one by one.
    """

    __slots__ = ("_read", "_pages")

    def __init__(self, read: Callable[[int, int], bytes | None]) -> None:
        self._read = read
        self._pages: dict[int, bytes | None] = {}

    def read(self, address: int, size: int) -> bytes | None:
        if address < 0 or size <= 0:
            return None
        base = address & ~(PAGE_SIZE - 1)
        offset = address - base
        if offset + size <= PAGE_SIZE:
            pages = self._pages
            page = pages.get(base, b"")
            if page == b"":
                if len(pages) >= _MAX_PAGES:
                    pages.clear()
                page = self._read(base, PAGE_SIZE)
                if page is not None and len(page) != PAGE_SIZE:
                    page = None
                pages[base] = page
            if page is not None:
                return page[offset:offset + size]
        return self._read(address, size)
