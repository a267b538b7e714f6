#!/usr/bin/env python3
"""Move sframe_core's modules into layer packages and rewrite every reference.

One table (MOVES, old module -> new module) drives everything, so the move can
be re-run on a newer main: files are moved with ``git mv`` (a move already
made is skipped), and every reference to an old module is rewritten:

- relative imports inside the packages (``from .x import``, ``from . import x``,
  ``from ..x import``), re-expressed relative to the file's new place;
- absolute imports and every dotted string (``from sframe_core.x import``,
  ``import sframe_core.x``, ``python -m sframe_core.x``, monkeypatch targets
  like ``"sframe_core.symfile.SAVED_REGISTERS"``, pyproject entry points);
- ``from sframe_core import x`` where x is a moved module;
- paths such as ``sframe_core/symfile.py`` in scripts and docs.

NAMES (old module, name) -> new module carries names that a later commit took
out of a module (a split): imports of them are pointed at their new module.
Running the script again on a tree that is already moved changes nothing.

Usage: python3 scripts/restructure.py [--no-move] [--check]
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "sframe_core"
PACKAGES = (PKG, "gdb_plugin", "lldb_plugin")

# Bottom to top: base, analysis, format, dwarf, unwind, targets, symfiles, cli.
MOVES: dict[str, str] = {
    # base: what every layer speaks (ABIs, the row model, errors, files, memory)
    "sframe_core.abi": "sframe_core.base.abi",
    "sframe_core.errors": "sframe_core.base.errors",
    "sframe_core.files": "sframe_core.base.files",
    "sframe_core.memory": "sframe_core.base.memory",
    "sframe_core.rows": "sframe_core.base.rows",
    # analysis: what machine code does to the frame
    "sframe_core.effects": "sframe_core.analysis.effects",
    "sframe_core.effects_s390x": "sframe_core.analysis.s390x",
    "sframe_core.saved": "sframe_core.analysis.saved",
    # format: SFrame sections, in ELF files, dumped and described
    "sframe_core.format": "sframe_core.format.records",
    "sframe_core.errata": "sframe_core.format.errata",
    "sframe_core.section": "sframe_core.format.section",
    "sframe_core.dump": "sframe_core.format.dump",
    "sframe_core.describe": "sframe_core.format.describe",
    "sframe_core.elf": "sframe_core.format.elf",
    # dwarf: DWARF CFI read as rows, .debug_frame written
    "sframe_core.cfi": "sframe_core.dwarf.cfi",
    "sframe_core.dwarf": "sframe_core.dwarf.debug_frame",
    # unwind: the step, its stops, addresses, frames without rows
    "sframe_core.addresses": "sframe_core.unwind.addresses",
    "sframe_core.unwind": "sframe_core.unwind.step",
    "sframe_core.norow": "sframe_core.unwind.norow",
    # targets: modules, cores, live processes, symbols, whole backtraces
    "sframe_core.symbols": "sframe_core.targets.symbols",
    "sframe_core.modules": "sframe_core.targets.modules",
    "sframe_core.corefile": "sframe_core.targets.corefile",
    "sframe_core.ptrace": "sframe_core.targets.ptrace",
    "sframe_core.backtrace": "sframe_core.targets.backtrace",
    # symfiles: symbol files for the debuggers, their cache and workers
    "sframe_core.symfile": "sframe_core.symfiles.symfile",
    "sframe_core.symcache": "sframe_core.symfiles.cache",
    "sframe_core.symjobs": "sframe_core.symfiles.jobs",
    "sframe_core.elfsyms": "sframe_core.symfiles.elfsyms",
    # cli: the sframe command
    "sframe_core.cli": "sframe_core.cli.commands",
    "sframe_core.verify": "sframe_core.cli.verify",
}

# Names carried out of a module by a later (hand) commit: (module, name) -> module.
# Only applied where the name is defined in its new module.
NAMES: dict[tuple[str, str], str] = {
    # effects.py split by ABI: the shared records stay, each ABI's decoder and
    # jump-table readers have their module, decoders.py picks the decoder.
    **{("sframe_core.analysis.effects", name): "sframe_core.analysis.amd64"
       for name in ("AMD64", "_X86_NAMES", "_RSP", "_RBP", "amd64_jump_tables",
                     "amd64_jump_table", "amd64_computed_goto")},
    **{("sframe_core.analysis.effects", name): "sframe_core.analysis.aarch64"
       for name in ("AArch64", "_A64_NAMES", "_A64_SP", "_A64_FP", "aarch64_jump_table",
                     "aarch64_jump_tables")},
    ("sframe_core.analysis.effects", "decoder_for"): "sframe_core.analysis.decoders",
    # what an SFrame FRE means leaves the row model (base) for the format layer
    ("sframe_core.base.rows", "FRERules"): "sframe_core.format.rules",
    ("sframe_core.base.rows", "fre_rules"): "sframe_core.format.rules",
    # the adapters' circles: gdb's register handles below objfiles and unwinder,
    # lldb's kept state below every other module of the plugin
    ("gdb_plugin.unwinder", "Registers"): "gdb_plugin.registers",
    ("gdb_plugin.unwinder", "Handles"): "gdb_plugin.registers",
    **{("lldb_plugin.target", name): "lldb_plugin.state"
       for name in ("target_key", "warn", "warn_once")},
    **{("lldb_plugin.symfiles", name): "lldb_plugin.state"
       for name in ("Route", "NATIVE", "FAILED", "PROVIDER", "ENV", "enabled", "routes", "is_native",
                    "keeps_addresses_when_debug_info_is_replaced")},
}

# What the move itself breaks or pushes past the line limit: (file, before, after),
# the file named where it stands before the move.
FIXUPS: list[tuple[str, str, str]] = [
    # setuptools installs the packages it is told of: the layer packages too.
    ("pyproject.toml",
     'packages = ["sframe_core", "gdb_plugin", "lldb_plugin"]',
     'packages = ["sframe_core", "sframe_core.analysis", "sframe_core.base", "sframe_core.cli",\n'
     '            "sframe_core.dwarf", "sframe_core.format", "sframe_core.symfiles", "sframe_core.targets",\n'
     '            "sframe_core.unwind", "gdb_plugin", "lldb_plugin"]'),
    # cli.py finds the checkout (sframe_gdb.py, lldb_plugin/) from its own path:
    # one folder deeper now.
    ("sframe_core/cli.py",
     "    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
     "    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))"),
    ("bench/bench_core_start.py",
     '[sys.executable, "-c", "import sframe_core.cli.commands, sframe_core.targets.corefile"]',
     '[sys.executable, "-c",\n'
     '                                  "import sframe_core.cli.commands, sframe_core.targets.corefile"]'),
    ("tests/test_cross_values.py",
     '"python import sframe_core.format.section; sframe_core.format.section.SAVED_REGISTERS = False"',
     '"python import sframe_core.format.section; "\n'
     '                       "sframe_core.format.section.SAVED_REGISTERS = False"'),
]

PACKAGE_DOCS = {
    "base": "What every layer uses: the ABIs, the row model, errors, opening files, reading memory.",
    "analysis": "What machine code does to the frame: one decoder per ABI, jump tables, the "
                "saved-register dataflow.",
    "format": "The SFrame format: records, sections, errata, SFrame in ELF files, dump and describe.",
    "dwarf": "DWARF CFI read as rows, and .debug_frame written from SFrame rows.",
    "unwind": "The unwind step: rows to the caller's registers, stop reasons, addresses, "
              "frames without rows.",
    "targets": "What is unwound: modules, core files, live processes, symbols, whole backtraces.",
    "symfiles": "Symbol files handed to the debuggers, their cache and the worker processes.",
    "cli": "The ``sframe`` command line.",
}
# What a package's __init__.py hands on besides its docstring: ``main`` stays
# ``sframe_core.cli:main`` (the entry point of installs made before the move).
PACKAGE_FACES = {"cli": '\nfrom .commands import main\n\n__all__ = ["main"]\n'}

SCOPE = ["sframe_core", "gdb_plugin", "lldb_plugin", "sframe_gdb.py", "tests", "bench", "scripts",
         "docs", "README.md", "pyproject.toml", "examples"]
SKIP_DIRS = {"fixtures", "__pycache__", ".git"}
SKIP_FILES = {os.path.join("scripts", "restructure.py")}
TEXT_EXT = {".py", ".sh", ".md", ".toml", ".txt", ".gdb", ".cfg", ".ini", ".json", ".yml", ".yaml"}

NEW_MODULES = set(MOVES.values()) | {PKG + "." + p for p in PACKAGE_DOCS}
OLD_MODULES = set(MOVES)
# The old modules whose files still stand: a new package that bears one's name
# (format, dwarf, unwind, cli) means that module until it has moved.
OLD_PRESENT = {m for m in MOVES if os.path.exists(os.path.join(ROOT, *m.split(".")) + ".py")}


def module_path(mod: str, package: bool = False) -> str:
    parts = mod.split(".")
    return os.path.join(*parts, "__init__.py") if package else os.path.join(*parts) + ".py"


def file_module(rel: str) -> tuple[str, bool]:
    """The module a file under ROOT is, and whether it is a package's __init__."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def map_dotted(dotted: str) -> str:
    """Rewrite a dotted name that may start with an old module.

    Where an old module's file still stands (the tree is not yet moved), its
    name means the old module, even where a new package bears it too
    (``sframe_core.format.FDE`` is then old format.py's ``FDE``); once moved, a
    name that starts with a new module is left alone.
    """
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        head = ".".join(parts[:n])
        if head in OLD_PRESENT:
            return ".".join([MOVES[head], *parts[n:]])
    for n in range(len(parts), 1, -1):
        head = ".".join(parts[:n])
        if head in NEW_MODULES:
            return dotted
    for n in range(len(parts), 1, -1):  # an old name left in a moved tree
        head = ".".join(parts[:n])
        if head in MOVES:
            return ".".join([MOVES[head], *parts[n:]])
    return dotted


