# Dumps what gdb shows INSIDE every frame of the selected thread: the
# callee-saved registers and every local variable and argument in scope.
# `source` it in gdb (gdb's own Python); read the output with
# helpers.gdbtools.parse_values. One line per item:
#   FRAME <level> <pc> <name>  (TAILCALL <level> <pc> <name>: skipped)
#   REG <name> <value>          VAR <name> <value>
# A value gdb cannot give prints as <unavailable> (not saved, optimized out,
# unreadable), which the tests treat alike.
import re

import gdb

_REGS = {
    "i386:x86-64": ("rbx", "rbp", "r12", "r13", "r14", "r15", "rsp", "rip"),
    "aarch64": tuple(f"x{n}" for n in range(19, 30)) + tuple(f"d{n}" for n in range(8, 16))
    + ("sp", "pc"),
    "s390:64-bit": tuple(f"r{n}" for n in range(6, 16)) + tuple(f"f{n}" for n in range(8, 16)),
}
_LIMIT = 40  # frames; `set $values_depth = N` dumps fewer
# s390x f8-f15 print as their bits (hex). Where the target has the vector
# facility (qemu's stub has, whatever -cpu says), GDB maps DWARF 16-31 to the
# pseudo registers v0-v15, so its own DWARF unwinder applies .eh_frame's rule
# for f8 to v8 and leaves raw f8 "same value": wrong in caller frames once a
# callee changed it. With `set $values_fpr_oracle = 1` (gdb's own unwinder)
# f8-f15 are evaluated from the rules GDB read instead: the live value in
# frame 0, then in each caller the 8 bytes at the address `info frame` of the
# frame below gives for vN (or fN), else the value below (same value).
_S390X_FPRS = {f"f{n}": n for n in range(8, 16)}
_SAVED_AT = re.compile(r"\b[fv](\d+) at (0x[0-9a-f]+)")


def _fpr_callers(f, fprs):
    """f8-f15 (n -> bits) in the caller of ``f``, from ``fprs`` in ``f``."""
    out = dict(fprs)
    try:
        f.select()
        text = gdb.execute("info frame", to_string=True)
    except gdb.error:
        return {n: None for n in fprs}
    _, _, saved = text.partition("Saved registers:")
    for n, at in _SAVED_AT.findall(saved):
        if int(n) in out:
            try:
                data = gdb.selected_inferior().read_memory(int(at, 16), 8).tobytes()
                out[int(n)] = int.from_bytes(data, "big")
            except gdb.MemoryError:
                out[int(n)] = None
    return out

def _text(get, fmt=None):
    try:
        value = get()
        if value.is_optimized_out:
            return "<unavailable>"
        if fmt is not None:
            text = value.format_string(format=fmt)
        else:
            text = value.format_string(raw=True, max_elements=8, repeat_threshold=100,
                                       max_depth=2) if hasattr(value, "format_string") \
                else str(value)
    except (gdb.error, gdb.MemoryError, ValueError, RuntimeError):
        return "<unavailable>"
    if "<unavailable>" in text or "<optimized out>" in text or "<not saved>" in text \
            or "<error" in text:
        return "<unavailable>"
    return " ".join(text.split())


def _dump():
    f = gdb.newest_frame()
    regs = _REGS.get(f.architecture().name(), ())
    level = 0
    depth = gdb.convenience_variable("values_depth")
    limit = int(depth) if depth is not None else _LIMIT
    oracle = None
    want = gdb.convenience_variable("values_fpr_oracle")
    if want is not None and int(want) and _S390X_FPRS.keys() & set(regs):
        oracle = {n: int(f.read_register(r).format_string(format="x"), 16)
                  for r, n in _S390X_FPRS.items()}
    while f is not None and level < limit:
        try:
            name = f.name()
            pc = f.pc()
        except gdb.error:
            break
        if f.type() == gdb.TAILCALL_FRAME:
            # Made up by gdb's DWARF unwinder from call-site info, not by any
            # unwinder from the stack: nothing to compare.
            print(f"TAILCALL {level} {pc:#x} {name}")
            f = f.older()
            level += 1
            continue
        print(f"FRAME {level} {pc:#x} {name}")
        for reg in regs:
            if reg in _S390X_FPRS and oracle is not None:
                bits = oracle.get(_S390X_FPRS[reg])
                text = "<unavailable>" if bits is None else f"{bits:#x}"
            elif reg in _S390X_FPRS:
                text = _text(lambda f=f, reg=reg: f.read_register(reg), "x")
            else:
                text = _text(lambda f=f, reg=reg: f.read_register(reg))
            print(f"REG {reg} {text}")
        if oracle is not None:
            oracle = _fpr_callers(f, oracle)
        try:
            block = f.block()
        except RuntimeError:
            block = None
        seen = set()
        while block is not None:
            for sym in block:
                if (sym.is_variable or sym.is_argument) and sym.name not in seen:
                    seen.add(sym.name)
                    print(f"VAR {sym.name} {_text(lambda f=f, sym=sym: sym.value(f))}")
            if block.function is not None:
                break
            block = block.superblock
        try:
            f = f.older()
        except gdb.error:
            break
        level += 1


_dump()
gdb.newest_frame().select()  # `info frame` above selected others; nexti steps frame 0
