"""DWARF CFI read as rows, and .debug_frame written from SFrame rows."""
