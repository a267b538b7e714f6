#!/usr/bin/env python3
"""What the ``.cold`` parts' second pass (``analysis/parts.py``) costs the
symbol-file generator: ``symfile.symbol_file_bytes`` on the real programs,
in-process, with the exits collected and the parts made again, against the
same run with both turned off (what is left on: ``analyse`` listing each
function's exits). Best of several runs each after a warm-up run,
alternated (and which goes first too) in this process; prints the ratio.

Usage: ``python -m bench.bench_parts [--runs N]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sframe_core.analysis import parts
from sframe_core.symfiles import symfile

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = [ROOT / "tests" / "fixtures" / "realprogs" / name / "busid-v3" / f"{name}.noeh"
            for name in ("lua5.4", "bzip2")]


@contextmanager
def without_parts() -> Iterator[None]:
    add, entries = parts.Collector.add, symfile.entries
    parts.Collector.add = lambda self, fde, analysis: None  # type: ignore[method-assign]
    symfile.entries = lambda section, exits, starts: {}  # type: ignore[assignment]
    try:
        yield
    finally:
        parts.Collector.add = add  # type: ignore[method-assign]
        symfile.entries = entries


def once(path: Path) -> float:
    start = time.perf_counter()
    symfile.symbol_file_bytes(str(path))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for path in PROGRAMS:
        if not path.exists():
            print(f"{path}: missing (tests/fixtures/build_realprogs.sh)")
            continue
        with_, without = [], []
        once(path)  # warm: the decoder's memo, the file cache
        for run in range(args.runs):
            for first in ((True, False) if run % 2 else (False, True)):
                if first:
                    with_.append(once(path))
                else:
                    with without_parts():
                        without.append(once(path))
        a, b = min(with_), min(without)
        print(f"{path.name}: with parts {a * 1000:.0f} ms, without {b * 1000:.0f} ms, "
              f"ratio {a / b:.3f}")


if __name__ == "__main__":
    main()
