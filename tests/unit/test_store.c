/* SPDX-License-Identifier: MIT */
/*
 * test_store.c - unit tests for the SQLite store. A fake process (lgm_proc_t over a
 * zeroed, heap-allocated region header and site arrays owned by the test,
 * store_fixture.c) is written with lgst_create/lgst_proc/lgst_stack/lgst_snapshot and
 * read back with plain sqlite3 queries (which sites each snapshot writes); lgr_open
 * is fed valid, foreign, damaged and missing files. The report built from the store
 * is tested in test_report.c.
 */
#include <dirent.h>
#include <errno.h>
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
#include "leakguard.h"
#include "output/store.h"
#include "store_fixture.h"

/* ------------------------------------------------------------------ fixtures */

static int q_is_null(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  int r = sqlite3_column_type(st, 0) == SQLITE_NULL;
  sqlite3_finalize(st);
  return r;
}

/* One text value (copied into buf). */
static const char *q_text(sqlite3 *db, const char *sql, char *buf, size_t n) {
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  const unsigned char *t = sqlite3_column_text(st, 0);
  snprintf(buf, n, "%s", t ? (const char *)t : "(null)");
  sqlite3_finalize(st);
  return buf;
}

/* The stack ids written for snapshot seq, as "1,2,3". */
static const char *stacks_at(sqlite3 *db, int seq, char *buf, size_t n) {
  char sql[160];
  snprintf(sql, sizeof sql,
           "SELECT coalesce(group_concat(stack, ','), '') FROM"
           " (SELECT stack FROM samples WHERE proc=1 AND seq=%d ORDER BY stack)",
           seq);
  return q_text(db, sql, buf, n);
}

/* ------------------------------------------------------------------ writing */

/* test_create_and_write's stacks: frames, locations stored once, modules. */
static void write_stacks(lgst_t *s, sqlite3 *db) {
  char buf[256];
  lgs_frame_t fr[3] = {
      {0x1000, "libc.so.6", "malloc", "", 0, 0},
      {0x2000, "app", "grow_cache", "/src/app/cache.c", 42, 1},
      {0x3000, "app", "main", "/src/app/main.c", 10, 0},
  };
  assert_int_equal(lgst_stack(s, 1, 2, LG_SPACE_HOST, fr, 3), 0);
  assert_int_equal(lgst_stack(s, 1, 3, LG_SPACE_MMAP, fr + 2, 1), 0);
  assert_string_equal(q_text(db, "SELECT space FROM stacks WHERE proc=1 AND stack=2", buf, sizeof buf), "host");
  assert_string_equal(q_text(db, "SELECT space FROM stacks WHERE proc=1 AND stack=3", buf, sizeof buf), "mmap");
  assert_int_equal(q_int(db, "SELECT depth FROM stacks WHERE proc=1 AND stack=2"), 3);
  assert_int_equal(q_int(db, "SELECT count(*) FROM frames WHERE proc=1 AND stack=2"), 3);
  assert_string_equal(q_text(db, "SELECT function FROM frames WHERE proc=1 AND stack=2 AND idx=1", buf, sizeof buf),
                      "grow_cache");
  assert_string_equal(q_text(db, "SELECT file FROM frames WHERE proc=1 AND stack=2 AND idx=1", buf, sizeof buf),
                      "/src/app/cache.c");
  assert_int_equal(q_int(db, "SELECT line FROM frames WHERE proc=1 AND stack=2 AND idx=1"), 42);
  assert_int_equal(q_int(db, "SELECT inlined FROM frames WHERE proc=1 AND stack=2 AND idx=1"), 1);
  assert_int_equal(q_int(db, "SELECT ip FROM frames WHERE proc=1 AND stack=2 AND idx=2"), 0x3000);
  assert_string_equal(q_text(db, "SELECT module FROM frames WHERE proc=1 AND stack=2 AND idx=0", buf, sizeof buf),
                      "libc.so.6");

  /* a location is stored once, whatever the number of stacks through it: stack 3's one
   * frame is stack 2's third; the same ip in another process is another location */
  assert_int_equal(q_int(db, "SELECT count(*) FROM locations"), 3);
  assert_string_equal(q_text(db, "SELECT locs FROM stacks WHERE proc=1 AND stack=3", buf, sizeof buf), "[3]");
  assert_string_equal(q_text(db, "SELECT locs FROM stacks WHERE proc=1 AND stack=2", buf, sizeof buf), "[1,2,3]");
  assert_int_equal(lgst_stack(s, 2, 2, LG_SPACE_HOST, fr + 2, 1), 0);
  assert_int_equal(q_int(db, "SELECT count(*) FROM locations"), 4);
  assert_int_equal(q_int(db, "SELECT count(*) FROM frames WHERE proc=2 AND function='main'"), 1);
  /* a frame with the same ip but another inlining level is another location */
  lgs_frame_t inl[2] = {{0x3000, "app", "helper", "/src/app/h.c", 7, 1},
                        {0x3000, "app", "main", "/src/app/main.c", 10, 0}};
  assert_int_equal(lgst_stack(s, 1, 4, LG_SPACE_HOST, inl, 2), 0);
  assert_string_equal(q_text(db, "SELECT locs FROM stacks WHERE proc=1 AND stack=4", buf, sizeof buf), "[5,3]");
  /* no frames at all */
  assert_int_equal(lgst_stack(s, 1, 5, LG_SPACE_HOST, fr, 0), 0);
  assert_string_equal(q_text(db, "SELECT locs FROM stacks WHERE proc=1 AND stack=5", buf, sizeof buf), "[]");

  lg_module_rec_t m;
  memset(&m, 0, sizeof m);
  m.start = 0x400000;
  m.end = 0x500000;
  m.bias = 0x1000;
  snprintf(m.path, sizeof m.path, "/usr/bin/app");
  assert_int_equal(lgst_module(s, 1, 0, &m), 0);
  assert_string_equal(q_text(db, "SELECT path FROM modules WHERE proc=1 AND module=0", buf, sizeof buf),
                      "/usr/bin/app");
  assert_int_equal(q_int(db, "SELECT start FROM modules WHERE proc=1 AND module=0"), 0x400000);
}

