"""The SFrame format: records, sections, errata, SFrame in ELF files, dump and describe."""

from __future__ import annotations

from ..base import settings

__all__ = ["SAVED_REGISTERS_ENV", "saved_registers"]

# The switch for the callee-saved register analysis (analysis/saved.py): rows
# carry rules for rbx/r12-r15, x19-x28/d8-d15 where the function's code proves
# them. A section takes it as it is opened, unless its opener says.
SAVED_REGISTERS_ENV = "SFRAME_SAVED_REGISTERS"


def saved_registers() -> bool:
    """Whether a section opened now gives its rows saved-register rules.

    Here rather than in ``section``: a symbol file's cache key depends on
    it, and a cache hit imports no decoder.
    """
    return settings.switch(SAVED_REGISTERS_ENV)
