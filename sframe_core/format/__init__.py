"""The SFrame format: records, sections, errata, SFrame in ELF files, dump and describe."""

from __future__ import annotations

import sys

__all__ = ["saved_registers"]


def saved_registers() -> bool:
    """``section.SAVED_REGISTERS``, the switch of the callee-saved register
    analysis, without importing the decoder for it.

    A symbol file's cache key depends on the switch, and a cache hit decodes
    no section: until ``section`` is imported nobody has set the switch, so
    it has the value ``section`` gives it (True).
    """
    section = sys.modules.get(f"{__name__}.section")
    return True if section is None else bool(section.SAVED_REGISTERS)
