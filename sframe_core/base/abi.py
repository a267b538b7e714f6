"""What each SFrame ABI means for unwinding: register numbers and fixed rules.

Registers are named by their DWARF numbers everywhere in sframe_core, because
both sources of rows (SFrame v3 flexible FDEs and DWARF CFI) speak in them.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Arch", "AMD64", "AARCH64_LE", "AARCH64_BE", "S390X", "arch_for_abi", "arch_for_machine",
           "ELF_MACHINE_NAMES",
           "ARCHES", "CALLEE_SAVED"]


class Arch(NamedTuple):
    """Per-ABI facts the decoder and the unwinder need.

    A NamedTuple, as the core's other records, not a dataclass: every
    debugger start-up imports this module, and ``dataclasses`` brings
    ``inspect`` and ``ast`` (7 ms of gdb's start-up) with it.
    """

    name: str
    abi_id: int  # sfh_abi_arch
    big_endian: bool
    sp: int  # DWARF number of the stack pointer
    fp: int  # DWARF number of the frame pointer
    ra: int  # DWARF number of the return-address column
    # Register that holds the return address on entry (aarch64 x30, s390x
    # r14); None where the call instruction pushes it (amd64).
    ra_reg: int | None
    # Caller's SP = CFA + sp_val_offset (s390x keeps a 160-byte save area).
    sp_val_offset: int
    # Registers named in dumps, DWARF number -> name.
    reg_names: tuple[tuple[int, str], ...]
    # ELF e_machine names pyelftools reports for this ABI.
    elf_machines: tuple[str, ...]
    # The ABI marks the outermost frame with a frame pointer of 0 (x86-64
    # psABI: _start clears rbp; AAPCS64: the frame-record chain ends with
    # x29 = 0). s390x has no such rule: r11 is 0 in ordinary code too.
    fp_zero_outermost: bool = True
    # User-space addresses are below 2**user_address_bits (amd64: 47-bit
    # canonical lower half; aarch64: at most 52-bit VAs, PAC and tags stripped);
    # None where the ABI gives user space the whole range (s390x).
    user_address_bits: int | None = None
    # The first instructions of the Linux rt_sigreturn trampoline, as GDB's
    # sigtramp sniffers match them (amd64-linux-tdep.c, aarch64-linux-tdep.c);
    # empty where none is known.
    sigreturn: bytes = b""
    # The header's fixed RA offset the ABI has (SFrame spec, per ABI): amd64's
    # RA is always at CFA - 8; aarch64 and s390x give it in each FRE (0). Any
    # other value is a corrupt header: the rows would put the RA anywhere,
    # and a DWARF consumer of our .debug_frame would follow them blindly.
    fixed_ra_offset: int = 0

    def reg_name(self, regno: int) -> str:
        for number, name in self.reg_names:
            if number == regno:
                return name
        return f"r{regno}"

    def reg_number(self, name: str) -> int | None:
        for number, known in self.reg_names:
            if known == name:
                return number
        return None

    @property
    def cfa_needs_decode(self) -> bool:
        """s390x stores CFA offsets as (offset - 160) / 8."""
        return self.abi_id == 4


_AMD64_REGS = (
    (0, "rax"), (1, "rdx"), (2, "rcx"), (3, "rbx"), (4, "rsi"), (5, "rdi"),
    (6, "rbp"), (7, "rsp"), (8, "r8"), (9, "r9"), (10, "r10"), (11, "r11"),
    (12, "r12"), (13, "r13"), (14, "r14"), (15, "r15"), (16, "rip"),
)
# d8-d15: the callee-saved low halves of v8-v15 (DWARF 72-79), named as
# .eh_frame readers and gdb name them.
_AARCH64_REGS = tuple((i, f"x{i}") for i in range(31)) + ((31, "sp"),) + tuple(
    (64 + i, f"d{i}") for i in range(8, 16))
_S390X_REGS = tuple((i, f"r{i}") for i in range(16)) + tuple(
    (16 + i, f"f{n}") for i, n in enumerate((0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15))
)

_AMD64_SIGRETURN = b"\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05"  # mov $15,%rax; syscall
# mov x8,#139; svc #0 (instructions are little-endian on aarch64_be too)
_AARCH64_SIGRETURN = b"\x68\x11\x80\xd2\x01\x00\x00\xd4"

AMD64 = Arch("amd64", 3, False, sp=7, fp=6, ra=16, ra_reg=None, sp_val_offset=0,
             reg_names=_AMD64_REGS, elf_machines=("EM_X86_64",), sigreturn=_AMD64_SIGRETURN,
             user_address_bits=47, fixed_ra_offset=-8)
AARCH64_BE = Arch("aarch64_be", 1, True, sp=31, fp=29, ra=30, ra_reg=30, sp_val_offset=0,
                  reg_names=_AARCH64_REGS, elf_machines=("EM_AARCH64",),
                  sigreturn=_AARCH64_SIGRETURN, user_address_bits=52)
AARCH64_LE = Arch("aarch64", 2, False, sp=31, fp=29, ra=30, ra_reg=30, sp_val_offset=0,
                  reg_names=_AARCH64_REGS, elf_machines=("EM_AARCH64",),
                  sigreturn=_AARCH64_SIGRETURN, user_address_bits=52)
S390X = Arch("s390x", 4, True, sp=15, fp=11, ra=14, ra_reg=14, sp_val_offset=-160,
             reg_names=_S390X_REGS, elf_machines=("EM_S390",), fp_zero_outermost=False)

ARCHES = (AARCH64_BE, AARCH64_LE, AMD64, S390X)


def arch_for_abi(abi_id: int) -> Arch | None:
    for arch in ARCHES:
        if arch.abi_id == abi_id:
            return arch
    return None


# e_machine numbers -> pyelftools' names, for the machines above: what
# readers that take the ELF header with ``struct`` (files.elf_layout) use.
ELF_MACHINE_NAMES = {62: "EM_X86_64", 183: "EM_AARCH64", 22: "EM_S390"}


def arch_for_machine(machine: str, big_endian: bool) -> Arch | None:
    """The ABI of an ELF file: its ``e_machine`` (pyelftools' name for it,
    ``Arch.elf_machines``) and byte order."""
    for arch in ARCHES:
        if machine in arch.elf_machines and arch.big_endian == big_endian:
            return arch
    return None


# Callee-saved registers other than the FP, by DWARF number: what the
# saved-register analysis tracks (analysis/) and what a row's text names
# (format/describe.py).
CALLEE_SAVED: dict[str, tuple[int, ...]] = {
    "amd64": (3, 12, 13, 14, 15),  # rbx, r12-r15 (rbp is SFrame's FP)
    "aarch64": tuple(range(19, 29)) + tuple(range(72, 80)),  # x19-x28, d8-d15 (v8-v15)
    "s390x": tuple(range(6, 11)) + (12, 13) + tuple(range(24, 32)),  # r6-r13 but r11, f8-f15
}
