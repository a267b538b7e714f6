"""What Linux's SFrame unwinder (kernel/unwind/sframe.c) refuses in a file.

The kernel reads a loaded file's section through PT_GNU_SFRAME and drops
all of it at its first bad entry, so each rule is reported once, at its
first offender. The rules are the kernel's, on the format's own records
(the header as written, the FDEs, the FREs) and the program headers:
docs/verify.md lists the kernel function each follows. ``sframe verify
--kernel`` words them (``verify/check.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..base.errors import FormatError
from .elf import ElfSFrame
from .linked import Part, describe_parts
from .records import FRE_TYPE_ADDR4
from .section import SFrameSection

__all__ = ["Refusal", "kernel_refusals"]


class Refusal(NamedTuple):
    """One rule the section breaks, at its first offender."""

    kind: str  # concatenated, version, sorted, pcrel, ..., fre-order, words
    pc: int | None  # the offender's address, None for the whole section
    text: str  # in words, with the kernel function that refuses


def kernel_refusals(info: ElfSFrame, section: SFrameSection,
                    sframe_segments: Sequence[tuple[int, int]],
                    exec_segments: Sequence[tuple[int, int]]) -> list[Refusal]:
    """Why the kernel would refuse ``section``, read from ``info``; empty: it
    would accept it.

    ``sframe_segments``: the file's PT_GNU_SFRAME program headers,
    ``exec_segments`` its executable PT_LOAD ones, each (vaddr, memsz).
    """
    parts = info.parts() if not info.is_relocatable else [Part(0, section.header)]
    hdr = parts[0].header  # as written: info.open merges concatenated parts
    out: list[Refusal] = []

    def refuse(kind: str, pc: int | None, text: str) -> None:
        if all(r.kind != kind for r in out):
            out.append(Refusal(kind, pc, text))

    if len(parts) > 1:
        refuse("concatenated", None, f"{describe_parts(parts)}: sframe_read_header reads the "
                                     f"first header's {hdr.num_fdes} FDEs only")
    if hdr.version != 3:
        refuse("version", None, f"SFrame version {hdr.version}: sframe_read_header accepts only "
                                "version 3")
    if not hdr.sorted:
        refuse("sorted", None, "SFRAME_F_FDE_SORTED is not set (sframe_read_header)")
    if not hdr.pcrel:
        refuse("pcrel", None, "SFRAME_F_FDE_FUNC_START_PCREL is not set (sframe_read_header)")
    if hdr.auxhdr_len:
        refuse("auxhdr", None, f"auxiliary header of {hdr.auxhdr_len} bytes (sframe_read_header)")
    if not hdr.num_fdes or not hdr.num_fres:
        refuse("empty", None, "no FDEs or no FREs (sframe_read_header)")
    if info.is_relocatable:
        refuse("relocatable", None, "a relocatable object: the kernel reads only loaded files")
        return out
    if not sframe_segments:
        refuse("segment", None, "no PT_GNU_SFRAME program header: the kernel finds the section "
                                "only through it")
    fixed_ra = hdr.cfa_fixed_ra_offset != 0
    previous: int | None = None
    for index in range(hdr.num_fdes):
        try:
            fde = section.get_fde(index)
        except FormatError as exc:
            refuse("fde", None, f"FDE {index}: {exc}")
            continue
        if previous is not None and fde.start < previous:
            refuse("order", fde.start, f"FDE {index} starts before FDE {index - 1}: the binary "
                                       "search fails (__find_fde)")
        previous = fde.start
        if not any(lo <= fde.start <= lo + size for lo, size in exec_segments):
            refuse("text", fde.start, f"FDE {index} at {fde.start:#x} is outside executable text "
                                      "(__read_fde)")
        if hdr.version == 3 and fde.flex:
            refuse("flex", fde.start, f"FDE {index} is a flexible FDE, which the kernel does not "
                                      "read yet (__read_fre)")
        if fde.info & 0x40 or fde.info2 & 0xE0 or fde.fre_type > FRE_TYPE_ADDR4:
            refuse("reserved", fde.start, f"FDE {index}: reserved bits set (info {fde.info:#04x},"
                                          f" info2 {fde.info2:#04x})")
        try:
            fres = section.get_fres(fde)
        except FormatError as exc:
            refuse("fre", fde.start, f"FDE {index}: {exc} (__read_fre)")
            continue
        last = -1
        for k, fre in enumerate(fres):
            pc = fde.start + fre.start
            if not fde.is_pcmask and fre.start > fde.size:
                refuse("fre-end", pc, f"FDE {index} FRE {k} starts past its function (__read_fre)")
            if fre.start <= last:
                refuse("fre-order", pc, f"FDE {index} FRE {k} does not start after FRE {k - 1} "
                                        f"(offset {fre.start:#x}): FREs must strictly increase "
                                        "(__find_fre)")
            last = fre.start
            count = len(fre.words)
            allowed = (0, 1, 2) if fixed_ra else (0, 2, 3)
            if not (hdr.version == 3 and fde.flex) and count not in allowed:
                why = (" (the CFA alone: __read_fre wants an RA word when the header has no "
                       "fixed RA offset)") if count == 1 else " (__read_fre)"
                refuse("words", pc, f"FDE {index} FRE {k} has {count} data words, the kernel "
                                    f"reads {allowed[0]}, {allowed[1]} or {allowed[2]}{why}")
    return out