/* test_create_and_write's snapshots of p: what each writes, partial or full. */
static void write_snapshots(lgst_t *s, sqlite3 *db, lgm_proc_t *p) {
  char buf[256];
  /* ---- seq 0, not full: sites 1..3 have live memory, site 4 is still empty, and
   * site 0 (LG_STACK_NONE, unattributed) is never written. */
  set_site(&p->sites[0], 999, 9, 999, 9, 0);
  set_site(&p->sites[1], 10000, 1, 10000, 1, 0);
  set_site(&p->sites[2], 200000, 2, 400000, 4, 1);
  set_site(&p->sites[3], 30000, 3, 30000, 3, UINT32_MAX);
  p->live_bytes = 2400;
  p->live_blocks = 6;
  p->host_bytes = 2400;
  p->rss_bytes = 8 * MiB;
  assert_int_equal(lgst_begin(s), 0);
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 1000000000ULL, 1 * GiB, 2 * GiB, 0), 0);
  assert_int_equal(lgst_commit(s), 0);
  assert_true(p->seq == 1);
  assert_string_equal(stacks_at(db, 0, buf, sizeof buf), "1,2,3");
  assert_int_equal(q_int(db, "SELECT live_bytes FROM samples WHERE proc=1 AND stack=2 AND seq=0"), 200000);
  assert_int_equal(q_int(db, "SELECT alloc_blocks FROM samples WHERE proc=1 AND stack=2 AND seq=0"), 4);
  assert_int_equal(q_int(db, "SELECT oldest_epoch FROM samples WHERE proc=1 AND stack=2 AND seq=0"), 1);
  assert_true(q_is_null(db, "SELECT oldest_epoch FROM samples WHERE proc=1 AND stack=3 AND seq=0"));
  assert_int_equal(q_int(db, "SELECT count(*) FROM snapshots"), 1);
  assert_int_equal(q_int(db, "SELECT t_ns FROM snapshots WHERE proc=1 AND seq=0"), 6000000000LL);
  assert_int_equal(q_int(db, "SELECT step FROM snapshots WHERE proc=1 AND seq=0"), 3);
  assert_int_equal(q_int(db, "SELECT live_bytes FROM snapshots WHERE proc=1 AND seq=0"), 2400);
  assert_int_equal(q_int(db, "SELECT rss_bytes FROM snapshots WHERE proc=1 AND seq=0"), 8 * MiB);
  assert_int_equal(q_int(db, "SELECT usage_bytes FROM snapshots WHERE proc=1 AND seq=0"), 1 * GiB);
  assert_int_equal(q_int(db, "SELECT limit_bytes FROM snapshots WHERE proc=1 AND seq=0"), 2 * GiB);
  assert_int_equal(q_int(db, "SELECT dropped FROM snapshots WHERE proc=1 AND seq=0"), 2);
  /* what was written is remembered */
  assert_true(p->stored[2].live_bytes == 200000 && p->stored[3].live_blocks == 3);

  /* ---- seq 1, not full: site 2 grew; site 3 allocated and freed a block in
   * between (alloc_blocks changed, live did not); site 1 is unchanged. Only 2. */
  set_site(&p->sites[2], 250000, 3, 450000, 5, 1);
  set_site(&p->sites[3], 30000, 3, 40000, 4, UINT32_MAX);
  atomic_store(&p->hdr->steps, 4);
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 2000000000ULL, 1 * GiB, 2 * GiB, 0), 0);
  assert_string_equal(stacks_at(db, 1, buf, sizeof buf), "2");
  assert_int_equal(q_int(db, "SELECT live_bytes FROM samples WHERE proc=1 AND stack=2 AND seq=1"), 250000);
  assert_int_equal(q_int(db, "SELECT step FROM snapshots WHERE proc=1 AND seq=1"), 4);

  /* ---- seq 2, not full, nothing changed: a snapshot row, no sample rows. */
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 3000000000ULL, 1 * GiB, 2 * GiB, 0), 0);
  assert_string_equal(stacks_at(db, 2, buf, sizeof buf), "");
  assert_int_equal(q_int(db, "SELECT count(*) FROM snapshots WHERE proc=1"), 3);

  /* ---- seq 3, full: the allocation-only change of site 3 is written now. */
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 4000000000ULL, 1 * GiB, 2 * GiB, 1), 0);
  char at3[64];
  stacks_at(db, 3, at3, sizeof at3);
  assert_non_null(strstr(at3, "3"));
  assert_int_equal(q_int(db, "SELECT alloc_blocks FROM samples WHERE proc=1 AND stack=3 AND seq=3"), 4);
  assert_int_equal(q_int(db, "SELECT count(*) FROM samples WHERE stack=0"), 0);
  assert_true(p->seq == 4);
}

