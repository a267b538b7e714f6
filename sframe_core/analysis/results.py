"""What a function's analysis reads, as keys: its result can then be kept
across builds of a program (``symfiles/analysis_store.py``) and reused for the
same key, wherever the function now lies.

``saved.analyse`` runs in two parts. The first decodes the function
(``effects.py``), refuses the cases it cannot model, resolves jump tables
from the file's data, and anchors each instruction to SFrame's CFA rule. The
second, the dataflow, reads only:

- the ABI (its SP, FP, entry CFA, red zone) and the decoder's tracked registers;
- each instruction's effect (``Effect``) but its text and address, which the
  dataflow never reads, and its branch target, of which it reads only whether
  it lies inside the function and, if so, where (an offset from the start);
- the instruction's offset from the function start, and the function's size;
- the resolved jump tables as instruction indices (site -> targets), which
  carry whatever the tables' file data said, and the CFA anchors of every
  instruction (SP - CFA, FP - CFA, from the SFrame rows);
- the code of the analysis itself (``version``).

``flow_key`` is a digest of exactly these, so two functions with the same
key get the same spans relative to their starts (moved functions, calls and
RIP-relative operands with new displacements, jump tables whose resolved
targets are the same), and a result is never reused where any input
differs. It saves the dataflow, not the decoding, and a new build's first
part is costly too (every new encoding is decoded in detail once): so amd64
functions also get keys from their bytes (``masked_key``, below), which
save both.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from ..base.abi import Arch
from ..base.rows import CFARule
from .effects import Effect, Flow
from .records import Reg, Regs

__all__ = ["ResultStore", "Kept", "KeptExit", "State", "Masks", "Reads", "flow_key", "index_key", "masks_of",
           "masked_key", "read_key", "INDIRECT", "UNREAD", "version"]

# The dataflow's state along a branch, as a plain tuple (``records.State``'s
# fields: what a store keeps and gives back): SP - CFA, FP - CFA, per tracked
# register its ``records.Reg``, ALT - CFA.
State = tuple[int | None, int | None, tuple[Reg, ...], int | None]
# A branch out of a function, relative to its start: (the branch's offset,
# its target's offset or None: an unread jump table, the state along it).
KeptExit = tuple[int, int | None, State | None]


class Kept(NamedTuple):
    """A function's result relative to its start: spans (lo, hi, rules) and
    exits (``records.Exit``, which ``parts.py`` needs of every function)."""

    spans: Sequence[tuple[int, int, Regs]]
    exits: Sequence[KeptExit] = ()

# Bump when the key's layout changes (a new input of the dataflow).
KEY_FORMAT = 2
# The modules whose code decides the dataflow's result or the key's meaning.
_SOURCES = ("saved.py", "effects.py", "results.py", "amd64.py", "aarch64.py", "s390x.py",
            "decoders.py", os.path.join("..", "base", "rows.py"), os.path.join("..", "base", "abi.py"))


# Where an amd64 function's address-dependent fields are (``masks_of``):
# (0, offset of a RIP displacement, 0) or (1 | 2, offset, size) of a direct
# branch whose last 4 | 1 bytes are its displacement; ``INDIRECT`` first: a
# function with indirect jumps, keyed with its address and what it read;
# ``UNREAD`` first: one with indirect jumps whose readers read nothing.
Masks = tuple[tuple[int, int, int], ...]
INDIRECT = (3, 0, 0)
UNREAD = (4, 0, 0)
# What the jump-table readers asked the file, in order: (0: ``read`` | 1:
# ``pointers``, address, size or count).
Reads = tuple[tuple[int, int, int], ...]


class ResultStore(Protocol):
    """Results kept by key (spans relative to the function start), and the
    masks amd64 functions of an ``index_key`` had (``masked_key``)."""

    def get(self, key: bytes) -> Kept | None: ...

    def put(self, key: bytes, kept: Kept) -> None: ...

    def masks(self, index: bytes) -> Sequence[Masks]: ...

    def add_masks(self, index: bytes, masks: Masks) -> None: ...

    def reads(self, key: bytes) -> Sequence[Reads]: ...

    def add_reads(self, key: bytes, reads: Reads) -> None: ...


@functools.cache
def version() -> str | None:
    """A digest of the analysis code and capstone's version, or None when the
    sources cannot be read (then nothing is kept: a result of other code could
    be taken for this code's)."""
    digest = hashlib.sha256(f"sframe-gdb analysis key {KEY_FORMAT}\0".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        digest.update(_capstone_identity().encode())
        for name in _SOURCES:
            with open(os.path.join(here, name), "rb") as stream:
                digest.update(name.encode() + b"\0" + stream.read() + b"\0")
    except Exception:  # noqa: BLE001 - no sources or no capstone: nothing is kept
        return None
    return digest.hexdigest()


def _capstone_identity() -> str:
    """Which capstone decodes: its binding's files as they are on disk (the
    wheel's, with its own library), else its versions. The files are not
    imported: a symbol file's worker whose functions the C analysis serves
    never needs capstone's binding, whose import is a large part of a small
    module's time."""
    import importlib.util

    spec = importlib.util.find_spec("capstone")
    if spec is not None and spec.origin:
        root = os.path.dirname(os.path.abspath(spec.origin))
        files = [os.path.join(root, "__init__.py"), os.path.join(root, "lib", "libcapstone.so")]
        if all(os.path.isfile(path) for path in files):
            stats = [os.stat(path) for path in files]
            return "capstone files " + " ".join(
                f"{path} {st.st_size} {st.st_mtime_ns}" for path, st in zip(files, stats, strict=True)) + "\0"
    import capstone

    return f"capstone {capstone.__version__} {capstone.cs_version()}\0"


# Effect fields but address, target and text -> their canonical text. The
# decoder hands out the same objects for an encoding every time it meets it
# (its memo), so they are looked up by identity (the entry holds them, so no
# id is reused while it is there): hashing enums is slow in Python.
_SHAPES: dict[tuple[int, ...], tuple[str, tuple[object, ...]]] = {}
_SHAPES_MAX = 1 << 16


def _shape_text(eff: Effect) -> str:
    return repr((
        eff.size, eff.flow.value,
        tuple((s.base.value, s.disp, s.size, s.reg) for s in eff.stores),
        tuple((ld.reg, ld.base.value, ld.disp, ld.size) for ld in eff.loads),
        tuple(sorted(eff.clobbers)),
        None if eff.sp is None else (eff.sp.from_, eff.sp.add),
        None if eff.fp is None else (eff.fp.from_, eff.fp.add),
        None if eff.alt is None else (eff.alt.from_, eff.alt.add),
        tuple(sorted(eff.others)), tuple(eff.moves)))


def flow_key(arch: Arch, tracked: tuple[int, ...], effects: Sequence[Effect], start: int,
             end: int, tables: dict[int, list[int]],
             anchors: Sequence[tuple[int | None, int | None]]) -> bytes | None:
    """The digest of everything the dataflow reads (module docstring), or None
    when results cannot be kept (``version`` unknown)."""
    code = version()
    if code is None:
        return None
    parts = [code, repr(arch), repr(tracked), str(end - start), repr(anchors),
             repr(sorted(tables.items()))]
    places: list[int] = []  # per instruction: offset, target (-1: none, -2: outside, or offset)
    shapes = _SHAPES
    for eff in effects:
        target = eff.target
        places.append(eff[0] - start)
        places.append(-1 if target is None else (target - start if start <= target < end else -2))
        held = eff[2:3] + eff[4:9] + eff[10:]  # flow, stores, loads, clobbers, sp, fp, alt, ...
        ident = (eff[1], *map(id, held))
        found = shapes.get(ident)
        if found is None:
            if len(shapes) >= _SHAPES_MAX:
                shapes.clear()
            found = shapes[ident] = (_shape_text(eff), held)
        parts.append(found[0])
    parts.append(repr(places))
    return hashlib.sha256("\n".join(parts).encode()).digest()[:20]




# -- amd64: a key from the bytes, with no decoding ---------------------------------
#
# On a rebuild most of the first half's time is decoding every new encoding
# in detail (a new displacement is a new encoding). For amd64 functions
# without indirect jumps (nothing read from the file), the result is also
# kept under a key made from the bytes with their address-dependent fields
# masked, at the places the previous build's decoding found them, and the
# next build tries those places first:
#
# - a direct branch's displacement (the last 4 or 1 bytes after a branch
#   opcode, checked equal to target - next instruction when found), with the
#   target put in the key as the dataflow reads it (an offset inside the
#   function, or outside): ``AMD64Decoder._effect`` gives a branch or call the same
#   effect wherever it goes (``shaped_branches``);
# - a RIP-relative operand's 32-bit displacement (capstone's printed value,
#   found exactly once in the instruction's bytes when found): ``AMD64Decoder._base``
#   makes every memory operand through RIP ``Base.OTHER`` at displacement 0
#   and ``_pointer_op`` an unknown SP/FP, so no effect holds it.
#
# An instruction's length depends on its prefixes, opcode, ModRM and SIB
# bytes, never on a displacement's value: bytes that agree outside these
# fields decode into the same instructions with the same effects (the
# decoder's memo relies on effects depending on the bytes alone, but for the
# address, the text and the branch target), the same boundaries, and so the
# same CFA anchors for the same SFrame rows (``index_key``).

_RIP = re.compile(r"\[rip ([+-]) (0x[0-9a-f]+|[0-9]+)\]")
# call/jmp rel32 (jcc rel32 is 0f 80-8f); jmp/jcc/loop/jrcxz rel8.
_REL32 = frozenset((0xE8, 0xE9))
_REL8 = frozenset((0xEB, 0xE0, 0xE1, 0xE2, 0xE3, *range(0x70, 0x80)))


def index_key(arch: Arch, size: int, start: int,
              rows: Sequence[tuple[int, CFARule | None]]) -> bytes | None:
    """What masks are looked up by: the ABI (amd64 only: None otherwise), the
    function's size and its SFrame CFA rows relative to its start."""
    code = version()
    if code is None or arch.name != "amd64":
        return None
    plain = [(at - start, None if cfa is None else tuple(cfa)) for at, cfa in rows]
    return hashlib.sha256(f"{code}\nindex\n{size}\n{plain!r}".encode()).digest()[:20]


def masks_of(effects: Sequence[Effect], code: bytes, start: int, indirect: bool = False,
             read: bool = True) -> Masks:
    """The address-dependent fields of a decoded amd64 function, where they
    are found exactly where they must be (see above). ``indirect``: the
    function has indirect jumps; its branch displacements only (the
    jump-table readers take table addresses from RIP-relative operands),
    after ``INDIRECT`` (its address is in the key: the readers read at
    addresses and compare the targets read with the instructions') or, when
    they read nothing (``read`` False), ``UNREAD``: the same bytes
    elsewhere have their RIP-relative addresses moved alike (the readers
    compare and order them only, and read nothing for none of them), and the
    readers read branch targets only as inside the function or not."""
    out: list[tuple[int, int, int]] = [(INDIRECT if read else UNREAD)] if indirect else []
    for eff in effects:
        off = eff.address - start
        size = eff.size
        last = off + size
        target = eff.target
        if target is not None and eff.flow in (Flow.JUMP, Flow.COND, Flow.CALL):
            rel = target - (eff.address + size)
            if size >= 5 and -(1 << 31) <= rel < 1 << 31 \
                    and code[last - 4:last] == struct.pack("<i", rel) \
                    and (code[last - 5] in _REL32 or (size >= 6 and code[last - 6] == 0x0F
                                                      and 0x80 <= code[last - 5] <= 0x8F)):
                out.append((1, off, size))
            elif size >= 2 and -128 <= rel < 128 and code[last - 1:last] == struct.pack("<b", rel) \
                    and code[last - 2] in _REL8:
                out.append((2, off, size))
            continue
        if "rip" in eff.text and not indirect:
            found = _RIP.search(eff.text)
            if found is None:
                continue
            disp = int(found.group(2), 0) * (-1 if found.group(1) == "-" else 1)
            if not -(1 << 31) <= disp < 1 << 31:
                continue
            field = struct.pack("<i", disp)
            insn = code[off:last]
            at = insn.find(field)
            if at >= 0 and insn.find(field, at + 1) < 0:
                out.append((0, off + at, 0))
    return tuple(out)


def masked_key(index: bytes, masks: Masks, code: bytes, start: int) -> bytes | None:
    """The key of ``code`` at ``start`` with ``masks``' fields masked and its
    masked branches' targets as the dataflow reads them; None when the masks
    do not fit the code."""
    buf = bytearray(code)
    size = len(code)
    wheres: list[int] = []
    for kind, off, length in masks:
        if kind == 3:
            wheres.append(start)  # INDIRECT: the address itself
            continue
        if kind == 4:
            continue  # UNREAD
        if kind == 0:
            if not 0 <= off <= size - 4:
                return None
            buf[off:off + 4] = bytes(4)
            continue
        width = 4 if kind == 1 else 1
        end = off + length
        if kind not in (1, 2) or off < 0 or length <= width or end > size:
            return None
        rel = int.from_bytes(code[end - width:end], "little", signed=True)
        where = end + rel
        wheres.append(where if 0 <= where < size else -1)
        buf[end - width:end] = bytes(width)
    head = f"masked\n{masks!r}\n{wheres!r}\n".encode()
    return hashlib.sha256(index + head + bytes(buf)).digest()[:20]


def read_key(quick: bytes, reads: Reads, answers: Sequence[bytes | list[int] | None],
             context: str) -> bytes:
    """The key of a function with indirect jumps: its ``masked_key`` (with
    its address), what the jump-table readers asked and what the file
    answered. The readers are deterministic: given the same effects (the
    same bytes at the same address, but branch displacements whose targets
    the key holds as the readers use them: inside the function or not, see
    ``amd64_jump_tables``, ``_x86_hoisted``, ``_reaches``), the same answers
    make them ask the same next question and resolve the same tables.
    ``context``: what else the readers are given (which of ``read`` and
    ``pointers`` there are, ``absolute_tables``): a reader given ``pointers``
    asks more than one without."""
    text = f"reads\n{context}\n{reads!r}\n{list(answers)!r}"
    return hashlib.sha256(quick + text.encode()).digest()[:20]
