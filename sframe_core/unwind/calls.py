"""Does a call instruction end at an address: can a PC be a return address?

A debugger numbers inline frames too, so the innermost real frame can sit
above level 0 with the live PC, which is the next instruction to run, not a
return address. Its rows must then be looked up at the PC itself, not at
``pc - 1``; the bytes before the PC tell which (a call instruction ends
there or not). Pure over bytes: the adapter reads them from the file.
"""

from __future__ import annotations

from ..base.abi import Arch

__all__ = ["CALL_WINDOW", "ends_with_call"]

# How many bytes before the PC ``ends_with_call`` reads: the longest call
# encoding compilers emit (amd64 ``call *disp32(base,index,scale)``).
CALL_WINDOW = 8


def ends_with_call(code: bytes, arch: Arch) -> bool:
    """Do the ``CALL_WINDOW`` bytes before a PC end with a call instruction?

    amd64: ``call rel32`` (E8, 5 bytes before the PC) and ``call r/m``
    (FF /2) with its opcode 2, 3, 4, 6, 7 or 8 bytes before it; aarch64:
    ``bl``, ``blr`` and the pointer-authenticating ``blraa``/``blrab``/
    ``blraaz``/``blrabz``. Another ABI counts as yes: the
    frame is then treated as a caller, as every frame above level 0 is.
    """
    if arch.name == "amd64":
        return (code[3] == 0xE8 or (code[6] == 0xFF and code[7] & 0x38 == 0x10)
                or (code[5] == 0xFF and code[6] & 0x38 == 0x10)
                or (code[2] == 0xFF and code[3] & 0x38 == 0x10)
                or (code[1] == 0xFF and code[2] & 0x38 == 0x10)
                or (code[0] == 0xFF and code[1] & 0x38 == 0x10)
                or (code[4] == 0xFF and code[5] & 0x38 == 0x10))
    if arch.name.startswith("aarch64"):
        word = int.from_bytes(code[4:], "big" if arch.big_endian else "little")
        return (word & 0xFC000000 == 0x94000000 or word & 0xFFFFFC1F == 0xD63F0000
                or word & 0xFEFFF800 == 0xD63F0800)
    return True
