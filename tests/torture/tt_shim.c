/* SPDX-License-Identifier: MIT */
/*
 * tt_shim.c - the shim pattern: a library that finds "the real" allocator functions
 * with dlsym(RTLD_NEXT, ...) (or dlvsym) and calls them on blocks the program
 * allocated. Bare, RTLD_NEXT from here is glibc's, as is the program's malloc. Under
 * leakguard, glibc's free, realloc or malloc_usable_size would meet a block with
 * leakguard's header ("free(): invalid size"). Built twice: tt_shim (linked by
 * tt_dlsym, in the initial search list) and tt_shim_dl (dlopen'ed), TT_SHIM_FN naming
 * each one's entry point.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef void (*free_fn)(void *);
typedef void *(*realloc_fn)(void *, size_t);
typedef size_t (*usable_fn)(void *);

int TT_SHIM_FN(int versioned);

static void *lookup(int versioned, const char *name)
{
  return versioned ? dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5") : dlsym(RTLD_NEXT, name);
}

/* Frees, reallocs and sizes blocks of the program through the functions found;
 * returns how many of the 4 lookups and uses went as bare. */
__attribute__((visibility("default"))) int TT_SHIM_FN(int versioned)
{
  free_fn f = (free_fn)lookup(versioned, "free");
  free_fn lf = (free_fn)lookup(versioned, "__libc_free");
  realloc_fn r = (realloc_fn)lookup(versioned, "realloc");
  usable_fn u = (usable_fn)lookup(versioned, "malloc_usable_size");
  int ok = 0;
  for (int i = 0; i < 100; i++) {
    char *p = malloc(100 + (size_t)i);
    memset(p, 1, 100 + (size_t)i);
    if (u) {
      size_t n = u(p);
      ok += i == 0 && n >= 100;
      memset(p, 2, n); /* every usable byte is ours */
    }
    if (r) {
      p = r(p, 5000 + (size_t)i);
      memset(p, 3, 5000 + (size_t)i);
      ok += i == 0 && p != NULL;
    }
    if (f)
      f(p);
    ok += i == 0 && f != NULL;
    char *q = malloc(64);
    memset(q, 4, 64);
    if (lf)
      lf(q);
    ok += i == 0 && lf != NULL;
  }
  return ok;
}
