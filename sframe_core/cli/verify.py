"""``sframe verify``: its arguments, the ELF files of a tree (``-r``), run
in parallel, and its words: a report as binutils-style lines or as JSON.

The checking itself is ``sframe_core/verify/`` (``check.verify_file``);
``commands.py`` registers the command with the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..base.files import is_elf
from ..verify.records import (
    AGREES,
    CANNOT_SAY,
    DISAGREES,
    ERRATUM,
    KNOWN_STATIC,
    NOT_COVERED,
    REASONS,
    SFRAME_ONLY,
    Finding,
    Function,
    Report,
)
from .common import PROG, UsageError, error_line, in_parallel

__all__ = ["HELP", "configure", "run", "report_lines", "report_json", "is_elf", "walk_elves"]

HELP = "check that .sframe says what .eh_frame/.debug_frame say, at every PC"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="ELF files (with -r: directories) whose .sframe to check")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="walk every ELF file with .sframe under the directories, in parallel")
    parser.add_argument("--against", metavar="FILE",
                        help="take the DWARF CFI from FILE (a separate debug file)")
    parser.add_argument("--kernel", action="store_true",
                        help="also check that Linux's SFrame unwinder would accept the section")
    parser.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                        help="worker processes for -r (default: CPUs, at most 8)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every function, agreeing ones too")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _verify_one(job: tuple[str, str | None, bool]) -> object:
    from ..verify.check import safe_verify

    return safe_verify(*job)


def run(args: argparse.Namespace) -> int:
    """Exit 0: everything agrees or differs only in named, expected ways; 1: a
    disagreement, an unexplained uncovered range, or a fatal finding; 2: a
    file cannot be read (one line each on stderr)."""
    from ..verify.check import Unreadable, safe_verify

    if args.against and (args.recursive or len(args.files) != 1):
        raise UsageError("--against goes with exactly one FILE")
    paths: list[str] = []
    skipped = 0
    if args.recursive:
        for top in args.files:
            if not os.path.isdir(top):
                raise UsageError(f"{top}: not a directory (-r walks directories)")
            paths += walk_elves(top)
    else:
        paths = list(args.files)
    jobs = [(path, args.against, args.kernel) for path in paths]
    if args.recursive:
        results = in_parallel(_verify_one, jobs, [job[0] for job in jobs], args.jobs)
    else:
        results = [safe_verify(*job) for job in jobs]
    reports: list[Report] = []
    errors: list[str] = []
    for result in results:
        if isinstance(result, Report):
            reports.append(result)
        elif isinstance(result, Unreadable) and result.skip and args.recursive:
            skipped += 1  # walking a tree: most files carry no SFrame (or no CFI)
        elif isinstance(result, Unreadable):
            errors.append(result.text)
    failed = sum(1 for r in reports if r.failed)
    # A gate over a tree must not pass on nothing: e.g. a linker dropped
    # every output's .sframe (gold and lld with --gc-sections).
    nothing = args.recursive and not reports and not errors
    status = 2 if errors or nothing else 1 if failed else 0
    out = sys.stdout
    if args.json:
        json.dump({"files": [report_json(r) for r in reports], "errors": errors,
                   "skipped": skipped, "status": status}, out, indent=1)
        out.write("\n")
    else:
        for report in reports:
            for line in report_lines(report, verbose=args.verbose):
                out.write(line + "\n")
        if len(paths) > 1:
            out.write(f"{PROG} verify: {len(reports)} files verified: {len(reports) - failed} OK, "
                      f"{failed} FAIL; {len(errors)} unreadable"
                      + (f"; {skipped} skipped (no .sframe, or no CFI to compare)" if args.recursive
                         else "") + "\n")
    out.flush()
    for error in errors:
        error_line(sys.stderr, error)
    if nothing:
        error_line(sys.stderr, f"no file verified ({skipped} skipped: no .sframe, or no CFI to "
                               "compare)")
    return status


def _verdict_words(func: Function, report: Report) -> str:
    reasons = ", ".join(REASONS.get(r, r) for r in func.reasons)
    if func.verdict == AGREES:
        return "agrees"
    if func.verdict == CANNOT_SAY:
        return f"differs only where SFrame cannot say it: {reasons}"
    if func.verdict == ERRATUM:
        return f"known producer erratum: {reasons}"
    if func.verdict == DISAGREES:
        return f"DISAGREES: {func.detail}"
    if func.verdict == NOT_COVERED:
        where = f"{report.where(func.start)}-{report.where(func.end)}"
        if func.known:
            return f"not covered ({where}, known: {func.detail})"
        return f"not covered: {func.detail}"
    return f"SFrame only ({report.where(func.start)}-{report.where(func.end)}): {func.detail}"


def report_lines(report: Report, *, verbose: bool = False) -> list[str]:
    """binutils style: ``FILE: 0xPC FUNCTION: what``, one line per finding, then a summary."""
    lines = []
    static = [f for f in report.functions if f.verdict == NOT_COVERED and f.known
              and f.reasons == (KNOWN_STATIC,)]
    for func in report.functions:
        if (func.verdict == AGREES or func.reasons == (KNOWN_STATIC,)) and not verbose:
            continue
        lines.append(f"{report.path}: {report.where(func.pc)} {func.name or '??'}: "
                     f"{_verdict_words(func, report)}")
    if static and not verbose:
        size = sum(f.end - f.start for f in static)
        lines.append(f"{report.path}: {static[0].start:#x} {static[0].name or '??'}: not covered "
                     f"(known: {static[0].detail}): {len(static)} functions, {size} bytes "
                     "(-v lists them)")
    for finding in (*report.findings, *(report.kernel or ())):
        where = (f"{report.where(finding.pc)} {finding.name or '??'}: "
                 if finding.pc is not None else "")
        severity = "" if finding.fatal else "warning: "
        lines.append(f"{report.path}: {where}{severity}{finding.text}")
    c = report.counts()
    summary = (f"{report.path}: SFrame v{report.version} {report.arch}: "
               f"{len(report.functions)} functions: {c[AGREES]} agree, "
               f"{c[CANNOT_SAY]} differ only where SFrame cannot say it, "
               f"{c[ERRATUM]} known errata, {c[DISAGREES]} DISAGREE, "
               f"{c[NOT_COVERED]} not covered ({c['not-covered-known']} known), "
               f"{c[SFRAME_ONLY]} SFrame only; {c['findings']} structural findings")
    if report.kernel is not None:
        summary += "; kernel: " + ("accepts" if not report.kernel
                                   else f"rejects ({len(report.kernel)} reasons)")
    lines.append(summary + (": FAIL" if report.failed else ": OK"))
    return lines


def _finding_json(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "pc": f.pc, "name": f.name, "text": f.text, "fatal": f.fatal}


def report_json(report: Report) -> dict[str, Any]:
    """The same content as ``report_lines``, as data (schema in docs/verify.md)."""
    return {
        "file": report.path,
        "version": report.version,
        "arch": report.arch,
        "status": report.status,
        "counts": report.counts(),
        "functions": [{"start": f.start, "end": f.end, "name": f.name, "verdict": f.verdict,
                       "pc": f.pc, "reasons": list(f.reasons), "known": f.known,
                       "detail": f.detail, "where": report.where(f.pc),
                       "text": _verdict_words(f, report)}
                      for f in report.functions],
        "findings": [_finding_json(f) for f in report.findings],
        "kernel": None if report.kernel is None else {
            "accepts": not report.kernel, "reasons": [_finding_json(f) for f in report.kernel]},
    }


def walk_elves(directory: str) -> list[str]:
    """Every regular ELF file under ``directory`` (symlinks not followed), sorted."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for entry in sorted(files):
            path = os.path.join(root, entry)
            if not os.path.islink(path) and os.path.isfile(path) and is_elf(path):
                found.append(path)
    return found
