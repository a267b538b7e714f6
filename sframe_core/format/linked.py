"""A linked module's ``.sframe`` as linkers really leave it: checked, and
read as one section where its parts can be proven right.

Only GNU ld merges the inputs' SFrame sections into one (sorted, flagged
``SFRAME_F_FDE_SORTED``, start addresses rewritten). gold, lld and mold 1.10
treat ``.sframe`` as plain data: they concatenate the inputs' sections (each
padded to its alignment) and apply the relocations gas put on the FDE start
fields. gas writes every start field as a PC-relative relocation to the
field itself (addend 0: v1, v2; v3 says so with ``SFRAME_F_FDE_FUNC_START_PCREL``),
so in such a section every part's starts are relative to their own field,
in every version, and no part is sorted by the linker. A reader that trusts
the first header reads one input's FDEs with wrong addresses (v1/v2) and
never sees the others.

``read_linked`` finds every header, reads each part's starts as its producer
wrote them, checks the result against the module's code (inside it, no two
functions overlapping) and, where all holds, builds one sorted section with
section-relative starts from the parts (the FDE index entries re-packed and
the FRE sub-sections copied, no FRE decoded), which every reader (lookups,
symbol files, the C FDE maker) then takes as any ld output. What cannot be
proven right is refused with one ``FormatError`` naming what is wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from ..base.errors import FormatError
from .records import HEADER_SIZE, SFRAME_F_FDE_FUNC_START_PCREL, SFRAME_F_FDE_SORTED, Header, parse_header

__all__ = ["Part", "Linked", "Extent", "split_parts", "part_extents", "check_extents", "merge_parts",
           "describe_parts", "read_linked"]

# The alignment gas gives ``.sframe`` (8 on every 64-bit target): a linker
# that concatenates pads each part with zeros up to it.
PART_ALIGN = 8

# (start, size, part index, FDE index in its part)
Extent = tuple[int, int, int, int]


class Part(NamedTuple):
    """One SFrame header's part of a section: where it starts, its header."""

    offset: int
    header: Header

    @property
    def end(self) -> int:
        return self.offset + self.header.size


