# The one frame dumper of the test suite: `source` it in gdb (gdb's own Python,
# not pytest's), read its output with helpers.gdbtools.parse_frames.
#
# For every thread, in gdb's thread order: "THREAD <lwp>[ selected]", then one
# "FRAME <pc> real|inline <name>" line per frame (inline and tail-call frames
# come from debug info, not from the stack: an unwinder only makes the real
# ones), then "FRAME-END <why the walk stopped>". Reading frames this way is
# sturdier than parsing `bt` text. (The `-ex 'python ... end'` form does not
# work in -batch: gdb hands the whole string, `end` included, to Python.)
import gdb

_NOT_REAL = (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME)
_LIMIT = 100000


def _dump_thread():
    f = gdb.newest_frame()
    n = 0
    while f is not None and n < _LIMIT:
        try:
            pc = f.pc()
        except gdb.error as exc:
            print(f"FRAME-END error: {exc}")
            return
        kind = "inline" if f.type() in _NOT_REAL else "real"
        print(f"FRAME {pc:#x} {kind} {f.name()}")
        n += 1
        try:
            older = f.older()
        except gdb.error as exc:
            print(f"FRAME-END error: {exc}")
            return
        if older is None:
            print(f"FRAME-END {gdb.frame_stop_reason_string(f.unwind_stop_reason())}")
        f = older


def _dump():
    selected = gdb.selected_thread()
    for t in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):
        t.switch()
        print(f"THREAD {t.ptid[1] or t.ptid[0]}{' selected' if t == selected else ''}")
        _dump_thread()
    if selected is not None:
        selected.switch()


_dump()
