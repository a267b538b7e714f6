"""Every benchmark runs, at tiny sizes, so that none can rot unnoticed.

Only that each one runs to the end and prints its ratio is checked: figures
are for ``python -m bench.NAME`` at full size, never for a test.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import DEBUGGERS, ROOT, missing
from helpers.gdbtools import GDBS, gdb_version

pytestmark = pytest.mark.slow

# bench module -> (arguments for a tiny run, a line it prints at the end)
BENCHES = {
    "bench_lookup": (["--fdes", "300", "--lookups", "300"], "ratio:"),
    "bench_unwind": (["--depth", "50", "--repeat", "1"], "eh_frame / sframe (warm, same core)"),
    "bench_gdb": (["--depth", "50", "--repeat", "1", "--steps", "3", "--saved", "both"],
                  "(Python unwinder, saved registers on): stepi+bt per instruction"),
    "bench_lldb": (["--depth", "50", "--runs", "1", "--provider"], "native route bt (deep.noeh.stripped)"),
    "bench_dwarf": (["--fdes", "300", "--repeat", "1"], "worst reload"),
    "bench_pid": (["--attaches", "3", "--interval", "0.01"], "signals:"),
    "bench_symbols": (["--symbols", "2000"], "command:"),
    "bench_verify": (["--functions", "300", "--repeat", "1"], "bar: under 5 s"),
    "bench_core_start": (["--runs", "1"], "target 0.5 s: --core wall"),
    "bench_scale": (["--sizes", "100", "--lldb", "23", "--real", "none"], "frames agree"),
    "bench_rebuild": (["--sizes", "300"], "same bytes"),
    "bench_saved": ([str(ROOT / "tests" / "fixtures" / "realprogs" / "bzip2" / "busid-v3-Os" / "bzip2")],
                    "us per code byte"),
}


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_bench_runs(name: str) -> None:
    args, last = BENCHES[name]
    if name == "bench_gdb":
        gdb = next((path for path in GDBS.values() if gdb_version(path)), None)
        if gdb is None:
            missing("no gdb to benchmark (scripts/setup.sh installs them)")
        args = ["--gdb", gdb, *args]
    if name == "bench_lldb" and not (DEBUGGERS / "lldb-23").exists():
        missing(f"{DEBUGGERS / 'lldb-23'} is missing (run scripts/setup.sh)")
    out = subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{name} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    assert last in out.stdout, out.stdout
    assert "Traceback" not in out.stderr, out.stderr
