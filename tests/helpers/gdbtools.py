"""Drive a real gdb with pexpect: start it clean, load the plugin, run commands, parse `bt`.

Used by tests/test_gdb.py and bench/bench_gdb.py. gdb runs interactively
(``from_tty`` is on, so it prints "Backtrace stopped: ..." lines) with
``-nx -q``, a scrubbed environment and a fixed prompt.

Where a test wants frames rather than ``bt`` text, gdb sources
``FRAMES_SCRIPT`` (``gdb_frames.py`` here, the one frame dumper of the
suite), and ``parse_frames`` reads what it printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import pexpect

from . import FIXTURES, ROOT, Frame

PLUGIN = ROOT / "sframe_gdb.py"
FRAMES_SCRIPT = Path(__file__).resolve().parent / "gdb_frames.py"
LOADED_LINE = "sframe: SFrame unwinder ready (help sframe)"
PROMPT = "(gdb-sframe-test) "
TIMEOUT = 60  # seconds for one command; a 10,000-frame bt takes a few

# The gdbs the suite runs under: the system one and those scripts/setup.sh
# installs (16, Debian 13's version; 17 and 18).
GDBS = {
    "gdb13": os.environ.get("SFRAME_GDB13", "/usr/bin/gdb"),
    "gdb16": os.environ.get("SFRAME_GDB16", str(ROOT / ".debuggers" / "bin" / "gdb-16")),
    "gdb17": os.environ.get("SFRAME_GDB17", str(ROOT / ".debuggers" / "bin" / "gdb-17")),
    "gdb18": os.environ.get("SFRAME_GDB18", str(ROOT / ".debuggers" / "bin" / "gdb-18")),
}

_VERSION = re.compile(r"^GNU gdb (?:\([^)]*\) )?(\d+)\.(\d+)", re.M)
# One frame line of `bt`: "#3  0x000055555555548d in f1 ()", or
# "#0  stop_here () at x.c:3" (no address when the PC is at a line start),
# or "#3  <signal handler called>".
_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-f]+) in )?(<signal handler called>|\S+)", re.M)


def gdb_version(path: str) -> tuple[int, int] | None:
    """(major, minor) of the gdb at ``path``, or None when it cannot run."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60,
                             env=clean_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION.search(out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def clean_env() -> dict[str, str]:
    """A minimal environment: no user gdbinit, no debuginfod, no pager, no venv."""
    home = tempfile.gettempdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TERM": "dumb",
        "LANG": "C",
        "LC_ALL": "C",
        "COLUMNS": "200",
        "LINES": "50",
        # Symbol files made before gdb goes on, whatever the module's size, so
        # that a session sees the route from its first stop (the default
        # makes large ones in a worker: test_gdb_route.py tests that).
        "SFRAME_GDB_SYMBOL_FILES": "foreground",
    }
    # The gdb-18 wrapper sets LD_LIBRARY_PATH itself.
    return env


def parse_bt(text: str) -> list[Frame]:
    return [Frame(int(m.group(2), 16) if m.group(2) else None, m.group(3), level=int(m.group(1)))
            for m in _FRAME.finditer(text)]


_DUMP_FRAME = re.compile(r"^FRAME (0x[0-9a-f]+) (real|inline|tailcall) (.*)$")


class Dump:
    """One thread as ``FRAMES_SCRIPT`` printed it."""

    def __init__(self, lwp: int, selected: bool) -> None:
        self.lwp = lwp
        self.selected = selected
        self.frames: list[Frame] = []  # every frame gdb shows, inline ones included
        self.real: list[int] = []  # the PCs of the frames an unwinder made (no inline/tail call)
        self.kinds: list[str] = []  # per frame: "real", "inline" or "tailcall"
        self.end = "(no FRAME-END line: the walk did not finish)"


def parse_frames(text: str) -> list[Dump]:
    """The threads ``FRAMES_SCRIPT`` printed, in gdb's thread order."""
    threads: list[Dump] = []
    for line in text.splitlines():
        if line.startswith("THREAD "):
            parts = line.split()
            threads.append(Dump(int(parts[1]), parts[-1] == "selected"))
        elif threads and line.startswith("FRAME-END "):
            threads[-1].end = line[len("FRAME-END "):].strip()
        elif threads and (m := _DUMP_FRAME.match(line)):
            dump = threads[-1]
            name = m.group(3).strip()
            pc = int(m.group(1), 16)
            dump.frames.append(Frame(pc, None if name == "None" else name, level=len(dump.frames)))
            dump.kinds.append(m.group(2))
            if m.group(2) == "real":
                dump.real.append(pc)
    return threads


