"""The one exception family of sframe_core.

Callers (the CLI, the GDB and LLDB adapters) catch ``SFrameError`` and turn it
into a one-line message; nothing else may escape a decoder or the unwinder.
"""

from __future__ import annotations

__all__ = ["SFrameError", "FormatError", "FileError", "NotELFError", "ProcessError"]


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
