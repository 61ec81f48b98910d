/* SPDX-License-Identifier: MIT */
/* alloc_inject.c - allocation-failure injection, SQLite-style (see alloc_inject.h). */
#include "alloc_inject.h"

#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

static long inject_at;        /* 0: off; else the allocation number that fails */
static int persistent;        /* 1: every allocation from inject_at on fails */
static long calls;            /* allocations counted since the pass began */
static int hit;               /* the pass reached inject_at */
static long trace_at;         /* LG_ALLOC_FAIL_TRACE=N: print the stack of failed allocation N */
static __thread int counting; /* the thread that called ai_init */
static int failures;

static int fail_now(void) {
  if (!inject_at || !counting) return 0;
  calls++;
  if (calls == inject_at || (persistent && calls > inject_at)) {
    if (calls == trace_at && !hit) {
      void *bt[32];
      int n = backtrace(bt, 32); /* libc's: not counted, no allocation after the first */
      fprintf(stderr, "allocation %ld fails here:\n", calls);
      backtrace_symbols_fd(bt, n, 2);
    }
    hit = 1;
    return 1;
  }
  return 0;
}

void ai_arm(long n, int pers) {
  inject_at = n;
  persistent = pers;
  calls = 0;
  hit = 0;
}
void ai_disarm(void) { inject_at = 0; }
int ai_hit(void) { return hit; }

void *__real_calloc(size_t n, size_t k);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t k);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);

void *__wrap_malloc(size_t n) {
  if (fail_now()) return errno = ENOMEM, NULL;
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t k) {
  if (fail_now()) return errno = ENOMEM, NULL;
  return __real_calloc(n, k);
}
void *__wrap_realloc(void *p, size_t n) {
  if (n && fail_now()) return errno = ENOMEM, NULL;
  return __real_realloc(p, n);
}
char *__wrap_strdup(const char *s) {
  if (fail_now()) return errno = ENOMEM, NULL;
  return __real_strdup(s);
}

static sqlite3_mem_methods sq_real;
static void *sq_malloc(int n) { return fail_now() ? NULL : sq_real.xMalloc(n); }
static void *sq_realloc(void *p, int n) { return fail_now() ? NULL : sq_real.xRealloc(p, n); }
static void *cj_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }

int ai_init(void) {
  const char *tr = getenv("LG_ALLOC_FAIL_TRACE");
  trace_at = tr ? atol(tr) : 0;
  counting = 1;
  void *bt[2];
  backtrace(bt, 2); /* loads libgcc's unwinder before anything is counted */
  if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &sq_real) != SQLITE_OK) return -1;
  sqlite3_mem_methods m = sq_real;
  m.xMalloc = sq_malloc;
  m.xRealloc = sq_realloc;
  if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK) return -1;
  cJSON_Hooks hooks = {cj_malloc, free};
  cJSON_InitHooks(&hooks);
  return 0;
}

void ai_check(int ok, const char *fmt, ...) {
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  failures++;
}
int ai_failures(void) { return failures; }
