/* SPDX-License-Identifier: MIT */
/*
 * inject_wait.c - may the injector load the agent in a thread that waits in futex?
 * (docs/attach.md, "An idle target"). A futex wait is how glibc's malloc waits for an
 * arena lock and how a thread waits for the loader's lock, so the call alone says
 * nothing; the thread's call stack does. The stopped thread is unwound remotely with
 * libunwind-ptrace (the .eh_frame of every module: Debian's libc and libpython have no
 * frame pointers), and the wait is taken only when
 *  - no frame lies in ld.so (the loader's lock, or a constructor dlopen runs);
 *  - none lies in one of libc's allocator or loader entry points (malloc ...
 *    malloc_trim, dlopen ... dl_iterate_phdr, fork: their callers may hold a lock that
 *    dlopen needs);
 *  - none lies in __lll_lock_wait_private, the slow path of every lock of libc's own
 *    (malloc's arena and list locks, stdio's): malloc does not always keep a frame of
 *    its own on the stack (free tail-calls _int_free, a static function), but its lock
 *    wait always goes through that one;
 *  - the walk ends at the outermost frame (clone3, _start): a stack the unwinder cannot
 *    read to its end may hold anything.
 * A program's own waits (pthread_cond_wait, sem_clockwait, pthread_join,
 * pthread_mutex_lock on its mutexes, a raw futex in libgomp) pass; so does a timed one
 * that our first stop interrupted, which goes on in restart_syscall.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libunwind-ptrace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/inject.h"

/* The deepest stack walked: deeper is "cannot tell". */
#define WAIT_MAX_FRAMES 1024

/* libc functions no frame may be in: the allocator's and the loader's entry points, and
 * the slow path of libc's internal locks. */
// clang-format off
static const char *const unsafe_names[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc", "memalign",
    "valloc", "pvalloc", "malloc_trim", "malloc_stats", "malloc_info", "mallinfo", "mallinfo2",
    "malloc_usable_size", "mallopt", "dlopen", "dlmopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1",
    "dlinfo", "dl_iterate_phdr", "fork", "_Fork", "__libc_freeres", "__lll_lock_wait_private"};
// clang-format on

int lgj_elf_dynsyms(const char *path, lgj_sym_fn fn, void *ctx) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    close(fd);
    return -EINVAL;
  }
  const char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return -errno;
  size_t sz = (size_t)st.st_size;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
  int rc = -EINVAL;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > sz)
    goto out;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr *ss = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > sz || ss->sh_offset + ss->sh_size > sz) goto out;
    const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset);
    size_t ns = sh[i].sh_size / sizeof *sym;
    for (size_t j = 0; j < ns; j++) {
      if (sym[j].st_shndx == SHN_UNDEF || !sym[j].st_value || sym[j].st_name >= ss->sh_size) continue;
      /* the name must end inside the string table */
      const char *nm = m + ss->sh_offset + sym[j].st_name;
      if (!memchr(nm, 0, ss->sh_size - sym[j].st_name)) continue;
      fn(ctx, nm, sym[j].st_value, sym[j].st_size);
    }
    rc = 0;
    break;
  }
out:
  munmap((void *)m, sz);
  return rc;
}

static int unsafe_name(const char *nm) {
  for (size_t i = 0; i < sizeof unsafe_names / sizeof *unsafe_names; i++)
    if (!strcmp(nm, unsafe_names[i])) return 1;
  return 0;
}

static int add_range(lgj_range_t **r, int *n, uintptr_t lo, uintptr_t hi) {
  lgj_range_t *nr = realloc(*r, (size_t)(*n + 1) * sizeof *nr);
  if (!nr) return -ENOMEM;
  nr[*n] = (lgj_range_t){lo, hi};
  *r = nr;
  ++*n;
  return 0;
}

typedef struct {
  lgj_waitcheck_t *w;
  uintptr_t base;
  int err;
} symctx_t;

static void on_sym(void *ctx, const char *nm, uint64_t value, uint64_t size) {
  symctx_t *c = ctx;
  if (!size) return;
  uintptr_t lo = c->base + value, hi = lo + size;
  /* every version of a name (several have two) */
  if (unsafe_name(nm) && add_range(&c->w->unsafe, &c->w->nunsafe, lo, hi)) c->err = -ENOMEM;
}

int lgj_maps_each(pid_t pid, lgj_map_fn fn, void *ctx) {
  char p[64], line[4096];
  snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(p, "re");
  if (!f) return -errno;
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    int pos = 0;
    if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &lo, &hi, &off, &pos) < 3 || !pos) continue;
    char *path = line + pos;
    path[strcspn(path, "\n")] = 0;
    rc = fn(ctx, lo, hi, off, path);
  }
  fclose(f);
  return rc > 0 ? 0 : rc;
}

/* The mappings of the object whose path ends in "/" + name, into r. */
typedef struct {
  const char *name;
  lgj_range_t **r;
  int *n;
} objctx_t;
static int on_object_map(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *path) {
  objctx_t *c = ctx;
  size_t nl = strlen(c->name), l = strlen(path);
  (void)off;
  if (l > nl && path[l - nl - 1] == '/' && !strcmp(path + l - nl, c->name)) return add_range(c->r, c->n, lo, hi);
  return 0;
}
static int object_ranges(pid_t pid, const char *name, lgj_range_t **r, int *n) {
  objctx_t c = {name, r, n};
  return lgj_maps_each(pid, on_object_map, &c);
}

