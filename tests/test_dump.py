"""``sframe dump`` against every golden ``readelf --sframe`` dump of the fixtures.

Comparison is line by line from ``Header :`` on, trailing spaces ignored (so
every token and every column position must match). Older dumpers differ from
the binutils 2.46 text we print in a few known ways; each is undone by one
named normalisation below, applied only to the goldens that need it.
"""

from __future__ import annotations

import difflib
import json
import re

import pytest
from helpers.manifest import Entry, fixture_path, golden_body, manifest_params, require

from sframe_core.cli.commands import main
from sframe_core.format.dump import dump_json, dump_text
from sframe_core.format.elf import open_sframe
from sframe_core.format.section import SFrameSection


def norm_v1_240(lines: list[str], entry: Entry) -> list[str]:
    """binutils 2.40 (v1): no ``CFA fixed RA offset`` line; RA printed ``u`` not ``f``."""
    out = [line for line in lines if not line.startswith("    CFA fixed RA offset:")]
    return [re.sub(r"^(    [0-9a-f]{16}  \S+ +\S+ +)f( *)$", r"\1u\2", line) for line in out]


def norm_old_object(lines: list[str], entry: Entry) -> list[str]:
    """2.40/2.44 ``.o`` dumps print ``pc = 0x0`` for every function (their relocation
    fix-up leaves the PC-relative value unused), so compare row addresses as offsets
    from the FDE's start and hide the FDE start. Applied to both sides."""
    out, base, in_mask = [], 0, False
    for line in lines:
        if line.lstrip().startswith("STARTPC"):
            in_mask = "[m]" in line  # PC-mask rows print raw offsets already
        m = re.match(r"^(    func idx \[\d+\]: pc = )0x([0-9a-f]+)(.*)$", line)
        if m:
            base = int(m.group(2), 16)
            out.append(f"{m.group(1)}*{m.group(3)}")
            continue
        m = re.match(r"^    ([0-9a-f]{16})(  .*)$", line)
        if m and not in_mask:
            out.append(f"    +{int(m.group(1), 16) - base:x}{m.group(2)}")
            continue
        out.append(line)
    return out


def normalisations(entry: Entry) -> list:
    steps = []
    if entry["producer_dir"].startswith("bu2.40"):
        steps.append(norm_v1_240)
    if entry["kind"] == "obj" and entry["sframe_version"] < 3:
        steps.append(norm_old_object)
    return steps


def compare(ours: str, golden: str, entry: Entry) -> None:
    want, got = golden_body(golden), golden_body(ours)
    for step in normalisations(entry):
        want, got = step(want, entry), step(got, entry)
    if want != got:
        diff = "\n".join(difflib.unified_diff(want, got, "golden", "sframe dump", lineterm=""))
        pytest.fail(f"{entry['path']}: dump differs from {entry['golden']}\n{diff}")


@pytest.mark.parametrize("entry", manifest_params(unique_golden=True))
def test_dump_matches_golden(entry: Entry | None) -> None:
    entry = require(entry)
    section = open_sframe(fixture_path(entry))
    compare(dump_text(section), fixture_path(entry, "golden").read_text(), entry)


@pytest.mark.parametrize("entry", manifest_params(lambda e: e["kind"] != "obj",
                                                  unique_golden=True))
def test_raw_blob_dump_matches_golden(entry: Entry | None) -> None:
    """The ``.sframe.bin`` bytes at ``.sframe.addr`` dump the same as the ELF file."""
    entry = require(entry)
    section = SFrameSection(fixture_path(entry, "sframe_bin").read_bytes(), entry["sframe_addr"])
    compare(dump_text(section), fixture_path(entry, "golden").read_text(), entry)


@pytest.mark.parametrize("entry", manifest_params(lambda e: e["variant"] == "noeh.stripped"))
def test_cli_dump_of_stripped_file(entry: Entry | None, capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    """Without section headers the section is found through PT_GNU_SFRAME."""
    entry = require(entry)
    assert main(["dump", str(fixture_path(entry))]) == 0
    compare(capsys.readouterr().out, fixture_path(entry, "golden").read_text(), entry)


@pytest.mark.parametrize("entry", manifest_params(lambda e: e["kind"] == "obj"))
def test_object_dump_says_text_offsets(entry: Entry | None,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    entry = require(entry)
    assert main(["dump", str(fixture_path(entry))]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("# relocatable object: addresses are offsets")
    assert main(["dump", "--json", str(fixture_path(entry))]) == 0
    assert json.loads(capsys.readouterr().out)["addresses"] == "text-offsets"


@pytest.mark.parametrize("entry", manifest_params(unique_golden=True))
def test_json_agrees_with_text(entry: Entry | None) -> None:
    """Every JSON row carries the same columns as the text dump, and the raw words."""
    entry = require(entry)
    section = open_sframe(fixture_path(entry))
    data = dump_json(section)
    assert data["errors"] == []
    assert data["header"]["num_fdes"] == len(data["fdes"])
    assert sum(len(f["fres"]) for f in data["fdes"]) == data["header"]["num_fres"]
    rows = [line.split() for line in dump_text(section).splitlines()
            if re.match(r"^    [0-9a-f]{16}  ", line)]
    fres = [fre for fde in data["fdes"] for fre in fde["fres"]]
    assert len(rows) == len(fres)
    for words, fre in zip(rows, fres, strict=True):
        assert len(fre["words"]) == (fre["info"] >> 1) & 0xF
        if fre["text"] is None:
            assert words[1:] == ["RA", "undefined"]
        else:
            assert words[1:] == [fre["text"]["cfa"], fre["text"]["fp"], fre["text"]["ra"]]
    json.dumps(data)  # plain data only
