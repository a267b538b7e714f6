"""sframe-gdb's version, in one place: pyproject.toml reads it from here
(``[tool.setuptools.dynamic]``), and the CLI, ``info sframe`` and LLDB's
``sframe status`` print it, installed or from a plain checkout."""

__version__ = "0.1.0"
