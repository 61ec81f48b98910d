/* SPDX-License-Identifier: MIT */
/*
 * symbolize.c - libdwfl-backed symbolizer with a per-address cache.
 *
 * The files (lgs_files_t) are shared by every process of a run: each distinct ELF
 * file (path, device, inode, size, mtime) is reported once to one libdwfl session, at
 * a synthetic load bias of its own (file k at (k + 1) << 40), and each process
 * (lgs_symbolizer_t) keeps only its map of address ranges to files with the bias it
 * loaded each at. An address is looked up at its file-relative place, so the debug
 * information of libc, of bash or of libtorch is read (and decompressed) once per run,
 * not once per process, and the cache of symbolized addresses is shared: a shell
 * script's hundred bash processes, a server's exec'd workers and the ranks of a
 * training job symbolize the same return addresses once.
 *
 * Modules are added at the bias the recorder saw (late dlopen()s included, since the
 * recorder appends them to the module map before any stack that uses them is
 * published). Debug info is found next to the file or through /usr/lib/debug
 * (dwfl_standard_find_debuginfo); without it the function comes from the symbol table
 * and file:line stay empty. Inlined frames are expanded with dwarf_getscopes, as
 * eu-addr2line -i does.
 */
#include "core/hash.h"
#include "core/symbolize.h"

#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* The C++ ABI demangler of libstdc++ (what c++filt uses), opened at the first mangled
 * name. Linked, libstdc++ was ~0.7 ms and 56 page faults at the start of every
 * leakguard command (an empty C program linked with it and without, 300 runs each),
 * and most runs never demangle a name: Python, C, shells. */
typedef char *(*demangle_fn)(const char *mangled, char *out, size_t *len, int *status);
static demangle_fn demangler;
static pthread_once_t demangler_once = PTHREAD_ONCE_INIT;

static void demangler_open(void) {
  void *lib = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
  if (lib) *(void **)&demangler = dlsym(lib, "__cxa_demangle");
}

