"""What the gdb adapter says to the user outside its commands: one
``warning: sframe: ...`` line on gdb's stderr, and a problem of an objfile
said once, however many frames meet it.

A backtrace meets a broken objfile at every frame in it; the first frame's
warning says all there is to say.
"""

from __future__ import annotations

import gdb

__all__ = ["warn", "OncePerObjfile"]


def warn(text: str) -> None:
    gdb.write(f"warning: sframe: {text}\n", gdb.STDERR)


class OncePerObjfile:
    """``warning: sframe: PATH: text``, the first time ``PATH`` has a problem."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def report(self, path: str, text: str) -> None:
        if path in self._said:
            return
        self._said.add(path)
        if text.startswith(path):
            text = text[len(path):].lstrip(": ")
        warn(f"{path}: {text}")
