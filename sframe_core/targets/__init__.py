"""What is unwound: modules, core files, live processes, symbols, whole backtraces."""