static void test_create_and_write(void **state) {
  fixture_t *f = *state;
  char path[256], buf[256];
  path_in(f, path, sizeof path, "write.lgdb");
  lgst_t *s = NULL;
  const char *err = "unset";
  assert_int_equal(lgst_create(path, &s, &err), 0);
  assert_non_null(s);
  assert_null(err);
  sqlite3 *db = lgst_db(s);
  assert_string_equal(q_text(db, "SELECT value FROM meta WHERE key='schema'", buf, sizeof buf), "2");
  assert_int_equal(lgst_meta(s, "limit_source", "cgroup"), 0);
  assert_int_equal(lgst_meta(s, "limit_source", "physical"), 0); /* replaces */
  assert_string_equal(q_text(db, "SELECT value FROM meta WHERE key='limit_source'", buf, sizeof buf), "physical");
  assert_int_equal(q_int(db, "SELECT count(*) FROM meta WHERE key='limit_source'"), 1);

  lgm_proc_t *p = fake_proc(5);
  atomic_store(&p->hdr->steps, 3);
  atomic_store(&p->hdr->dropped, 2);
  p->hdr->sample_bytes = 4096;
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(q_int(db, "SELECT count(*) FROM processes"), 1);
  assert_int_equal(q_int(db, "SELECT pid FROM processes WHERE proc=1"), 4242);
  assert_int_equal(q_int(db, "SELECT ppid FROM processes WHERE proc=1"), 17);
  assert_true(q_is_null(db, "SELECT parent_proc FROM processes WHERE proc=1"));
  assert_string_equal(q_text(db, "SELECT kind FROM processes WHERE proc=1", buf, sizeof buf), "start");
  assert_string_equal(q_text(db, "SELECT command FROM processes WHERE proc=1", buf, sizeof buf), "./app --serve");
  assert_string_equal(q_text(db, "SELECT end_reason FROM processes WHERE proc=1", buf, sizeof buf), "running");
  assert_true(q_is_null(db, "SELECT end_ns FROM processes WHERE proc=1"));
  assert_true(q_is_null(db, "SELECT exit_status FROM processes WHERE proc=1"));
  assert_int_equal(q_int(db, "SELECT steps FROM processes WHERE proc=1"), 3);
  assert_int_equal(q_int(db, "SELECT dropped FROM processes WHERE proc=1"), 2);
  assert_int_equal(q_int(db, "SELECT sample_bytes FROM processes WHERE proc=1"), 4096);

  write_stacks(s, db);

  write_snapshots(s, db, p);

  /* The process row is rewritten at the end. */
  p->ended = 1;
  p->end_ns = p->start_ns + 5000000000ULL;
  snprintf(p->end_reason, sizeof p->end_reason, "exit");
  p->exit_status = 3;
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(q_int(db, "SELECT count(*) FROM processes"), 1);
  assert_int_equal(q_int(db, "SELECT exit_status FROM processes WHERE proc=1"), 3);
  assert_true(q_is_null(db, "SELECT signal FROM processes WHERE proc=1"));
  assert_int_equal(q_int(db, "SELECT snapshots FROM processes WHERE proc=1"), 4);
  assert_int_equal(q_int(db, "SELECT end_ns FROM processes WHERE proc=1"), 10000000000LL);
  p->kind = LGM_FORK;
  p->parent_proc = 7;
  assert_int_equal(lgst_proc(s, p), 0);
  assert_string_equal(q_text(db, "SELECT kind FROM processes WHERE proc=1", buf, sizeof buf), "fork");
  assert_int_equal(q_int(db, "SELECT parent_proc FROM processes WHERE proc=1"), 7);

  int64_t nsamples = q_int(db, "SELECT count(*) FROM samples");
  assert_true(nsamples >= 5); /* 3 + 1 + 0 + at least site 3 at seq 3 */
  lgst_close(s);
  free_proc(p);

  /* and it reopens as a valid leakguard database, with everything committed */
  char why[512] = "";
  lgr_db_t *rd = NULL;
  assert_int_equal(lgr_open(path, &rd, why, sizeof why), 0);
  assert_int_equal(q_int(lgr_sqlite(rd), "SELECT count(*) FROM samples"), nsamples);
  assert_int_equal(q_int(lgr_sqlite(rd), "SELECT count(*) FROM snapshots"), 4);
  lgr_close(rd);
}

