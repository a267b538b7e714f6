# Records where indirect jumps really go. `source` it in gdb with
#   set $jt_sites = "FILE.json"   (a JSON object: site address -> its targets)
# on a process stopped before the sites run: breaks at every site, `stepi`s
# each hit (20 per site at most, then the site's breakpoint goes), and prints
#   JUMP <site> <pc after the jump>
# per hit once every site is done or the program ends.
import json

import gdb

_SITES = json.load(open(gdb.convenience_variable("jt_sites").string()))
_PER_SITE = 20


def _record():
    left = {int(site): _PER_SITE for site in _SITES}
    bps = {a: gdb.Breakpoint(f"*{a:#x}", internal=True) for a in left}
    seen = []
    try:
        gdb.execute("continue", to_string=True)
        while bps:
            pc = int(gdb.parse_and_eval("$pc"))
            if pc not in bps:
                break  # stopped elsewhere: the program ended or was signalled
            gdb.execute("stepi", to_string=True)
            seen.append((pc, int(gdb.parse_and_eval("$pc"))))
            left[pc] -= 1
            if left[pc] == 0:
                bps.pop(pc).delete()
            if bps:
                gdb.execute("continue", to_string=True)
    except gdb.error:
        pass  # the process exited
    for site, to in seen:
        print(f"JUMP {site:#x} {to:#x}")


_record()
