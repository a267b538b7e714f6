"""Static cross-check: SFrame rows against ``.eh_frame`` rows, PC by PC.

gas writes ``.sframe`` from the same ``.cfi_*`` directives as ``.eh_frame``,
so for every PC an SFrame FDE covers, the two decoders must agree on the CFA
rule and on where the RA and the FP are. The comparison is
``sframe_core.verify`` (what ``sframe verify`` runs): a disagreement is a bug
in one of the two decoders, unless it is one of the named cases there
(``PLT_EXPRESSION``, ``OBJ_AMBIGUOUS``, the ``.plt.got`` erratum), each of
which is a property of the toolchain's output, not a tolerance. This is
pyelftools' readelf-diff approach with our own two decoders as the two tools.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import FIXTURES, missing
from helpers.manifest import load_manifest, manifest_params, require

from sframe_core.base.rows import CFARule
from sframe_core.dwarf.cfi import CFITable
from sframe_core.format.elf import read_elf
from sframe_core.verify.check import verify_file
from sframe_core.verify.records import (
    AGREES,
    CANNOT_SAY,
    DISAGREES,
    ERRATUM,
    OBJ_AMBIGUOUS,
    PLT_EXPRESSION,
    PLT_GOT_ERRATUM,
)

ARCHES = ("x86_64", "aarch64", "s390x")
RSP = 7


def _sections(path: str) -> dict[str, tuple[int, int]]:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        return {sec.name: (sec["sh_addr"], sec["sh_addr"] + sec["sh_size"])
                for sec in elf.iter_sections()}


def crosscheck(path: str) -> tuple[int, Counter[str], list[str]]:
    """(functions compared, expected differences by name, unexplained differences).

    Uncovered code (CFI without SFrame) is ``sframe verify``'s business and
    tested in test_verify.py; here only what both sources describe counts.
    """
    report = verify_file(path)
    expected: Counter[str] = Counter()
    compared = 0
    for func in report.functions:
        if func.verdict in (AGREES, CANNOT_SAY, ERRATUM):
            compared += func.verdict != CANNOT_SAY or OBJ_AMBIGUOUS not in func.reasons
            expected.update(func.reasons)
    unexplained = [f"{func.pc:#x} {func.name}: {func.detail}" for func in report.functions
                   if func.verdict == DISAGREES]
    unexplained += [f.text for f in report.findings if f.fatal]
    return compared, expected, unexplained


def _twin(entry: dict[str, object]) -> bool:
    return entry["variant"] == "twin" and entry["arch"] in ARCHES


@pytest.mark.parametrize("entry", manifest_params(_twin))
def test_twin_rows_agree(entry: dict[str, object] | None) -> None:
    entry = require(entry)
    compared, expected, unexplained = crosscheck(str(FIXTURES / str(entry["path"])))
    assert compared > 0
    assert not unexplained, (f"{len(unexplained)} functions differ; first ones:\n"
                             + "\n".join(unexplained[:10]))
    # The named cases occur only where their causes exist.
    if entry["arch"] != "x86_64":
        assert not expected, expected
    assert OBJ_AMBIGUOUS not in expected


def test_manifest_covers_every_arch() -> None:
    entries = load_manifest()
    assert entries is not None, "tests/fixtures/MANIFEST.json is missing: run tests/fixtures/build.sh"
    arches = {entry["arch"] for entry in entries if entry["variant"] == "twin"}
    assert set(ARCHES) <= arches, f"no twin fixture for {sorted(set(ARCHES) - arches)}"


def test_named_differences_do_occur() -> None:
    """Each named case is real: it shows up where the toolchain produces it."""
    entries = load_manifest()
    assert entries is not None, "tests/fixtures/MANIFEST.json is missing: run tests/fixtures/build.sh"

    def find(producer: str, name: str) -> str:
        for entry in entries:
            if (entry["arch"] == "x86_64" and entry["producer_dir"] == producer
                    and entry["name"] == name and entry["variant"] == "twin"):
                return str(FIXTURES / entry["path"])
        pytest.fail(f"no x86_64/{producer}/{name} twin in the manifest")

    _, expected, _ = crosscheck(find("bu2.40-v1", "deep"))
    assert expected[PLT_EXPRESSION] > 0
    # A .o's text sections are laid out apart (relocations name each FDE's
    # section), so .text's f1 and .text.startup's main, both at offset 0, are
    # each compared with their own CFI: nothing is left ambiguous.
    compared, expected, _ = crosscheck(find("bu2.40-v1", "deep.o"))
    assert compared == 8 and OBJ_AMBIGUOUS not in expected
    _, expected, _ = crosscheck(find("bu2.44-v2", "deep"))
    assert expected[PLT_GOT_ERRATUM] == 1


@pytest.mark.parametrize("producer", ["bu2.44-v2", "bu2.44-v2pcrel", "busid-v3"])
def test_ld_plt_got_erratum(producer: str) -> None:
    """The bytes say sp+16 (dump and raw rules keep them); the rows say sp+8."""
    entries = load_manifest()
    assert entries is not None, "tests/fixtures/MANIFEST.json is missing: run tests/fixtures/build.sh"
    path = next(str(FIXTURES / e["path"]) for e in entries
                if e["arch"] == "x86_64" and e["producer_dir"] == producer
                and e["name"] == "bigfunc" and e["variant"] == "twin")
    section = read_elf(path).open()
    assert section is not None
    table = CFITable(path)
    lo, hi = _sections(path)[".plt.got"]
    assert hi - lo == 8  # one entry
    for pc in range(lo, hi):
        hit = section.lookup(pc)
        assert hit is not None and hit.fde.is_pcmask and hit.fde.rep_size == 8
        assert hit.rules.cfa == CFARule(RSP, 16)
        drow = table.row_at(pc)
        assert drow is not None
        assert hit.row.cfa == drow.cfa == CFARule(RSP, 8)
    # sframe verify names it: a known erratum, not a disagreement.
    func = next(f for f in verify_file(path).functions if f.start == lo)
    assert (func.name, func.verdict, func.reasons) == (".plt.got", ERRATUM, (PLT_GOT_ERRATUM,))


HOST_SRC = r"""
#include <alloca.h>
#include <stdio.h>
#include <string.h>
__attribute__((noinline)) int leaf(int n, char *p) { return p[n] + n; }
__attribute__((noinline)) int with_alloca(int n) {
    char *p = alloca(n + 16); memset(p, n, n + 16); return leaf(n, p) + leaf(n + 1, p);
}
__attribute__((noinline)) int many(int a, int b, int c, int d) {
    int r = 0;
    for (int i = 0; i < a; i++) r += with_alloca(i + b) * c - d;
    if (r > 100) return r - leaf(1, (char *)&r);
    return r;
}
__attribute__((noinline)) int branchy(int x) {
    if (x > 3) { puts("big"); return with_alloca(x) + many(x, 1, 2, 3); }
    return x;
}
int main(int argc, char **argv) { (void)argv; return branchy(argc) + many(argc, 2, 3, 4) > 0; }
"""


def test_host_toolchain_twin(tmp_path: Path) -> None:
    """The same check on a binary the host gcc and gas build here and now."""
    if shutil.which("gcc") is None:
        missing("no host gcc (scripts/setup.sh installs it)")
    source = tmp_path / "t.c"
    source.write_text(HOST_SRC)
    out = tmp_path / "t"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(out),
                    str(source)], check=True)
    compared, expected, unexplained = crosscheck(str(out))
    assert compared >= 5 and not unexplained, "\n".join(unexplained[:10])
    assert set(expected) <= {PLT_EXPRESSION}