/* store.h: "one samples row per site changed since the last call (all sites when
 * full != 0)"; docs/schema.md: "the final snapshot of each process writes every
 * site" (end_proc takes it with full = 1). */
/* lgst_tables() (what merge copies) is every table a database can hold but meta: a table
 * added to the schema and not to that list would be dropped by merge unsaid. */
static void test_table_list_is_the_schema(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "tables.lgdb");
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  assert_int_equal(lgst_cuda_tables(s), 0);
  sqlite3 *db = lgst_db(s);
  int listed = 0;
  for (const char *const *t = lgst_tables(); *t; t++, listed++) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='%s'", *t);
    assert_int_equal(q_int(db, sql), 1);
    assert_int_equal(lgst_table_is_gpu(*t), !strncmp(*t, "cuda_", 5) || !strncmp(*t, "nvml", 4));
  }
  assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name<>'meta'"), listed);
  lgst_close(s);
}

static void test_full_snapshot_writes_every_site(void **state) {
  fixture_t *f = *state;
  char path[256], buf[64];
  path_in(f, path, sizeof path, "full.lgdb");
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  sqlite3 *db = lgst_db(s);
  lgm_proc_t *p = fake_proc(4);
  set_site(&p->sites[1], 10000, 1, 10000, 1, 0);
  set_site(&p->sites[2], 20000, 2, 20000, 2, 0);
  set_site(&p->sites[3], 30000, 3, 30000, 3, 0);
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 1, 0, 0, 0), 0);
  assert_string_equal(stacks_at(db, 0, buf, sizeof buf), "1,2,3");
  set_site(&p->sites[2], 25000, 2, 25000, 3, 0); /* only site 2 changes */
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 2, 0, 0, 0), 0);
  assert_string_equal(stacks_at(db, 1, buf, sizeof buf), "2"); /* non-full: changed only */
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 3, 0, 0, 1), 0);
  stacks_at(db, 2, buf, sizeof buf);
  lgst_close(s);
  free_proc(p);
  assert_string_equal(buf, "1,2,3");
}

