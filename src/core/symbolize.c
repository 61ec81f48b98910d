/* SPDX-License-Identifier: MIT */
/*
 * symbolize.c - libdwfl-backed symbolizer with a per-address cache.
 *
 * Modules are reported to libdwfl with dwfl_report_elf at the bias the recorder saw
 * (late dlopen()s included, since the recorder appends them to the module map before
 * any stack that uses them is published). Debug info is found next to the file or
 * through /usr/lib/debug (dwfl_standard_find_debuginfo); without it the function comes
 * from the symbol table and file:line stay empty. Inlined frames are expanded with
 * dwarf_getscopes, as eu-addr2line -i does.
 */
#include "core/hash.h"
#include "core/symbolize.h"

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* C++ ABI demangler from libstdc++ (what c++filt uses). */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

char *lgs_demangle(const char *sym) {
  if (!sym || sym[0] != '_' || sym[1] != 'Z') return NULL;
  int st = 0;
  char *d = __cxa_demangle(sym, NULL, NULL, &st);
  if (st != 0) {
    free(d);
    return NULL;
  }
  return d;
}

#define CACHE_MAX_FRAMES 8
typedef struct centry {
  uint64_t ip;
  int n;
  lgs_frame_t f[CACHE_MAX_FRAMES];
} centry_t;

typedef struct strnode {
  struct strnode *next;
  char s[];
} strnode_t;

/* Sorted function symbols of one module. dwfl_module_addrinfo scans the whole
 * symbol table on every call (elfutils 0.188), which takes milliseconds in libraries
 * such as libtorch (10^5 symbols); this index is built once per module and searched
 * in O(log n). */
typedef struct symidx_ent {
  uint64_t addr, size;
  const char *name;
} symidx_ent_t;
typedef struct symidx {
  Dwfl_Module *mod;
  symidx_ent_t *e;
  size_t n;
} symidx_t;

struct lgs_symbolizer {
  symidx_t *idx;
  size_t nidx, capidx;
  Dwfl *dwfl;
  Dwfl_Callbacks cb;
  char *debuginfo_path;
  centry_t *cache;
  size_t cache_cap, cache_n;
  strnode_t *strings[4096];
  struct { /* the modules reported, by interned path and bias */
    const char *path;
    uint64_t bias;
  } * mods;
  size_t nmods, capmods;
};

/* Interned strings live as long as the symbolizer. */
static const char *intern(lgs_symbolizer_t *s, const char *str) {
  if (!str) return "";
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = str; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  strnode_t **b = &s->strings[h % 4096];
  for (strnode_t *n = *b; n; n = n->next)
    if (strcmp(n->s, str) == 0) return n->s;
  size_t len = strlen(str);
  strnode_t *n = malloc(sizeof *n + len + 1);
  if (!n) return "";
  memcpy(n->s, str, len + 1);
  n->next = *b;
  *b = n;
  return n->s;
}

lgs_symbolizer_t *lgs_new(void) {
  lgs_symbolizer_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cb.find_elf = dwfl_build_id_find_elf;
  s->cb.find_debuginfo = dwfl_standard_find_debuginfo;
  s->cb.section_address = dwfl_offline_section_address;
  s->cb.debuginfo_path = &s->debuginfo_path;
  s->dwfl = dwfl_begin(&s->cb);
  if (!s->dwfl) {
    free(s);
    return NULL;
  }
  dwfl_report_begin(s->dwfl);
  dwfl_report_end(s->dwfl, NULL, NULL);
  return s;
}

void lgs_free(lgs_symbolizer_t *s) {
  if (!s) return;
  dwfl_end(s->dwfl);
  for (size_t i = 0; i < s->nidx; i++) free(s->idx[i].e);
  free(s->idx);
  free(s->cache);
  free(s->mods);
  for (int i = 0; i < 4096; i++)
    for (strnode_t *n = s->strings[i], *nx; n; n = nx) {
      nx = n->next;
      free(n);
    }
  free(s);
}

