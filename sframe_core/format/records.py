"""SFrame byte layouts (versions 1, 2 and 3) and the records decoded from them.

Decoding is split the way pyelftools splits DWARF CFI: this module turns
bytes into records named after the spec's fields (header, FDE, FRE) and
checks that every offset and count stays inside the section; ``rows`` gives
the records their meaning per ABI. Functions here are pure and decode only
what they are asked for, so that answering one PC never walks the section.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from ..base.abi import arch_for_abi
from ..base.errors import FormatError

__all__ = [
    "SFRAME_MAGIC", "SFRAME_F_FDE_SORTED", "SFRAME_F_FRAME_POINTER",
    "SFRAME_F_FDE_FUNC_START_PCREL", "HEADER_SIZE", "FDE_SIZE", "V3_ATTR_SIZE",
    "FRE_TYPE_ADDR1", "FRE_TYPE_ADDR2", "FRE_TYPE_ADDR4", "PC_TYPE_INC", "PC_TYPE_MASK",
    "FDE_TYPE_DEFAULT", "FDE_TYPE_FLEX", "MAX_DEFAULT_WORDS", "FLEX_WORD_COUNTS",
    "Header", "FDE", "FRE", "parse_header", "decode_fde", "decode_fres", "find_fre", "fde_start_field",
    "fde_decoder", "fre_finder", "FREFinder",
]

SFRAME_MAGIC = 0xDEE2
SFRAME_F_FDE_SORTED = 0x1
SFRAME_F_FRAME_POINTER = 0x2
SFRAME_F_FDE_FUNC_START_PCREL = 0x4
# Flags each version defines. PCREL is a v2 erratum (binutils 2.45) and part
# of v3; FRAME_POINTER was dropped in v3. v1 predates both changes.
_VALID_FLAGS = {1: 0x3, 2: 0x7, 3: 0x5}

HEADER_SIZE = 28
FDE_SIZE = {1: 17, 2: 20, 3: 16}
V3_ATTR_SIZE = 5

FRE_TYPE_ADDR1, FRE_TYPE_ADDR2, FRE_TYPE_ADDR4 = 0, 1, 2
PC_TYPE_INC, PC_TYPE_MASK = 0, 1
FDE_TYPE_DEFAULT, FDE_TYPE_FLEX = 0, 1

# Most data words one FRE may carry: CFA, RA, FP in a default FDE; three
# (control word, offset) pairs in a v3 flexible FDE, of which the RA pair
# may be a single padding word.
MAX_DEFAULT_WORDS = 3
FLEX_WORD_COUNTS = frozenset({0, 2, 4, 5, 6})

# v1 PC-mask FDEs have no repetition size; binutils 2.40 only used them for
# 16-byte amd64 PLT entries (libsframe hard-codes 16 for v1 as well).
V1_PCMASK_REP_SIZE = 16


class Header(NamedTuple):
    """The SFrame preamble and header, with the offsets they imply."""

    big_endian: bool
    version: int
    flags: int
    abi_arch: int
    cfa_fixed_fp_offset: int
    cfa_fixed_ra_offset: int
    auxhdr_len: int
    num_fdes: int
    num_fres: int
    fre_len: int
    fdeoff: int
    freoff: int

    # Derived offsets, computed once by parse_header (lookups read them often).
    hdr_end: int = 0
    fde_base: int = 0
    fre_base: int = 0
    fre_end: int = 0
    fde_size: int = 0

    @property
    def size(self) -> int:
        """Bytes the section needs: the end of the FDE or FRE sub-section."""
        return max(self.fre_end, self.fde_base + self.num_fdes * self.fde_size)

    @property
    def sorted(self) -> bool:
        return bool(self.flags & SFRAME_F_FDE_SORTED)

    @property
    def pcrel(self) -> bool:
        return bool(self.flags & SFRAME_F_FDE_FUNC_START_PCREL)

    @property
    def endian(self) -> str:
        return ">" if self.big_endian else "<"


class FDE(NamedTuple):
    """One function descriptor (v3: index entry plus attribute record).

    ``start`` is the function's first address in the address space of the
    section address the section was opened with (file or runtime).
    """

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose
    offset: int  # section offset of the FDE (v3: of the index entry)
    start: int
    size: int
    fre_off: int  # sfde_func_start_fre_off, relative to the FRE sub-section
    num_fres: int
    info: int
    info2: int  # v3 only; 0 before
    rep_size: int
    fres_offset: int  # section offset of the first FRE

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def fre_type(self) -> int:
        return self.info & 0xF

    @property
    def pc_type(self) -> int:
        return (self.info >> 4) & 1

    @property
    def is_pcmask(self) -> bool:
        return self.pc_type == PC_TYPE_MASK

    @property
    def pauth_key(self) -> int:
        return (self.info >> 5) & 1

    @property
    def signal(self) -> bool:
        """v3 ``.cfi_signal_frame``; bit 7 is unused (zero) before v3."""
        return bool(self.info & 0x80)

    @property
    def fde_type(self) -> int:
        return self.info2 & 0x1F

    @property
    def flex(self) -> bool:
        return self.fde_type == FDE_TYPE_FLEX


class FRE(NamedTuple):
    """One frame row entry, its data words still uninterpreted."""

    offset: int  # section offset of the FRE
    start: int  # sfre_start_address: from the function start (or rep block)
    info: int
    words: tuple[int, ...]  # signed, as stored
    word_size: int  # bytes per data word: 1, 2 or 4

    @property
    def base_is_sp(self) -> bool:
        return bool(self.info & 1)

    @property
    def num_words(self) -> int:
        return (self.info >> 1) & 0xF

    @property
    def mangled_ra(self) -> bool:
        return bool(self.info & 0x80)

    @property
    def ra_undefined(self) -> bool:
        """No data words: the return address is undefined, the outermost frame."""
        return not self.words

    def unsigned(self, i: int) -> int:
        """Word ``i`` read as unsigned (v3 flexible control words)."""
        return self.words[i] & ((1 << (8 * self.word_size)) - 1)


_U16 = {False: struct.Struct("<H"), True: struct.Struct(">H")}
_HEADER = {e: struct.Struct(("<" if not e else ">") + "HBBBbbBIIIII") for e in (False, True)}
_FDE_V1 = {e: struct.Struct(("<" if not e else ">") + "iIIIB") for e in (False, True)}
_FDE_V2 = {e: struct.Struct(("<" if not e else ">") + "iIIIBBH") for e in (False, True)}
_FDE_V3 = {e: struct.Struct(("<" if not e else ">") + "qII") for e in (False, True)}
_ATTR_V3 = {e: struct.Struct(("<" if not e else ">") + "HBBB") for e in (False, True)}
_FRE_START = {
    (e, t): struct.Struct(("<" if not e else ">") + "BHI"[t]) for e in (False, True) for t in (0, 1, 2)
}
_WORDS = {
    (e, size, n): struct.Struct(("<" if not e else ">") + {1: "b", 2: "h", 4: "i"}[size] * n)
    for e in (False, True)
    for size in (1, 2, 4)
    for n in range(16)
}


def parse_header(data: bytes | memoryview) -> Header:
    """Read and check the header; nothing past it is touched."""
    if len(data) < HEADER_SIZE:
        raise FormatError(f"section is {len(data)} bytes, too short for the {HEADER_SIZE}-byte "
                          "SFrame header", 0)
    magic_bytes = bytes(data[0:2])
    if magic_bytes == b"\xe2\xde":
        big = False
    elif magic_bytes == b"\xde\xe2":
        big = True
    else:
        raise FormatError(f"bad magic 0x{magic_bytes.hex()} (expected 0xdee2 in either byte order)", 0)
    fields = _HEADER[big].unpack_from(data, 0)[1:]
    version, auxhdr_len, fdeoff, freoff, fre_len = fields[0], fields[5], fields[9], fields[10], fields[8]
    if version not in _VALID_FLAGS:
        raise FormatError(f"unknown SFrame version {version}", 2)
    hdr_end = HEADER_SIZE + auxhdr_len
    hdr = Header._make((big, *fields, hdr_end, hdr_end + fdeoff, hdr_end + freoff,
                        hdr_end + freoff + fre_len, FDE_SIZE[version]))
    if hdr.flags & ~_VALID_FLAGS[hdr.version]:
        raise FormatError(f"flags {hdr.flags:#x} not valid for SFrame version {hdr.version} "
                          f"(valid: {_VALID_FLAGS[hdr.version]:#x})", 3)
    arch = arch_for_abi(hdr.abi_arch)
    if arch is None:
        raise FormatError(f"unknown ABI/arch {hdr.abi_arch}", 4)
    if arch.big_endian != big:
        order = "big" if big else "little"
        raise FormatError(f"ABI/arch {hdr.abi_arch} does not match the {order}-endian magic", 4)
    if hdr.cfa_fixed_ra_offset != arch.fixed_ra_offset:
        raise FormatError(f"fixed RA offset {hdr.cfa_fixed_ra_offset} is not {arch.name}'s "
                          f"({arch.fixed_ra_offset})", 6)
    if hdr.cfa_fixed_fp_offset != 0:
        raise FormatError(f"fixed FP offset {hdr.cfa_fixed_fp_offset}: no ABI has one (0 expected)",
                          5)
    if hdr.fdeoff > hdr.freoff:
        raise FormatError(f"FDE sub-section offset {hdr.fdeoff:#x} is past the FRE sub-section "
                          f"offset {hdr.freoff:#x}", 0x14)
    length = len(data)
    fde_end = hdr.fde_base + hdr.num_fdes * hdr.fde_size
    if fde_end > length:
        raise FormatError(f"{hdr.num_fdes} FDEs of {hdr.fde_size} bytes at {hdr.fde_base:#x} do not "
                          f"fit in the {length}-byte section", 8)
    if fde_end > hdr.fre_base:
        raise FormatError(f"FDE sub-section (ends at {fde_end:#x}) overlaps the FRE sub-section "
                          f"(starts at {hdr.fre_base:#x})", 0x18)
    if hdr.fre_end > length:
        raise FormatError(f"FRE sub-section of {hdr.fre_len} bytes at {hdr.fre_base:#x} does not fit "
                          f"in the {length}-byte section", 0x10)
    # Every FRE has at least a start-address byte and an info byte.
    if hdr.num_fres * 2 > hdr.fre_len:
        raise FormatError(f"{hdr.num_fres} FREs cannot fit in an FRE sub-section of "
                          f"{hdr.fre_len} bytes", 0xC)
    return hdr


def fde_start_field(data: bytes | memoryview, hdr: Header, index: int) -> tuple[int, int]:
    """(section offset, signed value) of FDE ``index``'s function-start field."""
    offset = hdr.fde_base + index * hdr.fde_size
    if hdr.version == 3:
        return offset, _FDE_V3[hdr.big_endian].unpack_from(data, offset)[0]
    return offset, _FDE_V1[hdr.big_endian].unpack_from(data, offset)[0]


