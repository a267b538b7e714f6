"""The separate debug file a debugger would use for a module: found by
build-id under the debug roots, or by ``.gnu_debuglink`` beside the module
and under them (gdb's order), and checked to be the module's.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence

from ..base.errors import FileError
from ..targets.symbols import DEBUG_ROOTS
from .module_headers import ModuleInfo, read_module

__all__ = ["build_id_path", "crc32_of", "debug_file_for", "debug_source", "has_debug_information"]


def build_id_path(root: str, build_id: str) -> str:
    """Where gdb, elfutils and LLDB look for a debug file by build-id under ``root``."""
    return os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")


def crc32_of(path: str) -> int | None:
    """The CRC-32 of the whole file a ``.gnu_debuglink`` names, or None if unreadable."""
    crc = 0
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return None
    return crc & 0xFFFFFFFF


def debug_file_for(module: ModuleInfo, debug_roots: Sequence[str]) -> ModuleInfo | None:
    """The separate debug file gdb and LLDB would use for ``module``, if any.

    By build-id under each root first, then by ``.gnu_debuglink`` beside the
    module, in its ``.debug`` directory and under each root (gdb's order).
    A candidate whose build-id (or, without one, CRC) does not match is not
    the module's and is skipped.
    """
    candidates: list[str] = []
    if module.build_id and len(module.build_id) > 2:
        candidates += [build_id_path(root, module.build_id) for root in debug_roots]
    if module.debuglink is not None:
        here = os.path.dirname(os.path.realpath(module.path))
        name = module.debuglink[0]
        candidates += [os.path.join(here, name), os.path.join(here, ".debug", name)]
        candidates += [os.path.join(root + here, name) for root in debug_roots]
    real = os.path.realpath(module.path)
    for candidate in candidates:
        if not os.path.isfile(candidate) or os.path.realpath(candidate) == real:
            continue
        try:
            info = read_module(candidate)
        except FileError:
            continue
        if not info.has_debug_info:
            continue
        if module.build_id:
            if info.build_id != module.build_id:
                continue
        elif module.debuglink is None or crc32_of(candidate) != module.debuglink[1]:
            continue
        return info
    return None


def debug_source(module: ModuleInfo, debug_roots: Sequence[str]) -> ModuleInfo | None:
    """The file whose debug information a symbol file copies: the module, or its debug file."""
    if module.has_debug_info:
        return module
    return debug_file_for(module, debug_roots)


def has_debug_information(path: str, debug_roots: Sequence[str] = DEBUG_ROOTS) -> bool:
    """Does a debugger find debug information for ``path`` (its own or a separate
    file)? It decides whether a debugger that keeps types it read before a
    symbol file is added may take the file late."""
    return debug_source(read_module(path), debug_roots) is not None
