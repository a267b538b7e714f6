/* A symbol file's amd64 FDEs in C: from an FDE's FREs to its .debug_frame
 * program in one step, with the saved-register analysis of amd64.c between.
 *
 * With the analysis in C, the Python around it (reading the FREs, making
 * the rows, encoding them) is most of a symbol file's time, and LLDB waits
 * for the whole file (figures: docs/dwarf.md, "Cost"). This is the same
 * work, mirrored line by line from the Python, so that the bytes are the
 * same:
 *
 *   format/records.py  fde_decoder, _walk_fres, _fre  (the checks included)
 *   format/rules.py    fre_rules                      (a default FDE, amd64)
 *   format/section.py  fde_rows, saved_analysis       (rows split at the spans)
 *   analysis/records.py  Analysis.regs_at, anchor     (and saved.analyse's C gate)
 *   analysis/parts.py  Collector._kept, _first_cfa    (which exits matter)
 *   dwarf/debug_frame.py  encode_rows, _cfa_ops, _rule_ops, _advance, functions
 *
 * It declines an FDE (the Python makes it, and raises what it raises) for
 * anything off that path: a corrupt FDE or FRE (its own or one a branch
 * lands in), PC-mask and flexible FDEs, a mangled RA, an FDE whose first row
 * is not a function entry (gcc's .cold parts), code not in the file, and
 * every function amd64.c declines. symfiles/native_fdes.py calls it;
 * tests/test_native.py holds its symbol files to the Python's, byte for byte.
 */
#include "sframe_native.h"

#include <stdlib.h>
#include <string.h>

struct fde { int64_t start, size, num_fres, rep_size, first_fre; uint8_t info, info2; };
struct fre { int64_t start; uint8_t info; int count; int32_t words[3]; };

/* elf.py's code_reader(whole=True): the first segment of ``s`` that holds
 * the range whole by its file size answers, or nothing does. */
static const uint8_t *bytes_at(const struct sf_section *s, uint64_t address, uint64_t size) {
    for (int64_t k = 0; k < s->nregions; k++) {
        const struct sf_region *r = &s->regions[k];
        if (address + size >= address && r->vaddr <= address && address + size <= r->vaddr + r->filesz) {
            uint64_t at = address - r->vaddr;
            return at + size <= r->len ? r->bytes + at : NULL;
        }
    }
    return NULL;
}

/* The analysis's reader (sf_read_fn): ``context`` is the section. */
static int read_regions(void *context, uint64_t address, uint64_t size, uint8_t *out) {
    const uint8_t *found = bytes_at(context, address, size);
    if (!found) return 0;
    memcpy(out, found, size);
    return 1;
}

static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* records.py's fde_decoder (little-endian): 0, or -1 where it raises. */
static int get_fde(const struct sf_section *s, int64_t index, struct fde *f) {
    if (index < 0 || index >= s->num_fdes) return -1;
    const uint8_t *d = s->data;
    int64_t offset = s->fde_base + index * s->fde_size;
    f->start = s->starts[index];
    f->size = u32(d + offset + (s->version == 3 ? 8 : 4));
    f->info2 = 0;
    if (s->version == 3) {
        int64_t fre_off = u32(d + offset + 12);
        if (fre_off > s->fre_len - 5) return -1;
        int64_t attr = s->fre_base + fre_off;
        f->num_fres = u16(d + attr);
        f->info = d[attr + 2];
        f->info2 = d[attr + 3];
        f->rep_size = d[attr + 4];
        f->first_fre = attr + 5;
        if ((f->info2 & 0x1F) > 1) return -1;
    } else {
        f->first_fre = s->fre_base + u32(d + offset + 8);
        f->num_fres = u32(d + offset + 12);
        f->info = d[offset + 16];
        f->rep_size = s->version == 1 ? ((f->info & 0x10) ? 16 : 0) : d[offset + 17];
    }
    if ((f->info & 0xF) > 2 || f->num_fres * 2 > s->fre_end - f->first_fre) return -1;
    return 0;
}

static int pcmask(const struct fde *f) { return (f->info >> 4) & 1; }
static int flex(const struct sf_section *s, const struct fde *f) { return s->version == 3 && (f->info2 & 0x1F) == 1; }

/* records.py's _walk_fres and _fre, for a default FDE: the FREs into ``out``
 * (num_fres of them), 0; -1 where the walk raises. */
