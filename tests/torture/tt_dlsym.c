/* SPDX-License-Identifier: MIT */
/*
 * tt_dlsym.c - allocator functions obtained through dlsym and dlvsym, which bypass
 * the symbol binding that makes leakguard's hooks the program's malloc and free:
 *
 *   handle  dlsym(dlopen("libc.so.6", RTLD_NOW), "free") (and realloc, __libc_free,
 *           malloc_usable_size; then the same with dlvsym) used on the program's
 *           blocks; then a leak
 *   next    a shim library linked to the program (tt_shim) and one dlopen'ed
 *           (tt_shim_dl) that look them up with dlsym(RTLD_NEXT, ...) and dlvsym;
 *           then a leak
 *
 * Bare, each lookup gives glibc's function, as the program's malloc is. Recorded,
 * the answer must be leakguard's own function: glibc's would read leakguard's header
 * as the chunk size and abort.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt.h"

typedef void (*free_fn)(void *);
typedef void *(*realloc_fn)(void *, size_t);
typedef size_t (*usable_fn)(void *);

int tt_shim_run(int versioned);

static void *lookup(void *h, int versioned, const char *name)
{
  return versioned ? dlvsym(h, name, "GLIBC_2.2.5") : dlsym(h, name);
}

static int mode_handle(void)
{
  void *h = dlopen("libc.so.6", RTLD_NOW);
  if (!h)
    tt_die("dlopen libc.so.6");
  int ok = 0;
  for (int v = 0; v < 2; v++) {
    free_fn f = (free_fn)lookup(h, v, "free");
    free_fn lf = (free_fn)lookup(h, v, "__libc_free");
    realloc_fn r = (realloc_fn)lookup(h, v, "realloc");
    usable_fn u = (usable_fn)lookup(h, v, "malloc_usable_size");
    if (!f || !lf || !r || !u)
      continue;
    for (int i = 0; i < 100; i++) {
      char *p = malloc(100 + (size_t)i);
      size_t n = u(p);
      memset(p, 2, n);
      p = r(p, 5000 + (size_t)i);
      memset(p, 3, 5000 + (size_t)i);
      f(p);
      char *q = calloc(1, 64);
      lf(q);
    }
    ok++;
  }
  dlclose(h);
  printf("dlsym handle: %d of 2 lookups (dlsym, dlvsym) found and used\n", ok);
  tt_leak(2000, 32768);
  return ok != 2;
}

static int mode_next(const char *dir)
{
  int linked = tt_shim_run(0) + tt_shim_run(1);
  char path[4096];
  snprintf(path, sizeof path, "%s/libtt_shim_dl.so", dir);
  void *h = dlopen(path, RTLD_NOW);
  if (!h)
    tt_die("dlopen libtt_shim_dl.so");
  int (*run)(int) = (int (*)(int))dlsym(h, "tt_shim_dl_run");
  int loaded = run ? run(0) + run(1) : -1;
  printf("dlsym next: linked shim %d of 8, dlopen'ed shim %d of 8\n", linked, loaded);
  tt_leak(2000, 32768);
  return linked != 8 || loaded != 8;
}

int main(int argc, char **argv)
{
  if (argc >= 2 && !strcmp(argv[1], "handle"))
    return mode_handle();
  if (argc >= 3 && !strcmp(argv[1], "next"))
    return mode_next(argv[2]);
  fprintf(stderr, "usage: tt_dlsym handle | next DIR\n");
  return 2;
}