int lgs_add_module(lgs_symbolizer_t *s, const char *path, uint64_t start, uint64_t end, uint64_t bias) {
  (void)end;
  (void)start;
  if (!path || !path[0] || path[0] != '/') return -ENOENT; /* vdso and friends */
  /* a module reported already (a fork child shares its parent's symbolizer, and
   * reports the modules it inherited): nothing to add, and no lookup to forget */
  const char *ip = intern(s, path);
  for (size_t i = 0; i < s->nmods; i++)
    if (s->mods[i].path == ip && s->mods[i].bias == bias) return 0;
  if (ip[0] && s->nmods == s->capmods) { /* out of memory: reported, not remembered */
    size_t cap = s->capmods ? s->capmods * 2 : 32;
    void *nm = realloc(s->mods, cap * sizeof *s->mods);
    if (nm) {
      s->mods = nm;
      s->capmods = cap;
    }
  }
  if (ip[0] && s->nmods < s->capmods) {
    s->mods[s->nmods].path = ip;
    s->mods[s->nmods++].bias = bias;
  }
  dwfl_report_begin_add(s->dwfl);
  const char *base = strrchr(path, '/');
  Dwfl_Module *m = dwfl_report_elf(s->dwfl, base ? base + 1 : path, path, -1, bias, false);
  dwfl_report_end(s->dwfl, NULL, NULL);
  /* A new module can only change lookups that found no module: forget those. */
  for (size_t i = 0; i < s->cache_cap; i++)
    if (s->cache[i].ip && !s->cache[i].f[0].module[0]) s->cache[i].f[0].ip = 0, s->cache[i].n = -1;
  return m ? 0 : -EINVAL;
}

static centry_t *cache_slot(lgs_symbolizer_t *s, uint64_t ip, int *found) {
  if (s->cache_n * 2 >= s->cache_cap) {
    size_t ncap = s->cache_cap ? s->cache_cap * 2 : 4096;
    centry_t *nc = calloc(ncap, sizeof *nc);
    if (!nc) return NULL;
    for (size_t i = 0; i < s->cache_cap; i++) {
      if (!s->cache[i].ip) continue;
      size_t j = (s->cache[i].ip * LG_HASH_GOLDEN64 >> 17) & (ncap - 1);
      while (nc[j].ip) j = (j + 1) & (ncap - 1);
      nc[j] = s->cache[i];
    }
    free(s->cache);
    s->cache = nc;
    s->cache_cap = ncap;
  }
  size_t j = (ip * LG_HASH_GOLDEN64 >> 17) & (s->cache_cap - 1);
  while (s->cache[j].ip && s->cache[j].ip != ip) j = (j + 1) & (s->cache_cap - 1);
  *found = s->cache[j].ip == ip;
  return &s->cache[j];
}

static int cmp_sym(const void *a, const void *b) {
  const symidx_ent_t *x = a, *y = b;
  return (x->addr > y->addr) - (x->addr < y->addr);
}

static symidx_t *symidx_of(lgs_symbolizer_t *s, Dwfl_Module *m) {
  for (size_t i = 0; i < s->nidx; i++)
    if (s->idx[i].mod == m) return &s->idx[i];
  if (s->nidx == s->capidx) {
    size_t nc = s->capidx ? s->capidx * 2 : 32;
    symidx_t *n = realloc(s->idx, nc * sizeof *n);
    if (!n) return NULL;
    s->idx = n;
    s->capidx = nc;
  }
  symidx_t *x = &s->idx[s->nidx++];
  memset(x, 0, sizeof *x);
  x->mod = m;
  int nsym = dwfl_module_getsymtab(m);
  if (nsym <= 0) return x;
  x->e = malloc((size_t)nsym * sizeof *x->e);
  if (!x->e) return x;
  for (int i = 0; i < nsym; i++) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    const char *name = dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL);
    int type = GELF_ST_TYPE(sym.st_info);
    if (!name || !*name || !addr || (type != STT_FUNC && type != STT_GNU_IFUNC)) continue;
    x->e[x->n++] = (symidx_ent_t){addr, sym.st_size, name};
  }
  qsort(x->e, x->n, sizeof *x->e, cmp_sym);
  return x;
}

/* The function symbol containing pc, or NULL. */
static const char *symidx_lookup(lgs_symbolizer_t *s, Dwfl_Module *m, uint64_t pc) {
  symidx_t *x = symidx_of(s, m);
  if (!x || !x->n) return NULL;
  size_t lo = 0, hi = x->n;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (x->e[mid].addr <= pc) lo = mid;
    else hi = mid;
  }
  const symidx_ent_t *e = &x->e[lo];
  if (e->addr > pc) return NULL;
  if (e->size && pc >= e->addr + e->size) return NULL;
  return e->name;
}

static const char *die_name(Dwarf_Die *d) {
  Dwarf_Attribute a;
  const char *n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_linkage_name, &a));
  if (!n) n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_MIPS_linkage_name, &a));
  if (!n) n = dwarf_diename(d);
  if (!n) {
    if (dwarf_attr_integrate(d, DW_AT_name, &a)) n = dwarf_formstring(&a);
  }
  return n;
}