int lgj_waitcheck_init(lgj_waitcheck_t *w, pid_t pid, const char *libc_file, uintptr_t libc_base) {
  memset(w, 0, sizeof *w);
  symctx_t c = {w, libc_base, 0};
  int rc = lgj_elf_dynsyms(libc_file, on_sym, &c);
  if (rc == 0) rc = c.err;
  if (rc == 0) rc = object_ranges(pid, "ld-linux-x86-64.so.2", &w->ld, &w->nld);
  if (rc == 0 && (!w->nld || !w->nunsafe)) rc = -ENOENT;
  if (rc == 0) {
    w->as = unw_create_addr_space(&_UPT_accessors, 0);
    if (!w->as) rc = -ENOMEM;
  }
  if (rc != 0) lgj_waitcheck_free(w);
  return rc;
}

void lgj_waitcheck_free(lgj_waitcheck_t *w) {
  if (w->as) unw_destroy_addr_space((unw_addr_space_t)w->as);
  free(w->ld);
  free(w->unsafe);
  memset(w, 0, sizeof *w);
}

static int in_ranges(const lgj_range_t *r, int n, uintptr_t a) {
  for (int i = 0; i < n; i++)
    if (a >= r[i].lo && a < r[i].hi) return 1;
  return 0;
}

/* Walks tid's stack from frame `from` on: 0 at the first frame in ld.so or in one of
 * the unsafe libc functions (why says which), 1 at the outermost frame, -EIO when the
 * stack cannot be read to its end. */
static int walk_stack(const lgj_waitcheck_t *w, pid_t tid, int from, char *why, size_t n) {
  void *ui = _UPT_create(tid);
  if (!ui) return -ENOMEM;
  unw_cursor_t c;
  int rc = unw_init_remote(&c, (unw_addr_space_t)w->as, ui) < 0 ? -EIO : 0;
  int frames = 0;
  for (; rc == 0; frames++) {
    unw_word_t ip;
    if (frames >= WAIT_MAX_FRAMES || unw_get_reg(&c, UNW_REG_IP, &ip) < 0) {
      rc = -EIO;
      break;
    }
    /* a return address points after its call: the caller's function holds ip - 1 */
    uintptr_t a = frames ? (uintptr_t)ip - 1 : (uintptr_t)ip;
    if (frames >= from && in_ranges(w->ld, w->nld, a)) {
      snprintf(why, n, "thread %d: frame %d in ld.so", (int)tid, frames);
      break;
    }
    if (frames >= from && in_ranges(w->unsafe, w->nunsafe, a)) {
      snprintf(why, n, "thread %d: frame %d in libc's allocator, loader or own locks", (int)tid, frames);
      break;
    }
    int st = unw_step(&c);
    if (st == 0) rc = 1; /* the outermost frame: every frame seen */
    else if (st < 0) rc = -EIO;
  }
  if (rc == -EIO) snprintf(why, n, "thread %d: its stack could not be read to the end (%d frames)", (int)tid, frames);
  _UPT_destroy(ui);
  return rc;
}

int lgj_waiter_safe(const lgj_waitcheck_t *w, pid_t tid, char *why, size_t n) { return walk_stack(w, tid, 0, why, n); }

int lgj_hit_safe(const lgj_waitcheck_t *w, pid_t tid, char *why, size_t n) {
  int rc = walk_stack(w, tid, 1, why, n);
  return rc == -EIO ? 1 : rc;
}

/* The mappings of a process, for lgj_stack_describe: module and file offset of a pc. */
typedef struct {
  uintptr_t lo, hi;
  uint64_t off;
  char name[48];
} modmap_t;
typedef struct {
  modmap_t *m;
  int n;
} modctx_t;
static int on_mod_map(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *path) {
  modctx_t *c = ctx;
  if (path[0] != '/') return 0;
  modmap_t *nm = realloc(c->m, (size_t)(c->n + 1) * sizeof *nm);
  if (!nm) return -ENOMEM;
  c->m = nm;
  const char *b = strrchr(path, '/');
  nm[c->n] = (modmap_t){lo, hi, off, ""};
  snprintf(nm[c->n].name, sizeof nm[c->n].name, "%s", b + 1);
  c->n++;
  return 0;
}

int lgj_stack_describe(const lgj_waitcheck_t *w, pid_t tid, int max, char *out, size_t n) {
  if (!n) return -EINVAL;
  out[0] = 0;
  modctx_t mods = {0};
  (void)lgj_maps_each(tid, on_mod_map, &mods);
  void *ui = _UPT_create(tid);
  if (!ui) {
    free(mods.m);
    return -ENOMEM;
  }
  unw_cursor_t c;
  int rc = unw_init_remote(&c, (unw_addr_space_t)w->as, ui) < 0 ? -EIO : 0;
  size_t len = 0;
  for (int f = 0; rc == 0 && f < max; f++) {
    unw_word_t ip, off = 0;
    char nm[128] = "?", mod[80] = "";
    if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0) break;
    uintptr_t a = f ? (uintptr_t)ip - 1 : (uintptr_t)ip;
    for (int i = 0; i < mods.n; i++)
      if (a >= mods.m[i].lo && a < mods.m[i].hi) {
        snprintf(mod, sizeof mod, " (%s+0x%lx)", mods.m[i].name, (unsigned long)(ip - mods.m[i].lo + mods.m[i].off));
        break;
      }
    /* the nearest symbol the file names: in a stripped library a static function shows
     * as the export before it, so the module offset is what to look up */
    if (unw_get_proc_name(&c, nm, sizeof nm, &off) != 0 || !nm[0]) snprintf(nm, sizeof nm, "?");
    else if (off) snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "+0x%lx", (unsigned long)off);
    int k = snprintf(out + len, n - len, "%s%s%s", f ? " < " : "", nm, mod);
    if (k < 0 || (size_t)k >= n - len) break;
    len += (size_t)k;
    if (unw_step(&c) <= 0) break;
  }
  _UPT_destroy(ui);
  free(mods.m);
  return rc;
}
