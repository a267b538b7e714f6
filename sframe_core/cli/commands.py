"""The ``sframe`` command: dump and query ``.sframe`` sections from the shell.

Each subcommand is a ``run(args) -> int`` function registered with
``@command(name, help, configure)``; ``main`` only builds the parser from
the registry and turns every ``SFrameError`` (and OS error) into one line on
stderr, ``sframe: FILE: what is wrong``, with exit status 1. Usage errors
exit 2 (argparse). ``--traceback`` (hidden) lets developers see the stack.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.section import SectionAnalysis
from ..base.errors import FileError, SFrameError
from ..base.files import MAX_SECTION_SIZE, read_regular
from ..format.describe import describe_row, lookup_text
from ..format.dump import dump_json, dump_lines, fde_json, fre_json
from ..format.elf import read_elf
from ..format.section import SFrameSection
from ..targets import backtrace
from ..version import __version__
from . import verify as verify_cli
from .common import PROG, CommandFailed, UsageError, error_line, in_parallel

__all__ = ["main", "command", "COMMANDS", "CommandFailed", "parse_address", "open_input"]

@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: list[Command] = []


def command(name: str, help: str,
            configure: Callable[[argparse.ArgumentParser], None]
            ) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register ``run`` as subcommand ``name``; ``configure`` adds its arguments."""
    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS.append(Command(name, help, configure, run))
        return run
    return register


def parse_address(text: str) -> int:
    """``0x...`` hex or decimal, for argparse (a ValueError is a usage error)."""
    value = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    if value < 0:
        raise ValueError(text)
    return value


parse_address.__name__ = "address"  # argparse names the type in its message


# -- opening what the user named --------------------------------------------


@dataclass(frozen=True)
class Input:
    label: str  # what error messages name: the file or blob path
    section: SFrameSection
    text_offsets: bool  # relocatable object: addresses are text-section offsets


def _add_input_args(parser: argparse.ArgumentParser, *, file_required: bool) -> None:
    parser.add_argument("file", nargs=None if file_required else "?", metavar="FILE",
                        help="ELF file with a .sframe section")
    parser.add_argument("--raw", metavar="BLOB",
                        help="read raw .sframe section bytes from BLOB instead of an ELF file")
    parser.add_argument("--address", type=parse_address, default=None, metavar="ADDR",
                        help="section address for --raw (default 0), or a runtime address "
                             "to rebase an ELF file's section to")
    parser.add_argument("--json", action="store_true", help="print JSON")


def open_input(args: argparse.Namespace) -> Input:
    """The section named by ``FILE`` or ``--raw BLOB``.

    :raises SFrameError: with the file name in the message.
    """
    if args.raw is not None:
        label = args.raw
        data = read_regular(args.raw, MAX_SECTION_SIZE, "SFrame section")
        try:
            section = _raw_section(data, args.address or 0, label)
        except SFrameError as exc:
            raise type(exc)(f"{label}: {exc}") from None
        return Input(label, section, False)
    info = read_elf(args.file)
    opened = info.open(args.address, analyser=SectionAnalysis)
    if opened is None:
        raise FileError(f"{info.path}: no .sframe section")
    return Input(info.path, opened, info.is_relocatable)


def _raw_section(data: bytes, address: int, label: str) -> SFrameSection:
    """A blob's section; one of several SFrame headers one after the other
    (a gold, lld or mold output's bytes) is read part by part, as a linked
    module's is (no code to check the starts against: only their overlaps)."""
    from ..format.linked import read_linked, split_parts

    if len(split_parts(data)) == 1:
        return SFrameSection(data, address, name=label)
    linked = read_linked(data, address, exact=True, code=None)
    section = SFrameSection(linked.data, address, name=label)
    section.merged = linked.note
    return section


