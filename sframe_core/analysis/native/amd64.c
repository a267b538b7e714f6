/* The saved-register analysis of one amd64 function, in C: the same result
 * as sframe_core/analysis/saved.py's analyse() with amd64.py's detailed
 * effects (AMD64Decoder._effect) and jump tables (amd64_jump_tables), for a
 * function entered at its first instruction without a computed goto (its
 * table is read through the module's relocations, which this file does not
 * read); an indirect jump through no table it reads goes anywhere its CFA
 * rule fits, as in the Python. Anything else it declines (returns
 * SF_DECLINE) and the Python analysis runs: it never guesses.
 *
 * It mirrors the Python line by line (the same worklist order, the same
 * meets, the same spans and exits), so the symbol files are byte for byte
 * the same; tests/test_native.py holds it to the Python analysis on every
 * amd64 function of the fixtures, the real programs and the host's libraries.
 * capstone is the Python binding's own library (its headers ship with it):
 * native/__init__.py builds this file against them, and this file loads
 * that library (``sf_amd64_init``). Its protocol with the Python, and the
 * values it takes from the Python analysis, are in sframe_native.h.
 */
#include "sframe_native.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <capstone/capstone.h>

/* Stores one instruction is followed for: one with more is declined. */
#define MAX_STORES 4
/* The Python analysis's bounds (records.py), and amd64.py's table bound. */
#define MAX_INSNS SF_MAX_INSNS
#define RED_ZONE SF_RED_ZONE

enum flow { FALL, JUMP, COND, CALL, RETURN, INDIRECT, STOP };
enum base { B_SP, B_FP, B_OTHER, B_FRAME };
enum ptr { P_NONE, P_SP, P_FP, P_UNKNOWN }; /* SPOp: unchanged, from sp/fp + add, unknown */

/* effects.py's CALLEE_SAVED["amd64"], in its order: the analysis's tracked registers. */
static const int tracked_dwarf[NTRACKED] = {SF_TRACKED};

struct store { int8_t base; int64_t disp; int64_t size; int8_t reg; }; /* size -1: unsized; reg -1 */
struct load { int8_t reg; int8_t base; int64_t disp; };
struct effect {
    uint64_t addr;
    uint16_t size;
    uint8_t flow;
    uint8_t has_target;
    int64_t target;
    uint8_t nstores, nloads;
    struct store stores[MAX_STORES];
    struct load load;
    uint8_t clobbers; /* bit i: tracked_dwarf[i] */
    uint8_t sp_kind, fp_kind;
    int64_t sp_add, fp_add;
    char text[200]; /* "MNEMONIC OPERANDS", as effects.py's Effect.text */
};

struct reg { int64_t slot; uint8_t live, pinned; };
struct state { int64_t sp, fp; struct reg regs[NTRACKED]; };

/* capstone register id -> DWARF number of a followed register (3, 6, 7,
 * 12-15), or -1; made from the names in amd64.py's X86_NAMES. */
static int8_t reg_num[X86_REG_ENDING];
static csh handle;
static int ready;

struct name_number { const char *name; int number; };
static const struct name_number x86_names[] = {SF_X86_NAMES};

static int name_num(const char *name) {
    for (size_t i = 0; i < sizeof x86_names / sizeof *x86_names; i++)
        if (!strcmp(name, x86_names[i].name)) return x86_names[i].number;
    return -1;
}

/* capstone's functions, from the binding's library (``sf_amd64_init``):
 * loaded privately, so that nothing else in a debugger's process sees them. */
static cs_err (*cs_open_)(cs_arch, cs_mode, csh *);
static cs_err (*cs_option_)(csh, cs_opt_type, size_t);
static const char *(*cs_reg_name_)(csh, unsigned int);
static cs_insn *(*cs_malloc_)(csh);
static void (*cs_free_)(cs_insn *, size_t);
static bool (*cs_disasm_iter_)(csh, const uint8_t **, size_t *, uint64_t *, cs_insn *);
static cs_err (*cs_regs_access_)(csh, const cs_insn *, cs_regs, uint8_t *, cs_regs, uint8_t *);
#define cs_open cs_open_
#define cs_option cs_option_
#define cs_reg_name cs_reg_name_
#define cs_malloc cs_malloc_
#define cs_free cs_free_
#define cs_disasm_iter cs_disasm_iter_
#define cs_regs_access cs_regs_access_

/* Load capstone from ``library`` (the Python binding's); 0, or -1. */
int sf_amd64_init(const char *library) {
    if (ready) return 0;
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return -1;
    *(void **)&cs_open_ = dlsym(lib, "cs_open");
    *(void **)&cs_option_ = dlsym(lib, "cs_option");
    *(void **)&cs_reg_name_ = dlsym(lib, "cs_reg_name");
    *(void **)&cs_malloc_ = dlsym(lib, "cs_malloc");
    *(void **)&cs_free_ = dlsym(lib, "cs_free");
    *(void **)&cs_disasm_iter_ = dlsym(lib, "cs_disasm_iter");
    *(void **)&cs_regs_access_ = dlsym(lib, "cs_regs_access");
    if (!cs_open_ || !cs_option_ || !cs_reg_name_ || !cs_malloc_ || !cs_free_ || !cs_disasm_iter_
        || !cs_regs_access_)
        return -1;
    if (cs_open(CS_ARCH_X86, CS_MODE_64, &handle) != CS_ERR_OK) return -1;
    cs_option(handle, CS_OPT_DETAIL, CS_OPT_ON);
    for (int r = 0; r < X86_REG_ENDING; r++) {
        const char *name = r ? cs_reg_name(handle, (unsigned)r) : NULL;
        reg_num[r] = (int8_t)(name ? name_num(name) : -1);
    }
    ready = 1;
    return 0;
}

static int num(unsigned reg) { return reg && reg < X86_REG_ENDING ? reg_num[reg] : -1; }

static int tracked_index(int n) {
    for (int i = 0; i < NTRACKED; i++)
        if (tracked_dwarf[i] == n) return i;
    return -1;
}

static long at_index(const struct effect *effs, long count, uint64_t addr);

static int starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* ``s`` is one of ``list``. Each list's words begin with one of a few
 * letters (``firsts``): most mnemonics are told apart by their first. */
static int one_of(const char *s, const char *const *list) {
    for (; *list; list++) if (s[0] == (*list)[0] && !strcmp(s, *list)) return 1;
    return 0;
}

static int starts_one_of(const char *s, const char *const *list) {
    for (; *list; list++) if (s[0] == (*list)[0] && starts_with(s, *list)) return 1;
    return 0;
}

/* amd64.py's X86_MOVES, X86_UNSIZED and X86_STOPS. */
static const char *const moves[] = {SF_X86_MOVES, NULL};
static const char *const unsized[] = {SF_X86_UNSIZED, NULL};
static const char *const stops[] = {SF_X86_STOPS, NULL};

static void mem_base(const x86_op_mem *mem, int8_t *base, int64_t *disp) {
    int b = num(mem->base);
    *disp = 0;
    if (mem->segment != X86_REG_INVALID) { *base = B_OTHER; return; }
    if (b == 7 || b == 6) {
        if (mem->index != X86_REG_INVALID) { *base = B_FRAME; return; }
        *base = b == 7 ? B_SP : B_FP;
        *disp = mem->disp;
        return;
    }
    if (mem->base == X86_REG_INVALID && mem->index != X86_REG_INVALID) {
        int i = num(mem->index);
        if (i == 7 || i == 6) { *base = B_FRAME; return; }
    }
    *base = B_OTHER;
}

