#!/usr/bin/env python3
"""How long ``sframe verify`` takes on a program with many functions.

Builds, with the host gcc and gas (``--gsframe``), a program of N small
functions of a few shapes (leaf, a frame, alloca with a frame pointer, a
call), then times, in this one run and on that same file:

* ``verify_file`` (SFrame rows against ``.eh_frame`` rows, every function);
* the whole ``sframe verify FILE`` command (interpreter start included);
* ``readelf --sframe FILE`` (binutils: decodes and prints every FDE and FRE,
  verifying nothing), as the yardstick of "read the whole section once".

The issue's bar: a 10,000-function binary in under 5 s.

    python -m bench.bench_verify [--functions 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sframe_core.verify.check import verify_file

SHAPES = (
    "__attribute__((noinline)) int f{i}(int x) {{ return x * {i} + 1; }}\n",
    "__attribute__((noinline)) int f{i}(int x) {{ volatile char b[{n}]; b[0] = x; "
    "return f{j}(b[0]) + b[{m}]; }}\n",
    "__attribute__((noinline)) int f{i}(int x) {{ char *p = __builtin_alloca(x + {n}); "
    "p[0] = x; return f{j}(p[0]) + p[x]; }}\n",
    "__attribute__((noinline)) int f{i}(int x) {{ if (x > {i}) return f{j}(x - 1) * 2; "
    "return f{k}(x) + x; }}\n",
)


def build(directory: Path, count: int) -> Path:
    lines = ["#include <alloca.h>\n"]
    for i in range(count):
        j, k = max(i - 1, 0), max(i - 2, 0)
        shape = SHAPES[i % len(SHAPES)] if i >= 2 else SHAPES[0]
        lines.append(shape.format(i=i, j=j, k=k, n=16 + (i % 5) * 24, m=(i % 5)))
    lines.append(f"int main(int argc, char **argv) {{ (void)argv; return f{count - 1}(argc) & 1; }}\n")
    source = directory / "many.c"
    source.write_text("".join(lines))
    program = directory / "many"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(program),
                    str(source)], check=True, capture_output=True, timeout=1800)
    return program


def best(repeat: int, run: object) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        program = build(Path(tmp), args.functions)
        print(f"build:    {args.functions} functions (gcc -O2 --gsframe) in "
              f"{time.perf_counter() - t0:.1f} s")
        report = verify_file(str(program))
        counts = report.counts()
        print(f"verdicts: {len(report.functions)} functions, {counts['agrees']} agree, "
              f"{counts['DISAGREES']} disagree, status {report.status}")
        ours = best(args.repeat, lambda: verify_file(str(program)))
        print(f"verify_file:          {ours:.3f} s ({ours / len(report.functions) * 1e6:.0f} us "
              "per function)")
        command = best(args.repeat, lambda: subprocess.run(
            [sys.executable, "-m", "sframe_core", "verify", str(program)], check=False,
            capture_output=True))
        print(f"sframe verify FILE:   {command:.3f} s (the whole command)")
        readelf = shutil.which("readelf")
        if readelf is None:
            print("readelf:              not installed (apt-get install binutils)")
        else:
            theirs = best(args.repeat, lambda: subprocess.run(
                [readelf, "--sframe", str(program)], check=True, capture_output=True))
            print(f"readelf --sframe:     {theirs:.3f} s (decode and print only)")
            print(f"ratio: verify_file / readelf --sframe = {ours / theirs:.1f}")
        print(f"bar: under 5 s for 10,000 functions: "
              f"{'met' if command < 5 or args.functions < 10_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
