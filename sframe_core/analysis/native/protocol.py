"""The ctypes side of ``sframe_native.h``: the C analysis's protocol, mirrored once.

``native/__init__.py`` (the analysis of one function) and
``symfiles/native_fdes.py`` (a symbol file's FDEs) both speak to the
library through these: its entry points' signatures, its structs, the
words of its answers. ``compile_flags`` is the other direction: the values
the Python analysis defines, passed to the C when it is built rather than
copied into it (the build's name is a digest of them, so a change here
rebuilds the C).
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["NONE", "DECLINE", "NOMEM", "SMALL", "FDE_WORDS", "ST_DONE", "ST_DECLINED", "TRACKED",
           "SPAN_WORDS", "EXIT_WORDS", "READ", "NO_READ", "Region", "Section", "compile_flags",
           "declare"]

# sframe_native.h's words: an unknown value, the entry points' refusals.
NONE = -(1 << 63)
DECLINE, NOMEM, SMALL = -1, -2, -3
# sf_amd64_fdes's words per FDE, and its statuses.
FDE_WORDS = 7
ST_DONE, ST_DECLINED = 1, 2


def _tracked() -> tuple[int, ...]:
    from ..effects import CALLEE_SAVED

    return CALLEE_SAVED["amd64"]


# The analysis's tracked registers, in the order of the C's words.
TRACKED = _tracked()
SPAN_WORDS = 2 + 2 * len(TRACKED)
EXIT_WORDS = 4 + 3 * len(TRACKED)

# sf_read_fn: (context, address, size, out) -> 1, or 0 where there are no bytes.
READ = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                        ctypes.c_void_p)
NO_READ = READ()  # NULL: no table is read


class Region(ctypes.Structure):
    """``struct sf_region``: a PT_LOAD segment's contents."""

    _fields_ = [("vaddr", ctypes.c_uint64), ("filesz", ctypes.c_uint64),
                ("len", ctypes.c_uint64), ("bytes", ctypes.c_char_p)]


class Section(ctypes.Structure):
    """``struct sf_section``: the section and what the Python knows of it."""

    _fields_ = [
        ("data", ctypes.c_char_p), ("size", ctypes.c_int64), ("version", ctypes.c_int64),
        ("fixed_ra", ctypes.c_int64), ("fde_base", ctypes.c_int64), ("fde_size", ctypes.c_int64),
        ("fre_base", ctypes.c_int64), ("fre_end", ctypes.c_int64), ("fre_len", ctypes.c_int64),
        ("num_fdes", ctypes.c_int64), ("starts", ctypes.c_void_p),
        ("regions", ctypes.POINTER(Region)), ("nregions", ctypes.c_int64),
        ("max_bytes", ctypes.c_int64), ("analyse", ctypes.c_int64)]


def _strings(words: object) -> str:
    return ",".join(f'"{word}"' for word in words)  # type: ignore[attr-defined]


def compile_flags() -> tuple[str, ...]:
    """The ``-D`` flags that give the C the Python analysis's values
    (``sframe_native.h`` names them): its bounds, the CFA at a function's
    entry, the tracked registers and the row's registers around them, and
    the register names and mnemonic lists amd64.py reads capstone's text
    with."""
    from ...base.abi import AMD64
    from ..amd64 import X86_ALIASES, X86_MOVES, X86_NAMES, X86_STOPS, X86_UNSIZED
    from ..effects import TABLE_MAX
    from ..records import ENTRY_CFA, MAX_INSNS, RED_ZONE

    tracked = _tracked()
    aliases = ",".join("{" + _strings(names) + ",NULL}" for names in X86_ALIASES.values())
    return (
        f"-DSF_MAX_INSNS={MAX_INSNS}",
        f"-DSF_RED_ZONE={RED_ZONE['amd64']}",
        f"-DSF_TABLE_MAX={TABLE_MAX}",
        f"-DSF_ENTRY_CFA={ENTRY_CFA['amd64']}",
        f"-DSF_NTRACKED={len(tracked)}",
        f"-DSF_TRACKED={','.join(map(str, tracked))}",
        f"-DSF_FDE_REGS={','.join(map(str, sorted({*tracked, AMD64.fp, AMD64.ra})))}",
        f"-DSF_FP_REG={AMD64.fp}",
        f"-DSF_RA_REG={AMD64.ra}",
        "-DSF_X86_NAMES=" + ",".join(f'{{"{name}",{number}}}' for name, number in X86_NAMES.items()),
        f"-DSF_X86_ALIASES={aliases}",
        f"-DSF_X86_MOVES={_strings(sorted(X86_MOVES))}",
        f"-DSF_X86_UNSIZED={_strings(X86_UNSIZED)}",
        f"-DSF_X86_STOPS={_strings(sorted(X86_STOPS))}",
    )


def declare(lib: Any) -> bool:
    """Give ``lib``'s entry points their signatures; False where its structs
    are not the ones mirrored here (a library of another protocol)."""
    lib.sf_amd64_init.argtypes = [ctypes.c_char_p]
    lib.sf_amd64_analyse.restype = ctypes.c_long
    lib.sf_amd64_analyse.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64,
                                     ctypes.c_void_p, ctypes.c_long, READ, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_long]
    lib.sf_amd64_fdes.restype = ctypes.c_long
    lib.sf_amd64_fdes.argtypes = [ctypes.POINTER(Section), ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_long,
                                  ctypes.POINTER(ctypes.c_long)]
    lib.sf_native_layout.restype = None
    lib.sf_native_layout.argtypes = [ctypes.c_void_p]
    sizes = (ctypes.c_int64 * 2)()
    lib.sf_native_layout(sizes)
    return tuple(sizes) == (ctypes.sizeof(Region), ctypes.sizeof(Section))
