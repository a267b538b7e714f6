"""Known producer bugs in real SFrame data, corrected where rows are made.

Each erratum names the producer, what it writes, what the code really does,
and how the case is recognised, so narrowly that no correct section can
match. ``sframe dump`` shows the bytes as they are; rows (and so every
unwinder) get the correction.
"""

from __future__ import annotations

from ..base.abi import AMD64, Arch
from ..base.rows import CFARule
from .records import FDE

__all__ = ["correct_cfa"]

# ld (binutils 2.44 up to at least the 2.47.50 snapshot) gives amd64
# ``.plt.got`` a PC-mask FDE (repeat size 8) whose only FRE says CFA = SP + 16,
# the lazy ``.plt`` template after its push. An 8-byte ``.plt.got`` entry is a
# lone ``jmp *GOT(%rip)`` reached by a call, so CFA = SP + 8, as ld's own
# ``.eh_frame`` says (tests/test_crosscheck.py checks both at every PC).
_PLT_GOT_REP_SIZE = 8
_PLT_GOT_WRONG = CFARule(AMD64.sp, 16)
_PLT_GOT_RIGHT = CFARule(AMD64.sp, 8)


def correct_cfa(arch: Arch, fde: FDE, cfa: CFARule | None) -> CFARule | None:
    if (cfa == _PLT_GOT_WRONG and arch.abi_id == AMD64.abi_id and fde.is_pcmask
            and fde.rep_size == _PLT_GOT_REP_SIZE and fde.num_fres == 1):
        return _PLT_GOT_RIGHT
    return cfa
