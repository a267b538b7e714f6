"""The amd64 saved-register analysis in C (``amd64.c``), where a C compiler made it.

The Python analysis (``saved.analyse`` over ``amd64.py``'s effects) is most
of a symbol file's time, and LLDB waits for the whole file of a module with
debug information before its first stop (figures: docs/dwarf.md, "Cost").
``amd64.c`` is the same analysis (capstone's detailed decode as
``AMD64Decoder._effect`` reads it, the same dataflow, spans and exits,
gcc's jump tables read the way ``amd64_jump_tables`` reads them) for the
functions it covers: entered at their first instruction, with no computed
goto (whose table the Python reads through the module's relocations); an
indirect jump that is no table it reads (a tail call through a register)
goes anywhere its CFA rule fits, as in the Python. It declines the rest,
which ``saved.analyse`` decides, so every result is the one the Python
gives (``tests/test_native.py`` holds it to that on every amd64 function of
the fixtures, the real programs and the host's libc and loader). Its
protocol with the Python is ``sframe_native.h`` and ``protocol.py``.

It is compiled against the headers that come with capstone's Python binding
and calls that binding's own library, which it loads itself, privately (the
same capstone, so the same decoding). Built once per checkout or
installation (``python -m sframe_core.analysis.native`` does it; setup.sh
runs that), else at first use where a compiler is found (outside a
debugger's own process: a symbol-file worker, the command line), beside
this file or, where that is not writable, in the user's cache; without a
compiler, or with ``SFRAME_NATIVE=0``, there is none and the Python analysis
serves all.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from ...base import settings
from ...base.abi import AMD64
from ...base.files import cache_root
from ...base.rows import SAME, CFARule, Rule, RuleKind
from ..records import Analysis, Exit, Span, State, anchor, new_record
from .protocol import (
    EXIT_WORDS,
    NO_READ,
    NONE,
    READ,
    SMALL,
    SPAN_WORDS,
    TRACKED,
    compile_flags,
    declare,
)

__all__ = ["ENV", "wanted", "available", "analyse", "build", "built", "exits", "library",
           "library_path"]

ENV = "SFRAME_NATIVE"
_HERE = os.path.dirname(os.path.abspath(__file__))
# amd64.c: the analysis; fdes.c: a symbol file's FDEs around it (symfiles/native_fdes.py);
# sframe_native.h: the protocol both share with protocol.py.
_SOURCES = tuple(os.path.join(_HERE, name) for name in ("amd64.c", "fdes.c"))
_HEADER = os.path.join(_HERE, "sframe_native.h")

_lib: Any = None
_tried = False
_out = array("q")  # the C's answers (grown to fit the largest function asked)
# A span's rules by the C's words for them: spans mostly repeat a few.
_regs: dict[tuple[int, ...], tuple[tuple[int, Rule], ...]] = {}
# The reader of the function being analysed (``analyse``'s ``read``), and
# whether it failed: the C asks it for jump tables through ``_read``.
_reader: list[Callable[[int, int], bytes | None] | None] = [None]
_failed = [False]


@READ
def _read(context: int | None, address: int, size: int, out: int) -> int:
    """The C's ``read``: the file's bytes at ``address``, 1; 0 where there are none.
    Nothing may leave a ctypes callback: a reader that raises makes the C's
    answer void (``analyse`` then declines, and the Python analysis raises it)."""
    try:
        reader = _reader[0]
        data = None if reader is None else reader(address, size)
        if data is None or len(data) != size:
            return 0
        ctypes.memmove(out, data, size)
        return 1
    except BaseException:  # noqa: BLE001 - see above
        _failed[0] = True
        return 0


def _capstone() -> tuple[str, str] | None:
    """(the include directory, the library) of capstone's Python binding
    (found, not imported: a debugger's stop asks ``built`` early)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("capstone")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    root = os.path.dirname(os.path.abspath(spec.origin))
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib", "libcapstone.so")
    if not os.path.isfile(os.path.join(include, "capstone", "capstone.h")) or not os.path.isfile(lib):
        return None
    return include, lib


def wanted() -> bool:
    """Whether the C may serve (``SFRAME_NATIVE``): read each time a section's
    analysis is made or a symbol file asks, so a test or a session turns it
    off by the variable."""
    return settings.switch(ENV)


def built() -> bool:
    """Is the C analysis built here and not turned off (without loading it)?"""
    if not wanted():
        return False
    if _lib is not None:
        return True
    path = library_path()
    return path is not None and os.path.isfile(path)


@functools.cache
def _name() -> str | None:
    """The built library's file name: a digest of its sources, of the values
    the Python passes it (``protocol.compile_flags``) and of the capstone it
    is built against (read once per process)."""
    found = _capstone()
    if found is None:
        return None
    lib = found[1]
    source = b""
    for path in (*_SOURCES, _HEADER):
        with open(path, "rb") as stream:
            source += stream.read()
    source += "\n".join(compile_flags()).encode()
    stat = os.stat(lib)
    key = hashlib.sha256(source + f"\n{lib}\n{stat.st_size}\n{stat.st_mtime_ns}".encode()).hexdigest()
    return f"amd64-{key[:16]}.so"


def library_path() -> str | None:
    """Where the built library for this source and this capstone is (or goes)."""
    name = _name()
    if name is None:
        return None
    for directory in (os.path.join(_HERE, "_build"), _user_dir()):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    here = os.path.join(_HERE, "_build")
    writable = os.access(_HERE, os.W_OK) and (not os.path.exists(here) or os.access(here, os.W_OK))
    return os.path.join(here if writable else _user_dir(), name)


def _user_dir() -> str:
    return os.path.join(cache_root(), "native")


def build() -> str | None:
    """Compile ``amd64.c`` and ``fdes.c`` if they are not built yet; the path, or None (no
    compiler, no capstone headers, or the compiler failed)."""
    target = library_path()
    found = _capstone()
    if target is None or found is None:
        return None
    if os.path.isfile(target):
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".amd64-", suffix=".so", dir=os.path.dirname(target))
        os.close(fd)
    except OSError:
        return None
    try:
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", found[0], *compile_flags(),
                               "-o", tmp, *_SOURCES, "-ldl"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            return None
        os.replace(tmp, target)
        _forget_others(target)
        return target
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _forget_others(kept: str) -> None:
    """Remove the builds of other sources or capstones beside ``kept`` (a
    process that loaded one keeps its mapping)."""
    directory = os.path.dirname(kept)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith("amd64-") and name.endswith(".so") and name != os.path.basename(kept):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def available() -> bool:
    """Is the C analysis here (built now if a compiler can), and not turned off?"""
    global _lib, _tried
    if _lib is not None:
        return True
    if _tried or not wanted():
        return False
    _tried = True
    found = _capstone()
    # A debugger's own process never runs the compiler (a pause of a second
    # at some first frame): it takes a build that is there, which setup.sh,
    # the command line or any symbol-file worker leaves.
    inside = "gdb" in sys.modules or "lldb" in sys.modules
    path = library_path() if inside else build()
    if found is None or path is None or not os.path.isfile(path):
        return False
    try:
        lib = ctypes.CDLL(path)
        if not declare(lib) or lib.sf_amd64_init(os.fsencode(found[1])) != 0:  # the binding's capstone
            return False
    except (OSError, AttributeError):
        return False
    _lib = lib
    return True