/* amd64.py's _pointer_op: rsp/rbp = rsp/rbp + constant; else unknown. */
static void pointer_op(const cs_insn *insn, int dest, uint8_t *kind, int64_t *add) {
    const cs_x86 *x = &insn->detail->x86;
    *kind = P_UNKNOWN;
    *add = 0;
    if (x->op_count != 2 || x->operands[0].type != X86_OP_REG || num(x->operands[0].reg) != dest
        || x->operands[0].size != 8)
        return;
    const cs_x86_op *src = &x->operands[1];
    uint8_t own = dest == 7 ? P_SP : P_FP;
    if ((!strcmp(insn->mnemonic, "add") || !strcmp(insn->mnemonic, "sub")) && src->type == X86_OP_IMM) {
        *kind = own;
        *add = !strcmp(insn->mnemonic, "add") ? src->imm : -src->imm;
        return;
    }
    if (!strcmp(insn->mnemonic, "mov") && src->type == X86_OP_REG && src->size == 8) {
        int n = num(src->reg);
        if (n == 7 || n == 6) { *kind = n == 7 ? P_SP : P_FP; return; }
    }
    if (!strcmp(insn->mnemonic, "lea") && src->type == X86_OP_MEM) {
        int n = num(src->mem.base);
        if ((n == 7 || n == 6) && src->mem.index == X86_REG_INVALID && src->mem.segment == X86_REG_INVALID) {
            *kind = n == 7 ? P_SP : P_FP;
            *add = src->mem.disp;
        }
    }
}

static uint8_t tracked_bits(uint32_t writes) {
    uint8_t bits = 0;
    for (int i = 0; i < NTRACKED; i++)
        if (writes & (1u << tracked_dwarf[i])) bits |= (uint8_t)(1u << i);
    return bits;
}

/* amd64.py's AMD64Decoder._effect. 0, or SF_DECLINE (more stores than kept). */
static int effect_of(const cs_insn *insn, struct effect *e) {
    const cs_detail *d = insn->detail;
    const cs_x86 *x = &d->x86;
    const char *mnem = insn->mnemonic;
    e->addr = insn->address;
    e->size = insn->size;
    e->has_target = 0;
    e->target = 0;
    e->nstores = e->nloads = 0;
    e->clobbers = 0;
    e->sp_kind = e->fp_kind = 0;
    e->sp_add = e->fp_add = 0;
    size_t ml = strlen(insn->mnemonic), ol = strlen(insn->op_str);
    memcpy(e->text, insn->mnemonic, ml);
    e->text[ml] = ' ';
    memcpy(e->text + ml + 1, insn->op_str, ol + 1);
    int jump = 0, call = 0, ret = 0;
    for (int i = 0; i < d->groups_count; i++) {
        jump |= d->groups[i] == CS_GRP_JUMP;
        call |= d->groups[i] == CS_GRP_CALL;
        ret |= d->groups[i] == CS_GRP_RET || d->groups[i] == CS_GRP_IRET;
    }
    e->flow = FALL;
    if (jump || call) {
        int imm = x->op_count == 1 && x->operands[0].type == X86_OP_IMM;
        if (call) { e->flow = CALL; e->has_target = (uint8_t)imm; }
        else if (!imm) e->flow = INDIRECT;
        else { e->flow = starts_with(mnem, "jmp") ? JUMP : COND; e->has_target = 1; }
        if (imm) e->target = x->operands[0].imm;
    } else if (ret) e->flow = RETURN;
    else if (one_of(mnem, stops)) e->flow = STOP;

    if (!strcmp(mnem, "push")) {
        int reg = x->operands[0].type == X86_OP_REG ? num(x->operands[0].reg) : -1;
        int full = x->operands[0].size == 8;
        e->nstores = 1;
        e->stores[0] = (struct store){B_SP, -8, 8, (int8_t)(full && tracked_index(reg) >= 0 ? reg : -1)};
        e->sp_kind = P_SP;
        e->sp_add = -8;
        return 0;
    }
    /* The registers written (pop and the generic case read them): capstone's
     * lists and the written register operands. */
    uint32_t writes = 0; /* bit n: DWARF register n (n < 16) */
    if (!(e->flow == CALL || e->flow == RETURN || e->flow == INDIRECT || e->flow == JUMP
          || e->flow == COND || !strcmp(mnem, "leave"))) {
        cs_regs rd, wr;
        uint8_t nrd = 0, nwr = 0;
        if (cs_regs_access(handle, insn, rd, &nrd, wr, &nwr) == CS_ERR_OK)
            for (int i = 0; i < nwr; i++) { int n = num(wr[i]); if (n >= 0) writes |= 1u << n; }
        for (int i = 0; i < x->op_count; i++)
            if (x->operands[i].type == X86_OP_REG && (x->operands[i].access & CS_AC_WRITE)) {
                int n = num(x->operands[i].reg);
                if (n >= 0) writes |= 1u << n;
            }
    }
    if (!strcmp(mnem, "pop") && x->operands[0].type == X86_OP_REG) {
        int reg = num(x->operands[0].reg);
        uint8_t loaded = 0;
        if (tracked_index(reg) >= 0 && x->operands[0].size == 8) {
            e->nloads = 1;
            e->load = (struct load){(int8_t)reg, B_SP, 0};
            loaded = (uint8_t)(1u << tracked_index(reg));
        }
        e->clobbers = tracked_bits(writes) & (uint8_t)~loaded;
        e->sp_kind = P_SP;
        e->sp_add = 8;
        if (reg == 6) e->fp_kind = P_UNKNOWN;
        return 0;
    }
    if (e->flow == CALL) {
        e->nstores = 1;
        e->stores[0] = (struct store){B_SP, -8, 8, -1};
        return 0;
    }
    if (e->flow == RETURN || e->flow == INDIRECT || e->flow == JUMP || e->flow == COND) return 0;
    if (!strcmp(mnem, "leave")) {
        e->sp_kind = P_FP;
        e->sp_add = 8;
        e->fp_kind = P_UNKNOWN;
        return 0;
    }
    /* _generic */
    int is_mov = (!strcmp(mnem, "mov") || !strcmp(mnem, "movq")) && x->op_count == 2;
    int skip_mem = !strcmp(mnem, "lea") || starts_with(mnem, "nop") || starts_with(mnem, "prefetch");
    int is_unsized = starts_one_of(mnem, unsized);
    for (int i = 0; i < x->op_count; i++) {
        const cs_x86_op *op = &x->operands[i];
        if (op->type != X86_OP_MEM || skip_mem) continue;
        int8_t base;
        int64_t disp;
        mem_base(&op->mem, &base, &disp);
        int written = (op->access & CS_AC_WRITE) || op->access == 0 || (i == 0 && one_of(mnem, moves));
        if (!written || base == B_OTHER) continue;
        int sized = op->size == 1 || op->size == 2 || op->size == 4 || op->size == 8 || op->size == 16
                    || op->size == 32 || op->size == 64;
        int8_t reg = -1;
        if (is_mov && x->operands[1].type == X86_OP_REG && op->size == 8) {
            int n = num(x->operands[1].reg);
            reg = (int8_t)(tracked_index(n) >= 0 ? n : -1);
        }
        if (e->nstores >= MAX_STORES) return SF_DECLINE;
        e->stores[e->nstores++] = (struct store){base, disp, (is_unsized || !sized) ? -1 : op->size, reg};
    }
    uint8_t loaded = 0;
    if (is_mov && x->operands[0].type == X86_OP_REG && x->operands[1].type == X86_OP_MEM
        && x->operands[0].size == 8) {
        int n = num(x->operands[0].reg);
        int8_t base;
        int64_t disp;
        mem_base(&x->operands[1].mem, &base, &disp);
        if (tracked_index(n) >= 0) {
            e->nloads = 1;
            e->load = (struct load){(int8_t)n, base, disp};
            loaded = (uint8_t)(1u << tracked_index(n));
        }
    }
    if (writes & (1u << 7)) pointer_op(insn, 7, &e->sp_kind, &e->sp_add);
    if (writes & (1u << 6)) pointer_op(insn, 6, &e->fp_kind, &e->fp_add);
    e->clobbers = tracked_bits(writes) & (uint8_t)~loaded;
    return 0;
}

