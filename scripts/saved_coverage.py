"""Coverage of the callee-saved register analysis against .eh_frame, PC by PC.

    .venv/bin/python scripts/saved_coverage.py FILE...

For each ELF file with both ``.sframe`` and ``.eh_frame`` (a twin), the
static proof of tests/test_saved.py (``tests/helpers/savedcheck.py``): per
class, the (PC, register) pairs weighted by bytes of code; coverage is the
share of pairs where ``.eh_frame`` has a rule and ours is the same. Exit 1 on
any disagreement (the first ones are printed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers import savedcheck


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = 0
    for path in argv:
        started = time.perf_counter()
        result = savedcheck.check(path)
        print(f"{result.summary()} [{time.perf_counter() - started:.1f}s]")
        stopped = {note: n for note, n in result.notes.items() if note != "analysed"}
        print(f"  functions analysed: {result.notes['analysed']}; stopped early: {stopped or 'none'}")
        for line in result.disagreements[:10]:
            print(f"  DISAGREE {line}")
        bad += len(result.disagreements)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