class Gdb:
    """One gdb process. ``cmd`` returns the command's output (prompt excluded)."""

    def __init__(self, gdb: str, *, plugin: bool = True, args: list[str] | None = None,
                 cwd: str | None = None, timeout: float = TIMEOUT,
                 disable_prologue: bool = True, symbol_files: str = "foreground",
                 env: dict[str, str] | None = None) -> None:
        self.path = gdb
        argv = ["-nx", "-q", "-iex", f"set prompt {PROMPT}",
                "-iex", "set pagination off", "-iex", "set width 0", "-iex", "set height 0",
                "-iex", "set confirm off"] + (args or [])
        environment = clean_env() | (env or {})
        environment["SFRAME_GDB_SYMBOL_FILES"] = symbol_files  # "off": the Python unwinder alone
        self.child = pexpect.spawn(gdb, argv, env=environment, cwd=cwd, encoding="utf-8",
                                   codec_errors="replace", timeout=timeout, echo=False,
                                   dimensions=(50, 400))
        # pexpect waits 50 ms before each send (for programs that turn echo
        # off late); gdb reads its next line only at its prompt, which cmd
        # waits for: without the wait a session of a thousand commands is
        # 50 s shorter.
        self.child.delaybeforesend = None
        self.child.expect_exact(PROMPT)
        self.banner = self.child.before
        self.cmd("set debuginfod enabled off")  # unknown in some builds: harmless error
        self.cmd("set style enabled off")
        self.cmd("handle SIGUSR1 SIGALRM nostop noprint pass")  # the sig fixture's own signals
        if disable_prologue:
            # gdb >= 16: stop the prologue analyzer from hiding unwinder failures.
            self.cmd('maint frame-unwinder disable -name "amd64 prologue"')
        self.load_output = ""
        if plugin:
            self.load_output = self.load_plugin()

    def load_plugin(self) -> str:
        out = self.cmd(f"source {PLUGIN}")
        if LOADED_LINE not in out:
            raise AssertionError(f"plugin did not load:\n{out}")
        return out

    def cmd(self, line: str, timeout: float | None = None) -> str:
        self.child.sendline(line)
        self.child.expect_exact(PROMPT, timeout=timeout if timeout is not None else -1)
        return (self.child.before or "").replace("\r\n", "\n")

    def bt(self, args: str = "") -> list[Frame]:
        return parse_bt(self.cmd(f"bt {args}".strip()))

    def close(self) -> None:
        if self.child.isalive():
            try:
                self.child.sendline("kill")
                self.child.sendline("quit")
                self.child.expect(pexpect.EOF, timeout=10)
            except (pexpect.TIMEOUT, pexpect.EOF, OSError):
                pass
            self.child.close(force=True)

    def __enter__(self) -> Gdb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fixture(*parts: str) -> Path:
    return FIXTURES.joinpath(*parts)


VALUES_SCRIPT = Path(__file__).resolve().parent / "gdb_values.py"


class FrameValues(NamedTuple):
    level: int
    pc: int
    name: str
    items: dict[str, str]  # "REG rbx" / "VAR p" -> value text ("<unavailable>" when none)


def parse_values(text: str) -> list[FrameValues]:
    """What ``gdb_values.py`` printed, frame by frame."""
    frames: list[FrameValues] = []
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind == "FRAME":
            level, pc, name = (rest.split(" ", 2) + ["", ""])[:3]
            frames.append(FrameValues(int(level), int(pc, 16), name, {}))
        elif kind in ("REG", "VAR") and frames:
            name, _, value = rest.partition(" ")
            frames[-1].items.setdefault(f"{kind} {name}", value)
    return frames


UNAVAILABLE = "<unavailable>"


def compare_values(native: list[FrameValues], ours: list[FrameValues], where: str) -> tuple[int, int]:
    """(values gdb's own unwinder shows in caller frames, of which ours shows too)."""
    assert [(f.pc, f.name) for f in ours] == [(f.pc, f.name) for f in native], where
    shown = same = 0
    for theirs, mine in zip(native, ours, strict=True):
        if theirs.pc == native[0].pc and theirs.name == native[0].name:
            continue  # the live registers
        for key, value in theirs.items.items():
            if value == UNAVAILABLE:
                continue
            shown += 1
            got = mine.items.get(key, UNAVAILABLE)
            if got == UNAVAILABLE:
                continue
            assert got == value, (f"{where}: frame {theirs.level} ({theirs.name}): {key} = {got}, "
                                  f"gdb's own unwinder says {value}")
            same += 1
    return shown, same