_new_tuple = tuple.__new__


def _bad_fde(index: int, offset: int, version: int, info: int, num_fres: int, fre_off: int,
             first_fre: int, fre_len: int, fre_end: int) -> FormatError:
    """Word what the decoder's one combined check found wrong, first problem first."""
    if version < 3 and first_fre > fre_end:
        return FormatError(f"FDE {index}: first FRE at FRE offset {fre_off:#x} is outside the "
                           f"{fre_len}-byte FRE sub-section", offset + 8)
    if info & 0xF > FRE_TYPE_ADDR4:
        return FormatError(f"FDE {index}: bad FRE type {info & 0xF}",
                           offset + (16 if version < 3 else 0))
    # Each FRE takes at least two bytes: a count that cannot fit is corrupt,
    # and rejecting it here bounds the work any later walk can do.
    return FormatError(f"FDE {index}: {num_fres} FREs cannot fit in the "
                       f"{max(fre_end - first_fre, 0)} bytes left in the FRE sub-section",
                       offset + (12 if version < 3 else 0))


def fde_decoder(hdr: Header, sec_addr: int, pcrel: bool | None = None
                ) -> Callable[[bytes | memoryview, int], FDE]:
    """``decode(data, index) -> FDE`` with the header's fields bound once.

    The hot path of every lookup: one unpack, one combined bounds check (a
    failure is worded by ``_bad_fde``), one tuple. ``pcrel`` overrides the
    header flag (``.o`` files).
    """
    (big, version, flags, _abi, _fp, _ra, _aux, num_fdes, _nfres, fre_len, _fdeoff, _freoff,
     _hdr_end, fde_base, fre_base, fre_end, fde_size) = hdr
    relative = bool(flags & SFRAME_F_FDE_FUNC_START_PCREL) if pcrel is None else pcrel

    def out_of_range(index: int) -> FormatError:
        return FormatError(f"FDE index {index} out of range (section has {num_fdes})")

    if version == 3:
        unpack, unpack_attr = _FDE_V3[big].unpack_from, _ATTR_V3[big].unpack_from
        attr_limit = fre_len - V3_ATTR_SIZE

        def decode(data: bytes | memoryview, index: int) -> FDE:
            if not 0 <= index < num_fdes:
                raise out_of_range(index)
            offset = fde_base + index * fde_size
            value, size, fre_off = unpack(data, offset)
            if fre_off > attr_limit:
                raise FormatError(f"FDE {index}: attribute record at FRE offset {fre_off:#x} is "
                                  f"outside the {fre_len}-byte FRE sub-section", offset + 12)
            attr = fre_base + fre_off
            num_fres, info, info2, rep_size = unpack_attr(data, attr)
            first_fre = attr + V3_ATTR_SIZE
            if info2 & 0x1F > FDE_TYPE_FLEX:
                raise FormatError(f"FDE {index}: unknown FDE type {info2 & 0x1F}", attr + 3)
            if info & 0xF > FRE_TYPE_ADDR4 or num_fres * 2 > fre_end - first_fre:
                raise _bad_fde(index, offset, 3, info, num_fres, fre_off, first_fre, fre_len,
                               fre_end)
            start = sec_addr + value + (offset if relative else 0)
            return _new_tuple(FDE, (index, offset, start, size, fre_off, num_fres, info, info2,
                                    rep_size, first_fre))
        return decode

    unpack = (_FDE_V1 if version == 1 else _FDE_V2)[big].unpack_from

    def decode_v1_v2(data: bytes | memoryview, index: int) -> FDE:
        if not 0 <= index < num_fdes:
            raise out_of_range(index)
        offset = fde_base + index * fde_size
        if version == 1:
            value, size, fre_off, num_fres, info = unpack(data, offset)
            rep_size = V1_PCMASK_REP_SIZE if info & 0x10 else 0
        else:
            value, size, fre_off, num_fres, info, rep_size, _pad = unpack(data, offset)
        first_fre = fre_base + fre_off
        # first_fre > fre_end makes the right side negative: one test for both.
        if info & 0xF > FRE_TYPE_ADDR4 or num_fres * 2 > fre_end - first_fre:
            raise _bad_fde(index, offset, version, info, num_fres, fre_off, first_fre, fre_len,
                           fre_end)
        start = sec_addr + value + (offset if relative else 0)
        return _new_tuple(FDE, (index, offset, start, size, fre_off, num_fres, info, 0,
                                rep_size, first_fre))
    return decode_v1_v2