/* -- the effects of encodings met before ------------------------------------
 *
 * Most of a module's instructions are encodings met before (a push, a
 * frame-slot store, a move between registers), and capstone's detailed
 * decode and ``effect_of`` were half of the time. An effect depends on the
 * instruction's bytes and, for a relative branch, on its address (its
 * target, and the target capstone prints), so the effect of every other
 * encoding is kept by its bytes and reused at another address as it is. x86
 * decodes the same bytes from the same start the same way, and no encoding
 * is a prefix of another, so the bytes at a PC that begin with a kept
 * encoding are that encoding: each length from 1 to 15 is looked up in turn.
 * Per thread, at most MEMO_MAX encodings (about 5 MB). */
#define MEMO_SLOTS (1 << 15)
#define MEMO_MAX (MEMO_SLOTS / 2)
struct memo_entry { uint8_t len; uint8_t bytes[15]; struct effect eff; };
static _Thread_local struct memo_entry **memo_slots;
static _Thread_local long memo_count;

static uint32_t memo_step(uint32_t h, uint8_t byte) { return (h ^ byte) * 16777619u; }

static const struct effect *memo_find(const uint8_t *p, size_t left) {
    if (!memo_slots) return NULL;
    uint32_t h = 2166136261u;
    for (size_t len = 1; len <= 15 && len <= left; len++) {
        h = memo_step(h, p[len - 1]);
        for (uint32_t k = (h ^ (uint32_t)len) & (MEMO_SLOTS - 1);; k = (k + 1) & (MEMO_SLOTS - 1)) {
            const struct memo_entry *e = memo_slots[k];
            if (!e) break;
            if (e->len == len && !memcmp(e->bytes, p, len)) return &e->eff;
        }
    }
    return NULL;
}

static void memo_keep(const uint8_t *at, const cs_insn *insn, const struct effect *eff) {
    const cs_detail *d = insn->detail;
    if (eff->has_target) return; /* its target is its address's */
    for (int i = 0; i < d->groups_count; i++)
        if (d->groups[i] == CS_GRP_BRANCH_RELATIVE) return; /* and so is its text */
    if (insn->size < 1 || insn->size > 15 || memo_count >= MEMO_MAX) return;
    if (!memo_slots && !(memo_slots = calloc(MEMO_SLOTS, sizeof *memo_slots))) return;
    struct memo_entry *e = malloc(sizeof *e);
    if (!e) return;
    e->len = (uint8_t)insn->size;
    memcpy(e->bytes, at, insn->size);
    e->eff = *eff;
    uint32_t h = 2166136261u;
    for (size_t len = 1; len <= e->len; len++) h = memo_step(h, at[len - 1]);
    uint32_t k = (h ^ (uint32_t)e->len) & (MEMO_SLOTS - 1);
    while (memo_slots[k]) k = (k + 1) & (MEMO_SLOTS - 1);
    memo_slots[k] = e;
    memo_count++;
}

/* -- jump tables (amd64.py's amd64_jump_tables for gcc's position-independent
 * tables, over the same instruction texts) -- */

#define TABLE_MAX SF_TABLE_MAX
/* amd64.py's X86_ALIASES: each 64-bit register's names, widest first. */
static const char *const aliases[16][6] = {SF_X86_ALIASES};

/* The family (index into aliases) whose 64-bit name is ``name``, or -1. */
static int family64(const char *name, size_t len) {
    for (int f = 0; f < 16; f++)
        if (strlen(aliases[f][0]) == len && !strncmp(aliases[f][0], name, len)) return f;
    return -1;
}

static int in_family(int f, const char *name, size_t len) {
    for (int i = 0; aliases[f][i]; i++)
        if (strlen(aliases[f][i]) == len && !strncmp(aliases[f][i], name, len)) return 1;
    return 0;
}

/* _family(name, width) for width 1 (32-bit names). */
static int family32(const char *name, size_t len) {
    for (int f = 0; f < 16; f++)
        if (strlen(aliases[f][1]) == len && !strncmp(aliases[f][1], name, len)) return f;
    return -1;
}

/* _mentions: a word of ``text`` (split at spaces , [ ] * + -) in family ``f``. */
static int mentions(const char *text, int f) {
    const char *p = text;
    while (*p) {
        while (*p && strchr(" ,[]*+-", *p)) p++;
        const char *w = p;
        while (*p && !strchr(" ,[]*+-", *p)) p++;
        if (p > w && in_family(f, w, (size_t)(p - w))) return 1;
    }
    return 0;
}

/* _rip_lea: the address ``lea REG, [rip + 0x...]`` loads, or NONE. */
static int64_t rip_lea(const struct effect *e, const char *reg) {
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "lea %s, [rip + 0x", reg);
    size_t len = strlen(e->text);
    if (n <= 0 || strncmp(e->text, prefix, (size_t)n) || len < (size_t)n + 2 || e->text[len - 1] != ']')
        return NONE;
    uint64_t value = 0;
    for (size_t i = (size_t)n; i < len - 1; i++) {
        char c = e->text[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0 || value >> 60) return NONE;
        value = value * 16 + (uint64_t)d;
    }
    return (int64_t)(e->addr + e->size + value);
}

struct tables { long *start; long *count; int64_t *targets; long cap; }; /* per site: its targets' addresses */

/* _successors */
static int successors(const struct effect *effs, long count, long k, long out[2]) {
    int n = 0;
    const struct effect *e = &effs[k];
    if ((e->flow == FALL || e->flow == COND || e->flow == CALL) && k + 1 < count) out[n++] = k + 1;
    if ((e->flow == JUMP || e->flow == COND) && e->has_target) {
        long j = at_index(effs, count, (uint64_t)e->target);
        if (j >= 0) out[n++] = j;
    }
    return n;
}

/* _reaches: can control go from after a source (0: the entry) to ``use``
 * without running a kill? ``site_table``: per instruction, its table (-1: none). */