static int get_fres(const struct sf_section *s, const struct fde *f, struct fre *out) {
    const uint8_t *d = s->data;
    int type = f->info & 0xF, addr_size = 1 << type;
    int64_t pos = f->first_fre, previous = -1, end = s->fre_end;
    for (int64_t k = 0; k < f->num_fres; k++) {
        if (pos + addr_size + 1 > end) return -1;
        int64_t start = type == 0 ? d[pos] : type == 1 ? u16(d + pos) : u32(d + pos);
        uint8_t info = d[pos + addr_size];
        int size_code = (info >> 5) & 3, count = (info >> 1) & 0xF;
        if (size_code == 3 || count > 3) return -1;
        int word_size = 1 << size_code;
        int64_t following = pos + addr_size + 1 + count * word_size;
        if (following > end || start < previous) return -1;
        if (!pcmask(f) && start > f->size) return -1;
        struct fre *r = &out[k];
        r->start = start;
        r->info = info;
        r->count = count;
        const uint8_t *w = d + pos + addr_size + 1;
        for (int i = 0; i < count; i++, w += word_size)
            r->words[i] = word_size == 1 ? (int8_t)w[0] : word_size == 2 ? (int16_t)u16(w) : (int32_t)u32(w);
        previous = start;
        pos = following;
    }
    return 0;
}

/* A rule (base/rows.py): kinds as the encoder tells them apart. */
enum kind { K_UNSET, K_SAME, K_UNDEFINED, K_AT_CFA };
struct rule { int kind; int64_t offset; };
struct cfa { int64_t reg, offset; }; /* never dereferenced in a default FDE */

/* rules.py's fre_rules, amd64 (fixed RA offset, no fixed FP offset):
 * 0 for the outermost frame (no data words), else 1 and the CFA and FP. */
static int fre_rules(const struct fre *r, struct cfa *cfa, struct rule *fp) {
    if (!r->count) return 0;
    cfa->reg = (r->info & 1) ? 7 : 6;
    cfa->offset = r->words[0];
    if (r->count > 1) *fp = (struct rule){K_AT_CFA, r->words[1]};
    else *fp = (struct rule){K_SAME, 0};
    return 1;
}

/* records.entry_cfa: SP + SF_ENTRY_CFA, the CFA at a function's entry. */
static int is_entry(const struct fre *r) {
    struct cfa c;
    struct rule fp;
    return fre_rules(r, &c, &fp) && c.reg == 7 && c.offset == SF_ENTRY_CFA;
}

/* section.py's find_fde on a sorted section: -1 for none, -2 where an FDE
 * on the way is corrupt (the Python raises). */
static int64_t find_fde(const struct sf_section *s, int64_t pc, struct fde *f) {
    int64_t lo = 0, hi = s->num_fdes;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (s->starts[mid] <= pc) lo = mid + 1; else hi = mid;
    }
    int64_t pos = lo - 1;
    if (pos < 0) return -1;
    if (get_fde(s, pos, f)) return -2;
    if (f->start <= pc && pc < f->start + f->size) return pos;
    for (int step = 0; step < 8; step++) {
        if (pos == 0) return -1;
        if (s->starts[pos - 1] != f->start) return -1;
        pos--;
        if (get_fde(s, pos, f)) return -2;
        if (f->start <= pc && pc < f->start + f->size) return pos;
    }
    return -1;
}

/* Collector._kept for a branch into FDE ``f``: 1 kept, 0 not, -1 where the
 * Python raises, -2 out of memory. */
static int kept_fde(const struct sf_section *s, const struct fde *f) {
    if (pcmask(f)) return 0;
    if (flex(s, f)) return -1; /* its rules are the Python's to read */
    if (f->num_fres == 0) return 1; /* _first_cfa None: not the entry's */
    struct fre *fres = malloc(sizeof *fres * (size_t)f->num_fres);
    if (!fres) return -2;
    int result = -1;
    if (!get_fres(s, f, fres)) result = fres[0].start != 0 || !is_entry(&fres[0]);
    free(fres);
    return result;
}

/* Collector._kept's answers by FDE index over one sf_amd64_fdes call, so
 * that an FDE many branches land in (a shared error path, a tail-called
 * helper) has its FREs decoded once: 0 not asked yet, else the answer + 2. */
struct kept_cache { int8_t *by_fde; };

