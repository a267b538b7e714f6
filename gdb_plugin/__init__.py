"""sframe-gdb's GDB adapter: lets GDB 13 to 18 unwind stacks from SFrame.

Loaded by ``source /path/to/sframe_gdb.py``: that loader makes ``sframe_core``
and pyelftools importable (the rule is ``sframe_core/deps.py``) and calls
``plugin.register()``. This package holds no format or unwind logic: it turns
GDB's registers, memory and objfiles into ``sframe_core``'s types and the
core's answer (a caller frame, or a reason to stop) back into a
``gdb.UnwindInfo``.

The same shape as ``lldb_plugin``, bottom to top:

- what finds modules: ``objfiles`` (which objfile covers a PC, parsed from
  GDB's section and mapping lists; it does not import ``gdb``, nor does this
  file, so it is tested without GDB);
- what hands symbol files to the debugger: ``symfiles`` (each objfile's
  ``.debug_frame`` symbol file, made in a worker, and the route it took);
- what serves the fallback: ``unwinder`` (the global unwinder ``sframe``, for
  what the symbol files cannot serve), with ``registers`` (GDB's handles);
- the commands: ``commands`` (``info sframe``, ``sframe lookup``, ``set
  sframe mode``); ``events`` (when the objfile table is re-read);
- the entry: ``plugin`` (``register()``).
"""