def _with_label(label: str, exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith(f"{label}:") else f"{label}: {text}"


# -- dump -------------------------------------------------------------------


def _configure_dump(parser: argparse.ArgumentParser) -> None:
    _add_input_args(parser, file_required=False)


@command("dump", "print a .sframe section like `objdump --sframe`", _configure_dump)
def run_dump(args: argparse.Namespace) -> int:
    _need_one_input(args)
    source = open_input(args)
    out = sys.stdout
    if args.json:
        data = dump_json(source.section, text_offsets=source.text_offsets)
        json.dump(data, out, indent=1)
        out.write("\n")
        errors = data["errors"]
    else:
        found: list[SFrameError] = []
        for line in dump_lines(source.section, found, text_offsets=source.text_offsets):
            out.write(line + "\n")
        errors = [str(e) for e in found]
    if errors:
        out.flush()
        raise CommandFailed(_with_label(source.label, errors[0]) +
                            (f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""))
    return 0


def _need_one_input(args: argparse.Namespace) -> None:
    if (args.file is None) == (args.raw is None):
        raise UsageError("give either FILE or --raw BLOB")


# -- lookup -----------------------------------------------------------------


def _configure_lookup(parser: argparse.ArgumentParser) -> None:
    _add_input_args(parser, file_required=False)
    parser.add_argument("pc", type=parse_address, metavar="ADDR",
                        help="address to look up (0x... or decimal)")


@command("lookup", "show the SFrame row that applies at an address", _configure_lookup)
def run_lookup(args: argparse.Namespace) -> int:
    _need_one_input(args)
    source = open_input(args)
    section = source.section
    try:
        hit = section.lookup(args.pc)
    except SFrameError as exc:
        raise CommandFailed(_with_label(source.label, exc)) from None
    if hit is None:
        fde = section.find_fde(args.pc)
        if fde is None:
            raise CommandFailed(f"{source.label}: address 0x{args.pc:x} is not covered by any FDE")
        raise CommandFailed(f"{source.label}: address 0x{args.pc:x} is in FDE [{fde.index}] "
                            "but before its first FRE")
    if args.json:
        fres = section.get_fres(hit.fde)
        k = next(i for i, f in enumerate(fres) if f.offset == hit.fre.offset)
        data: dict[str, Any] = {
            "pc": args.pc,
            "fde": fde_json(section, hit.fde),
            "fre": fre_json(section, hit.fde, k, hit.fre, hit.rules),
            "row": {"start": hit.row.start, "end": hit.row.end},
            "description": describe_row(hit.row, section.arch,
                                        pauth_key=hit.fde.pauth_key if hit.fre.mangled_ra
                                        else None),
        }
        json.dump(data, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for line in lookup_text(section, hit, pc=args.pc):
            sys.stdout.write(line + "\n")
    return 0


# -- verify (sframe_core/verify/; its arguments and output: cli/verify.py) ----------


command("verify", verify_cli.HELP, verify_cli.configure)(verify_cli.run)


# -- backtrace (sframe_core/targets/backtrace.py) ------------------------------------

command("backtrace", "unwind every thread of a core file or a live process",
        backtrace.configure)(backtrace.run)


# -- to-dwarf (sframe_core/symfiles/symfile.py) -------------------------------------------


def _configure_to_dwarf(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="ELF executable or library with .sframe (with -r: a directory)")
    parser.add_argument("--debug-file", metavar="DEBUGFILE",
                        help="copy the debug information of DEBUGFILE, FILE's separate debug "
                             "file (objcopy --only-keep-debug), into the symbol file")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="with --build-id-dir: a symbol file for every ELF file under the "
                             "directory FILE that has .sframe and no .eh_frame, in parallel; "
                             "files there and up to date are left as they are")
    parser.add_argument("--debug-dir", metavar="DIR", action="append", default=[],
                        help="with -r: look for separate debug files under DIR too, by build-id "
                             "(DIR/.build-id/xx/yyyy.debug) or .gnu_debuglink name "
                             "(repeatable; /usr/lib/debug and beside each file always)")
    parser.add_argument("--force", action="store_true",
                        help="with -r: remake the files that are up to date too")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="write the symbol file to OUT (default: FILE.debug)")
    parser.add_argument("--build-id-dir", metavar="DIR",
                        help="write it as DIR/.build-id/xx/yyyy.debug, where gdb "
                             "(set debug-file-directory DIR) and elfutils find it")
    parser.add_argument("--cache", metavar="DIR", nargs="?", const="", default=None,
                        help="put it in the symbol file cache the debugger plugins read "
                             "(DIR, default $XDG_CACHE_HOME/sframe-gdb/symbols), unless it is "
                             "there already; prints its path")
    parser.add_argument("-j", "--jobs", metavar="N", type=_jobs, default=None,
                        help="worker processes for a large module (with -r: modules made at "
                             "once) (default: the usable CPUs, at most 8; 1: in this process); "
                             "the output is the same")


def _jobs(text: str) -> int:
    value = int(text)  # a ValueError is a usage error (argparse)
    if value < 1:
        raise ValueError(text)
    return value


_jobs.__name__ = "positive integer"  # argparse: "invalid positive integer value: '0'"


@command("to-dwarf", "write a symbol file whose .debug_frame says what .sframe says",
         _configure_to_dwarf)
