"""The one exception family of sframe_core.

Callers (the CLI, the GDB and LLDB adapters) catch ``SFrameError`` and turn it
into a one-line message; nothing else may escape a decoder or the unwinder.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SFrameError", "FormatError", "FileError", "NotELFError", "ProcessError",
           "foreign_errors", "reading_elf"]


class SFrameError(Exception):
    """Root of every error this package raises on purpose."""


class FormatError(SFrameError):
    """The bytes of a ``.sframe`` section are not a valid SFrame section.

    The message names what is wrong and, where it helps, the byte offset in
    the section, so that ``sframe dump`` users can look at it with ``xxd``.
    """

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        if offset is not None:
            message = f"{message} (at offset {offset:#x})"
        super().__init__(message)


class FileError(SFrameError):
    """A file cannot be used: missing, unreadable, not ELF, or without SFrame."""


class NotELFError(FileError):
    """A regular file that is not ELF: a data file a process maps is no error."""


class ProcessError(SFrameError):
    """A live process cannot be examined: gone, not ours to trace, or already traced."""


def foreign_errors() -> tuple[type[BaseException], ...]:
    """What reading a bad ELF file with pyelftools raises besides ``OSError``.

    Its own errors; ``AssertionError`` on encodings it does not handle;
    ``ValueError`` out of its enums; lookup and type errors on truncated
    tables; ``struct.error`` from our own unpacking of what it returns. All
    of them mean "this file (or this part of it) is not readable".
    """
    from elftools.common.exceptions import DWARFError, ELFError
    from elftools.construct.core import ConstructError

    return (ELFError, DWARFError, ConstructError, AssertionError, struct.error, ValueError,
            KeyError, IndexError, TypeError)


@contextmanager
def reading_elf(name: str, what: str = "malformed ELF file") -> Iterator[None]:
    """The pyelftools error boundary: inside it, an ``OSError`` or a
    ``foreign_errors()`` one leaves as a ``FileError`` naming ``name`` (and
    ``what`` is wrong with it); our own errors pass unchanged."""
    try:
        yield
    except SFrameError:
        raise
    except OSError as exc:
        raise FileError(f"{name}: {exc.strerror or exc}") from None
    except foreign_errors() as exc:
        raise FileError(f"{name}: {what}: {exc}") from None
