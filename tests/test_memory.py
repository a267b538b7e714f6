"""sframe_core.base.memory.PageCache: one read per page, exact reads where a page fails."""

from __future__ import annotations

from sframe_core.base.memory import PAGE_SIZE, PageCache


class FakeTarget:
    """Readable in [lo, hi); records every read it is asked for."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.reads: list[tuple[int, int]] = []

    def read(self, address: int, size: int) -> bytes | None:
        self.reads.append((address, size))
        if address < self.lo or address + size > self.hi:
            return None
        return bytes((address + i) & 0xFF for i in range(size))


def test_one_read_per_page() -> None:
    target = FakeTarget(0x10000, 0x20000)
    memory = PageCache(target.read)
    assert memory.read(0x10008, 8) == bytes(range(8, 16))
    assert memory.read(0x10ff8, 8) == bytes(range(0xF8, 0x100))
    assert target.reads == [(0x10000, PAGE_SIZE)]


def test_read_across_pages_is_exact() -> None:
    target = FakeTarget(0x10000, 0x20000)
    memory = PageCache(target.read)
    assert memory.read(0x10ffc, 8) == bytes([0xFC, 0xFD, 0xFE, 0xFF, 0, 1, 2, 3])
    assert target.reads == [(0x10ffc, 8)]


def test_unreadable_page_falls_back_to_exact_reads() -> None:
    # Only part of the page is readable (a truncated core segment).
    target = FakeTarget(0x10000, 0x10800)
    memory = PageCache(target.read)
    assert memory.read(0x10010, 8) == bytes(range(0x10, 0x18))
    assert memory.read(0x10900, 8) is None
    assert target.reads == [(0x10000, PAGE_SIZE), (0x10010, 8), (0x10900, 8)]


def test_bad_requests() -> None:
    memory = PageCache(FakeTarget(0, 1 << 20).read)
    assert memory.read(-8, 8) is None
    assert memory.read(0x100, 0) is None


def test_cache_is_bounded() -> None:
    target = FakeTarget(0, 1 << 40)
    memory = PageCache(target.read)
    for page in range(3000):
        memory.read(page * PAGE_SIZE, 8)
    assert len(memory._pages) <= 1024