def decode_fde(data: bytes | memoryview, hdr: Header, index: int, sec_addr: int,
               pcrel: bool | None = None) -> FDE:
    """Decode FDE ``index``; ``pcrel`` overrides the header flag (``.o`` files)."""
    return fde_decoder(hdr, sec_addr, pcrel)(data, index)


def _walk_fres(data: bytes | memoryview, hdr: Header, fde: FDE, stop: int | None = None
               ) -> list[tuple[int, int, int, int, int]]:
    """(offset, start, info, word count, word size) of each FRE, checked.

    With ``stop``, the walk ends at the first FRE starting after ``stop``
    (included, so its start bounds the previous FRE's range). Words are not
    unpacked: a lookup reads start fields up to its hit and decodes only
    that FRE.
    """
    addr_size = 1 << fde.fre_type
    unpack_start = _FRE_START[(hdr.big_endian, fde.fre_type)].unpack_from
    end = hdr.fre_end
    pos = fde.fres_offset
    previous = -1
    flex = hdr.version == 3 and fde.flex
    limit = None if fde.is_pcmask else fde.size
    walked = []
    for k in range(fde.num_fres):
        if pos + addr_size + 1 > end:
            raise FormatError(f"FDE {fde.index}: FRE {k} runs past the end of the FRE sub-section", pos)
        start = data[pos] if addr_size == 1 else unpack_start(data, pos)[0]
        info = data[pos + addr_size]
        size_code = (info >> 5) & 3
        count = (info >> 1) & 0xF
        if size_code == 3:
            raise FormatError(f"FDE {fde.index}: FRE {k} has invalid data-word size code 3",
                              pos + addr_size)
        if flex:
            if count not in FLEX_WORD_COUNTS:
                raise FormatError(f"FDE {fde.index}: FRE {k} has {count} data words, not valid in a "
                                  "flexible FDE", pos + addr_size)
        elif count > MAX_DEFAULT_WORDS:
            raise FormatError(f"FDE {fde.index}: FRE {k} has {count} data words (at most "
                              f"{MAX_DEFAULT_WORDS})", pos + addr_size)
        word_size = 1 << size_code
        following = pos + addr_size + 1 + count * word_size
        if following > end:
            raise FormatError(f"FDE {fde.index}: FRE {k} runs past the end of the FRE sub-section", pos)
        if start < previous:
            raise FormatError(f"FDE {fde.index}: FRE {k} starts at {start:#x}, before the previous "
                              f"FRE ({previous:#x})", pos)
        if limit is not None and start > limit:
            raise FormatError(f"FDE {fde.index}: FRE {k} starts at {start:#x}, past the function's "
                              f"size {fde.size:#x}", pos)
        walked.append((pos, start, info, count, word_size))
        if stop is not None and start > stop:
            break
        previous = start
        pos = following
    return walked