static const char *nice_name(lgs_symbolizer_t *s, const char *raw) {
  if (!raw) return "??";
  char *d = lgs_demangle(raw);
  const char *r = intern(s, d ? d : raw);
  free(d);
  return r;
}

static int resolve(lgs_symbolizer_t *s, uint64_t ip, lgs_frame_t *f, int max) {
  Dwarf_Addr pc = ip - 1;
  Dwfl_Module *m = dwfl_addrmodule(s->dwfl, pc);
  f[0] = (lgs_frame_t){ip, "", "??", "", 0, 0};
  if (!m) return 1;
  const char *mname = dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
  f[0].module = intern(s, mname);
  const char *symname = symidx_lookup(s, m, pc);
  f[0].function = nice_name(s, symname);
  /* Only trust the line table when a compile unit covers pc: code without debug info
   * (crt1.o's _start) would otherwise borrow the nearest line of another unit. */
  Dwarf_Addr cubias = 0;
  Dwfl_Line *line = dwfl_module_addrdie(m, pc, &cubias) ? dwfl_module_getsrc(m, pc) : NULL;
  if (line) {
    int ln = 0;
    const char *file = dwfl_lineinfo(line, NULL, &ln, NULL, NULL, NULL);
    f[0].file = intern(s, file);
    f[0].line = ln;
  }
  /* Inlined frames. */
  Dwarf_Addr bias = 0;
  Dwarf_Die *cu = dwfl_module_addrdie(m, pc, &bias);
  if (!cu) return 1;
  Dwarf_Die *scopes = NULL;
  int ns = dwarf_getscopes(cu, pc - bias, &scopes);
  if (ns <= 0) return 1;
  /* dwarf_getscopes continues into an inlined function's abstract definition;
   * dwarf_getscopes_die on the innermost DIE follows the concrete (caller) chain. */
  Dwarf_Die inner;
  Dwarf_Addr b2 = 0;
  Dwarf *dw = dwfl_module_getdwarf(m, &b2);
  if (dw && dwarf_offdie(dw, dwarf_dieoffset(&scopes[0]), &inner)) {
    free(scopes);
    scopes = NULL;
    ns = dwarf_getscopes_die(&inner, &scopes);
    if (ns <= 0) return 1;
  }
  int n = 0;
  const char *cur_file = f[0].file;
  int cur_line = f[0].line;
  Dwarf_Files *files = NULL;
  dwarf_getsrcfiles(cu, &files, NULL);
  for (int i = 0; i < ns && n < max; i++) {
    Dwarf_Die *d = &scopes[i];
    int tag = dwarf_tag(d);
    if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
    lgs_frame_t *o = &f[n++];
    *o =
        (lgs_frame_t){ip, f[0].module, nice_name(s, die_name(d)), cur_file, cur_line, tag == DW_TAG_inlined_subroutine};
    if (tag == DW_TAG_subprogram) break;
    /* The caller's position is the call site of this inlined instance. */
    Dwarf_Attribute a;
    Dwarf_Word cf = 0, cl = 0;
    if (dwarf_formudata(dwarf_attr(d, DW_AT_call_file, &a), &cf) == 0 && files) {
      const char *fn = dwarf_filesrc(files, cf, NULL, NULL);
      cur_file = intern(s, fn);
    }
    if (dwarf_formudata(dwarf_attr(d, DW_AT_call_line, &a), &cl) == 0) cur_line = (int)cl;
  }
  free(scopes);
  if (n == 0) return 1;
  /* The outermost (subprogram) name from the symbol table is more reliable. */
  if (symname && !f[n - 1].inlined) f[n - 1].function = nice_name(s, symname);
  return n;
}

int lgs_lookup(lgs_symbolizer_t *s, uint64_t ip, lgs_frame_t *out, int max) {
  int found = 0;
  centry_t *c = cache_slot(s, ip, &found);
  if (c && found && c->n > 0) {
    int n = c->n < max ? c->n : max;
    memcpy(out, c->f, (size_t)n * sizeof *out);
    return n;
  }
  lgs_frame_t tmp[CACHE_MAX_FRAMES];
  int n = resolve(s, ip, tmp, CACHE_MAX_FRAMES);
  if (c) {
    if (!found) s->cache_n++;
    c->ip = ip;
    c->n = n;
    memcpy(c->f, tmp, (size_t)n * sizeof *tmp);
  }
  if (n > max) n = max;
  memcpy(out, tmp, (size_t)n * sizeof *out);
  return n;
}