/* parts.py's Collector._kept: 1 kept, 0 not, -1 where the Python raises. */
static int kept(const struct sf_section *s, int64_t target, struct kept_cache *cache) {
    struct fde f;
    int64_t found = find_fde(s, target, &f);
    if (found == -2) return -1;
    if (found < 0) return 1;
    if (!cache->by_fde) cache->by_fde = calloc((size_t)s->num_fdes, 1);
    if (cache->by_fde && cache->by_fde[found]) return cache->by_fde[found] - 2;
    int result = kept_fde(s, &f);
    if (result == -2) return -1; /* not kept: memory may be found for the next */
    if (cache->by_fde) cache->by_fde[found] = (int8_t)(result + 2);
    return result;
}

/* -- the encoder (debug_frame.py) -------------------------------------- */

struct buf { uint8_t *p; long n, cap; };

static int put(struct buf *b, uint8_t byte) {
    if (b->n >= b->cap) return -1;
    b->p[b->n++] = byte;
    return 0;
}

static int uleb(struct buf *b, uint64_t v) {
    do {
        uint8_t byte = v & 0x7F;
        v >>= 7;
        if (put(b, v ? byte | 0x80 : byte)) return -1;
    } while (v);
    return 0;
}

static int sleb(struct buf *b, int64_t v) {
    for (;;) {
        uint8_t byte = v & 0x7F;
        v >>= 7; /* arithmetic, as Python's */
        if ((v == 0 && !(byte & 0x40)) || (v == -1 && (byte & 0x40))) return put(b, byte);
        if (put(b, byte | 0x80)) return -1;
    }
}

static int sleb_len(int64_t v) {
    uint8_t tmp[16];
    struct buf b = {tmp, 0, sizeof tmp};
    sleb(&b, v);
    return (int)b.n;
}

/* _block(_cfa_plus(offset)): DW_OP_consts offset, DW_OP_plus */
static int cfa_plus_block(struct buf *b, int64_t offset) {
    return uleb(b, (uint64_t)(2 + sleb_len(offset))) || put(b, 0x11) || sleb(b, offset) || put(b, 0x22);
}

static int rule_ops(struct buf *b, int reg, const struct rule *r) {
    switch (r->kind) {
    case K_SAME: return put(b, 0x08) || uleb(b, (uint64_t)reg);
    case K_UNDEFINED: return put(b, 0x07) || uleb(b, (uint64_t)reg);
    case K_AT_CFA:
        if (r->offset % 8 == 0) {
            int64_t factored = r->offset / -8;
            if (factored >= 0) {
                if (reg < 64) return put(b, (uint8_t)(0x80 | reg)) || uleb(b, (uint64_t)factored);
                return put(b, 0x05) || uleb(b, (uint64_t)reg) || uleb(b, (uint64_t)factored);
            }
            return put(b, 0x11) || uleb(b, (uint64_t)reg) || sleb(b, factored);
        }
        return put(b, 0x10) || uleb(b, (uint64_t)reg) || cfa_plus_block(b, r->offset);
    default: return -1;
    }
}

static int cfa_ops(struct buf *b, const struct cfa *n, const struct cfa *old) {
    if (old->reg == n->reg && n->offset >= 0) return put(b, 0x0E) || uleb(b, (uint64_t)n->offset);
    if (old->offset == n->offset) return put(b, 0x0D) || uleb(b, (uint64_t)n->reg);
    if (n->offset >= 0) return put(b, 0x0C) || uleb(b, (uint64_t)n->reg) || uleb(b, (uint64_t)n->offset);
    if (n->offset % 8 == 0) return put(b, 0x12) || uleb(b, (uint64_t)n->reg) || sleb(b, n->offset / -8);
    /* _block(_breg(reg, offset)): DW_OP_breg<reg> offset (reg < 32 here) */
    return put(b, 0x0F) || uleb(b, (uint64_t)(1 + sleb_len(n->offset))) || put(b, (uint8_t)(0x70 + n->reg))
           || sleb(b, n->offset);
}

static int advance(struct buf *b, uint64_t delta) {
    if (delta < 0x40) return put(b, (uint8_t)(0x40 | delta));
    if (delta < 0x100) return put(b, 0x02) || put(b, (uint8_t)delta);
    if (delta < 0x10000) return put(b, 0x03) || put(b, delta & 0xFF) || put(b, (delta >> 8) & 0xFF);
    if (delta >= (1ULL << 32)) return -1;
    return put(b, 0x04) || put(b, delta & 0xFF) || put(b, (delta >> 8) & 0xFF) || put(b, (delta >> 16) & 0xFF)
           || put(b, (delta >> 24) & 0xFF);
}