def _fre(data: bytes | memoryview, hdr: Header, fde: FDE, pos: int, start: int, info: int,
         count: int, word_size: int) -> FRE:
    words_at = pos + (1 << fde.fre_type) + 1
    words = _WORDS[(hdr.big_endian, word_size, count)].unpack_from(data, words_at) if count else ()
    return FRE(pos, start, info, words, word_size)


def decode_fres(data: bytes | memoryview, hdr: Header, fde: FDE) -> tuple[FRE, ...]:
    """Decode the FREs of one FDE, checking each against the section bounds."""
    return tuple(_fre(data, hdr, fde, *walked) for walked in _walk_fres(data, hdr, fde))


# An invalid info byte's "length": past any section, so the bounds check
# that follows the walk catches it without a test of its own per FRE.
_INVALID = 1 << 62


def _fre_lengths(addr_size: int) -> tuple[int, ...]:
    """FRE byte length for each info byte of a default FDE; ``_INVALID`` where invalid."""
    lengths = []
    for info in range(256):
        size_code, count = (info >> 5) & 3, (info >> 1) & 0xF
        valid = size_code != 3 and count <= MAX_DEFAULT_WORDS
        lengths.append(addr_size + 1 + count * (1 << size_code) if valid else _INVALID)
    return tuple(lengths)


