/* SPDX-License-Identifier: MIT */
/*
 * procfs.c - what the injector reads about a target before touching it: /proc/PID
 * (status fields, mappings), the dynamic symbols of its libc and ld.so, and whether
 * it may be attached to at all (docs/attach.md).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attach/internal.h"

double lgj_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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

int lgj_status_field(pid_t pid, const char *key, long *out) {
  char p[64], line[256];
  snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
  FILE *f = fopen(p, "re");
  if (!f) return -errno;
  int rc = -ENOENT;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':') {
      *out = strtol(line + kl + 1, NULL, 10);
      rc = 0;
      break;
    }
  fclose(f);
  return rc;
}

/* The load address and path of the first mapping whose file name ends in suffix. */
typedef struct {
  const char *const *suffixes;
  uintptr_t *base;
  char *path;
  size_t n;
} mapctx_t;
static int on_map(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *name) {
  mapctx_t *c = ctx;
  size_t l = strlen(name);
  (void)hi;
  for (const char *const *s = c->suffixes; *s; s++) {
    size_t sl = strlen(*s);
    if (off == 0 && l >= sl && !strcmp(name + l - sl, *s) && (l == sl || name[l - sl - 1] == '/')) {
      *c->base = lo;
      snprintf(c->path, c->n, "%s", name);
      return 1; /* found: stop */
    }
  }
  return 0;
}
int lgj_find_map(pid_t pid, const char *const *suffixes, uintptr_t *base, char *path, size_t n) {
  *base = 0;
  mapctx_t c = {suffixes, base, path, n};
  int rc = lgj_maps_each(pid, on_map, &c);
  return rc ? rc : *base ? 0 : -ENOENT;
}

/* st_value of the defined dynamic symbols names[i] in the ELF file path (0: absent). */
typedef struct {
  const char *const *names;
  uint64_t *vals;
  int nn;
} symvals_t;
static void on_symval(void *ctx, const char *nm, uint64_t value, uint64_t size) {
  symvals_t *c = ctx;
  (void)size;
  for (int k = 0; k < c->nn; k++)
    if (!c->vals[k] && !strcmp(nm, c->names[k])) c->vals[k] = value;
}
int lgj_elf_syms(const char *path, const char *const *names, uint64_t *vals, int nn) {
  for (int k = 0; k < nn; k++) vals[k] = 0;
  symvals_t c = {names, vals, nn};
  return lgj_elf_dynsyms(path, on_symval, &c);
}

int lgj_check(pid_t pid, char *why, size_t n) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d", (int)pid);
  if (pid <= 0 || access(p, F_OK) != 0) {
    snprintf(why, n, "no process %d", (int)pid);
    return -ESRCH;
  }
  if (pid == getpid()) {
    snprintf(why, n, "cannot attach to leakguard itself");
    return -EINVAL;
  }
  long tracer = 0;
  if (lgj_status_field(pid, "TracerPid", &tracer) == 0 && tracer != 0) {
    snprintf(why, n, "process %d is already traced by process %ld (a debugger or another leakguard attach)", (int)pid,
             tracer);
    return -EBUSY;
  }
  static const char *const libc[] = {"libc.so.6", NULL};
  uintptr_t base;
  char path[4096];
  int r = lgj_find_map(pid, libc, &base, path, sizeof path);
  /* another user's process: its maps are as closed to us as ptrace is */
  if (r == -EACCES || r == -EPERM) return lgj_refused(pid, EPERM, why, n);
  if (r != 0) {
    snprintf(why, n,
             "process %d has no libc.so.6 mapped (statically linked, or not glibc): attach needs a dynamically "
             "linked glibc program",
             (int)pid);
    return -ENOEXEC;
  }
  /* the agent itself may be there: it stays loaded after a detach, and attaches again */
  static const char *const preload[] = {"libleakguard.so", NULL};
  if (lgj_find_map(pid, preload, &base, path, sizeof path) == 0) {
    snprintf(why, n, "process %d is already recorded by leakguard run (%s is loaded)", (int)pid, path);
    return -EALREADY;
  }
  return 0;
}

int lgj_refused(pid_t pid, int e, char *why, size_t n) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
  int scope = 0;
  if (f) {
    if (fscanf(f, "%d", &scope) != 1) scope = 0;
    fclose(f);
  }
  if (e == EPERM && scope >= 1)
    snprintf(why, n,
             "ptrace of process %d refused: kernel.yama.ptrace_scope is %d (%s); run as root or set it to 0 "
             "(sysctl kernel.yama.ptrace_scope=0)",
             (int)pid, scope,
             scope == 1   ? "only a parent may trace"
             : scope == 2 ? "only CAP_SYS_PTRACE may trace"
                          : "ptrace disabled");
  else if (e == EPERM)
    snprintf(why, n,
             "ptrace of process %d refused: it belongs to another user or is not dumpable (needs CAP_SYS_PTRACE)",
             (int)pid);
  else snprintf(why, n, "ptrace of process %d failed: %s", (int)pid, strerror(e));
  return -e;
}
