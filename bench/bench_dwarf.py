#!/usr/bin/env python3
"""Time SFrame -> DWARF: generating ``.debug_frame`` and symbol files, and
reloading a cached symbol file (what an adapter pays at every module load).

- generation: ``dwarf.debug_frame`` alone and the whole symbol file
  (``symfile.write_symbol_file``: headers, debug sections copied, rename), per
  1,000 FDEs, on the real programs (lua5.4, bzip2) and on a synthetic
  20,000-function section (bench_lookup's);
- reload: ``symfile.symbol_file_for`` on a cache hit (module headers read,
  ``.sframe`` hashed, nothing generated), for the example programs; target
  under 50 ms.

Best of several runs, in this process (pyelftools already imported, as in a
debugger with the plugin loaded). Usage: ``python -m bench.bench_dwarf [--fdes N]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.bench_lookup import best, encode
from sframe_core.analysis.section import SectionAnalysis
from sframe_core.dwarf.debug_frame import debug_frame
from sframe_core.format.elf import read_elf
from sframe_core.format.section import SFrameSection
from sframe_core.symfiles import symfile

ROOT = Path(__file__).resolve().parent.parent

REAL = ROOT / "tests" / "fixtures" / "realprogs"
FIX = ROOT / "tests" / "fixtures" / "x86_64" / "busid-v3"
RELOAD_TARGET = 0.050


def demo(tmp: Path) -> Path | None:
    """examples/demo.c built as scripts/demo.sh builds it (gcc + gas --gsframe)."""
    gcc, objcopy = shutil.which("gcc"), shutil.which("objcopy")
    if not gcc or not objcopy:
        return None
    out = tmp / "demo"
    subprocess.run([gcc, "-O2", "-fomit-frame-pointer", "-Wa,--gsframe",
                    str(ROOT / "examples" / "demo.c"), "-o", str(out)], check=True)
    subprocess.run([objcopy, "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr",
                    str(out), str(out) + ".noeh"], check=True)
    return Path(str(out) + ".noeh")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fdes", type=int, default=20_000, help="functions in the synthetic section")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (best kept)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-dwarf-"))
    try:
        print(f"generation (best of {args.repeat})               FDEs   .debug_frame   per 1k FDEs"
              "   symbol file   per 1k FDEs")
        modules = [REAL / "lua5.4" / p / "lua5.4.noeh" for p in ("bu2.40-v1", "busid-v3")]
        modules += [REAL / "bzip2" / "busid-v3" / "bzip2.noeh"]
        for path in modules:
            if not path.exists():
                print(f"  {path}: missing (tests/fixtures/build_realprogs.sh)")
                continue
            section = read_elf(path).open(analyser=SectionAnalysis)
            assert section is not None
            n = section.num_fdes
            frame = best(lambda s=section: debug_frame(s), args.repeat)  # type: ignore[misc]
            whole = best(lambda p=path: symfile.write_symbol_file(str(p), str(tmp / "x.debug")),
                         args.repeat)
            name = "/".join(path.parts[-3:])
            print(f"  {name:34} {n:6} {frame * 1e3:11.1f} ms {frame / n * 1e6:10.1f} ms"
                  f" {whole * 1e3:10.1f} ms {whole / n * 1e6:10.1f} ms")
        n = args.fdes
        section = SFrameSection(encode(3, True, n, 0x100000), 0x100000)
        frame = best(lambda: debug_frame(section), args.repeat)
        print(f"  {'synthetic v3 section':34} {n:6} {frame * 1e3:11.1f} ms"
              f" {frame / n * 1e6:10.1f} ms")

        print("\nreload from the cache (best of 20)      ms   target")
        examples = [FIX / "deep.noeh", FIX / "uselib-libnoeh" / "uselib",
                    FIX / "uselib-libnoeh" / "libsf.so", *modules]
        built = demo(tmp)
        if built is not None:
            examples.insert(0, built)
        cache = str(tmp / "cache")
        worst = 0.0
        for path in examples:
            if not path.exists():
                continue
            made = symfile.symbol_file_for(str(path), cache=cache)
            assert not made.cached
            reload = best(lambda p=path: symfile.symbol_file_for(str(p), cache=cache),  # type: ignore[misc]
                          repeat=20)
            assert symfile.symbol_file_for(str(path), cache=cache).cached
            worst = max(worst, reload)
            name = path.name if path == built else "/".join(path.parts[-3:])
            print(f"  {name:36} {reload * 1e3:5.1f}   < {RELOAD_TARGET * 1e3:.0f}")
        print(f"\nworst reload {worst * 1e3:.1f} ms: "
              f"{'within' if worst < RELOAD_TARGET else 'OVER'} the {RELOAD_TARGET * 1e3:.0f} ms target")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
