/* SPDX-License-Identifier: MIT */
/*
 * alloc_inject.h - allocation-failure injection, SQLite-style (issue #11), for the
 * tests that link it (test_alloc_fail.c, test_alloc_fail_collector.c).
 *
 * Every allocation of leakguard's own code (malloc, calloc, realloc, strdup: the test
 * links with -Wl,--wrap for each), of SQLite (SQLITE_CONFIG_MALLOC) and of cJSON
 * (cJSON_InitHooks) goes through a counter. Armed with N, the Nth allocation fails,
 * once ("transient") or it and every later one ("persistent"). Only the thread that
 * called ai_init counts and fails: a worker thread of the code under test (the
 * collector's symbolizer) allocates normally, so a pass makes the same allocations in
 * the same order every time.
 */
#ifndef LG_TESTS_UNIT_ALLOC_INJECT_H
#define LG_TESTS_UNIT_ALLOC_INJECT_H

#include <stddef.h>

/* Installs the SQLite and cJSON hooks; this thread is the one that counts. 0, or -1
 * when SQLite refuses its configuration. LG_ALLOC_FAIL_TRACE=N prints the stack of the
 * Nth failed allocation. */
int ai_init(void);
/* Arms the injection: allocation n fails (and every later one if persistent). */
void ai_arm(long n, int persistent);
/* Stops failing; ai_hit() keeps saying whether allocation n was reached. */
void ai_disarm(void);
int ai_hit(void);

/* Checks: a failed one is printed ("FAIL ...") and counted. */
void ai_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ai_failures(void);

/* The allocator under the wraps, for the test's own allocations that must not fail. */
void *__real_malloc(size_t n);

#endif
