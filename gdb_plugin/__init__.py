"""sframe-gdb's GDB adapter: lets GDB 13 to 18 unwind stacks from SFrame.

Loaded by ``source /path/to/sframe_gdb.py``: that loader makes ``sframe_core``
and pyelftools importable (the rule is ``sframe_core/deps.py``) and calls
``plugin.register()``. This package holds no format or unwind logic: it turns
GDB's registers, memory and objfiles into ``sframe_core``'s types and the
core's answer (a caller frame, or a reason to stop) back into a
``gdb.UnwindInfo``.

Modules, in the order GDB meets them: ``objfiles`` (which objfile covers a
PC, parsed from GDB's section and mapping lists; it does not import ``gdb``,
nor does this file, so it is tested without GDB), ``unwinder`` (the global
unwinder ``sframe``), ``commands`` (``info sframe``, ``sframe lookup``, ``set
sframe mode``), ``events`` (when the objfile table is re-read), ``plugin``
(``register()``).
"""