static int reaches(const struct effect *effs, long count, const long *sources, long nsources,
                   const uint8_t *kill, long use, const long *site_table, const struct tables *t,
                   long *todo, uint8_t *seen) {
    long ntodo = 0, succ[2];
    uint64_t lo = effs[0].addr, hi = effs[count - 1].addr + effs[count - 1].size;
    memset(seen, 0, (size_t)count);
    for (long s = 0; s < nsources; s++) {
        if (sources[s] == 0) { todo[ntodo++] = 0; continue; }
        int n = successors(effs, count, sources[s], succ);
        for (int m = 0; m < n; m++) todo[ntodo++] = succ[m];
    }
    while (ntodo) {
        long k = todo[--ntodo];
        if (seen[k]) continue;
        seen[k] = 1;
        if (k == use) return 1;
        if (effs[k].flow == INDIRECT) {
            long tab = site_table[k];
            if (tab < 0) return 1;
            for (long m = 0; m < t->count[tab]; m++) {
                uint64_t a = (uint64_t)t->targets[t->start[tab] + m];
                if (a >= lo && a < hi && at_index(effs, count, a) < 0) return 1;
            }
            if (!kill[k])
                for (long m = 0; m < t->count[tab]; m++) {
                    long j = at_index(effs, count, (uint64_t)t->targets[t->start[tab] + m]);
                    if (j >= 0) todo[ntodo++] = j;
                }
            continue;
        }
        if (!kill[k]) {
            int n = successors(effs, count, k, succ);
            for (int m = 0; m < n; m++) todo[ntodo++] = succ[m];
        }
    }
    return 0;
}

struct scratch { long *todo, *sources; uint8_t *seen, *kill; int64_t *values; };

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* _x86_hoisted: the table address callee-saved ``base`` holds at ``use``
 * from a ``lea base, [rip + T]`` on every path, or NONE. */
