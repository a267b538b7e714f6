"""Mutated real sections: only SFrameError may escape, quickly, with bounded memory.

Counts in the header and FDEs are checked against the section size before
anything is allocated or walked, so a flipped bit never turns into a huge
loop or list; hypothesis' ``deadline`` catches a slow path, tracemalloc a big
allocation.
"""

from __future__ import annotations

import struct
import tracemalloc
from functools import cache

from helpers.manifest import find_entry, fixture_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sframe_core.base.errors import SFrameError
from sframe_core.format.dump import dump_json, dump_text
from sframe_core.format.section import SFrameSection

PRODUCERS = ("bu2.40-v1", "bu2.44-v2", "busid-v3")
MEMORY_LIMIT = 8 << 20  # bytes: far above what a few-KiB section needs


@cache
def seed(producer: str) -> tuple[bytes, int]:
    entry = find_entry(lambda e: e["arch"] == "x86_64" and e["producer_dir"] == producer
                       and e["name"] == "realign" and e["kind"] != "obj")
    return fixture_path(entry, "sframe_bin").read_bytes(), entry["sframe_addr"]


def exercise(data: bytes, address: int) -> None:
    tracemalloc.start()
    try:
        try:
            section = SFrameSection(data, address)
        except SFrameError:
            return
        for call in (lambda: list(section.iter_fdes()), section.validate,
                     lambda: dump_text(section), lambda: dump_json(section)):
            try:
                call()
            except SFrameError:
                pass
        for pc in range(address - 0x2000, address, 0x7F):
            try:
                section.lookup(pc)
            except SFrameError:
                pass
        _, peak = tracemalloc.get_traced_memory()
        assert peak < MEMORY_LIMIT, f"peak allocation {peak} bytes"
    finally:
        tracemalloc.stop()


FUZZ = settings(max_examples=150, deadline=1000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(producer=st.sampled_from(PRODUCERS), flips=st.lists(st.integers(0, 1 << 20), max_size=8))
def test_bit_flips(producer: str, flips: list[int]) -> None:
    data, address = seed(producer)
    buf = bytearray(data)
    for bit in flips:
        pos = (bit >> 3) % len(buf)
        buf[pos] ^= 1 << (bit & 7)
    exercise(bytes(buf), address)


@FUZZ
@given(producer=st.sampled_from(PRODUCERS), cut=st.integers(0, 4096))
def test_truncation(producer: str, cut: int) -> None:
    data, address = seed(producer)
    exercise(data[: max(len(data) - cut, 0)], address)


@FUZZ
@given(producer=st.sampled_from(PRODUCERS), where=st.integers(0, 1 << 16),
       value=st.sampled_from([0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x10000, 0xFFFF, 0]))
def test_huge_counts(producer: str, where: int, value: int) -> None:
    """Header counts, then FDE count/offset fields, set to huge values."""
    data, address = seed(producer)
    buf = bytearray(data)
    version = buf[2]
    fields = [8, 0xC, 0x10, 0x14, 0x18]
    fde_size = {1: 17, 2: 20, 3: 16}[version]
    num_fdes = struct.unpack_from("<I", buf, 8)[0]
    for i in range(num_fdes):
        base = 28 + i * fde_size
        fields += [base + 4, base + 8] + ([base + 12] if version < 3 else [])
    offset = fields[where % len(fields)]
    struct.pack_into("<I", buf, offset, value)
    exercise(bytes(buf), address)


@FUZZ
@given(producer=st.sampled_from(PRODUCERS), blob=st.binary(max_size=64),
       at=st.integers(0, 1 << 16))
def test_spliced_bytes(producer: str, blob: bytes, at: int) -> None:
    data, address = seed(producer)
    pos = at % len(data)
    exercise(data[:pos] + blob + data[pos + len(blob):], address)


# -- the lookup fast path checks what the careful walk checks -----------------------


def _outcome(call, *args):  # type: ignore[no-untyped-def]
    try:
        return ("ok", call(*args))
    except SFrameError as exc:
        return ("error", str(exc))


@settings(max_examples=300, deadline=2000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(producer=st.sampled_from(PRODUCERS), where=st.integers(0, 1 << 30),
       value=st.integers(0, 255))
def test_fast_fre_search_agrees_with_the_checked_walk(producer: str, where: int,
                                                      value: int) -> None:
    """One byte of the FRE sub-section changed: ``fre_finder``'s tight loop
    must give exactly what ``_walk_fres`` gives, result or error, at every
    offset of every FDE around the change (so no check was dropped for speed)."""
    from sframe_core.format.records import _checked_find_fre, decode_fde, fre_finder, parse_header

    data, address = seed(producer)
    hdr = parse_header(data)
    mutated = bytearray(data)
    at = hdr.fre_base + where % hdr.fre_len
    mutated[at] = value
    blob = bytes(mutated)
    find = fre_finder(hdr)
    for index in range(hdr.num_fdes):
        try:
            fde = decode_fde(blob, hdr, index, address)
        except SFrameError:
            continue
        if not fde.fres_offset - 16 <= at < fde.fres_offset + 64:
            continue
        for offset in range(0, min(fde.size, 0x400) + 2):
            assert _outcome(find, blob, fde, offset) == \
                _outcome(_checked_find_fre, blob, hdr, fde, offset), (index, offset)
