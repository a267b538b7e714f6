"""``sframe verify``'s words: a report as binutils-style lines or as JSON,
and the ELF files of a tree (``-r``).

The checking itself is ``sframe_core/verify/`` (``check.verify_file``);
``commands.py`` holds the arguments and runs the files in parallel.
"""

from __future__ import annotations

import os
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

__all__ = ["report_lines", "report_json", "is_elf", "walk_elves"]


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