def split_parts(data: bytes | memoryview, *, exact: bool = True) -> list[Part]:
    """Every SFrame header of ``data`` and its part.

    ``exact``: ``data`` is the section as its header says (``sh_size``), so
    what follows the first part must be another part (after at most
    ``PART_ALIGN - 1`` zero bytes of padding); else (``PT_GNU_SFRAME``,
    whose ``p_filesz`` ld keeps from before its merge) bytes after a part
    that do not start a header are not the section's.

    :raises FormatError: a header is not valid, or bytes follow the last
        part that are neither padding nor a header.
    """
    first = parse_header(data)
    parts = [Part(0, first)]
    magic = bytes(data[0:2])
    view = memoryview(data)
    length = len(data)
    pos = first.size
    while pos < length:
        aligned = min(-(-pos // PART_ALIGN) * PART_ALIGN, length)
        nxt = pos
        while nxt < aligned and view[nxt] == 0:
            nxt += 1
        if nxt == length or (length - pos < PART_ALIGN and not any(view[pos:])):
            break  # padding at the end
        if bytes(view[nxt:nxt + 2]) != magic:
            if not exact:
                break
            raise FormatError(f"the header's counts end at {parts[-1].end:#x}, and the "
                              f"{length - pos} bytes that follow in the {length}-byte section "
                              "are not an SFrame header", pos)
        try:
            header = parse_header(view[nxt:])
        except FormatError as exc:
            if not exact:
                break  # bytes past the section that happen to look like a magic
            raise FormatError(f"SFrame header {len(parts) + 1} (of several concatenated) at "
                              f"{nxt:#x}: {exc}") from None
        if (header.version, header.abi_arch) != (first.version, first.abi_arch):
            raise FormatError(f"SFrame header {len(parts) + 1} at {nxt:#x} is version "
                              f"{header.version} ABI {header.abi_arch}, the first version "
                              f"{first.version} ABI {first.abi_arch}", nxt)
        parts.append(Part(nxt, header))
        pos = nxt + header.size
    return parts


def _field_relative(part: Part, many: bool) -> bool:
    """Whether ``part``'s starts are relative to their field (as gas's
    relocations leave them) or to the section (ld's merge).

    :raises FormatError: a part flagged sorted among several: ld's output
        concatenated again, whose starts no rule relates to its place.
    """
    hdr = part.header
    if hdr.flags & SFRAME_F_FDE_FUNC_START_PCREL:
        return True
    if not hdr.flags & SFRAME_F_FDE_SORTED:
        return True
    if many:
        raise FormatError(f"the part at {part.offset:#x} is flagged sorted (a merged section "
                          "concatenated again): how its start addresses relate to its place "
                          "is not known", part.offset)
    return False


def part_extents(data: bytes | memoryview, parts: Sequence[Part], address: int) -> list[Extent]:
    """Every FDE's (start, size, part, index) at ``address``, each part's
    starts read as its producer wrote them (``_field_relative``)."""
    many = len(parts) > 1
    out: list[Extent] = []
    for k, part in enumerate(parts):
        hdr = part.header
        field = 8 if hdr.version == 3 else 4
        fmt = f"{hdr.endian}{'q' if field == 8 else 'i'}I{hdr.fde_size - field - 4}x"
        first = part.offset + hdr.fde_base
        area = data[first: first + hdr.num_fdes * hdr.fde_size]
        if _field_relative(part, many):
            base, step = address + first, hdr.fde_size
        else:
            base, step = address, 0
        out.extend((base + i * step + value, size, k, i)
                   for i, (value, size) in enumerate(struct.iter_unpack(fmt, area)))
    return out


def _extent(data: bytes | memoryview, parts: Sequence[Part], k: int, index: int,
            address: int) -> Extent:
    """FDE ``index`` of part ``k``'s extent, read as ``part_extents`` reads it."""
    part = parts[k]
    hdr = part.header
    at = part.offset + hdr.fde_base + index * hdr.fde_size
    value, size = struct.unpack_from(f"{hdr.endian}{'q' if hdr.version == 3 else 'i'}I", data, at)
    base = address + at if _field_relative(part, len(parts) > 1) else address
    return base + value, size, k, index


def _where(parts: Sequence[Part], extent: Extent) -> str:
    _start, _size, k, index = extent
    if len(parts) == 1:
        return f"FDE {index}"
    return f"FDE {index} of the header at {parts[k].offset:#x}"


def check_extents(parts: Sequence[Part], extents: Sequence[Extent],
                  code: Sequence[tuple[int, int]] | None) -> list[Extent]:
    """``extents`` sorted by start, once checked: every function inside one
    of the ``code`` ranges (when known), none overlapping the next.

    :raises FormatError: the first FDE that breaks either.
    """
    ordered = sorted(extents)
    ranges = sorted(code) if code else None
    previous: Extent | None = None
    for extent in ordered:
        start, size = extent[0], extent[1]
        if ranges is not None and not any(lo <= start and start + size <= hi
                                          for lo, hi in ranges):
            raise FormatError(f"{_where(parts, extent)} ({start:#x}-{start + size:#x}) is "
                              "outside the module's code")
        if previous is not None and previous[0] + previous[1] > start:
            raise FormatError(f"{_where(parts, previous)} ({previous[0]:#x}-"
                              f"{previous[0] + previous[1]:#x}) overlaps {_where(parts, extent)} "
                              f"({start:#x}-{start + size:#x})")
        previous = extent
    return ordered


def describe_parts(parts: Sequence[Part]) -> str:
    """"3 SFrame headers concatenated (at 0x0, 0x88, 0x110)", for messages."""
    where = ", ".join(f"{p.offset:#x}" for p in parts[:8])
    more = ", ..." if len(parts) > 8 else ""
    return f"{len(parts)} SFrame headers concatenated (at {where}{more})"


def merge_parts(data: bytes | memoryview, parts: Sequence[Part], ordered: Sequence[Extent],
                address: int) -> bytes:
    """One sorted section at ``address`` holding every part's FDEs (``ordered``:
    ``check_extents``'s answer), with section-relative starts: the parts'
    FRE sub-sections copied one after the other, each FDE index entry
    copied with its start and FRE offset rewritten."""
    first = parts[0].header
    endian, version, fde_size = first.endian, first.version, first.fde_size
    field = 8 if version == 3 else 4
    entry = struct.Struct(f"{endian}{'q' if field == 8 else 'i'}II")  # start, size, fre_off
    fre_shift: list[int] = []
    fre_chunks: list[bytes] = []
    shift = 0
    for part in parts:
        hdr = part.header
        fre_shift.append(shift)
        fre_chunks.append(bytes(data[part.offset + hdr.fre_base: part.offset + hdr.fre_end]))
        shift += hdr.fre_len
    num_fdes = len(ordered)
    fdes = bytearray(num_fdes * fde_size)
    limit = (1 << (8 * field - 1))
    for j, (start, size, k, index) in enumerate(ordered):
        part = parts[k]
        at = part.offset + part.header.fde_base + index * fde_size
        _value, _size, fre_off = entry.unpack_from(data, at)
        value = start - address
        if not -limit <= value < limit:
            raise FormatError(f"{_where(parts, (start, size, k, index))}: start {start:#x} is "
                              f"too far from the section at {address:#x}")
        fdes[j * fde_size: (j + 1) * fde_size] = data[at: at + fde_size]
        entry.pack_into(fdes, j * fde_size, value, size, fre_off + fre_shift[k])
    header = struct.pack(f"{endian}HBBBbbBIIIII", 0xDEE2, version, SFRAME_F_FDE_SORTED,
                         first.abi_arch, first.cfa_fixed_fp_offset, first.cfa_fixed_ra_offset, 0,
                         num_fdes, sum(p.header.num_fres for p in parts), shift, 0,
                         num_fdes * fde_size)
    merged = b"".join((header, bytes(fdes), *fre_chunks))
    assert len(header) == HEADER_SIZE
    return merged


class Linked(NamedTuple):
    """What ``read_linked`` found: the parts, and the bytes to read (``data``
    itself, or the parts merged)."""

    parts: list[Part]
    data: bytes | memoryview
    merged: bool

    @property
    def note(self) -> str | None:
        """What a dump of the bytes read says of them, when they are not the file's."""
        if not self.merged:
            return None
        if len(self.parts) > 1:
            return f"{describe_parts(self.parts)} by the linker: shown as read, one sorted section"
        return ("SFRAME_F_FDE_SORTED not set by the linker: shown as read, sorted, "
                "start addresses made section-relative")


def read_linked(data: bytes | memoryview, address: int, *, exact: bool,
                code: Sequence[tuple[int, int]] | None) -> Linked:
    """Check a linked module's ``.sframe`` (at ``address``, the module's
    ``code`` ranges in the same address space) and give what to read.

    A single part flagged sorted (ld's output) is read as it is; its first
    and last function are checked against ``code``, the rest is the
    lookup's business. A section of several parts, or one not flagged
    sorted (gold, lld, mold), is read through ``merge_parts`` once every
    FDE is proven inside the code and apart from the others.

    :raises FormatError: what no producer writes, or what cannot be read right.
    """
    parts = split_parts(data, exact=exact)
    head = parts[0].header
    if len(parts) == 1 and head.sorted:
        if code and head.num_fdes:
            ends = [_extent(data, parts, 0, i, address) for i in {0, head.num_fdes - 1}]
            check_extents(parts, ends, code)
        return Linked(parts, data, False)
    try:
        ordered = check_extents(parts, part_extents(data, parts, address), code)
    except FormatError as exc:
        what = describe_parts(parts) if len(parts) > 1 else "FDEs not flagged sorted"
        raise FormatError(f"{what}: {exc}") from None
    return Linked(parts, merge_parts(data, parts, ordered, address), True)
