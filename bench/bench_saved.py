"""Cost of the callee-saved register analysis (sframe_core.analysis.saved): cold time per function.

For each file, every function with an SFrame FDE is analysed once from a
freshly opened section (nothing cached), the way the first backtrace through
it pays: decoding with capstone, the dataflow, the rules (CPU time of this
process, so that a loaded machine does not inflate it). Prints the median,
95th percentile, largest and total, and the slowest function; and, apart, what
the first analysis of a process pays once (importing capstone, making its
decoder).

Usage: python -m bench.bench_saved [FILE ...] (from the checkout; default:
the real-program fixtures lua5.4 and bzip2, busid-v3 build).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from sframe_core.analysis.decoders import decoder_for
from sframe_core.analysis.section import SectionAnalysis, analysis_of
from sframe_core.format.elf import read_elf

REALPROGS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "realprogs"


def measure(path: str) -> None:
    section = read_elf(path).open(analyser=SectionAnalysis)
    if section is None:
        print(f"{path}: no .sframe")
        return
    # Importing capstone and making its decoder happens once per process (the
    # first function's analysis pays it): timed apart from the functions.
    t0 = time.process_time()
    decoder_for(section.arch)
    startup = time.process_time() - t0
    analysis = analysis_of(section)
    times: list[tuple[float, int, int]] = []
    for fde in section.iter_fdes():
        if fde.is_pcmask:
            continue
        analysis.forget()
        t0 = time.process_time()
        analysis.rules(fde)
        times.append((time.process_time() - t0, fde.size, fde.start))
    values = sorted(t for t, _, _ in times)
    worst = max(times)
    p95 = values[int(0.95 * (len(values) - 1))]
    print(f"{path}: {len(values)} functions, median {statistics.median(values) * 1e3:.2f} ms, "
          f"p95 {p95 * 1e3:.2f} ms, max {worst[0] * 1e3:.1f} ms ({worst[1]} bytes at "
          f"{worst[2]:#x}), total {sum(values):.2f} s; "
          f"{sum(values) / sum(s for _, s, _ in times) * 1e6:.1f} us per code byte "
          f"(and once per process: decoder start-up {startup * 1e3:.0f} ms)", flush=True)


def main() -> int:
    paths = sys.argv[1:] or [str(REALPROGS / name / "busid-v3" / name) for name in ("lua5.4", "bzip2")]
    for path in paths:
        measure(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