_FRE_LENGTHS = tuple(_fre_lengths(1 << t) for t in (FRE_TYPE_ADDR1, FRE_TYPE_ADDR2,
                                                     FRE_TYPE_ADDR4))


def _checked_find_fre(data: bytes | memoryview, hdr: Header, fde: FDE, offset: int
                      ) -> tuple[int, FRE, int | None] | None:
    walked = _walk_fres(data, hdr, fde, offset)
    following = None
    if walked and walked[-1][1] > offset:
        following = walked.pop()[1]
    if not walked:
        return None
    return len(walked) - 1, _fre(data, hdr, fde, *walked[-1]), following


_START_UNPACK = {big: tuple(_FRE_START[(big, t)].unpack_from for t in (0, 1, 2))
                 for big in (False, True)}
# Per byte order and info byte: (unpack the data words, word size, word count),
# None for the invalid word-size code 3.
_WORDS_BY_INFO = {
    big: tuple((_WORDS[(big, 1 << ((info >> 5) & 3), (info >> 1) & 0xF)].unpack_from,
                1 << ((info >> 5) & 3), (info >> 1) & 0xF) if (info >> 5) & 3 != 3 else None
               for info in range(256))
    for big in (False, True)
}

FREFinder = Callable[[bytes | memoryview, FDE, int], tuple[int, FRE, int | None] | None]