static int64_t hoisted(const struct effect *effs, long count, int fam, long use,
                       const long *site_table, const struct tables *t, struct scratch *w) {
    static const int dwarf[16] = {0, 3, 2, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int number = dwarf[fam];
    int ti = tracked_index(number);
    if (ti < 0) return NONE;
    long nvalues = 0, nbad = 0;
    /* values[k] per instruction (NONE: not a lea of a table); bad list. */
    for (long k = 0; k < count; k++) {
        w->values[k] = NONE;
        const struct effect *e = &effs[k];
        if ((e->clobbers & (1u << ti)) || (e->nloads && e->load.reg == number)) {
            int64_t a = rip_lea(e, aliases[fam][0]);
            if (a != NONE) { w->values[k] = a; nvalues++; }
            else nbad++;
        }
    }
    if (!nvalues) return NONE;
    /* the distinct values, sorted */
    int64_t *distinct = malloc(sizeof *distinct * (size_t)nvalues);
    if (!distinct) return NONE;
    long nd = 0;
    for (long k = 0; k < count; k++) if (w->values[k] != NONE) distinct[nd++] = w->values[k];
    qsort(distinct, (size_t)nd, sizeof *distinct, cmp_i64);
    int64_t found = NONE;
    for (long v = 0; v < nd; v++) {
        if (v && distinct[v] == distinct[v - 1]) continue;
        long ns = 0;
        w->sources[ns++] = 0;
        for (long k = 0; k < count; k++) {
            const struct effect *e = &effs[k];
            if (((e->clobbers & (1u << ti)) || (e->nloads && e->load.reg == number)) && w->values[k] == NONE)
                w->sources[ns++] = k;
        }
        for (long k = 0; k < count; k++) {
            w->kill[k] = w->values[k] == distinct[v];
            if (w->values[k] != NONE && !w->kill[k]) w->sources[ns++] = k;
        }
        if (!reaches(effs, count, w->sources, ns, w->kill, use, site_table, t, w->todo, w->seen)) {
            found = distinct[v];
            break;
        }
    }
    free(distinct);
    return found;
}

static int parse_int(const char *s, int64_t *out) {
    /* Python's int(s, 0) for what capstone prints: [-]0xHEX or [-]DECIMAL */
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    uint64_t v = 0;
    if (s[0] == '0' && s[1] == 'x') {
        s += 2;
        if (!*s) return 0;
        for (; *s; s++) {
            int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
            if (d < 0 || v >> 59) return 0;
            v = v * 16 + (uint64_t)d;
        }
    } else {
        if (!*s || (s[0] == '0' && s[1])) return 0;
        for (; *s; s++) {
            if (*s < '0' || *s > '9' || v > (UINT64_MAX / 10 - 10)) return 0;
            v = v * 10 + (uint64_t)(*s - '0');
        }
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* A backward walk from a jump may step over ``effs[j]``: it falls through
 * (or branches on a condition) and no branch lands after it
 * (``effects[j + 1].address in leaders``). */
static int straight(const struct effect *effs, long j, const uint64_t *leaders, long nleaders) {
    uint64_t next = effs[j + 1].addr;
    long lo = 0, hi = nleaders;
    while (lo < hi) { long mid = (lo + hi) / 2; if (leaders[mid] < next) lo = mid + 1; else hi = mid; }
    return !(lo < nleaders && leaders[lo] == next) && (effs[j].flow == FALL || effs[j].flow == COND);
}

enum want { W_ADD, W_MOVSXD, W_LEA, W_JA, W_CMP };

/* amd64_jump_table: the targets of the table ``effs[i]`` jumps through
 * (appended to ``t``), 1; 0 where it is not gcc's form; -1 out of memory. */
static int jump_table(const struct effect *effs, long count, long i, const uint64_t *leaders,
                      long nleaders, sf_read_fn read, void *context, const long *site_table,
                      const struct tables *known, struct tables *t, long *ntargets, long tab,
                      struct scratch *w) {
    /* jump = text.split(): the last two words "jmp" and a 64-bit register */
    const char *text = effs[i].text;
    const char *words[8];
    size_t lens[8];
    int nw = 0;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *q = p;
        while (*q && *q != ' ') q++;
        if (nw == 8) return 0;
        words[nw] = p; lens[nw] = (size_t)(q - p); nw++;
        p = q;
    }
    if (nw < 2 || lens[nw - 2] != 3 || strncmp(words[nw - 2], "jmp", 3)) return 0;
    int a = family64(words[nw - 1], lens[nw - 1]);
    if (a < 0) return 0;
    enum want want = W_ADD;
    int b = -1, idx = -1;
    int64_t table = NONE;
    char prefix[96];
    long lowest = i - 32 > 0 ? i - 32 : 0;
    for (long j = i - 1; j >= lowest; j--) {
        const struct effect *e = &effs[j];
        if (!straight(effs, j, leaders, nleaders)) return 0;
        const char *tx = e->text;
        int64_t address;
        if (want == W_ADD && (snprintf(prefix, sizeof prefix, "add %s, ", aliases[a][0]), starts_with(tx, prefix))) {
            /* b = text.split(", ")[1] */
            const char *s1 = strstr(tx, ", ");
            const char *s2 = strstr(s1 + 2, ", ");
            size_t blen = s2 ? (size_t)(s2 - (s1 + 2)) : strlen(s1 + 2);
            b = family64(s1 + 2, blen);
            if (b < 0) return 0;
            want = W_MOVSXD;
        } else if (want == W_MOVSXD && (snprintf(prefix, sizeof prefix, "movsxd %s, dword ptr [%s + ",
                                                 aliases[a][0], aliases[b][0]), starts_with(tx, prefix))) {
            const char *rest = tx + strlen(prefix);
            size_t rlen = strlen(rest);
            if (rlen < 3 || strcmp(rest + rlen - 3, "*4]")) return 0;
            idx = family64(rest, rlen - 3);
            if (idx < 0) return 0;
            want = W_LEA;
            int64_t h = hoisted(effs, count, b, j, site_table, known, w);
            if (h != NONE) { table = h; want = W_JA; }
        } else if ((want == W_LEA || want == W_JA || want == W_CMP)
                   && (address = rip_lea(e, aliases[b][0])) != NONE) {
            if (want != W_LEA && address != table) return 0;
            table = address;
            if (want == W_LEA) want = W_JA;
        } else if (want == W_JA && starts_with(tx, "ja ")) {
            want = W_CMP;
        } else if (want == W_CMP && starts_with(tx, "cmp ")) {
            const char *ops = tx + 4;
            const char *sep = strstr(ops, ", ");
            size_t reglen = sep ? (size_t)(sep - ops) : strlen(ops);
            const char *bound = sep ? sep + 2 : "";
            if (!in_family(idx, ops, reglen) || table == NONE) return 0;
            int64_t value;
            if (!parse_int(bound, &value)) return 0;
            int64_t n = value + 1;
            if (!(0 < n && n <= TABLE_MAX)) return 0;
            uint8_t data[4 * TABLE_MAX];
            if (!read(context, (uint64_t)table, (uint64_t)(4 * n), data)) return 0;
            if (*ntargets + n > t->cap) { /* grown as tables are read: memory as the input's */
                long cap = 2 * t->cap > *ntargets + n ? 2 * t->cap : *ntargets + n;
                int64_t *grown = realloc(t->targets, sizeof *grown * (size_t)cap);
                if (!grown) return -1;
                t->targets = grown;
                t->cap = cap;
            }
            t->start[tab] = *ntargets;
            t->count[tab] = n;
            for (int64_t m = 0; m < n; m++) {
                int32_t entry;
                memcpy(&entry, data + 4 * m, 4); /* little-endian host (amd64) */
                t->targets[(*ntargets)++] = table + entry;
            }
            return 1;
        } else if (idx >= 0 && (want == W_LEA || want == W_JA) && starts_with(tx, "movzx ")) {
            /* all(r in aliases[idx] for r in text[6:].split(", ")) */
            const char *p = tx + 6;
            int all = 1;
            for (;;) {
                const char *sep = strstr(p, ", ");
                size_t len = sep ? (size_t)(sep - p) : strlen(p);
                if (!in_family(idx, p, len)) { all = 0; break; }
                if (!sep) break;
                p = sep + 2;
            }
            if (!all) goto other;
        } else if (idx >= 0 && (want == W_LEA || want == W_JA)
                   && (snprintf(prefix, sizeof prefix, "mov %s, ", aliases[idx][1]), starts_with(tx, prefix))) {
            /* text.split(", ")[1] is a 32-bit name: the index is its family */
            const char *s1 = strstr(tx, ", ");
            const char *s2 = strstr(s1 + 2, ", ");
            size_t len = s2 ? (size_t)(s2 - (s1 + 2)) : strlen(s1 + 2);
            int f = family32(s1 + 2, len);
            if (f < 0) goto other;
            idx = f;
        } else {
            goto other;
        }
        continue;
    other:
        if (want == W_JA || want == W_CMP || mentions(tx, a) || (b >= 0 && mentions(tx, b))
            || (idx >= 0 && mentions(tx, idx)))
            return 0;
    }
    return 0;
}

/* amd64_computed_goto up to the read of its table through ``pointers``
 * (the module's relocations, which this file does not read): 1 where the
 * Python would read a table there, 0 where it would not (the jump is then
 * an unread one), -1 where this cannot tell (an immediate it does not
 * parse as Python's int(text, 0) would). 1 and -1 decline the function. */
static int computed_goto(const struct effect *effs, long count, long i, const uint64_t *leaders,
                         long nleaders, const long *site_table, const struct tables *known,
                         struct scratch *w) {
    const char *text = effs[i].text;
    /* text.split() == ["jmp", a] */
    if (strncmp(text, "jmp ", 4)) return 0;
    const char *reg = text + 4;
    if (!*reg || strchr(reg, ' ')) return 0;
    int a = family64(reg, strlen(reg));
    if (a < 0) return 0;
    int idx = -1;
    int64_t table = NONE;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "mov %s, qword ptr [", aliases[a][0]);
    long lowest = i - 32 > 0 ? i - 32 : 0;
    for (long j = i - 1; j >= lowest; j--) {
        const struct effect *e = &effs[j];
        if (!straight(effs, j, leaders, nleaders)) return 0;
        const char *tx = e->text;
        size_t len = strlen(tx);
        if (idx < 0) {
            size_t n = strlen(prefix);
            if (starts_with(tx, prefix) && len >= n + 3 && !strcmp(tx + len - 3, "*8]")) {
                /* base, _, index = text[len(prefix):-3].partition(" + ") */
                const char *inner = tx + n;
                size_t inner_len = len - n - 3;
                const char *plus = NULL;
                for (size_t k = 0; k + 3 <= inner_len; k++)
                    if (!strncmp(inner + k, " + ", 3)) { plus = inner + k; break; }
                size_t blen = plus ? (size_t)(plus - inner) : inner_len;
                int base = family64(inner, blen);
                int index = plus ? family64(plus + 3, inner_len - blen - 3) : -1;
                if (base < 0 || index < 0) return 0;
                table = hoisted(effs, count, base, j, site_table, known, w);
                if (table == NONE) return 0;
                idx = index;
            } else if (mentions(tx, a)) {
                return 0;
            }
            continue;
        }
        /* mnem, _, ops = text.partition(" "); dst, _, src = ops.partition(", ") */
        const char *sp = strchr(tx, ' ');
        size_t mlen = sp ? (size_t)(sp - tx) : len;
        const char *ops = sp ? sp + 1 : tx + len;
        const char *comma = strstr(ops, ", ");
        size_t dlen = comma ? (size_t)(comma - ops) : strlen(ops);
        const char *src = comma ? comma + 2 : ops + strlen(ops);
        int dst_idx = (dlen == strlen(aliases[idx][0]) && !strncmp(ops, aliases[idx][0], dlen))
                      || (dlen == strlen(aliases[idx][1]) && !strncmp(ops, aliases[idx][1], dlen));
        int64_t n = -1;
        if (mlen == 3 && !strncmp(tx, "and", 3) && dst_idx) {
            int64_t mask;
            if (!parse_int(src, &mask)) return -1;
            if (mask < 0 || mask > TABLE_MAX || (mask & (mask + 1))) return 0;
            n = mask + 1;
        } else if (mlen == 5 && !strncmp(tx, "movzx", 5) && dst_idx) {
            int byte_reg = 0;
            for (int f = 0; f < 16; f++)
                if (!strcmp(src, aliases[f][3])) byte_reg = 1;
            if (!strcmp(src, "ah") || !strcmp(src, "bh") || !strcmp(src, "ch") || !strcmp(src, "dh"))
                byte_reg = 1;
            if (starts_with(src, "byte ptr ") || byte_reg) n = 256;
            else if (mentions(tx, idx)) return 0;
        } else if (mentions(tx, idx)) {
            return 0;
        }
        if (n >= 0) return n <= TABLE_MAX ? 1 : 0; /* table is known here */
    }
    return 0;
}

/* -- the dataflow (saved.py's _dataflow, for amd64: no ALT, no held values) -- */

static int same_state(const struct state *a, const struct state *b) {
    if (a->sp != b->sp || a->fp != b->fp) return 0;
    for (int i = 0; i < NTRACKED; i++)
        if (a->regs[i].slot != b->regs[i].slot || a->regs[i].live != b->regs[i].live
            || a->regs[i].pinned != b->regs[i].pinned)
            return 0;
    return 1;
}

static struct state meet(const struct state *a, const struct state *b) {
    struct state m;
    m.sp = a->sp == b->sp ? a->sp : NONE;
    m.fp = a->fp == b->fp ? a->fp : NONE;
    for (int i = 0; i < NTRACKED; i++) {
        m.regs[i].slot = a->regs[i].slot == b->regs[i].slot ? a->regs[i].slot : NONE;
        m.regs[i].live = a->regs[i].live && b->regs[i].live;
        m.regs[i].pinned = a->regs[i].pinned && b->regs[i].pinned;
    }
    return m;
}

static struct state reconcile(struct state s, int64_t asp, int64_t afp) {
    if ((asp != NONE && s.sp != NONE && asp != s.sp) || (afp != NONE && s.fp != NONE && afp != s.fp)) {
        struct state lost;
        lost.sp = asp;
        lost.fp = afp;
        for (int i = 0; i < NTRACKED; i++) lost.regs[i] = (struct reg){NONE, 0, 0};
        return lost;
    }
    if (asp != NONE && s.sp == NONE) s.sp = asp;
    if (afp != NONE && s.fp == NONE) s.fp = afp;
    return s;
}

static int64_t address(int8_t base, int64_t disp, const struct state *s) {
    if (base == B_SP) return s->sp == NONE ? NONE : s->sp + disp;
    if (base == B_FP) return s->fp == NONE ? NONE : s->fp + disp;
    return NONE;
}

static int64_t pointer(uint8_t kind, int64_t add, const struct state *s) {
    if (kind == P_SP && s->sp != NONE) return s->sp + add;
    if (kind == P_FP && s->fp != NONE) return s->fp + add;
    return NONE;
}

static struct state transfer(const struct state *state, const struct effect *e) {
    struct state out = *state;
    for (int k = 0; k < e->nstores; k++) {
        const struct store *st = &e->stores[k];
        if (st->base == B_OTHER || (st->base == B_FP && state->fp == NONE)) continue;
        int64_t at = address(st->base, st->disp, state);
        if (at == NONE) {
            for (int i = 0; i < NTRACKED; i++)
                if (!out.regs[i].pinned) { out.regs[i].slot = NONE; out.regs[i].pinned = 0; }
            continue;
        }
        for (int i = 0; i < NTRACKED; i++) {
            int64_t slot = out.regs[i].slot;
            if (slot != NONE && slot + 8 > at && (st->size < 0 || slot < at + st->size)) {
                out.regs[i].slot = NONE;
                out.regs[i].pinned = 0;
            }
        }
        if (st->reg >= 0) {
            int i = tracked_index(st->reg);
            if (out.regs[i].live && st->size >= 8) {
                if (out.regs[i].slot != NONE) out.regs[i].live = 1;
                else out.regs[i] = (struct reg){at, 1, 1};
            }
        }
    }
    if (e->nloads) {
        int i = tracked_index(e->load.reg);
        int64_t at = address(e->load.base, e->load.disp, state);
        if (out.regs[i].slot != NONE && at == out.regs[i].slot) {
            out.regs[i].live = 1;
            out.regs[i].pinned = 0;
        } else {
            out.regs[i].live = 0;
        }
    }
    for (int i = 0; i < NTRACKED; i++)
        if (e->clobbers & (1u << i)) out.regs[i].live = 0;
    if (e->sp_kind) out.sp = pointer(e->sp_kind, e->sp_add, state);
    if (e->fp_kind) out.fp = pointer(e->fp_kind, e->fp_add, state);
    return out;
}

static int inert(const struct effect *e) {
    return !e->nstores && !e->nloads && !e->clobbers && !e->sp_kind && !e->fp_kind;
}

/* Binary search: the index of the instruction at ``addr``, or -1. */
static long at_index(const struct effect *effs, long count, uint64_t addr) {
    long lo = 0, hi = count;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        if (effs[mid].addr < addr) lo = mid + 1; else hi = mid;
    }
    return lo < count && effs[lo].addr == addr ? lo : -1;
}

