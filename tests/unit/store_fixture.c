/* SPDX-License-Identifier: MIT */
/*
 * store_fixture.c - the fixtures of test_store.c and test_report.c (store_fixture.h),
 * built into both programs.
 */
#include <dirent.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/model.h"
#include "core/region.h"
#include "store_fixture.h"

int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(f->dir, sizeof f->dir, "%s/lgstore-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(f->dir)) {
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

int teardown(void **state) {
  fixture_t *f = *state;
  DIR *d = opendir(f->dir);
  if (d) {
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(path, sizeof path, "%s/%s", f->dir, e->d_name);
        unlink(path);
      }
    closedir(d);
  }
  rmdir(f->dir);
  free(f);
  return 0;
}

void path_in(const fixture_t *f, char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", f->dir, name); }

/* A process as the collector models it; only hdr->steps/dropped/sample_bytes of
 * the region header are read by the store. */
lgm_proc_t *fake_proc(uint32_t nsites) {
  lgm_proc_t *p = calloc(1, sizeof *p);
  assert_non_null(p);
  p->hdr = calloc(1, sizeof *p->hdr);
  assert_non_null(p->hdr);
  p->sites = calloc(nsites, sizeof *p->sites);
  p->stored = calloc(nsites, sizeof *p->stored);
  assert_non_null(p->sites);
  assert_non_null(p->stored);
  p->nsites = nsites;
  p->proc = 1;
  p->pid = 4242;
  p->ppid = 17;
  p->kind = LGM_START;
  p->conn = -1;
  snprintf(p->command, sizeof p->command, "./app --serve");
  snprintf(p->exe, sizeof p->exe, "/usr/bin/app");
  p->start_ns = 5000000000ULL;
  return p;
}

void free_proc(lgm_proc_t *p) {
  free(p->hdr);
  free(p->sites);
  free(p->stored);
  free(p);
}

/* One integer from a query (asserting that it returns a row). */
int64_t q_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    print_error("prepare %s: %s\n", sql, sqlite3_errmsg(db));
    fail();
  }
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    print_error("no row: %s\n", sql);
    fail();
  }
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

void set_site(lgm_site_t *s, int64_t live, int64_t blocks, uint64_t abytes, uint64_t ablocks, uint32_t oldest) {
  s->live_bytes = live;
  s->live_blocks = blocks;
  s->alloc_bytes = abytes;
  s->alloc_blocks = ablocks;
  s->oldest_epoch = oldest;
}
