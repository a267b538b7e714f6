# Dumps what gdb shows INSIDE every frame of the selected thread: the
# callee-saved registers and every local variable and argument in scope.
# `source` it in gdb (gdb's own Python); read the output with
# helpers.gdbtools.parse_values. One line per item:
#   FRAME <level> <pc> <name>  (TAILCALL <level> <pc> <name>: skipped)
#   REG <name> <value>          VAR <name> <value>
# A value gdb cannot give prints as <unavailable> (not saved, optimized out,
# unreadable), which the tests treat alike.
import gdb

_REGS = {
    "i386:x86-64": ("rbx", "rbp", "r12", "r13", "r14", "r15", "rsp", "rip"),
    "aarch64": tuple(f"x{n}" for n in range(19, 30)) + tuple(f"d{n}" for n in range(8, 16))
    + ("sp", "pc"),
    "s390:64-bit": tuple(f"r{n}" for n in range(6, 16)) + tuple(f"f{n}" for n in range(8, 16)),
}
_LIMIT = 40  # frames; `set $values_depth = N` dumps fewer


def _text(get):
    try:
        value = get()
        if value.is_optimized_out:
            return "<unavailable>"
        text = value.format_string(raw=True, max_elements=8, repeat_threshold=100,
                                   max_depth=2) if hasattr(value, "format_string") else str(value)
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
            print(f"REG {reg} {_text(lambda f=f, reg=reg: f.read_register(reg))}")
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