def fre_finder(hdr: Header) -> FREFinder:
    """``find(data, fde, offset)``: the last FRE starting at or before ``offset``
    (from the function or repeat-block start) as (index, FRE, start of the
    next FRE or None), or None; the section's constants bound once.

    The hot path of every unwind step: a tight walk over start fields and
    info bytes that checks what ``_walk_fres`` checks (starts in order and
    inside the function; valid info bytes and every FRE inside the
    sub-section, the latter once, on the last FRE examined, since FREs only
    move forward). ``_walk_fres`` takes over to word the error as soon as
    anything looks wrong, and for flexible FDEs.
    """
    big, fre_end, v3 = hdr.big_endian, hdr.fre_end, hdr.version == 3
    starts = _START_UNPACK[big]
    words = _WORDS_BY_INFO[big]

    def find(data: bytes | memoryview, fde: FDE, offset: int
             ) -> tuple[int, FRE, int | None] | None:
        (_i, _o, _s, size, _f, num_fres, info, info2, _r, pos) = fde
        if v3 and info2 & 0x1F == FDE_TYPE_FLEX:
            return _checked_find_fre(data, hdr, fde, offset)
        fre_type = info & 0xF
        lengths = _FRE_LENGTHS[fre_type]
        # PC-mask FRE starts are offsets in a repeat block, not bounded by the size.
        limit = 1 << 32 if info & 0x10 else size
        previous = -1
        hit_k = hit_pos = -1
        following = None
        try:
            if fre_type == FRE_TYPE_ADDR1:
                for k in range(num_fres):
                    start = data[pos]
                    if not previous <= start <= limit:
                        return _checked_find_fre(data, hdr, fde, offset)
                    if start > offset:
                        following = start
                        pos += lengths[data[pos + 1]]
                        break
                    hit_k, hit_pos, previous = k, pos, start
                    pos += lengths[data[pos + 1]]
            else:
                unpack_start = starts[fre_type]
                addr_size = 1 << fre_type
                for k in range(num_fres):
                    start = unpack_start(data, pos)[0]
                    if not previous <= start <= limit:
                        return _checked_find_fre(data, hdr, fde, offset)
                    if start > offset:
                        following = start
                        pos += lengths[data[pos + addr_size]]
                        break
                    hit_k, hit_pos, previous = k, pos, start
                    pos += lengths[data[pos + addr_size]]
        except (IndexError, struct.error):
            return _checked_find_fre(data, hdr, fde, offset)
        if pos > fre_end:  # the last FRE examined, or an invalid info byte
            return _checked_find_fre(data, hdr, fde, offset)
        if hit_k < 0:
            return None
        fre_info = data[hit_pos + (1 << fre_type)]
        unpack_words, word_size, count = words[fre_info]  # type: ignore[misc]  # valid: checked
        first_word = hit_pos + (1 << fre_type) + 1
        return hit_k, _new_tuple(FRE, (hit_pos, previous, fre_info,
                                       unpack_words(data, first_word) if count else (),
                                       word_size)), following
    return find


def find_fre(data: bytes | memoryview, hdr: Header, fde: FDE, offset: int
             ) -> tuple[int, FRE, int | None] | None:
    """The last FRE starting at or before ``offset``: see ``fre_finder``."""
    return fre_finder(hdr)(data, fde, offset)
