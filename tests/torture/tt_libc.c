/* SPDX-License-Identifier: MIT */
/*
 * tt_libc.c - direct calls of glibc's exported allocator names (issue #17): blocks
 * from malloc freed by __libc_free and the other way round, __libc_realloc of a
 * malloc'd block, __libc_memalign/valloc/pvalloc freed by free. Under leakguard these
 * names used to reach glibc with leakguard's header in front: abort. Then a leak
 * through __libc_malloc, which must be recorded like malloc.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static void *kept[4096];

static void leak_direct(long ms)
{
  size_t n = 0;
  for (long t = 0; t < ms && n < sizeof kept / sizeof kept[0]; t += 20) {
    char *p = __libc_malloc(32768); /* TT-LEAK-LIBC */
    memset(p, 7, 32768);
    kept[n++] = p;
    tt_sleep_ms(20);
  }
}

int main(void)
{
  unsigned long bad = 0;
  for (int i = 0; i < 5000; i++) {
    size_t n = 1 + (size_t)(i * 37) % 5000;
    char *a = malloc(n);
    memset(a, 1, n);
    __libc_free(a);
    char *b = __libc_malloc(n);
    memset(b, 2, n);
    free(b);
    char *c = __libc_calloc(n, 1);
    for (size_t k = 0; k < n; k++)
      bad += c[k] != 0;
    c = __libc_realloc(c, 2 * n);
    memset(c, 3, 2 * n);
    c = realloc(c, n / 2 + 1);
    __libc_free(c);
    char *d = __libc_memalign(64 << (i % 4), n);
    bad += ((uintptr_t)d & ((64u << (i % 4)) - 1)) != 0;
    memset(d, 4, n);
    free(d);
    if (i % 100 == 0) {
      char *e = __libc_valloc(n), *f = __libc_pvalloc(n);
      bad += ((uintptr_t)e & 4095) != 0 || ((uintptr_t)f & 4095) != 0;
      memset(e, 5, n);
      memset(f, 6, n);
      __libc_free(e);
      free(f);
    }
    char *g = malloc(n);
    bad += malloc_usable_size(g) < n;
    __libc_free(__libc_realloc(g, n + 100));
  }
  printf("libc: 5000 rounds, %lu bad\n", bad);
  leak_direct(2000);
  printf("libc: leaked through __libc_malloc\n");
  return bad != 0;
}