def run_to_dwarf(args: argparse.Namespace) -> int:
    from ..symfiles.buildid_tree import checked_debug_file
    from ..symfiles.symfile import (
        build_id_path,
        read_module,
        symbol_file_for,
        write_symbol_file,
    )
    from ..symfiles.workers import default_jobs

    if sum(x is not None for x in (args.output, args.build_id_dir, args.cache)) > 1:
        raise UsageError("give one of -o OUT, --build-id-dir DIR and --cache")
    if args.recursive:
        return _to_dwarf_tree(args)
    if args.debug_dir or args.force:
        raise UsageError("--debug-dir and --force go with -r")
    if args.debug_file is not None and args.cache is not None:
        raise UsageError("--debug-file does not go with --cache (the plugins find debug files "
                         "themselves)")
    jobs = args.jobs or default_jobs()
    if args.cache is not None:
        # The plugins' cache (symfile.symbol_file_for): a debugger can have
        # this made by a process of its own and find it there.
        found = symbol_file_for(args.file, cache=args.cache or None, jobs=jobs)
        if found.warning:
            error_line(sys.stderr, found.warning)
        sys.stdout.write(f"{found.path}\n")
        return 0
    out = args.output or f"{args.file}.debug"
    module = read_module(args.file)
    debug = None if args.debug_file is None else checked_debug_file(module, args.debug_file)
    if args.build_id_dir:
        build_id = module.build_id
        if not build_id:
            raise CommandFailed(f"{args.file}: no build-id note: use -o OUT")
        out = build_id_path(args.build_id_dir, build_id)
        try:
            os.makedirs(os.path.dirname(out), exist_ok=True)
        except OSError as exc:
            raise CommandFailed(f"{os.path.dirname(out)}: {exc.strerror or exc}") from None
    made = write_symbol_file(args.file, out, jobs=jobs, debug_file=debug)
    if args.build_id_dir and module.has_debug_info:
        error_line(sys.stderr, _OWN_DEBUG_INFO.format(args.file))
    sys.stdout.write(f"{made.path}\n")
    return 0


# gdb, LLDB and libdwfl look for a separate debug file (by build-id, through
# debuginfod) only for a module without debug information of its own.
_OWN_DEBUG_INFO = ("warning: {} has debug information of its own: debuggers will not look up "
                   "this file by build-id (strip the module and keep its debug file: "
                   "objcopy --only-keep-debug, strip, --debug-file)")


def _to_dwarf_tree(args: argparse.Namespace) -> int:
    """``to-dwarf -r DIR --build-id-dir OUT``: every module of a tree, in
    parallel; one line on stderr per module that failed (exit status 1)."""
    from ..symfiles.buildid_tree import Outcome, debug_roots, make, plan_tree
    from .verify import walk_elves

    if args.build_id_dir is None:
        raise UsageError("-r writes into a build-id tree: give --build-id-dir DIR")
    if args.debug_file is not None:
        raise UsageError("--debug-file goes with one FILE; with -r use --debug-dir DIR")
    if not os.path.isdir(args.file):
        raise UsageError(f"{args.file}: not a directory (-r walks directories)")
    tree = plan_tree(walk_elves(args.file), args.build_id_dir, debug_roots(args.debug_dir),
                     args.force)
    outcomes: list[Outcome] = in_parallel(make, tree.jobs, [j.module for j in tree.jobs],
                                           args.jobs)
    failed = [o.text for o in outcomes if o.status == "failed"]
    for outcome in outcomes:
        if outcome.status == "written":
            sys.stdout.write(f"{outcome.job.out}\n")
    written = sum(o.status == "written" for o in outcomes)
    sys.stdout.write(f"{PROG} to-dwarf: {written} written, {len(outcomes) - written - len(failed)}"
                     f" up to date, {len(failed) + len(tree.errors)} failed; {tree.skipped} "
                     "skipped (no .sframe, an .eh_frame, or a build-id seen before)\n")
    sys.stdout.flush()
    for outcome in outcomes:
        if outcome.status == "written" and outcome.job.own_debug_info:
            error_line(sys.stderr, _OWN_DEBUG_INFO.format(outcome.job.module))
    for text in [*tree.errors, *failed]:
        error_line(sys.stderr, text)
    return 1 if failed or tree.errors else 0


# -- cache (sframe_core/symfiles/cache.py) ----------------------------------------------


def _configure_cache(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_const", dest="action", const="list",
                      help="list the cached symbol files and kept analysis results, least recently "
                           "used first (default)")
    what.add_argument("--prune", action="store_const", dest="action", const="prune",
                      help="remove files unused for SFRAME_CACHE_DAYS days (30), then the least "
                           "recently used above SFRAME_CACHE_MAX_MB megabytes (1024)")
    what.add_argument("--clear", action="store_const", dest="action", const="clear",
                      help="remove every cached symbol file and kept analysis result")
    parser.add_argument("--dir", metavar="DIR",
                        help="the cache directory (default: $XDG_CACHE_HOME/sframe-gdb/symbols)")