char *lgs_demangle(const char *sym) {
  if (!sym || sym[0] != '_' || sym[1] != 'Z') return NULL;
  pthread_once(&demangler_once, demangler_open);
  if (!demangler) return NULL; /* no libstdc++: the mangled name stays */
  int st = 0;
  char *d = demangler(sym, NULL, NULL, &st);
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

/* One distinct ELF file, reported to the shared libdwfl session at base. */
typedef struct lgs_file {
  const char *path; /* interned */
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns;
  Dwfl_Module *mod; /* NULL: libdwfl could not read it */
  Dwfl *own;        /* a non-PIE executable's own session (below), else NULL */
  uint64_t key;     /* the synthetic load bias: cache keys, and the shared session's */
} lgs_file_t;

/* File k's synthetic bias, (k + 1) << 40: above any ELF file's own addresses (< 2^40 in
 * practice). A non-PIE executable (ET_EXEC) cannot be moved (libdwfl reports it at its
 * link-time addresses whatever bias it is given), and two of them would overlap at
 * 0x400000: each has a libdwfl session of its own, at its own addresses. */
#define LGS_FILE_SHIFT 40
#define LGS_FILES_MAX ((1u << (63 - LGS_FILE_SHIFT)) - 1)

struct lgs_files {
  symidx_t *idx;
  size_t nidx, capidx;
  Dwfl *dwfl;
  Dwfl_Callbacks cb;
  char *debuginfo_path;
  centry_t *cache; /* by synthetic address */
  size_t cache_cap, cache_n;
  strnode_t *strings[4096];
  lgs_file_t *files;
  size_t nfiles, capfiles;
  int symtab_slow;      /* lgs_files_symtab_test */
  size_t symtab_direct; /* indexes read by symidx_read_table */
};

/* One process's modules: address ranges, sorted by start, none overlapping. */
typedef struct lgs_pmod {
  uint64_t start, end, bias;
  uint32_t file;
} lgs_pmod_t;

struct lgs_symbolizer {
  lgs_files_t *fs;
  lgs_pmod_t *mods;
  size_t nmods, capmods;
};

/* Interned strings live as long as the symbolizer. */
static const char *intern(lgs_files_t *s, const char *str) {
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

/* ---- separate debug information, found on this machine
 *
 * libdw 0.188's dwfl_standard_find_debuginfo looks by build ID, then along the
 * debuglink path, and last asks debuginfod: for that it dlopens libdebuginfod, which
 * loads libcurl, gnutls, nettle, krb5 and a score of other libraries and runs their
 * constructors, at the first file without debug information of every run (bash, env,
 * libc: nearly always), whether or not a server is configured. That was ~7 ms of the
 * end of every `leakguard run` (BENCHMARKS.md, "Less per process"). Unless debuginfod
 * is wanted (DEBUGINFOD_URLS kept: LEAKGUARD_DEBUGINFOD=1, cli/services.h), the lookup
 * is the local part of libdw's, by its exported build-ID search and then the same three
 * places for the .gnu_debuglink name (the file's directory, its .debug subdirectory,
 * /usr/lib/debug + the directory), checked by build ID or the link's CRC-32 (zlib's
 * crc32 is the polynomial the link uses). */
static int same_file(int fd, const char *path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int crc_matches(int fd, uint32_t want) {
  unsigned char buf[65536];
  uLong crc = crc32(0L, Z_NULL, 0);
  ssize_t n;
  off_t at = 0;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    crc = crc32(crc, buf, (uInt)n);
    at += n;
  }
  return n == 0 && (uint32_t)crc == want;
}

/* The candidate is the module's debug file: the same build ID when both have one,
 * else the debuglink's CRC when it gives one. */
static int debug_file_fits(Dwfl_Module *mod, int fd, GElf_Word crc) {
  const unsigned char *want = NULL;
  GElf_Addr vaddr;
  int wlen = dwfl_module_build_id(mod, &want, &vaddr);
  Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  if (!e) return 0;
  int ok = elf_kind(e) == ELF_K_ELF;
  if (ok && wlen > 0) {
    const void *got = NULL;
    ssize_t glen = dwelf_elf_gnu_build_id(e, &got);
    if (glen > 0) ok = glen == wlen && memcmp(got, want, (size_t)wlen) == 0;
    else ok = crc ? crc_matches(fd, crc) : 0;
  } else if (ok) ok = crc ? crc_matches(fd, crc) : 1;
  elf_end(e);
  return ok;
}

static int find_debuginfo_local(Dwfl_Module *mod, void **userdata, const char *modname, GElf_Addr base,
                                const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                                char **debuginfo_file_name) {
  int fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                        debuginfo_file_name);
  if (fd >= 0) return fd;
  const char *slash = file_name ? strrchr(file_name, '/') : NULL;
  if (!debuglink_file || !*debuglink_file || !slash || file_name[0] != '/') {
    errno = 0;
    return -1;
  }
  int dlen = (int)(slash - file_name);
  char path[PATH_MAX];
  for (int i = 0; i < 3; i++) {
    int n = i == 0   ? snprintf(path, sizeof path, "%.*s/%s", dlen, file_name, debuglink_file)
            : i == 1 ? snprintf(path, sizeof path, "%.*s/.debug/%s", dlen, file_name, debuglink_file)
                     : snprintf(path, sizeof path, "/usr/lib/debug%.*s/%s", dlen, file_name, debuglink_file);
    if (n < 0 || (size_t)n >= sizeof path) continue;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (!same_file(fd, file_name) && debug_file_fits(mod, fd, debuglink_crc)) {
      *debuginfo_file_name = strdup(path);
      return fd;
    }
    close(fd);
  }
  errno = 0;
  return -1;
}

static int want_debuginfod(void) {
  const char *v = getenv("DEBUGINFOD_URLS");
  return v && *v;
}

lgs_files_t *lgs_files_new(void) {
  lgs_files_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cb.find_elf = dwfl_build_id_find_elf;
  s->cb.find_debuginfo = want_debuginfod() ? dwfl_standard_find_debuginfo : find_debuginfo_local;
  s->cb.section_address = dwfl_offline_section_address;
  s->cb.debuginfo_path = &s->debuginfo_path;
  s->dwfl = dwfl_begin(&s->cb);
  if (!s->dwfl) {
    free(s);
    return NULL;
  }
  dwfl_report_begin(s->dwfl);
  dwfl_report_end(s->dwfl, NULL, NULL);
  elf_version(EV_CURRENT); /* for elf_begin in is_exec */
  return s;
}

void lgs_files_free(lgs_files_t *s) {
  if (!s) return;
  dwfl_end(s->dwfl);
  for (size_t i = 0; i < s->nfiles; i++) dwfl_end(s->files[i].own);
  for (size_t i = 0; i < s->nidx; i++) free(s->idx[i].e);
  free(s->idx);
  free(s->cache);
  free(s->files);
  for (int i = 0; i < 4096; i++)
    for (strnode_t *n = s->strings[i], *nx; n; n = nx) {
      nx = n->next;
      free(n);
    }
  free(s);
}

lgs_symbolizer_t *lgs_new(lgs_files_t *fs) {
  if (!fs) return NULL;
  lgs_symbolizer_t *s = calloc(1, sizeof *s);
  if (s) s->fs = fs;
  return s;
}

void lgs_free(lgs_symbolizer_t *s) {
  if (!s) return;
  free(s->mods);
  free(s);
}

/* 1 when path is a non-PIE executable (ELF type ET_EXEC). */
static int is_exec(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  GElf_Ehdr eh;
  int exec = e && gelf_getehdr(e, &eh) && eh.e_type == ET_EXEC;
  elf_end(e);
  close(fd);
  return exec;
}

/* The shared file for path as it is on disk now: found, else reported to libdwfl.
 * -errno when it cannot be (not a file, not ELF, out of memory). */
static int file_of(lgs_files_t *fs, const char *path, uint32_t *out) {
  struct stat st;
  if (stat(path, &st) != 0) return -errno;
  int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  const char *ip = intern(fs, path);
  if (!ip[0]) return -ENOMEM;
  for (size_t i = fs->nfiles; i-- > 0;) {
    const lgs_file_t *f = &fs->files[i];
    if (f->path == ip && f->dev == st.st_dev && f->ino == st.st_ino && f->size == st.st_size && f->mtime_ns == mt) {
      if (!f->mod) return -EINVAL;
      *out = (uint32_t)i;
      return 0;
    }
  }
  if (fs->nfiles >= LGS_FILES_MAX) return -ENOSPC;
  if (fs->nfiles == fs->capfiles) {
    size_t cap = fs->capfiles ? fs->capfiles * 2 : 64;
    lgs_file_t *nf = realloc(fs->files, cap * sizeof *nf);
    if (!nf) return -ENOMEM;
    fs->files = nf;
    fs->capfiles = cap;
  }
  lgs_file_t *f = &fs->files[fs->nfiles];
  *f = (lgs_file_t){ip, st.st_dev, st.st_ino, st.st_size, mt, NULL, NULL, (uint64_t)(fs->nfiles + 1) << LGS_FILE_SHIFT};
  Dwfl *d = fs->dwfl;
  if (is_exec(path) && !(d = f->own = dwfl_begin(&fs->cb))) return -ENOMEM;
  dwfl_report_begin_add(d);
  const char *base = strrchr(path, '/');
  f->mod = dwfl_report_elf(d, base ? base + 1 : path, path, -1, f->own ? 0 : f->key, false);
  dwfl_report_end(d, NULL, NULL);
  fs->nfiles++; /* remembered either way: a file libdwfl cannot read is not tried again */
  if (!f->mod) return -EINVAL;
  *out = (uint32_t)(fs->nfiles - 1);
  return 0;
}

int lgs_add_module(lgs_symbolizer_t *s, const char *path, uint64_t start, uint64_t end, uint64_t bias) {
  if (!path || !path[0] || path[0] != '/') return -ENOENT; /* vdso and friends */
  if (end <= start) return -EINVAL;
  /* a module reported already: nothing to add */
  for (size_t i = 0; i < s->nmods; i++)
    if (s->mods[i].start == start && s->mods[i].end == end && s->mods[i].bias == bias &&
        !strcmp(s->fs->files[s->mods[i].file].path, path))
      return 0;
  uint32_t file = 0;
  int e = file_of(s->fs, path, &file);
  if (e) return e;
  /* A module loaded where another was (a dlclose, then a dlopen): the newer one. */
  size_t w = 0;
  for (size_t i = 0; i < s->nmods; i++)
    if (s->mods[i].end <= start || s->mods[i].start >= end) s->mods[w++] = s->mods[i];
  s->nmods = w;
  if (s->nmods == s->capmods) {
    size_t cap = s->capmods ? s->capmods * 2 : 32;
    lgs_pmod_t *nm = realloc(s->mods, cap * sizeof *nm);
    if (!nm) return -ENOMEM;
    s->mods = nm;
    s->capmods = cap;
  }
  size_t at = s->nmods;
  while (at > 0 && s->mods[at - 1].start > start) at--;
  memmove(s->mods + at + 1, s->mods + at, (s->nmods - at) * sizeof *s->mods);
  s->mods[at] = (lgs_pmod_t){start, end, bias, file};
  s->nmods++;
  return 0;
}

static centry_t *cache_slot(lgs_files_t *s, uint64_t ip, int *found) {
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

/* Sorts x by address: an LSD radix sort, byte by byte, skipping the bytes every
 * address shares (the high ones). libc's qsort is a merge sort through a comparison
 * function: 0.9 ms for libc's 10^4 symbols (libc6-dbg's table), at the end of every
 * run that recorded a frame in libc; this is a tenth of it. */
static int cmp_sym(const void *a, const void *b) {
  const symidx_ent_t *x = a, *y = b;
  if (x->addr != y->addr) return (x->addr > y->addr) - (x->addr < y->addr);
  return strcmp(x->name, y->name); /* aliases in one order whatever qsort does */
}

static void sort_by_addr(symidx_ent_t *e, size_t n) {
  if (n < 2) return;
  symidx_ent_t *tmp = malloc(n * sizeof *tmp);
  if (!tmp) { /* no room for the second buffer: qsort, in place when it must be */
    qsort(e, n, sizeof *e, cmp_sym);
    return;
  }
  uint64_t all_or = 0, all_and = ~0ull;
  for (size_t i = 0; i < n; i++) all_or |= e[i].addr, all_and &= e[i].addr;
  symidx_ent_t *src = e, *dst = tmp;
  for (int shift = 0; shift < 64; shift += 8) {
    if ((((all_or ^ all_and) >> shift) & 0xff) == 0) continue; /* the same byte in all */
    size_t count[257] = {0};
    for (size_t i = 0; i < n; i++) count[((src[i].addr >> shift) & 0xff) + 1]++;
    for (int b = 0; b < 256; b++) count[b + 1] += count[b];
    for (size_t i = 0; i < n; i++) dst[count[(src[i].addr >> shift) & 0xff]++] = src[i];
    symidx_ent_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != e) memcpy(e, src, n * sizeof *e);
  free(tmp);
}

/* The function symbols of m read straight from its symbol table, when libdwfl's nsym
 * indices are exactly that table's (no mini debuginfo merged in): 0, or -1 to take
 * them one by one through dwfl_module_getsym_info, whose section lookups and address
 * adjustments cost 0.27 us a symbol, 2.7 ms for libc6-dbg's libc. An address is the
 * symbol's value plus the bias of the file that holds the table, as libdwfl adds it. */
static int symidx_read_table(symidx_t *x, Dwfl_Module *m, int nsym) {
  GElf_Sym sym;
  GElf_Addr addr = 0;
  GElf_Word shndx = 0;
  Elf *elf = NULL, *elf_last = NULL;
  Dwarf_Addr bias = 0, bias_last = 1;
  if (nsym < 2 || !dwfl_module_getsym_info(m, 1, &sym, &addr, &shndx, &elf, &bias) ||
      !dwfl_module_getsym_info(m, nsym - 1, &sym, &addr, &shndx, &elf_last, &bias_last) || !elf || elf != elf_last ||
      bias != bias_last)
    return -1;
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf, &eh) || (eh.e_type != ET_DYN && eh.e_type != ET_EXEC)) return -1;
  Elf_Scn *scn = NULL, *tab = NULL, *dyn = NULL;
  GElf_Shdr sh, tabsh = {0}, dynsh = {0};
  while ((scn = elf_nextscn(elf, scn)))
    if (gelf_getshdr(scn, &sh)) {
      if (sh.sh_type == SHT_SYMTAB && !tab) tab = scn, tabsh = sh;
      if (sh.sh_type == SHT_DYNSYM && !dyn) dyn = scn, dynsh = sh;
    }
  if (!tab) tab = dyn, tabsh = dynsh; /* libdwfl's order: .symtab, else .dynsym */
  if (!tab || !tabsh.sh_entsize || tabsh.sh_size / tabsh.sh_entsize != (uint64_t)nsym) return -1;
  Elf_Data *d = elf_getdata(tab, NULL);
  if (!d) return -1;
  /* the last symbol as libdwfl sees it, read here: the same table */
  GElf_Sym s1;
  if (!gelf_getsym(d, nsym - 1, &s1) || s1.st_value != sym.st_value || s1.st_name != sym.st_name) return -1;
  for (int i = 1; i < nsym; i++) {
    if (!gelf_getsym(d, i, &s1)) continue;
    int type = GELF_ST_TYPE(s1.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || !s1.st_value) continue;
    if (s1.st_shndx == SHN_UNDEF || (s1.st_shndx >= SHN_LORESERVE && s1.st_shndx != SHN_XINDEX)) continue;
    const char *name = elf_strptr(elf, tabsh.sh_link, s1.st_name);
    if (!name || !*name) continue;
    x->e[x->n++] = (symidx_ent_t){s1.st_value + bias, s1.st_size, name};
  }
  return 0;
}

