"""sframe_core: decode SFrame stack-trace sections and unwind with them.

The shared core of sframe-gdb. It never imports gdb or lldb: the adapters
(``gdb_plugin``, ``lldb_plugin``) give it registers and memory, and it
gives back caller frames.
"""

from typing import TYPE_CHECKING, Any

from .base.errors import FileError, FormatError, SFrameError

if TYPE_CHECKING:
    from .format.section import Lookup, SFrameSection

__all__ = ["SFrameError", "FormatError", "FileError", "SFrameSection", "Lookup", "__version__"]
from .version import __version__


def __getattr__(name: str) -> Any:
    """``SFrameSection`` and ``Lookup``, imported when first asked for: every
    import of a submodule runs this file, and a debugger whose objfiles all
    have symbol files never decodes a section (PEP 562)."""
    if name in ("SFrameSection", "Lookup"):
        from .format import section

        return getattr(section, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
