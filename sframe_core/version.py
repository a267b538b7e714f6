"""sframe-gdb's versions, in one place: the package's (pyproject.toml reads
it from here, ``[tool.setuptools.dynamic]``, and the CLI, ``info sframe`` and
LLDB's ``sframe status`` print it, installed or from a plain checkout), and
its symbol files' generator's."""

__version__ = "0.1.0"

# Bump when the bytes written for the same input change (a fix in dwarf.py):
# cached symbol files and kept analysis results of older generators are
# then not reused. What each version changed: docs/dwarf.md, "Generator
# versions".
GENERATOR = 16
