"""What the ``sframe`` subcommands share: the program's name, the two ways a
command fails, the one-line error, and jobs run in worker processes.

Apart from ``commands.py`` so that a subcommand's own module (``verify.py``)
uses them without importing the module that registers every subcommand.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO, TypeVar

__all__ = ["PROG", "CommandFailed", "UsageError", "error_line", "in_parallel"]

PROG = "sframe"


class CommandFailed(Exception):
    """A command's own failure, already worded for the user (exit status 1)."""


class UsageError(Exception):
    """Arguments argparse alone cannot check (exit status 2)."""


def error_line(stream: TextIO, text: str) -> None:
    """``sframe: text``, flushed (after the output it follows)."""
    stream.write(f"{PROG}: {text}\n")
    stream.flush()


_J = TypeVar("_J")
_R = TypeVar("_R")


def in_parallel(run: Callable[[_J], _R], jobs: Sequence[_J], names: Sequence[str],
                workers: int | None) -> list[_R]:
    """``run`` on every job, in worker processes (``workers``, default the
    CPUs, at most 8), results in order; a progress line naming each job as it
    is done, on a terminal only (a log or a pipe gets none)."""
    if len(jobs) < 2:
        return [run(job) for job in jobs]
    import multiprocessing

    results: list[_R] = []
    progress = sys.stderr.isatty()
    count = max(1, min(workers or os.cpu_count() or 1, 8, len(jobs)))
    with multiprocessing.get_context("spawn" if sys.platform == "darwin" else "fork").Pool(
            count) as pool:
        for done, result in enumerate(pool.imap(run, jobs, chunksize=1), 1):
            results.append(result)
            if progress:
                sys.stderr.write(f"\r[{done}/{len(jobs)}] {names[done - 1][-60:]:<60}")
                sys.stderr.flush()
    if progress:
        sys.stderr.write("\r" + " " * 80 + "\r")
    return results