/* The registers a row gives rules for, in the encoder's (sorted) order:
 * the analysis's tracked registers, the FP and the RA column. */
static const int regs_order[] = {SF_FDE_REGS};
#define NREGS ((int)(sizeof regs_order / sizeof *regs_order))
static const int tracked[NTRACKED] = {SF_TRACKED};

/* Where each register's rule is in a row (its index in regs_order). */
struct slots { int tracked[NTRACKED], fp, ra; };

static int slot_of(int reg) {
    for (int i = 0; i < NREGS; i++)
        if (regs_order[i] == reg) return i;
    return -1;
}

/* The slots, or -1 where regs_order lacks a register. */
static int find_slots(struct slots *out) {
    out->fp = slot_of(SF_FP_REG);
    out->ra = slot_of(SF_RA_REG);
    int missing = out->fp < 0 || out->ra < 0;
    for (int i = 0; i < NTRACKED; i++) missing |= (out->tracked[i] = slot_of(tracked[i])) < 0;
    return missing ? -1 : 0;
}

/* encode_rows' state across one FDE's rows. */
struct encoder {
    struct buf *b; uint64_t loc; struct cfa cfa; struct rule current[NREGS]; int64_t ra;
    const struct slots *at;
};

/* One row [lo, hi) (hi only bounds the next): ``cfa`` NULL for the outermost. */
static int encode_row(struct encoder *e, uint64_t lo, const struct cfa *cfa, const struct rule *fp,
                      const int64_t *span) {
    if (lo > e->loc) {
        if (advance(e->b, lo - e->loc)) return -1;
        e->loc = lo;
    }
    struct rule want[NREGS];
    for (int i = 0; i < NREGS; i++) want[i] = (struct rule){K_UNDEFINED, 0};
    for (int i = 0; span && i < NTRACKED; i++) {
        if (span[2 * i] == 1) want[e->at->tracked[i]] = (struct rule){K_SAME, 0};
        else if (span[2 * i] == 2) want[e->at->tracked[i]] = (struct rule){K_AT_CFA, span[2 * i + 1]};
    }
    want[e->at->ra] = cfa ? (struct rule){K_AT_CFA, e->ra} : (struct rule){K_UNDEFINED, 0}; /* the fixed RA */
    want[e->at->fp] = *fp;
    if (cfa && (cfa->reg != e->cfa.reg || cfa->offset != e->cfa.offset)) {
        if (cfa_ops(e->b, cfa, &e->cfa)) return -1;
        e->cfa = *cfa;
    }
    for (int i = 0; i < NREGS; i++) {
        if (e->current[i].kind != K_UNSET && e->current[i].kind == want[i].kind
            && e->current[i].offset == want[i].offset)
            continue;
        if (rule_ops(e->b, regs_order[i], &want[i])) return -1;
        e->current[i] = want[i];
    }
    return 0;
}

/* saved.py's Analysis.regs_at over the C's spans (``SPAN_WORDS`` each):
 * the span holding pc (its words), or NULL and the gap [lo, hi) around it. */
static const int64_t *regs_at(const int64_t *spans, long n, uint64_t pc, uint64_t *lo, uint64_t *hi) {
    long a = 0, z = n;
    while (a < z) {
        long mid = (a + z) / 2;
        if ((uint64_t)spans[mid * SPAN_WORDS + 1] <= pc) a = mid + 1; else z = mid;
    }
    if (a < n) {
        const int64_t *span = &spans[a * SPAN_WORDS];
        if ((uint64_t)span[0] <= pc) {
            *lo = (uint64_t)span[0];
            *hi = (uint64_t)span[1];
            return span + 2;
        }
        *lo = a ? (uint64_t)spans[(a - 1) * SPAN_WORDS + 1] : 0;
        *hi = (uint64_t)span[0];
        return NULL;
    }
    *lo = n ? (uint64_t)spans[(n - 1) * SPAN_WORDS + 1] : 0;
    *hi = UINT64_MAX; /* 1 << 64: past every end */
    return NULL;
}

/* -- one FDE ----------------------------------------------------------- */

