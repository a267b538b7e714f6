"""Run one program under LLDB (SB API) and print ``bt`` at the first hit of each breakpoint.

Run by LLDB's own Python (``.debuggers/bin/lldb-NN-python``), not pytest's::

    lldb-23-python tests/lldb_stops.py '{"binary": ..., "args": [...], "breakpoints": [...],
                                         "plugin": "/path/lldb_plugin" | null, "frames": N,
                                         "addresses": {name: file address} | null}'

Prints one JSON object: breakpoint name -> {"bt": the text of ``bt`` at its
first hit, "list": [[pc, module, function, "file:line:column", inlined, artificial] of
every frame, through the SB API] (each name's breakpoints are disabled once
hit, so each stop is that function's first hit),
"frames": [[``frame variable``, ``register read``] in caller frames 1..N]},
plus ``"__log__"``: everything the commands printed besides (the plugin's lines).
One LLDB session for all stops: a session per stop would cost an LLDB start each.
"""

from __future__ import annotations

import json
import sys

import lldb


def main() -> int:
    config = json.loads(sys.argv[1])
    lldb.SBDebugger.Initialize()
    debugger = lldb.SBDebugger.Create(False)
    debugger.SetAsync(False)
    interp = debugger.GetCommandInterpreter()
    log: list[str] = []

    def run(command: str) -> str:
        result = lldb.SBCommandReturnObject()
        interp.HandleCommand(command, result)
        return (result.GetOutput() or "") + (result.GetError() or "")

    if config.get("plugin"):
        log.append(run(f"command script import {config['plugin']}"))
    log.append(run(f"target create {config['binary']}"))
    target = debugger.GetSelectedTarget()
    names: dict[int, str] = {}
    if config.get("addresses"):
        # A stripped binary (and its twin, for the same stops): by file address.
        module = target.GetModuleAtIndex(0)
        for name, address in config["addresses"].items():
            bp = target.BreakpointCreateBySBAddress(module.ResolveFileAddress(address))
            if bp.IsValid():
                names[bp.GetID()] = name
    else:
        for name in config["breakpoints"]:
            bp = target.BreakpointCreateByName(name)
            if bp.IsValid() and bp.GetNumLocations():
                names[bp.GetID()] = name
    args = " ".join(json.dumps(a) for a in config["args"])
    log.append(run(f"process launch -o /dev/null -- {args}"))
    process = target.GetProcess()
    stops: dict[str, dict[str, object]] = {}
    while process.IsValid() and process.GetState() == lldb.eStateStopped:
        thread = process.GetSelectedThread()
        hit = []
        for t in process:
            if t.GetStopReason() == lldb.eStopReasonBreakpoint:
                thread = t
                hit += [names.get(t.GetStopReasonDataAtIndex(i), "")
                        for i in range(0, t.GetStopReasonDataCount(), 2)]
        if not hit:
            break
        # Disabled rather than one-shot: LLDB 21 reports no breakpoint id
        # for a one-shot breakpoint that was deleted as it was hit.
        for bp_id, name in names.items():
            if name in hit:
                target.FindBreakpointByID(bp_id).SetEnabled(False)
        process.SetSelectedThread(thread)
        text = run("bt")
        listed = []
        for frame in thread:
            line = frame.GetLineEntry()
            where = (f"{line.GetFileSpec().GetFilename()}:{line.GetLine()}:{line.GetColumn()}"
                     if line.IsValid() and line.GetLine() else None)
            listed.append([frame.GetPC(), frame.GetModule().GetFileSpec().GetFilename(),
                           frame.GetFunctionName(), where, frame.IsInlined(),
                           frame.IsArtificial()])
        frames = []
        for k in range(1, min(config.get("frames", 0), thread.GetNumFrames() - 1) + 1):
            run(f"frame select {k}")
            frames.append([run("frame variable"), run("register read")])
        for name in hit:
            if name and name not in stops:
                stops[name] = {"bt": text, "list": listed, "frames": frames}
        log.append(run("continue"))
    run("process kill")
    print(json.dumps({**stops, "__log__": "".join(log)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
