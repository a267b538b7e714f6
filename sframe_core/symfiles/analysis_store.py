"""The callee-saved register analysis's results, kept across builds of a module.

A rebuilt program has a new build-id, so its symbol file is a miss in the
cache (``symfile.py``) and is made again; most of that time is the analysis
of every function (``analysis/saved.py``), although an edit-compile-debug
loop changes a few functions per build. So the generator keeps, per module
path, one file beside the symbol files holding each function's result under
the digest of everything its dataflow reads (``analysis/results.py``: the
decoded effects relative to the function's start, its CFA anchors, its
resolved jump tables, the analysis code), and the next build's functions
with the same digest take the kept spans, moved to where they now start,
and the kept branches out of the function (the state along each, which
``analysis/parts.py`` needs of every function to enter gcc's ``.cold``
parts), with their targets read again from the new build's bytes.
The symbol file is the same, byte for byte, with or without this file.

The file (``<module name>-<digest of its path>.analysis``) holds the last
build's results only (what it used and made), so it stays about as large as
one module's worth. It is read whole and trusted only whole: a magic line,
the digest of the generator and analysis versions it was made by, the
SHA-256 of the rest; anything that does not match (another version, a
truncated or corrupt file, a malformed entry) is ignored and replaced.
Written to a temporary file and renamed into place, as the symbol files
are; pruned with them (``cache.py``: the same age and size bounds, the
same ``sframe cache``). ``SFRAME_ANALYSIS_CACHE=0`` turns it off. Modules
of fewer than ``MIN_FDES`` functions keep none (their analysis is quick).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ..analysis import results
from ..analysis.results import Kept, KeptExit, Masks, Reads, Regs, State
from ..base import settings
from ..base.rows import SAME, Rule, RuleKind
from . import cache as symcache

__all__ = ["AnalysisStore", "StoreKept", "ENV", "MIN_FDES", "SUFFIX", "enabled", "store_path"]

ENV = "SFRAME_ANALYSIS_CACHE"
MIN_FDES = 256
SUFFIX = ".analysis"
_MAGIC = b"sframe-gdb analysis results 2\n"
_MAX_FILE = 64 << 20  # a larger file is not ours
_MAX_PAYLOAD = 512 << 20
# Mask lists tried per (size, CFA rows) of a function: each try is a hash.
_MASKS_PER_INDEX = 8
_KINDS = {RuleKind.AT_CFA.value: RuleKind.AT_CFA, RuleKind.SAME_VALUE.value: RuleKind.SAME_VALUE,
          RuleKind.IN_REG.value: RuleKind.IN_REG}


# What a worker process hands back: the results, masks and reads it used and made.
StoreKept = tuple[dict[bytes, Kept], dict[bytes, list[Masks]], dict[bytes, list[Reads]]]


def enabled() -> bool:
    """False when ``SFRAME_ANALYSIS_CACHE`` says off (0, off, no, false)."""
    return settings.switch(ENV)


def store_path(directory: str, module: str) -> str:
    """The store file of the module at path ``module`` in the cache ``directory``."""
    real = os.path.realpath(module)
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", os.path.basename(real))[:48] or "module"
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return os.path.join(directory, f"{name}-{digest}{SUFFIX}")


def _tag(generator: str) -> bytes | None:
    code = results.version()
    if code is None:
        return None
    return hashlib.sha256(f"{generator}\0{code}".encode()).hexdigest().encode()


def _is_int(value: object) -> bool:
    return type(value) is int


def _rule(item: object) -> tuple[int, Rule] | None:
    """One ``(reg, rule)`` of a stored rule set, as ``saved._rules`` makes them; None if not."""
    if not isinstance(item, list) or len(item) != 4:
        return None
    reg, kind_name, offset, other = item
    kind = _KINDS.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None or not _is_int(reg) or not _is_int(offset):
        return None
    if kind is RuleKind.SAME_VALUE:
        return (reg, SAME) if offset == 0 and other is None else None
    if kind is RuleKind.AT_CFA:
        return (reg, Rule(kind, offset)) if other is None else None
    return (reg, Rule(kind, 0, other)) if offset == 0 and _is_int(other) else None


def _rule_sets(raw: object) -> list[Regs] | None:
    if not isinstance(raw, list):
        return None
    out: list[Regs] = []
    for regs in raw:
        if not isinstance(regs, list):
            return None
        rules = [_rule(item) for item in regs]
        if any(r is None for r in rules):
            return None
        out.append(tuple(r for r in rules if r is not None))
    return out


def _spans(flat: object, sets: list[Regs]) -> Sequence[tuple[int, int, Regs]] | None:
    """``[lo, hi, set, lo, hi, set, ...]`` as spans, or None unless ordered and in range."""
    if not isinstance(flat, list) or len(flat) % 3:
        return None
    out = []
    previous = 0
    for k in range(0, len(flat), 3):
        lo, hi, which = flat[k], flat[k + 1], flat[k + 2]
        if not (_is_int(lo) and _is_int(hi) and _is_int(which)) or not previous <= lo < hi \
                or not 0 <= which < len(sets):
            return None
        out.append((lo, hi, sets[which]))
        previous = hi
    return tuple(out)


# The last store file parsed in this process, by identity: the parts a
# worker process is given, and workers forked after the parent read it,
# parse it once. (Entries are immutable; each store copies the dicts.)
_LAST: tuple[tuple[object, ...], _Parsed] | None = None


class AnalysisStore:
    """One module's kept results: ``get``/``put`` for ``saved.analyse``
    (``analysis.results.ResultStore``), ``save`` to write what this build used."""

    def __init__(self, path: str, tag: bytes | None, loaded: Mapping[bytes, Kept] | None = None,
                 masks: Mapping[bytes, list[Masks]] | None = None,
                 reads: Mapping[bytes, list[Reads]] | None = None, note: str = "") -> None:
        self.path = path
        self._tag = tag
        self._loaded: dict[bytes, Kept] = dict(loaded or {})
        self._used: dict[bytes, Kept] = {}
        self._loaded_masks: dict[bytes, list[Masks]] = dict(masks or {})
        self._masks: dict[bytes, list[Masks]] = {}
        self._loaded_reads: dict[bytes, list[Reads]] = dict(reads or {})
        self._reads: dict[bytes, list[Reads]] = {}
        self.note = note  # why a file there was ignored, for tests and curious readers
        self.hits = self.misses = 0

    @classmethod
    def load(cls, path: str, generator: str) -> AnalysisStore:
        """The store at ``path`` (empty when there is none, or it is not whole and ours)."""
        tag = _tag(generator)
        if tag is None:
            return cls(path, None, note="the analysis version is unknown: nothing is kept")
        global _LAST
        try:
            with open(path, "rb") as stream:
                st = os.fstat(stream.fileno())
                seen = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, tag)
                if _LAST is not None and _LAST[0] == seen:
                    parsed = _LAST[1]  # read already (a worker's next part, or forked)
                else:
                    parsed = _parse(stream.read(_MAX_FILE + 1), tag)
                    _LAST = (seen, parsed)
        except OSError:
            return cls(path, tag)
        loaded, masks, reads, note = parsed
        return cls(path, tag, loaded, masks, reads, note)

    # -- saved.analyse's side -----------------------------------------------------

    def get(self, key: bytes) -> Kept | None:
        found = self._used.get(key)
        if found is None:
            found = self._loaded.get(key)
            if found is not None:
                self._used[key] = found
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: bytes, kept: Kept) -> None:
        self._used[key] = Kept(tuple(kept.spans), tuple(kept.exits))

    def masks(self, index: bytes) -> list[Masks]:
        return _lists(self._masks, self._loaded_masks, index)

    def add_masks(self, index: bytes, masks: Masks) -> None:
        _add_bounded(self.masks(index), masks)

    def reads(self, key: bytes) -> list[Reads]:
        return _lists(self._reads, self._loaded_reads, key)

    def add_reads(self, key: bytes, reads: Reads) -> None:
        _add_bounded(self.reads(key), reads)

    # -- the generator's side -----------------------------------------------------

    def kept(self) -> StoreKept:
        """What this store used and made (a worker process hands it back)."""
        return (dict(self._used), {k: list(v) for k, v in self._masks.items() if v},
                {k: list(v) for k, v in self._reads.items() if v})

    def absorb(self, kept: StoreKept) -> None:
        """What a worker process used and made (``kept``), as if used here."""
        entries, masks, reads = kept
        self._used.update(entries)
        for index, found in masks.items():
            for one in found:
                self.add_masks(index, one)
        for key, asked in reads.items():
            for log in asked:
                self.add_reads(key, log)

    def save(self) -> None:
        """Write what this build used and made, atomically; when that is what
        the file holds already, only mark it used. Best effort: a cache that
        cannot be written costs the next build time, nothing else."""
        if self._tag is None or not self._used:
            return
        masks = {k: v for k, v in self._masks.items() if v}
        reads = {k: v for k, v in self._reads.items() if v}
        if self._used.keys() == self._loaded.keys() and masks == self._loaded_masks \
                and reads == self._loaded_reads:
            symcache.touch(self.path)
            return
        import tempfile  # as symfile.py: only where a file is written

        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            fd, tmp = tempfile.mkstemp(prefix=".sframe-tmp-", suffix=SUFFIX, dir=directory)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(_encode(self._used, masks, reads, self._tag))
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_Triples = tuple[tuple[int, int, int], ...]
_Item = TypeVar("_Item", Regs, State)


def _lists(used: dict[bytes, list[_Triples]], loaded: Mapping[bytes, list[_Triples]],
           key: bytes) -> list[_Triples]:
    """The masks or reads under ``key`` this build uses (the loaded ones, copied once)."""
    found = used.get(key)
    if found is None:
        found = used[key] = list(loaded.get(key, ()))
    return found


def _add_bounded(known: list[_Triples], item: _Triples) -> None:
    """``item`` added to ``known``, the oldest dropped past ``_MASKS_PER_INDEX``."""
    if item not in known:
        if len(known) >= _MASKS_PER_INDEX:
            del known[0]
        known.append(item)


def _number(numbers: dict[_Item, int], table: list[list[object]], item: _Item,
            row: Callable[[_Item], list[object]]) -> int:
    """``item``'s row number in ``table`` (rule sets, states: each written once),
    its ``row`` appended the first time."""
    found = numbers.get(item)
    if found is None:
        found = numbers[item] = len(table)
        table.append(row(item))
    return found


def _flat(lists: Mapping[bytes, list[tuple[tuple[int, int, int], ...]]]) -> dict[str, list[list[int]]]:
    return {key.hex(): [[n for triple in one for n in triple] for one in found]
            for key, found in sorted(lists.items())}


def _encode(entries: Mapping[bytes, Kept], masks: Mapping[bytes, list[Masks]],
            reads: Mapping[bytes, list[Reads]], tag: bytes) -> bytes:
    sets: dict[Regs, int] = {}
    table: list[list[object]] = []
    out: dict[str, list[int]] = {}
    states: dict[State, int] = {}
    state_table: list[list[object]] = []
    exits: dict[str, list[int | None]] = {}
    for key, (spans, kept_exits) in sorted(entries.items()):
        flat: list[int] = []
        for lo, hi, regs in spans:
            flat += (lo, hi, _number(sets, table, regs, lambda regs: [
                [reg, rule.kind.value, rule.offset, rule.reg] for reg, rule in regs]))
        out[key.hex()] = flat
        if kept_exits:
            branches: list[int | None] = []
            for off, rel, state in kept_exits:
                number = -1 if state is None else _number(states, state_table, state, lambda s: [
                    s[0], s[1], [list(r) for r in s[2]], s[3]])
                branches += (off, rel, number)
            exits[key.hex()] = branches
    payload = zlib.compress(json.dumps({"regs": table, "results": out, "masks": _flat(masks),
                                        "reads": _flat(reads), "states": state_table,
                                        "exits": exits},
                                       separators=(",", ":")).encode(), 6)
    return _MAGIC + tag + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


_Parsed = tuple[dict[bytes, Kept], dict[bytes, list[Masks]], dict[bytes, list[Reads]], str]


def _key(name: object) -> bytes | None:
    if not isinstance(name, str) or len(name) != 40:
        return None
    try:
        return bytes.fromhex(name)
    except ValueError:
        return None


def _triples(raw: object) -> dict[bytes, list[tuple[tuple[int, int, int], ...]]] | None:
    """Masks or reads: key -> lists of flattened integer triples."""
    if not isinstance(raw, dict):
        return None
    out: dict[bytes, list[tuple[tuple[int, int, int], ...]]] = {}
    for name, found in raw.items():
        index = _key(name)
        if index is None or not isinstance(found, list):
            return None
        lists: list[tuple[tuple[int, int, int], ...]] = []
        for flat in found:
            if not isinstance(flat, list) or len(flat) % 3 or not all(_is_int(n) for n in flat):
                return None
            lists.append(tuple((flat[k], flat[k + 1], flat[k + 2]) for k in range(0, len(flat), 3)))
        out[index] = lists
    return out


def _parse(data: bytes, tag: bytes) -> _Parsed:
    """(entries, masks, reads, "") from a whole store file of this version,
    else ({}, {}, {}, why not)."""
    if len(data) > _MAX_FILE:
        return {}, {}, {}, "too large"
    if not data.startswith(_MAGIC):
        return {}, {}, {}, "not a store file"
    head, sep, rest = data[len(_MAGIC):].partition(b"\n")
    if not sep or head != tag:
        return {}, {}, {}, "made by another version"
    digest, sep, payload = rest.partition(b"\n")
    if not sep or hashlib.sha256(payload).hexdigest().encode() != digest:
        return {}, {}, {}, "checksum mismatch (truncated or corrupt)"
    try:
        inflate = zlib.decompressobj()
        text = inflate.decompress(payload, _MAX_PAYLOAD)
        if inflate.unconsumed_tail or not inflate.eof:
            return {}, {}, {}, "corrupt payload"
        raw = json.loads(text)
    except (zlib.error, ValueError, RecursionError):
        return {}, {}, {}, "corrupt payload"
    if not isinstance(raw, dict) or not isinstance(raw.get("results"), dict):
        return {}, {}, {}, "malformed"
    sets = _rule_sets(raw.get("regs"))
    masks = _triples(raw.get("masks"))
    reads = _triples(raw.get("reads"))
    if sets is None or masks is None or reads is None:
        return {}, {}, {}, "malformed rules or masks"
    states = _states(raw.get("states"))
    exits = raw.get("exits")
    if states is None or not isinstance(exits, dict):
        return {}, {}, {}, "malformed states or exits"
    entries: dict[bytes, Kept] = {}
    for name, flat in raw["results"].items():
        spans = _spans(flat, sets)
        key = _key(name)
        branches = _exits(exits.get(name, []), states)
        if spans is None or key is None or branches is None:
            return {}, {}, {}, "malformed entry"
        entries[key] = Kept(spans, branches)
    return entries, masks, reads, ""


def _is_opt_int(value: object) -> bool:
    return value is None or type(value) is int


def _states(raw: object) -> list[State] | None:
    """The stored states (``results.State``), or None unless each is one."""
    if not isinstance(raw, list):
        return None
    out: list[State] = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 4 or not isinstance(item[2], list) \
                or not (_is_opt_int(item[0]) and _is_opt_int(item[1]) and _is_opt_int(item[3])):
            return None
        regs = []
        for reg in item[2]:
            if not isinstance(reg, list) or len(reg) != 4 or not _is_opt_int(reg[0]) \
                    or type(reg[1]) is not bool or type(reg[2]) is not bool \
                    or not _is_opt_int(reg[3]):
                return None
            regs.append((reg[0], reg[1], reg[2], reg[3]))
        out.append((item[0], item[1], tuple(regs), item[3]))
    return out


def _exits(flat: object, states: list[State]) -> tuple[KeptExit, ...] | None:
    """``[offset, target offset, state, ...]`` as kept exits, or None unless well formed."""
    if not isinstance(flat, list) or len(flat) % 3:
        return None
    out: list[KeptExit] = []
    for k in range(0, len(flat), 3):
        off, rel, which = flat[k], flat[k + 1], flat[k + 2]
        if not (_is_int(off) and off >= 0 and _is_opt_int(rel) and _is_int(which)) \
                or not -1 <= which < len(states):
            return None
        out.append((off, rel, None if which < 0 else states[which]))
    return tuple(out)