/* The rules of a state (saved.py's _rules): per tracked register, kind (0
 * none, 1 same value, 2 at CFA + offset) and offset. */
static void rules_of(const struct state *s, int64_t out[2 * NTRACKED]) {
    for (int i = 0; i < NTRACKED; i++) {
        int64_t slot = s->regs[i].slot;
        if (slot != NONE && (s->sp == NONE || slot >= s->sp - RED_ZONE)) {
            out[2 * i] = 2;
            out[2 * i + 1] = slot;
        } else if (s->regs[i].live) {
            out[2 * i] = 1;
            out[2 * i + 1] = 0;
        } else {
            out[2 * i] = 0;
            out[2 * i + 1] = 0;
        }
    }
}

static void put_state(int64_t *w, const struct state *s) {
    w[0] = s->sp;
    w[1] = s->fp;
    for (int i = 0; i < NTRACKED; i++) {
        w[2 + 3 * i] = s->regs[i].slot;
        w[3 + 3 * i] = s->regs[i].live;
        w[4 + 3 * i] = s->regs[i].pinned;
    }
}

/* The worklist of the dataflow, and saved.py's flow_to: ``state`` reaches
 * instruction ``j`` (reconciled with its anchor, met with what reached it). */
struct worklist {
    struct state *states;
    uint8_t *known, *pending;
    long *work, nwork;
    const int64_t *anchor_sp, *anchor_fp;
};

static void flow_to(struct worklist *f, long j, struct state state) {
    struct state s = reconcile(state, f->anchor_sp[j], f->anchor_fp[j]);
    struct state n = f->known[j] ? meet(&f->states[j], &s) : s;
    if (!f->known[j] || !same_state(&n, &f->states[j])) {
        f->states[j] = n;
        f->known[j] = 1;
        if (!f->pending[j]) { f->pending[j] = 1; f->work[f->nwork++] = j; }
    }
}

/* Analyse ``code`` (``len`` bytes at ``start``). ``rows``: SFrame's rows in
 * address order, three words each: the row's address and its anchor (SP -
 * CFA and FP - CFA that its CFA rule fixes, NONE where it fixes none).
 * Writes to ``out`` (``cap`` words): the number of spans, then each span
 * (lo, hi, then kind and offset per tracked register), then the number of
 * exits, then each exit (target or NONE, whether a state follows, SP, FP,
 * then slot, live, pinned per tracked register). Returns the words written,
 * SF_DECLINE (the Python analysis decides), SF_SMALL (``out`` too small) or
 * SF_NOMEM. ``read(context, address, size, buffer)``: the file's bytes (jump tables),
 * 1 when it could; NULL: no indirect jump is followed (they are declined). */