static symidx_t *symidx_of(lgs_files_t *s, Dwfl_Module *m) {
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
  if (!s->symtab_slow && symidx_read_table(x, m, nsym) == 0) {
    s->symtab_direct++;
  } else {
    x->n = 0;
    for (int i = 0; i < nsym; i++) {
      GElf_Sym sym;
      GElf_Addr addr = 0;
      const char *name = dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL);
      int type = GELF_ST_TYPE(sym.st_info);
      if (!name || !*name || !addr || (type != STT_FUNC && type != STT_GNU_IFUNC)) continue;
      x->e[x->n++] = (symidx_ent_t){addr, sym.st_size, name};
    }
  }
  sort_by_addr(x->e, x->n);
  return x;
}

size_t lgs_files_symtab_test(lgs_files_t *fs, int slow) {
  fs->symtab_slow = slow;
  return fs->symtab_direct;
}

/* The function symbol containing pc, or NULL. */
static const char *symidx_lookup(lgs_files_t *s, Dwfl_Module *m, uint64_t pc) {
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

static const char *nice_name(lgs_files_t *s, const char *raw) {
  if (!raw) return "??";
  char *d = lgs_demangle(raw);
  const char *r = intern(s, d ? d : raw);
  free(d);
  return r;
}

/* A shared library of the system's (libc, libstdc++, libpython, libz...): its frames
 * are named from the symbol table alone, without lines or inlined frames. Their lines
 * are never the user's (a site is named by the program's own frame, findings/frames.c),
 * and Debian's separate debug files are compressed: the first line looked up in libc
 * inflated all of libc6-dbg's DWARF, ~30 ms of the collector's CPU in every run that
 * recorded a libc frame, most of a short run's end (BENCHMARKS.md, wrappers). A
 * program's own executable, wherever installed, and libraries elsewhere keep theirs. */
static int system_library(const char *path) {
  static const char *const dirs[] = {"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"};
  if (!path || !strstr(path, ".so")) return 0;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
    if (!strncmp(path, dirs[i], strlen(dirs[i]))) return 1;
  return 0;
}

static int resolve(lgs_files_t *s, Dwfl *dwfl, uint64_t ip, lgs_frame_t *f, int max) {
  Dwarf_Addr pc = ip - 1;
  Dwfl_Module *m = dwfl_addrmodule(dwfl, pc);
  f[0] = (lgs_frame_t){ip, "", "??", "", 0, 0};
  if (!m) return 1;
  const char *mpath = NULL;
  const char *mname = dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, &mpath, NULL);
  f[0].module = intern(s, mname);
  const char *symname = symidx_lookup(s, m, pc);
  f[0].function = nice_name(s, symname);
  if (system_library(mpath)) return 1;
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

/* The process's module containing pc, or NULL. */
static const lgs_pmod_t *pmod_of(const lgs_symbolizer_t *s, uint64_t pc) {
  size_t lo = 0, hi = s->nmods;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->mods[mid].start <= pc) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return NULL;
  const lgs_pmod_t *m = &s->mods[lo - 1];
  return pc < m->end ? m : NULL;
}