/* model.h, known_only: the collector's snapshots store the samples of the stacks it
 * stores (known), and of the GPU spaces, only; every site otherwise. */
static void test_known_only(void **state) {
  fixture_t *f = *state;
  char path[256], buf[64];
  path_in(f, path, sizeof path, "known.lgdb");
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  sqlite3 *db = lgst_db(s);
  lgm_proc_t *p = fake_proc(5);
  for (uint32_t i = 1; i < 5; i++) set_site(&p->sites[i], 10000 * i, 1, 10000 * i, 1, 0);
  p->known_only = 1;
  p->sites[2].known = 1;
  p->sites[4].space = LG_SPACE_DEVICE;
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 1, 0, 0, LGST_ALL), 0);
  assert_string_equal(stacks_at(db, 0, buf, sizeof buf), "2,4");
  p->known_only = 0;
  for (uint32_t i = 1; i < 5; i++) set_site(&p->sites[i], 20000 * i, 2, 20000 * i, 2, 0);
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 2, 0, 0, LGST_ALL), 0);
  assert_string_equal(stacks_at(db, 1, buf, sizeof buf), "1,2,3,4");
  lgst_close(s);
  free_proc(p);
}

/* ------------------------------------------------------------------ opening */

static void write_file(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
}

/* A valid database with enough rows to span several pages. */
static void make_valid_db(const char *path) {
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc(64);
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(lgst_begin(s), 0);
  for (int k = 0; k < 40; k++) {
    for (uint32_t i = 1; i < 64; i++) set_site(&p->sites[i], (int64_t)(i * 10000 + k), 1 + k, 0, 0, 0);
    assert_int_equal(lgst_snapshot(s, p, p->start_ns + (uint64_t)k * 1000000000ULL, 0, 0, 0), 0);
  }
  assert_int_equal(lgst_commit(s), 0);
  lgst_close(s);
  free_proc(p);
}

static void expect_open_fails(const char *path, const char *must_contain) {
  lgr_db_t *s = (lgr_db_t *)0x1;
  char why[512];
  memset(why, 0, sizeof why);
  int rc = lgr_open(path, &s, why, sizeof why);
  if (rc >= 0) {
    print_error("lgr_open(%s) = %d, want an error\n", path, rc);
    fail();
  }
  assert_ptr_equal(s, (lgr_db_t *)0x1); /* out untouched */
  assert_true(why[0] != 0);
  assert_null(strchr(why, '\n')); /* one line */
  assert_non_null(strstr(why, path));
  if (must_contain && !strstr(why, must_contain)) {
    print_error("reason \"%s\" lacks \"%s\"\n", why, must_contain);
    fail();
  }
}

/* store.c: between full snapshots, sites that never held 4 KiB are not written (a
 * Python program has 10^5 of them); the full snapshot writes them. */