def _regs_of(words: tuple[int, ...]) -> tuple[tuple[int, Rule], ...]:
    """A span's rules from the C's kind and offset per tracked register."""
    regs: list[tuple[int, Rule]] = []
    for i, reg in enumerate(TRACKED):
        kind = words[2 * i]
        if kind == 1:
            regs.append((reg, SAME))
        elif kind == 2:
            regs.append((reg, Rule(RuleKind.AT_CFA, words[2 * i + 1])))
    return tuple(regs)


def analyse(code: bytes, start: int, rows: Sequence[tuple[int, CFARule | None]],
            read: Callable[[int, int], bytes | None] | None = None) -> Analysis | None:
    """``saved.analyse``'s result for an amd64 function entered at ``start``
    whose first row is a function entry, or None where the C declines (the
    Python analysis then decides). ``read(address, size)``: the file's bytes,
    for jump tables (None: a function with an indirect jump is declined)."""
    global _out
    if _lib is None and not available():
        return None
    words: list[int] = []
    for at, cfa in rows:  # each row and its anchor, None as the C's NONE
        sp, fp = anchor(cfa, AMD64)
        words += (at, NONE if sp is None else sp, NONE if fp is None else fp)
    packed = array("q", words)
    want = 1024 + 64 * len(code)
    if len(_out) < want:
        _out = array("q", bytes(8 * want))
    _reader[0], _failed[0] = read, False
    try:
        while True:
            answer = _lib.sf_amd64_analyse(code, len(code), start, packed.buffer_info()[0],
                                           len(rows), _read if read is not None else NO_READ, None,
                                           _out.buffer_info()[0], len(_out))
            if answer != SMALL:
                break
            _out = array("q", bytes(16 * len(_out)))
    finally:
        _reader[0] = None
    if answer < 0 or _failed[0]:
        return None
    out = _out[:answer].tolist()
    spans, pos = _spans(out)
    return Analysis(spans, "", exits(out, pos))


def library() -> Any:
    """The loaded library (``sf_amd64_fdes`` for symfiles/native_fdes.py), or
    None (none, or turned off: ``wanted``)."""
    return _lib if wanted() and (_lib is not None or available()) else None


def _spans(out: list[int]) -> tuple[tuple[Span, ...], int]:
    """The spans of the C's answer, and where its exits begin."""
    spans = []
    pos = 1
    made = _regs
    for _ in range(out[0]):
        key = tuple(out[pos + 2:pos + SPAN_WORDS])
        regs = made.get(key)
        if regs is None:
            if len(made) >= 4096:
                made.clear()
            regs = made[key] = _regs_of(key)
        spans.append(new_record(Span, (out[pos], out[pos + 1], regs)))
        pos += SPAN_WORDS
    return tuple(spans), pos


def exits(out: Sequence[int], pos: int = 0) -> tuple[Exit, ...]:
    """The exits of the C's words from ``pos`` on (their count, then each)."""
    found: list[Exit] = []
    count, pos = out[pos], pos + 1
    for _ in range(count):
        target = out[pos]
        state = None
        if out[pos + 1]:
            w = out[pos + 2:pos + EXIT_WORDS]
            state = new_record(State, (None if w[0] == NONE else w[0], None if w[1] == NONE else w[1],
                                  tuple((None if w[2 + 3 * i] == NONE else w[2 + 3 * i],
                                         bool(w[3 + 3 * i]), bool(w[4 + 3 * i]), None)
                                        for i in range(len(TRACKED))), None))
        found.append((None if target == NONE else target, state))
        pos += EXIT_WORDS
    return tuple(found)


def main() -> int:
    """Build the library (setup.sh); say where it is, or why there is none."""
    path = build()
    if path is None:
        print("sframe: no native amd64 analysis (no C compiler, or capstone without its headers); "
              "the Python analysis serves", file=sys.stderr)
        return 1
    print(path)
    return 0
