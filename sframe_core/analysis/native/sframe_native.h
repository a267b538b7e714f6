/* The protocol between the C analysis (amd64.c, fdes.c) and the Python that
 * calls it: what both .c files share, written once. native/protocol.py is
 * its ctypes mirror (the structs' layouts and the words below), and checks
 * the layouts against sf_native_layout() when it loads the library.
 *
 * What the Python analysis defines (its bounds, the tracked registers, the
 * mnemonic and register-name lists amd64.py reads) is not copied here:
 * native/protocol.py's compile_flags() passes it as -D flags, and the
 * build's name is a digest of them, so a change in Python rebuilds the C.
 */
#ifndef SFRAME_NATIVE_H
#define SFRAME_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#if !defined(SF_MAX_INSNS) || !defined(SF_RED_ZONE) || !defined(SF_TABLE_MAX) || !defined(SF_ENTRY_CFA) \
    || !defined(SF_NTRACKED) || !defined(SF_TRACKED) || !defined(SF_FDE_REGS) \
    || !defined(SF_FP_REG) || !defined(SF_RA_REG) \
    || !defined(SF_X86_NAMES) || !defined(SF_X86_ALIASES) || !defined(SF_X86_MOVES) \
    || !defined(SF_X86_UNSIZED) || !defined(SF_X86_STOPS)
#error "build with python -m sframe_core.analysis.native: it passes the Python analysis's values"
#endif

/* The tracked registers' states fit a byte of bits (struct effect's clobbers). */
#define NTRACKED SF_NTRACKED
_Static_assert(NTRACKED <= 8, "the tracked registers fit a byte");

/* An unknown value (Python's None) in every word below. */
#define NONE INT64_MIN

/* What the entry points return besides a count of words. */
#define SF_DECLINE (-1) /* not covered: the Python analysis decides */
#define SF_NOMEM (-2)
#define SF_SMALL (-3) /* an output buffer is too small: ask again with a larger one */

/* sf_amd64_analyse's answer: the number of spans, each SPAN_WORDS (start,
 * end, then kind and offset per tracked register: 0 none, 1 same value, 2
 * at CFA + offset); the number of exits, each EXIT_WORDS (target, whether a
 * state follows, SP - CFA, FP - CFA, then per tracked register its slot,
 * live, pinned). */
#define SPAN_WORDS (2 + 2 * NTRACKED)
#define EXIT_WORDS (4 + 3 * NTRACKED)

/* sf_amd64_fdes's answer per FDE: status, start, end, signal frame, its
 * program's offset and length, the exit words that follow (sf_amd64_analyse's
 * exits, where they matter to parts.py). */
#define FDE_WORDS 7
#define ST_NONE 0     /* no function: no rows (exits may follow) */
#define ST_DONE 1     /* an FDE made */
#define ST_DECLINED 2 /* the Python makes this one */

/* The file's ``size`` bytes at ``address`` into ``out``: 1, or 0 where the
 * file has none. ``context`` is the caller's, handed back as given. */
typedef int (*sf_read_fn)(void *context, uint64_t address, uint64_t size, uint8_t *out);

/* A PT_LOAD segment's contents as the file holds them (elf.py code_reader). */
struct sf_region {
    uint64_t vaddr, filesz, len;
    const uint8_t *bytes;
};

/* The section and what the Python knows of it (section.py). */
struct sf_section {
    const uint8_t *data;
    int64_t size, version, fixed_ra, fde_base, fde_size, fre_base, fre_end, fre_len, num_fdes;
    const int64_t *starts; /* FDE i's start: the section is sorted */
    const struct sf_region *regions;
    int64_t nregions, max_bytes;
    int64_t analyse; /* rows get the saved-register rules (section.py _wants_saved) */
};

int sf_amd64_init(const char *library);
long sf_amd64_analyse(const uint8_t *code, size_t len, uint64_t start, const int64_t *rows,
                      long nrows, sf_read_fn read, void *context, int64_t *out, long cap);
long sf_amd64_fdes(const struct sf_section *s, int64_t lo, int64_t hi, int64_t *out, long cap,
                   uint8_t *prog, long prog_cap, long *used);
/* sizeof struct sf_region and struct sf_section, for the mirror's check. */
void sf_native_layout(int64_t out[2]);

#endif