static void test_small_sites_only_in_full(void **state) {
  fixture_t *f = *state;
  char path[256], buf[256];
  path_in(f, path, sizeof path, "small.lgdb");
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc(4);
  sqlite3 *db = lgst_db(s);
  set_site(&p->sites[1], 100, 1, 100, 1, 0);   /* small */
  set_site(&p->sites[2], 8192, 1, 8192, 1, 0); /* big */
  set_site(&p->sites[3], 4095, 1, 4095, 1, 0); /* just below */
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 1, 0, 0, 0), 0);
  assert_string_equal(stacks_at(db, 0, buf, sizeof buf), "2");
  set_site(&p->sites[2], 100, 1, 8292, 2, 0); /* big site drops: written */
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 2, 0, 0, 0), 0);
  assert_string_equal(stacks_at(db, 1, buf, sizeof buf), "2");
  assert_int_equal(lgst_snapshot(s, p, p->start_ns + 3, 0, 0, 1), 0);
  assert_string_equal(stacks_at(db, 2, buf, sizeof buf), "1,2,3");
  lgst_close(s);
  free_proc(p);
}

static void test_open_valid(void **state) {
  fixture_t *f = *state;
  char path[256], why[512] = "";
  path_in(f, path, sizeof path, "valid.lgdb");
  make_valid_db(path);
  lgr_db_t *s = NULL;
  assert_int_equal(lgr_open(path, &s, why, sizeof why), 0);
  assert_non_null(s);
  assert_int_equal(q_int(lgr_sqlite(s), "SELECT count(*) FROM snapshots"), 40);
  assert_int_equal(q_int(lgr_sqlite(s), "SELECT count(*) FROM samples"), 40 * 63);
  lgr_close(s);
}

static void test_open_text_file(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "notes.txt");
  char text[2048];
  size_t n = 0;
  for (int i = 0; i < 40; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "line %d: this is a text file, not a database\n", i);
  write_file(path, text, n);
  expect_open_fails(path, "not a leakguard database");
  /* a short one too */
  path_in(f, path, sizeof path, "short.txt");
  write_file(path, "hello\n", 6);
  expect_open_fails(path, "not a leakguard database");
}

static void test_open_truncated(void **state) {
  fixture_t *f = *state;
  char full[256], cut[256];
  path_in(f, full, sizeof full, "whole.lgdb");
  path_in(f, cut, sizeof cut, "cut.lgdb");
  make_valid_db(full);
  FILE *fp = fopen(full, "rb");
  assert_non_null(fp);
  static char page[4096];
  assert_int_equal(fread(page, 1, sizeof page, fp), sizeof page);
  int more = fgetc(fp) != EOF; /* the original is longer than what we keep */
  fclose(fp);
  assert_true(more);
  write_file(cut, page, sizeof page);
  expect_open_fails(cut, "leakguard database");
}

static void test_open_missing(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "does-not-exist.lgdb");
  lgr_db_t *s = NULL;
  char why[512] = "";
  assert_int_equal(lgr_open(path, &s, why, sizeof why), -ENOENT);
  assert_null(s);
  assert_non_null(strstr(why, path));
  assert_non_null(strstr(why, strerror(ENOENT)));
  /* and nothing was created */
  assert_int_equal(access(path, F_OK), -1);
}

static void test_open_foreign_sqlite(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "other.sqlite");
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  expect_open_fails(path, "not a leakguard database");

  /* a meta table without our schema key */
  path_in(f, path, sizeof path, "meta-only.sqlite");
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);", NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  expect_open_fails(path, "not a leakguard database");

  /* an empty file is an empty SQLite database, and not ours */
  path_in(f, path, sizeof path, "empty.lgdb");
  write_file(path, "", 0);
  expect_open_fails(path, "not a leakguard database");
}

static void test_open_future_schema(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "future.lgdb");
  make_valid_db(path);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value='3' WHERE key='schema'", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  expect_open_fails(path, "schema version 3");
  /* a database of an older leakguard says so, and what to do */
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value='1' WHERE key='schema'", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  expect_open_fails(path, "recorded by an older leakguard (database schema 1; this one reads schema 2)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_table_list_is_the_schema, setup, teardown),
      cmocka_unit_test_setup_teardown(test_create_and_write, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_snapshot_writes_every_site, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_sites_only_in_full, setup, teardown),
      cmocka_unit_test_setup_teardown(test_known_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_valid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_text_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_truncated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_missing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_foreign_sqlite, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_future_schema, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