struct work {
    struct fre *fres; long fres_cap;
    int64_t *rows; long rows_cap;
    int64_t *answer; long answer_cap;
    struct slots at;
    struct kept_cache kept;
};

static int grow(void **p, long *cap, long want, size_t size) {
    if (want <= *cap) return 0;
    long n = *cap ? *cap : 64;
    while (n < want) n *= 2;
    void *q = realloc(*p, size * (size_t)n);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* saved_analysis and Collector.rows for FDE ``f``, whose rows (and their
 * anchors) are in ``w->rows``, ``entry`` the last FRE at its start: the
 * spans, and the exits into ``o`` after its FDE_WORDS where one goes
 * somewhere that matters. The exit words written, or SF_DECLINE, SF_SMALL,
 * SF_NOMEM. */
static long analysed(const struct sf_section *s, const struct fde *f, long entry, struct work *w,
                     int64_t *o, long cap, const int64_t **spans_out, long *nspans_out) {
    /* analyse's gate for the C: the last row at the start is a function
     * entry's, the function is not too large, its code is in the file */
    if (entry < 0 || !is_entry(&w->fres[entry]) || f->size > s->max_bytes) return SF_DECLINE;
    const uint8_t *code = bytes_at(s, (uint64_t)f->start, (uint64_t)f->size);
    if (!code) return SF_DECLINE;
    long answer;
    for (;;) {
        long want = 1024 + 64 * f->size;
        if (grow((void **)&w->answer, &w->answer_cap, want, sizeof *w->answer)) return SF_NOMEM;
        answer = sf_amd64_analyse(code, (size_t)f->size, (uint64_t)f->start, w->rows, (long)f->num_fres,
                                  read_regions, (void *)s, w->answer, w->answer_cap);
        if (answer != SF_SMALL) break;
        if (grow((void **)&w->answer, &w->answer_cap, 2 * w->answer_cap, sizeof *w->answer)) return SF_NOMEM;
    }
    if (answer < 0) return answer == SF_NOMEM ? SF_NOMEM : SF_DECLINE;
    const int64_t *spans = w->answer + 1;
    long nspans = (long)w->answer[0];
    const int64_t *exits = spans + nspans * SPAN_WORDS;
    long nexits = (long)exits[0];
    /* Collector.add keeps the exits only when one goes somewhere that matters */
    int keep = 0;
    for (long x = 0; x < nexits; x++) { /* every one asked, as a corrupt FDE there raises */
        int64_t target = exits[1 + x * EXIT_WORDS];
        if (target == NONE) continue;
        int k = kept(s, target, &w->kept);
        if (k < 0) return SF_DECLINE;
        keep |= k;
    }
    *spans_out = spans;
    *nspans_out = nspans;
    if (!keep) return 0;
    long n = 1 + nexits * EXIT_WORDS;
    if (FDE_WORDS + n > cap) return SF_SMALL;
    memcpy(o + FDE_WORDS, exits, sizeof *o * (size_t)n);
    o[6] = n;
    return n;
}

/* FDE ``index`` into ``o`` (FDE_WORDS, then exit words) and ``prog``:
 * the words written, SF_DECLINE for the Python, SF_SMALL, SF_NOMEM. */
static long one_fde(const struct sf_section *s, int64_t index, struct work *w, int64_t *o, long cap,
                    struct buf *prog) {
    struct fde f;
    if (get_fde(s, index, &f)) return SF_DECLINE;
    if (cap < FDE_WORDS) return SF_SMALL;
    memset(o, 0, sizeof *o * FDE_WORDS);
    o[0] = ST_NONE;
    if (f.size == 0 || f.num_fres == 0) return FDE_WORDS; /* debug_frame.functions skips it */
    if (pcmask(&f) || flex(s, &f) || s->fixed_ra == 0) return SF_DECLINE;
    if (f.start < 0 || f.start > INT64_MAX - f.size) return SF_DECLINE;
    if (grow((void **)&w->fres, &w->fres_cap, f.num_fres, sizeof *w->fres)
        || grow((void **)&w->rows, &w->rows_cap, 3 * f.num_fres, sizeof *w->rows))
        return SF_NOMEM;
    struct fre *fres = w->fres;
    if (get_fres(s, &f, fres)) return SF_DECLINE;
    /* saved_analysis: the rows' anchors, and analyse's gate for the C (the
     * last row at the start is the function entry's, the code is there) */
    long entry = -1;
    for (int64_t k = 0; k < f.num_fres; k++) {
        if (fres[k].info & 0x80) return SF_DECLINE; /* a mangled RA: the encoder refuses it */
        struct cfa c;
        struct rule fp;
        int64_t *row = &w->rows[3 * k];
        row[0] = f.start + fres[k].start;
        row[1] = row[2] = NONE;
        if (fre_rules(&fres[k], &c, &fp)) {
            if (c.reg == 7) row[1] = -c.offset; else row[2] = -c.offset;
        }
        if (fres[k].start <= 0) entry = k;
    }
    long words = FDE_WORDS;
    const int64_t *spans = NULL;
    long nspans = 0;
    if (s->analyse) {
        long got = analysed(s, &f, entry, w, o, cap, &spans, &nspans);
        if (got < 0) return got;
        words += got;
    }
    /* fde_rows, each row encoded as it is made (encode_rows) */
    long at = prog->n;
    struct encoder e = {prog, 0, {7, 0}, {{0}}, s->fixed_ra, &w->at};
    for (int i = 0; i < NREGS; i++) e.current[i] = (struct rule){K_UNDEFINED, 0};
    e.current[w->at.fp] = e.current[w->at.ra] = (struct rule){K_UNSET, 0}; /* said in the first row */
    uint64_t first = 0, last = 0, limit = (uint64_t)(f.start + f.size);
    int any = 0;
    for (int64_t k = 0; k < f.num_fres; k++) {
        uint64_t start = (uint64_t)f.start + (uint64_t)fres[k].start;
        uint64_t end = k + 1 < f.num_fres ? (uint64_t)f.start + (uint64_t)fres[k + 1].start : limit;
        if (end > limit) end = limit;
        if (start >= end) continue;
        struct cfa c;
        struct rule fp = {K_SAME, 0};
        int outer = !fre_rules(&fres[k], &c, &fp);
        for (uint64_t pc = start; pc < end;) {
            uint64_t lo, hi;
            const int64_t *span = regs_at(spans, nspans, pc, &lo, &hi);
            if (lo < pc) lo = pc;
            if (hi > end) hi = end;
            if (!any) { first = lo; e.loc = lo; any = 1; }
            if (encode_row(&e, lo, outer ? NULL : &c, &fp, span)) return prog->n >= prog->cap ? SF_SMALL : SF_DECLINE;
            last = hi;
            pc = hi;
        }
    }
    if (any) {
        o[0] = ST_DONE;
        o[1] = (int64_t)first;
        o[2] = (int64_t)last;
        o[3] = s->version == 3 && (f.info & 0x80);
        o[4] = at;
        o[5] = prog->n - at;
    }
    return words;
}

/* FDEs [lo, hi) of the section: FDE_WORDS per FDE (and its exits where
 * they matter) into ``out``, their programs into ``prog``. Returns the
 * words written, SF_SMALL (a buffer is too small: nothing is kept, ask
 * again with larger ones) or SF_NOMEM. ``*used``: the program bytes.
 * Every FDE is declined where the registers passed at build time do not
 * make a row (SF_FDE_REGS lacks one): the Python makes them. */
long sf_amd64_fdes(const struct sf_section *s, int64_t lo, int64_t hi, int64_t *out, long cap,
                   uint8_t *prog, long prog_cap, long *used) {
    struct work w = {0};
    struct buf b = {prog, 0, prog_cap};
    long n = 0, result = 0;
    int unmade = find_slots(&w.at);
    for (int64_t index = lo; index < hi; index++) {
        long at = b.n;
        long got = unmade ? SF_DECLINE : one_fde(s, index, &w, out + n, cap - n, &b);
        if (got == SF_SMALL || got == SF_NOMEM) { result = got; goto done; }
        if (got == SF_DECLINE) {
            if (cap - n < FDE_WORDS) { result = SF_SMALL; goto done; }
            memset(out + n, 0, sizeof *out * FDE_WORDS);
            out[n] = ST_DECLINED;
            b.n = at; /* what it began to write is not kept */
            got = FDE_WORDS;
        }
        n += got;
    }
    result = n;
    *used = b.n;
done:
    free(w.fres);
    free(w.rows);
    free(w.answer);
    free(w.kept.by_fde);
    return result;
}

void sf_native_layout(int64_t out[2]) {
    out[0] = (int64_t)sizeof(struct sf_region);
    out[1] = (int64_t)sizeof(struct sf_section);
}
