"""``sframe verify``'s engine: SFrame rows against DWARF CFI rows per
function, and the section's structure (the kernel's own rules are the
format's: ``format/kernel.py``).

``records.py`` (verdicts, findings, a file's report), ``compare.py`` (two
row lists over one function), ``layout.py`` (the ELF file's sections,
segments, a ``.o``'s text sections laid out), ``check.py`` (a whole file:
``verify_file``). The command line (``cli/verify.py``) words the reports
and walks trees.
"""
