"""sframe_core: decode SFrame stack-trace sections and unwind with them.

The shared core of sframe-gdb. It never imports gdb or lldb: the adapters
(``gdb_plugin``, ``lldb_plugin``) give it registers and memory, and it
gives back caller frames.
"""

from .base.errors import FileError, FormatError, SFrameError
from .format.section import Lookup, SFrameSection

__all__ = ["SFrameError", "FormatError", "FileError", "SFrameSection", "Lookup", "__version__"]
from .version import __version__