long sf_amd64_analyse(const uint8_t *code, size_t len, uint64_t start,
                      const int64_t *rows, long nrows, sf_read_fn read, void *context, int64_t *out,
                      long cap) {
    if (!ready || len == 0) return SF_DECLINE;
    uint64_t end = start + len;
    long capacity = 64, count = 0, result = SF_DECLINE;
    struct effect *effs = malloc(sizeof *effs * (size_t)capacity);
    cs_insn *insn = cs_malloc(handle);
    struct state *states = NULL;
    uint8_t *known = NULL, *pending = NULL, *inerts = NULL;
    long *work = NULL, *leaving = NULL;
    int64_t *anchor_sp = NULL, *anchor_fp = NULL;
    uint64_t *leaders = NULL;
    long *site_table = NULL, *known_table = NULL;
    struct tables cur_t = {0}, last_t = {0};
    struct scratch sc = {0};
    struct state *ind_state = NULL, *groups = NULL;
    long *ind_order = NULL, *ind_slot = NULL;
    if (!effs || !insn) { result = SF_NOMEM; goto done; }
    const uint8_t *p = code;
    size_t left = len;
    uint64_t addr = start;
    while (left > 0) {
        if (count == capacity) {
            capacity *= 2;
            struct effect *grown = realloc(effs, sizeof *effs * (size_t)capacity);
            if (!grown) { result = SF_NOMEM; goto done; }
            effs = grown;
        }
        const struct effect *seen = memo_find(p, left);
        if (seen) {
            if (count >= MAX_INSNS) goto done;
            effs[count] = *seen;
            effs[count].addr = addr;
            p += seen->size;
            left -= seen->size;
            addr += seen->size;
        } else {
            const uint8_t *at = p;
            if (!cs_disasm_iter(handle, &p, &left, &addr, insn)) goto done; /* undecodable */
            if (count >= MAX_INSNS) goto done;
            if (effect_of(insn, &effs[count]) != 0) goto done;
            memo_keep(at, insn, &effs[count]);
        }
        if (effs[count].flow == INDIRECT && !read) goto done; /* no table can be read */
        count++;
    }
    states = malloc(sizeof *states * (size_t)count);
    known = calloc((size_t)count, 1);
    pending = calloc((size_t)count, 1);
    inerts = malloc((size_t)count);
    work = malloc(sizeof *work * (size_t)count);
    leaving = malloc(sizeof *leaving * (size_t)count);
    anchor_sp = malloc(sizeof *anchor_sp * (size_t)count);
    anchor_fp = malloc(sizeof *anchor_fp * (size_t)count);
    if (!states || !known || !pending || !inerts || !work || !leaving || !anchor_sp || !anchor_fp) {
        result = SF_NOMEM;
        goto done;
    }
    long nleaving = 0;
    for (long i = 0; i < count; i++) {
        struct effect *e = &effs[i];
        inerts[i] = (uint8_t)inert(e);
        if (!e->has_target) continue;
        uint64_t t = (uint64_t)e->target;
        if (t >= start && t < end) {
            if (at_index(effs, count, t) < 0) goto done; /* into the middle of an instruction */
            if (e->flow == CALL && start < t) goto done; /* a call into its own function */
        } else if (e->flow == JUMP || e->flow == COND || e->flow == CALL) {
            leaving[nleaving++] = i;
        }
    }
    /* The indirect jumps: every one a table read the way amd64.py reads it,
     * in the same two rounds (the first round's tables are the ways through
     * their jumps in the second), or the Python analysis decides. */
    long nsites = 0;
    for (long i = 0; i < count; i++) nsites += effs[i].flow == INDIRECT;
    site_table = malloc(sizeof *site_table * (size_t)count);
    if (!site_table) { result = SF_NOMEM; goto done; }
    for (long i = 0; i < count; i++) site_table[i] = -1;
    if (nsites) {
        long nleaders = 0;
        leaders = malloc(sizeof *leaders * (size_t)count);
        known_table = malloc(sizeof *known_table * (size_t)count);
        cur_t.start = malloc(sizeof *cur_t.start * (size_t)nsites);
        cur_t.count = malloc(sizeof *cur_t.count * (size_t)nsites);
        last_t.start = malloc(sizeof *last_t.start * (size_t)nsites);
        last_t.count = malloc(sizeof *last_t.count * (size_t)nsites);
        sc.sources = malloc(sizeof *sc.sources * (size_t)(count + 1));
        sc.seen = malloc((size_t)count);
        sc.kill = malloc((size_t)count);
        sc.values = malloc(sizeof *sc.values * (size_t)count);
        if (!leaders || !known_table || !cur_t.start || !cur_t.count || !last_t.start
            || !last_t.count || !sc.sources || !sc.seen || !sc.kill || !sc.values) {
            result = SF_NOMEM;
            goto done;
        }
        for (long i = 0; i < count; i++) if (effs[i].has_target) leaders[nleaders++] = (uint64_t)effs[i].target;
        qsort(leaders, (size_t)nleaders, sizeof *leaders, cmp_u64);
        for (long i = 0; i < count; i++) known_table[i] = -1;
        long known_targets = 0; /* of the tables ``last_t`` holds */
        for (int round = 0; round < 2; round++) {
            long ntargets = 0, tab = 0;
            /* ``reaches`` pushes at most two successors per instruction and
             * source, and a known table's targets once per jump */
            free(sc.todo);
            sc.todo = malloc(sizeof *sc.todo * (size_t)(4 * count + 16 + known_targets));
            if (!sc.todo) { result = SF_NOMEM; goto done; }
            for (long i = 0; i < count; i++) {
                if (effs[i].flow != INDIRECT) continue;
                int got = jump_table(effs, count, i, leaders, nleaders, read, context, known_table, &last_t,
                                     &cur_t, &ntargets, tab, &sc);
                if (got < 0) { result = SF_NOMEM; goto done; }
                if (!got) {
                    /* a computed goto's table is read through the relocations: the Python's */
                    if (computed_goto(effs, count, i, leaders, nleaders, known_table, &last_t, &sc))
                        goto done;
                    site_table[i] = -1; /* unread: it may go anywhere its CFA rule fits */
                    continue;
                }
                site_table[i] = tab++;
            }
            /* found becomes the known ways for the next round */
            struct tables swap = last_t;
            last_t = cur_t;
            cur_t = swap;
            known_targets = ntargets;
            memcpy(known_table, site_table, sizeof *known_table * (size_t)count);
        }
        /* ``last_t`` holds the last round's tables. Each must land on
         * instruction starts inside the function (else: not used, unread). */
        for (long i = 0; i < count; i++) {
            long tab = site_table[i];
            if (tab < 0) continue;
            for (long m = 0; m < last_t.count[tab]; m++) {
                uint64_t t = (uint64_t)last_t.targets[last_t.start[tab] + m];
                if (t >= start && t < end && at_index(effs, count, t) < 0) { site_table[i] = -1; break; }
            }
        }
        /* the indirect jumps may leave (their tables' targets outside) */
        nleaving = 0;
        for (long i = 0; i < count; i++) {
            struct effect *e = &effs[i];
            if (e->has_target) {
                uint64_t t = (uint64_t)e->target;
                if (!(t >= start && t < end) && (e->flow == JUMP || e->flow == COND || e->flow == CALL))
                    leaving[nleaving++] = i;
            }
            if (e->flow == INDIRECT) leaving[nleaving++] = i;
        }
    }
    /* Each instruction's anchor from the rows (saved.py's _anchors). */
    long k = 0;
    int64_t asp = NONE, afp = NONE;
    for (long i = 0; i < count; i++) {
        while (k < nrows && (uint64_t)rows[3 * k] <= effs[i].addr) {
            asp = rows[3 * k + 1];
            afp = rows[3 * k + 2];
            k++;
        }
        anchor_sp[i] = asp;
        anchor_fp[i] = afp;
    }
    struct state first;
    first.sp = -SF_ENTRY_CFA; /* SP - CFA at the entry */
    first.fp = NONE;
    for (int i = 0; i < NTRACKED; i++) first.regs[i] = (struct reg){NONE, 1, 0};
    states[0] = reconcile(first, anchor_sp[0], anchor_fp[0]);
    known[0] = 1;
    struct worklist flow = {states, known, pending, work, 0, anchor_sp, anchor_fp};
    work[flow.nwork++] = 0;
    pending[0] = 1;
    /* The unread indirect jumps' states (saved.py's ``indirect``: the last
     * state each site had, sites in the order first reached). */
    long nind = 0;
    if (nsites) {
        ind_state = malloc(sizeof *ind_state * (size_t)count);
        ind_order = malloc(sizeof *ind_order * (size_t)nsites);
        ind_slot = malloc(sizeof *ind_slot * (size_t)count);
        groups = malloc(sizeof *groups * (size_t)nsites);
        if (!ind_state || !ind_order || !ind_slot || !groups) { result = SF_NOMEM; goto done; }
        for (long i = 0; i < count; i++) ind_slot[i] = -1;
    }
    for (;;) {
    while (flow.nwork) {
        long i = work[--flow.nwork];
        pending[i] = 0;
        for (;;) {
            struct effect *e = &effs[i];
            struct state outs = inerts[i] ? states[i] : transfer(&states[i], e);
            if (e->flow == INDIRECT) {
                long tab = site_table[i];
                if (tab < 0) {
                    if (ind_slot[i] < 0) { ind_slot[i] = nind; ind_order[nind++] = i; }
                    ind_state[i] = outs;
                    break;
                }
                for (long m = 0; m < last_t.count[tab]; m++) {
                    uint64_t t = (uint64_t)last_t.targets[last_t.start[tab] + m];
                    if (!(t >= start && t < end)) continue;
                    flow_to(&flow, at_index(effs, count, t), outs);
                }
                break;
            }
            if (e->flow == RETURN || e->flow == STOP) break;
            if (e->flow == JUMP || e->flow == COND) {
                uint64_t t = (uint64_t)e->target;
                if (t >= start && t < end) {
                    flow_to(&flow, at_index(effs, count, t), outs);
                }
                if (e->flow == JUMP) break;
            }
            i++;
            if (i >= count) break;
            outs = reconcile(outs, anchor_sp[i], anchor_fp[i]);
            struct state n = known[i] ? meet(&states[i], &outs) : outs;
            if (known[i] && same_state(&n, &states[i])) break;
            states[i] = n;
            known[i] = 1;
            if (pending[i]) break;
        }
    }
    if (!nind) break;
    /* An unread jump's state to every instruction whose CFA rule fits it;
     * the sites with the same SP/FP offsets met first, in first-seen order. */
    long ngroups = 0;
    for (long k = 0; k < nind; k++) {
        const struct state *site = &ind_state[ind_order[k]];
        long g = 0;
        while (g < ngroups && !(groups[g].sp == site->sp && groups[g].fp == site->fp)) g++;
        if (g == ngroups) groups[ngroups++] = *site;
        else if (!same_state(&groups[g], site)) groups[g] = meet(&groups[g], site);
    }
    for (long g = 0; g < ngroups; g++) {
        for (long i = 0; i < count; i++) {
            if ((anchor_sp[i] != NONE && groups[g].sp != NONE && anchor_sp[i] != groups[g].sp)
                || (anchor_fp[i] != NONE && groups[g].fp != NONE && anchor_fp[i] != groups[g].fp))
                continue;
            flow_to(&flow, i, groups[g]);
        }
    }
    if (!flow.nwork) break;
    }
    /* The spans: neighbouring instructions with the same rules, merged. */
    long w = 1, nspans = 0;
    int64_t current[2 * NTRACKED], rules[2 * NTRACKED];
    int64_t lo = -1, hi = -1;
    for (long i = 0; i < count; i++) {
        if (known[i]) rules_of(&states[i], rules); else memset(rules, 0, sizeof rules);
        if (hi == (int64_t)effs[i].addr && !memcmp(rules, current, sizeof rules)) {
            hi += effs[i].size;
            continue;
        }
        if (hi >= 0) {
            if (w + SPAN_WORDS > cap) { result = SF_SMALL; goto done; }
            out[w] = lo;
            out[w + 1] = hi;
            memcpy(&out[w + 2], current, sizeof current);
            w += SPAN_WORDS;
            nspans++;
        }
        lo = (int64_t)effs[i].addr;
        hi = lo + effs[i].size;
        memcpy(current, rules, sizeof rules);
    }
    if (w + SPAN_WORDS + 1 > cap) { result = SF_SMALL; goto done; }
    out[w] = lo;
    out[w + 1] = hi;
    memcpy(&out[w + 2], current, sizeof current);
    w += SPAN_WORDS;
    out[0] = ++nspans;
    /* The branches out (saved.py's _exits; no indirect jumps here). */
    long exits_at = w++;
    long nexits = 0;
    for (long x = 0; x < nleaving; x++) {
        long i = leaving[x];
        struct effect *e = &effs[i];
        long first = 0, n = 1, tab = -1;
        int unread = 0;
        if (e->flow == INDIRECT) { /* a read table's targets outside, each an exit */
            tab = site_table[i];
            if (tab >= 0) {
                first = last_t.start[tab];
                n = last_t.count[tab];
            } else if (!known[i]) {
                continue; /* an unread jump no path reaches: never taken */
            } else {
                unread = 1; /* one exit, to anywhere (no target) */
            }
        }
        for (long m = first; m < first + n; m++) {
            int64_t target = unread ? NONE : tab < 0 ? e->target : last_t.targets[m];
            if (tab >= 0 && (uint64_t)target >= start && (uint64_t)target < end) continue;
            if (w + EXIT_WORDS > cap) { result = SF_SMALL; goto done; }
            out[w] = target;
            if (known[i] && e->flow != CALL) {
                struct state after = inerts[i] ? states[i] : transfer(&states[i], e);
                out[w + 1] = 1;
                put_state(&out[w + 2], &after);
            } else {
                out[w + 1] = 0;
                for (int j = 2; j < EXIT_WORDS; j++) out[w + j] = 0;
            }
            w += EXIT_WORDS;
            nexits++;
        }
    }
    out[exits_at] = nexits;
    result = w;
done:
    free(effs);
    if (insn) cs_free(insn, 1);
    free(states);
    free(known);
    free(pending);
    free(inerts);
    free(work);
    free(leaving);
    free(anchor_sp);
    free(anchor_fp);
    free(leaders);
    free(site_table);
    free(known_table);
    free(cur_t.start);
    free(cur_t.count);
    free(cur_t.targets);
    free(last_t.start);
    free(last_t.count);
    free(last_t.targets);
    free(sc.todo);
    free(sc.sources);
    free(sc.seen);
    free(sc.kill);
    free(sc.values);
    free(ind_state);
    free(ind_order);
    free(ind_slot);
    free(groups);
    return result;
}