int lgs_lookup(lgs_symbolizer_t *s, uint64_t ip, lgs_frame_t *out, int max) {
  const lgs_pmod_t *pm = pmod_of(s, ip - 1);
  if (!pm) { /* in no module the process reported */
    out[0] = (lgs_frame_t){ip, "", "??", "", 0, 0};
    return 1;
  }
  lgs_files_t *fs = s->fs;
  const lgs_file_t *file = &fs->files[pm->file];
  /* the same instruction in every process: its address in the file (vaddr), plus the
   * file's synthetic bias; the shared session has the file there */
  uint64_t vaddr = ip - pm->bias, sip = vaddr + file->key;
  int found = 0, n;
  centry_t *c = cache_slot(fs, sip, &found);
  lgs_frame_t tmp[CACHE_MAX_FRAMES];
  const lgs_frame_t *f = tmp;
  if (c && found && c->n > 0) {
    n = c->n;
    f = c->f;
  } else {
    n = file->own ? resolve(fs, file->own, vaddr, tmp, CACHE_MAX_FRAMES)
                  : resolve(fs, fs->dwfl, sip, tmp, CACHE_MAX_FRAMES);
    if (c) {
      if (!found) fs->cache_n++;
      c->ip = sip;
      c->n = n;
      memcpy(c->f, tmp, (size_t)n * sizeof *tmp);
    }
  }
  if (n > max) n = max;
  for (int i = 0; i < n; i++) {
    out[i] = f[i];
    out[i].ip = ip;
  }
  return n;
}
