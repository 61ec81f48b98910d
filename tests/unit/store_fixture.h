/* SPDX-License-Identifier: MIT */
/*
 * store_fixture.h - what the store's and the report's unit tests (test_store.c,
 * test_report.c) share: a temporary directory per test, a fake process as the
 * collector models it, and a query for one integer.
 */
#ifndef LG_TESTS_UNIT_STORE_FIXTURE_H
#define LG_TESTS_UNIT_STORE_FIXTURE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

#define KiB 1024LL
#define MiB (1024LL * KiB)
#define GiB (1024LL * MiB)

typedef struct fixture {
  char dir[64];
} fixture_t;

/* cmocka setup and teardown: a fresh directory (fixture_t) per test, removed after. */
int setup(void **state);
int teardown(void **state);
/* out = the path of name in the test's directory. */
void path_in(const fixture_t *f, char *out, size_t n, const char *name);
/* A process as the collector models it; only hdr->steps/dropped/sample_bytes of
 * the region header are read by the store. */
lgm_proc_t *fake_proc(uint32_t nsites);
void free_proc(lgm_proc_t *p);
/* One integer from a query (asserting that it returns a row). */
int64_t q_int(sqlite3 *db, const char *sql);
void set_site(lgm_site_t *s, int64_t live, int64_t blocks, uint64_t abytes, uint64_t ablocks, uint32_t oldest);

#endif
