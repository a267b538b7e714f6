"""Capture what a real GDB prints about its objfiles, for tests/test_gdb_objfiles.py.

    cd tests && ../.venv/bin/python -m data.gdb_objfiles.capture NAME GDB
    e.g. NAME GDB = gdb13 /usr/bin/gdb, gdb18 ../.debuggers/bin/gdb-18

writes NAME-SCENARIO.json here for three scenarios on tests/fixtures/x86_64/bu2.44-v2:
``live`` (deep.noeh, no .eh_frame, stopped by abort), ``twin`` (deep, with
.eh_frame) and ``noshdr-core`` (a copy of deep.noeh without section headers,
as ``objcopy --strip-section-headers`` leaves it, read from its core). Each
file holds gdb's version line, the output of gdb_plugin.objfiles.SECTIONS_COMMAND
and of ``info proc mappings``, and the objfiles the adapter asks about; the
checkout's path reads ``@ROOT@``, the copy's ``@NOSHDR@`` and the core's directory ``@TMP@``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers import ROOT, X86, no_section_headers

from gdb_plugin.objfiles import SECTIONS_COMMAND

HERE = Path(__file__).resolve().parent
PROGRAMS = X86 / "bu2.44-v2"

DUMP = """python
import gdb, json
def _text(command):
    try:
        return gdb.execute(command, to_string=True)
    except gdb.error as exc:
        return "error: " + str(exc)
objfiles = [o.filename for o in gdb.current_progspace().objfiles()
            if o.owner is None and getattr(o, "is_file", True)]
print("CAPTURE " + json.dumps({"sections": _text(COMMAND), "mappings": _text("info proc mappings"),
                               "objfiles": objfiles}))
end
""".replace("COMMAND", repr(SECTIONS_COMMAND))


def run_gdb(gdb: str, args: list[str], before: list[str], tmp: Path) -> dict[str, object]:
    script = tmp / "dump.gdb"
    script.write_text(DUMP)
    cmd = [gdb, "-nx", "-q", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set pagination off"]
    for line in before:
        cmd += ["-ex", line]
    cmd += ["-x", str(script), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    for line in out.stdout.splitlines():
        if line.startswith("CAPTURE "):
            data: dict[str, object] = json.loads(line[len("CAPTURE "):])
            return data
    raise SystemExit(f"{gdb}: no capture:\n{out.stdout}\n{out.stderr}")


def main() -> None:
    name, gdb = sys.argv[1], sys.argv[2]
    version = subprocess.run([gdb, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        noshdr = no_section_headers(PROGRAMS / "deep.noeh", tmp / "deep.noshdr")
        core = tmp / "deep.core"
        scenarios = {
            "live": run_gdb(gdb, ["--args", str(PROGRAMS / "deep.noeh"), "abort"], ["run"], tmp),
            "twin": run_gdb(gdb, ["--args", str(PROGRAMS / "deep"), "abort"], ["run"], tmp),
        }
        run_gdb(gdb, ["--args", str(noshdr), "abort"], ["run", f"gcore {core}"], tmp)
        scenarios["noshdr-core"] = run_gdb(gdb, [str(noshdr), str(core)], [], tmp)
        for scenario, data in scenarios.items():
            text = json.dumps({"gdb": version, **data}, indent=1)
            text = text.replace(str(noshdr), "@NOSHDR@").replace(str(tmp), "@TMP@")
            text = text.replace(str(ROOT), "@ROOT@")
            (HERE / f"{name}-{scenario}.json").write_text(text + "\n")
            print(f"wrote {name}-{scenario}.json")


if __name__ == "__main__":
    main()
