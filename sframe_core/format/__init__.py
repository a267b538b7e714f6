"""The SFrame format: records, sections, errata, SFrame in ELF files, dump and describe."""
