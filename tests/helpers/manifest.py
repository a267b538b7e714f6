"""The fixture manifest, golden dumps, hand-built sections.

Tests that need the real fixtures parametrize over ``MANIFEST.json`` with
``manifest_params``; when the manifest is missing they get one ``None``
parameter and ``require`` fails them with a message saying so (never skip:
a missing fixture set must not look like a passing suite).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import FIXTURES

MANIFEST = FIXTURES / "MANIFEST.json"
MISSING = "fixtures are missing: tests/fixtures/MANIFEST.json not found (run tests/fixtures/build.sh)"

Entry = dict[str, Any]


def load_manifest() -> list[Entry] | None:
    if not MANIFEST.is_file():
        return None
    entries: list[Entry] = json.loads(MANIFEST.read_text())
    return entries


def manifest_params(keep: Callable[[Entry], bool] = lambda e: True, *,
                    unique_golden: bool = False) -> list[Any]:
    """pytest params over the manifest entries ``keep`` accepts (id = path)."""
    entries = load_manifest()
    if entries is None:
        return [pytest.param(None, id="fixtures-missing")]
    seen: set[str] = set()
    params = []
    for entry in entries:
        if not keep(entry):
            continue
        if unique_golden:
            if entry["golden"] in seen:
                continue
            seen.add(entry["golden"])
        params.append(pytest.param(entry, id=entry["path"]))
    if not params:
        return [pytest.param(None, id="no-matching-fixture")]
    return params


def require(entry: Entry | None) -> Entry:
    if entry is None:
        pytest.fail(MISSING if load_manifest() is None else "no fixture matches this test")
    return entry


def fixture_path(entry: Entry, key: str = "path") -> Path:
    return FIXTURES / entry[key]


def fixture_bytes(entry: Entry) -> bytes:
    return fixture_path(entry, "sframe_bin").read_bytes()


def find_entry(keep: Callable[[Entry], bool]) -> Entry:
    """The first manifest entry ``keep`` accepts; fails the test if none."""
    entries = load_manifest()
    if entries is None:
        pytest.fail(MISSING)
    for entry in entries:
        if keep(entry):
            return entry
    pytest.fail("no fixture matches this test")


# -- golden dumps ------------------------------------------------------------


@dataclass
class GoldenFDE:
    index: int
    pc: int
    size: int
    mask: bool
    attrs: str
    rows: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)


def golden_body(text: str) -> list[str]:
    """The golden's lines from ``Header :`` on, right-stripped, no trailing blanks."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Header :")
    body = [line.rstrip() for line in lines[start:]]
    while body and not body[-1]:
        body.pop()
    return body


def parse_golden(text: str) -> list[GoldenFDE]:
    """FDEs and their rows; a row's columns are ``("RA undefined",)`` or (CFA, FP, RA)."""
    fdes: list[GoldenFDE] = []
    for line in golden_body(text):
        words = line.split()
        if line.startswith("    func idx ["):
            head, _, rest = line.partition("]: pc = ")
            pc_text, _, rest = rest.partition(", size = ")
            size_text, _, attrs = rest.partition(" bytes")
            fdes.append(GoldenFDE(int(head.split("[")[1]), int(pc_text, 16),
                                  int(size_text), False, attrs.lstrip(", ")))
        elif words and words[0].startswith("STARTPC"):
            fdes[-1].mask = "[m]" in words[0]
        elif fdes and words and len(words[0]) == 16:
            fdes[-1].rows.append((int(words[0], 16), tuple(words[1:]) if words[1] != "RA"
                                  else ("RA undefined",)))
    return fdes


# -- building sections by hand -----------------------------------------------


@dataclass
class FREDef:
    start: int
    words: Sequence[int]
    base_sp: bool = True
    mangled: bool = False
    word_size: int = 1


@dataclass
class FDEDef:
    start: int  # function address
    size: int
    fres: Sequence[FREDef]
    fre_type: int = 0
    pcmask: bool = False
    pauth_b: bool = False
    signal: bool = False
    flex: bool = False
    rep_size: int = 0


def _fre_bytes(e: str, fre_type: int, fre: FREDef) -> bytes:
    code = {1: 0, 2: 1, 4: 2}[fre.word_size]
    info = int(bool(fre.base_sp and fre.words)) | (len(fre.words) << 1) | (code << 5) | (fre.mangled << 7)
    wfmt = {1: "b", 2: "h", 4: "i"}[fre.word_size]
    words = b"".join(struct.pack(e + (wfmt if w < 0 else wfmt.upper()), w) for w in fre.words)
    return struct.pack(e + "BHI"[fre_type], fre.start) + bytes([int(info)]) + words


def build_section(version: int, abi: int, fdes: Iterable[FDEDef], *, address: int = 0,
                  flags: int | None = None, fixed_ra: int | None = None,
                  fixed_fp: int = 0) -> bytes:
    """Encode a well-formed section as GNU tools lay it out (for ``address``)."""
    fdes = list(fdes)
    big = abi in (1, 4)
    e = ">" if big else "<"
    if flags is None:
        flags = 0x5 if version == 3 else 0x1
    if fixed_ra is None:
        fixed_ra = -8 if abi == 3 else 0
    fde_size = {1: 17, 2: 20, 3: 16}[version]
    fre_area = bytearray()
    records = []
    num_fres = 0
    for i, fde in enumerate(fdes):
        fre_off = len(fre_area)
        info = fde.fre_type | (fde.pcmask << 4) | (fde.pauth_b << 5) | (fde.signal << 7)
        if version == 3:
            fre_area += struct.pack(e + "HBBB", len(fde.fres), info, int(fde.flex), fde.rep_size)
        for fre in fde.fres:
            fre_area += _fre_bytes(e, fde.fre_type, fre)
        num_fres += len(fde.fres)
        field_off = 28 + i * fde_size
        value = fde.start - address - (field_off if flags & 0x4 else 0)
        if version == 1:
            records.append(struct.pack(e + "iIIIB", value, fde.size, fre_off, len(fde.fres), info))
        elif version == 2:
            records.append(struct.pack(e + "iIIIBBH", value, fde.size, fre_off, len(fde.fres),
                                       info, fde.rep_size, 0))
        else:
            records.append(struct.pack(e + "qII", value, fde.size, fre_off))
    header = struct.pack(e + "HBBBbbBIIIII", 0xDEE2, version, flags, abi, fixed_fp, fixed_ra, 0,
                         len(fdes), num_fres, len(fre_area), 0, len(fdes) * fde_size)
    return header + b"".join(records) + bytes(fre_area)