def _size(count: int) -> str:
    if count < 1 << 10:
        return f"{count} bytes"
    if count < 1 << 20:
        return f"{count / (1 << 10):.1f} KiB"
    return f"{count / (1 << 20):.1f} MiB"


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


@command("cache", "list, prune or clear the symbol files made for debuggers", _configure_cache)
def run_cache(args: argparse.Namespace) -> int:
    import time

    from ..symfiles import cache as symcache
    from ..symfiles.symfile import cache_dir

    directory = args.dir or cache_dir()
    action = args.action or "list"
    try:
        if action == "list":
            found = symcache.entries(directory)
            now = time.time()
            for entry in found:
                days = (now - entry.used) / 86400
                note = "  (unfinished write)" if entry.temporary else ""
                sys.stdout.write(f"{entry.size:>12}  used {days:5.1f} days ago  "
                                 f"{os.path.basename(entry.path)}{note}\n")
            total = sum(e.size for e in found)
            sys.stdout.write(f"{directory}: {_files(len(found))}, {_size(total)}\n")
            return 0
        removed, freed = (symcache.prune(directory) if action == "prune"
                          else symcache.clear(directory))
    except OSError as exc:
        raise CommandFailed(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    sys.stdout.write(f"{directory}: removed {_files(removed)}, {_size(freed)}\n")
    return 0


# -- gdbinit (owned by the GDB adapter) ----------------------------------------


def _configure_gdbinit(parser: argparse.ArgumentParser) -> None:
    pass


@command("gdbinit", "print the lines that load the SFrame unwinder from ~/.gdbinit",
         _configure_gdbinit)
def run_gdbinit(args: argparse.Namespace) -> int:
    """``sframe_gdb.py`` sits beside the ``sframe_core`` package, in a checkout
    and in site-packages alike."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    plugin = os.path.join(here, "sframe_gdb.py")
    if not os.path.isfile(plugin):
        raise CommandFailed(f"{plugin}: not found (is sframe-gdb installed with its gdb plugin?)")
    sys.stdout.write("# SFrame unwinder for gdb (sframe-gdb)\n")
    sys.stdout.write(f"source {plugin}\n")
    return 0


def _configure_lldbinit(parser: argparse.ArgumentParser) -> None:
    pass


@command("lldbinit", "print the ~/.lldbinit line that loads the LLDB plugin", _configure_lldbinit)
def run_lldbinit(args: argparse.Namespace) -> int:
    """``lldb_plugin`` sits beside the ``sframe_core`` package, like ``sframe_gdb.py``."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    plugin = os.path.join(here, "lldb_plugin")
    if not os.path.isfile(os.path.join(plugin, "__init__.py")):
        raise CommandFailed(f"{plugin}: not found (is sframe-gdb installed with its LLDB plugin?)")
    sys.stdout.write(f"command script import {plugin}\n")
    return 0


# -- main -------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect SFrame (.sframe) sections.")
    parser.add_argument("--version", action="version", version=f"%(prog)s (sframe-gdb) {__version__}")
    parser.add_argument("--traceback", action="store_true", help=argparse.SUPPRESS)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS:
        sub = subparsers.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        sub.add_argument("--traceback", action="store_true", help=argparse.SUPPRESS,
                         default=argparse.SUPPRESS)
        cmd.configure(sub)
        sub.set_defaults(run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        try:
            status = int(args.run(args))
            sys.stdout.flush()
            return status
        except UsageError as exc:
            parser.error(str(exc))  # exits 2
        except BrokenPipeError:
            raise
        except KeyboardInterrupt as exc:
            if args.traceback:
                raise
            error_line(sys.stderr, str(exc) or "interrupted")
            return 130
        except (SFrameError, CommandFailed) as exc:
            if args.traceback:
                raise
            error_line(sys.stderr, str(exc))
            return 1
        except OSError as exc:
            if args.traceback:
                raise
            error_line(sys.stderr, f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
            return 1
        except Exception as exc:  # a bug: still one line, unless asked for more
            if args.traceback:
                raise
            error_line(sys.stderr, f"internal error: {type(exc).__name__}: {exc} "
                               "(rerun with --traceback)")
            return 1
    except BrokenPipeError:
        # The reader went away (``sframe dump x | head``): nothing more to say.
        # Point stdout at /dev/null so the interpreter's final flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