def resolve(importer: str, is_pkg: bool, level: int, module: str | None) -> str:
    base = importer.split(".")
    if not is_pkg:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def relative(importer: str, is_pkg: bool, target: str) -> tuple[int, str]:
    """``target`` as a relative import from ``importer``: (level, module or '')."""
    here = importer.split(".") if is_pkg else importer.split(".")[:-1]
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    level = len(here) - common + 1
    return level, ".".join(there[common:])


_DEFINED: dict[str, set[str]] = {}


def defines(mod: str, name: str) -> bool:
    if mod not in _DEFINED:
        path = os.path.join(ROOT, module_path(mod))
        names: set[str] = set()
        if os.path.exists(path):
            tree = ast.parse(open(path, encoding="utf-8").read())
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Assign):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
        _DEFINED[mod] = names
    return name in _DEFINED[mod]


def fmt_from(level: int, module: str, names: list[str], absolute: str | None) -> str:
    head = absolute if absolute is not None else "." * level + module
    return f"from {head} import {', '.join(names)}"


def rewrite_imports(src: str, importer: str, is_pkg: bool) -> str:
    """Rewrite the ImportFrom statements whose module (or names) moved."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return rewrite_text(src)
    lines = src.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    new_importer = importer if is_pkg else map_dotted(importer)
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset  # type: ignore[operator]
        spans.append((start, end))
        if isinstance(node, ast.Import):
            old = src[start:end]
            if rewrite_text(old) != old:
                edits.append((start, end, rewrite_text(old)))
            continue
        if node.level:
            target = resolve(importer, is_pkg, node.level, node.module)
        else:
            target = node.module or ""
        if target.split(".")[0] not in PACKAGES:
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            full = target + "." + alias.name
            text = alias.name + (f" as {alias.asname}" if alias.asname else "")
            # ``from sframe_core import section``: a moved module (also one left
            # in a moved tree, where its name is no new package's)
            if full in OLD_PRESENT or (full in OLD_MODULES and full not in NEW_MODULES):
                parent, leaf = MOVES[full].rsplit(".", 1)
                asname = alias.asname or (alias.name if leaf != alias.name else None)
                groups.setdefault(parent, []).append(leaf + (f" as {asname}" if asname else ""))
                continue
            if full in NEW_MODULES and target not in OLD_PRESENT:  # a new package's module
                groups.setdefault(target, []).append(text)
                continue
            new_target = map_dotted(target)
            moved = NAMES.get((new_target, alias.name)) or NAMES.get((target, alias.name))
            if moved and defines(moved, alias.name):
                new_target = moved
            groups.setdefault(new_target, []).append(text)
        if list(groups) == [target] and not node.level:
            continue
        stmts = []
        for mod, names in groups.items():
            if node.level and mod.split(".")[0] == new_importer.split(".")[0]:
                level, rel = relative(new_importer, is_pkg, mod)
                stmts.append(fmt_from(level, rel, names, None))
            else:
                stmts.append(fmt_from(0, "", names, mod))
        old = src[start:end]
        indent = " " * node.col_offset
        new = ("\n" + indent).join(stmts)
        if ast.dump(ast.parse(old.strip())) != ast.dump(ast.parse(textwrap.dedent(indent + new))):
            edits.append((start, end, new))
    # The text between the imports: dotted names and paths in strings and prose.
    pieces, at = [], 0
    changes = dict((start, (end, new)) for start, end, new in edits)
    for start, end in sorted(spans):
        pieces.append(rewrite_text(src[at:start]))
        pieces.append(changes[start][1] if start in changes else src[start:end])
        at = end
    pieces.append(rewrite_text(src[at:]))
    return "".join(pieces)


DOTTED = re.compile(r"\bsframe_core(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"\bsframe_core/((?:\w+/)*\w+)\.py\b")


def rewrite_text(src: str) -> str:
    src = DOTTED.sub(lambda m: map_dotted(m.group(0)), src)

    def path(m: re.Match[str]) -> str:
        mod = PKG + "." + m.group(1).replace("/", ".")
        new = map_dotted(mod)
        return module_path(new).replace(os.sep, "/") if new != mod else m.group(0)

    return PATH.sub(path, src)


def files_in_scope() -> list[str]:
    out = []
    for entry in SCOPE:
        full = os.path.join(ROOT, entry)
        if os.path.isfile(full):
            out.append(entry)
            continue
        for dirpath, dirnames, filenames in os.walk(full):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if os.path.splitext(name)[1] in TEXT_EXT or name in ("run",):
                    out.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return out


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-move", action="store_true", help="rewrite references only")
    parser.add_argument("--check", action="store_true", help="say what would change, change nothing")
    args = parser.parse_args()

    # New contents first, computed from each file's current place.
    changed: dict[str, str] = {}
    for rel in files_in_scope():
        if rel in SKIP_FILES:
            continue
        path = os.path.join(ROOT, rel)
        try:
            src = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        new = src
        if rel.endswith(".py"):
            mod, is_pkg = file_module(rel)
            new = rewrite_imports(new, mod, is_pkg)
        else:
            new = rewrite_text(new)
        if new != src:
            changed[rel] = new
    moves = []
    if not args.no_move:
        for old, new in MOVES.items():
            src, dst = module_path(old), module_path(new)
            if os.path.exists(os.path.join(ROOT, src)) and not os.path.exists(os.path.join(ROOT, dst)):
                moves.append((src, dst))
    if args.check:
        for rel in sorted(changed):
            print("rewrite", rel)
        for src, dst in moves:
            print("move", src, dst)
        return 1 if changed or moves else 0

    for pkg, doc in PACKAGE_DOCS.items():
        init = os.path.join(ROOT, PKG, pkg, "__init__.py")
        if not os.path.exists(init):
            os.makedirs(os.path.dirname(init), exist_ok=True)
            with open(init, "w", encoding="utf-8") as out:
                out.write(f'"""{doc}"""\n' + PACKAGE_FACES.get(pkg, ""))
            git("add", os.path.relpath(init, ROOT))
    for rel, before, after in FIXUPS:
        if not os.path.exists(os.path.join(ROOT, rel)):  # moved already
            mod = PKG + "." + rel[len(PKG) + 1:-3].replace("/", ".") if rel.startswith(PKG) else ""
            rel = module_path(MOVES[mod]) if mod in MOVES else rel
        text = changed.get(rel)
        if text is None and os.path.exists(os.path.join(ROOT, rel)):
            text = open(os.path.join(ROOT, rel), encoding="utf-8").read()
        if text is not None and before in text:
            changed[rel] = text.replace(before, after)
    for rel, new in changed.items():
        with open(os.path.join(ROOT, rel), "w", encoding="utf-8") as out:
            out.write(new)
    touched = set(changed)
    for src, dst in moves:
        git("mv", src, dst)
        touched.discard(src)
        touched.add(dst)
    py = sorted(t for t in touched if t.endswith(".py") and os.path.exists(os.path.join(ROOT, t)))
    if py:
        ruff = os.path.join(ROOT, ".venv", "bin", "ruff")
        subprocess.run([ruff if os.path.exists(ruff) else "ruff", "check", "--fix", "--select", "I",
                        "--quiet", *py], cwd=ROOT, check=False)
    print(f"{len(moves)} moved, {len(changed)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
