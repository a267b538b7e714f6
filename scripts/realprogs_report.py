"""Sanity report on the real-program fixtures: gdb without / with the plugin on `.noeh`.

For each program and producer: FDE count, stops, deepest stack, and for every
stop whether the frame list (pc and function of every frame, inline frames
included) of `.noeh` equals the twin's under gdb's own DWARF unwinder, first
without the plugin, then with `source sframe_gdb.py`.

    .venv/bin/python scripts/realprogs_report.py [--gdb /usr/bin/gdb] [--programs lua5.4,bzip2]
        [--producers bu2.40-v1,...] [--details]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers import realprogs as rp  # noqa: E402
from helpers.realprogs import FRAME_LIST, frame_list, no_tailcall, physical_pcs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gdb", default="/usr/bin/gdb")
    ap.add_argument("--programs", default=",".join(rp.PROGRAMS))
    ap.add_argument("--producers", default=",".join(rp.PRODUCERS))
    ap.add_argument("--details", action="store_true", help="print every differing stop")
    ap.add_argument("--json", help="write all frame lists to this file")
    ap.add_argument("--no-stripped", action="store_true", help="skip the .noeh.stripped runs")
    a = ap.parse_args()
    manifest = json.loads((rp.DIR / "MANIFEST.json").read_text())
    fdes = {f["path"]: f["sframe"]["num_fdes"] for f in manifest["files"]}
    dump = {}
    bad_plugin = 0
    print(f"{'program/producer':26s} {'FDEs':>5s} {'stops':>5s} {'deepest':>7s} "
          f"{'plain gdb .noeh':>16s} {'plugin .noeh':>13s} {'differ only by tailcall frames':>31s}"
          f" {'plugin .noeh.stripped (pcs)':>28s}")
    for prog, producer in rp.builds(a.programs.split(","), a.producers.split(",")):
        twin = rp.gdb_stops(a.gdb, prog.path(producer), prog, extra=FRAME_LIST)
        plain = rp.gdb_stops(a.gdb, prog.path(producer, "noeh"), prog, extra=FRAME_LIST,
                             prologue_analyzer=True)  # gdb alone, as a user has it
        plug = rp.gdb_stops(a.gdb, prog.path(producer, "noeh"), prog, extra=FRAME_LIST, plugin=True)
        stripped: dict[str, rp.Stop] = {}
        if not a.no_stripped:
            at = rp.breakpoint_offsets(a.gdb, prog.path(producer), prog)
            stripped = rp.gdb_stops(a.gdb, prog.path(producer, "noeh.stripped"), prog, extra=FRAME_LIST,
                                    plugin=True, at=at)
        ok_plain = ok_plug = tail_only = ok_stripped = 0
        for bp, stop in twin.items():
            want = frame_list(stop)
            got_plain = frame_list(plain[bp]) if bp in plain else ["NOT-HIT"]
            got_plug = frame_list(plug[bp]) if bp in plug else ["NOT-HIT"]
            ok_plain += got_plain in (want, no_tailcall(want))
            ok_plug += got_plug == want
            tail_only += got_plug != want and got_plug == no_tailcall(want)
            phys = physical_pcs(want)
            got_stripped = physical_pcs(frame_list(stripped[bp])) if bp in stripped else ["NOT-HIT"]
            ok_stripped += got_stripped[:len(phys)] == phys
            if a.details and not a.no_stripped and got_stripped[:len(phys)] != phys:
                print(f"  {prog.name}/{producer} {bp} stripped: pcs {got_stripped[:len(phys) + 1]} "
                      f"twin {phys}")
            dump[f"{prog.name}/{producer}/{bp}"] = {"twin": want, "plain": got_plain, "plugin": got_plug,
                                                    "stripped": got_stripped}
            if got_plug != no_tailcall(want) or (bp in stripped and got_stripped[:len(phys)] != phys):
                bad_plugin += 1
            if a.details and (got_plug != want or got_plain != want):
                for label, got in (("plain", got_plain), ("plugin", got_plug)):
                    if got in (want, no_tailcall(want)):
                        continue
                    i = next((k for k, (x, y) in enumerate(zip(want, got, strict=False)) if x != y),
                             min(len(want), len(got)))
                    print(f"  {prog.name}/{producer} {bp} {label}: {len(got)} frames vs twin "
                          f"{len(want)}; first difference at #{i}: "
                          f"twin {want[i] if i < len(want) else '-'} got {got[i] if i < len(got) else '-'}")
        deepest = max((len(frame_list(s)) for s in twin.values()), default=0)
        rel = prog.path(producer).relative_to(rp.DIR).as_posix()
        n = len(twin)
        print(f"{prog.name + '/' + producer:26s} {fdes[rel]:5d} {n:5d} {deepest:7d} "
              f"{f'{ok_plain}/{n} right':>16s} {f'{ok_plug}/{n} right':>13s} {tail_only:31d}"
              f" {'-' if a.no_stripped else f'{ok_stripped}/{n} right':>28s}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(dump, indent=1))
    return 1 if bad_plugin else 0


if __name__ == "__main__":
    sys.exit(main())
