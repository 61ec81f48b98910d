/* SPDX-License-Identifier: MIT */
/*
 * test_report.c - unit tests for the report built from the store (lgr_build and
 * lgo_render_json). Databases are written through the store with the fake process of
 * store_fixture.c: a two-site database (one growing, one flat, 20 snapshots) whose
 * JSON report is parsed with cJSON and checked field by field, holders merged per
 * site, and series shaped to test the findings of issue #10 (minor first uses, a
 * staircase of fills, leaks in lockstep, growth spread over many sites).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/blockhdr.h"
#include "core/model.h"
#include "core/region.h"
#include "leakguard.h"
#include "findings/report.h"
#include "findings/impl.h"
#include "output/render.h"
#include "output/store.h"
#include "store_fixture.h"

/* ------------------------------------------------------------------ report */

/* Stack 2 grows by 64 KiB per second; stack 3 holds 1 MiB from the start. */
static void make_report_db(const char *path) {
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  assert_int_equal(lgst_meta(s, "limit_source", "cgroup"), 0);
  lgm_proc_t *p = fake_proc(4);
  lgs_frame_t grow[3] = {
      {0x7f0000001000, "libc.so.6", "malloc", "", 0, 0},
      {0x401000, "app", "grow_cache", "/src/app/cache.c", 42, 0},
      {0x402000, "app", "main", "/src/app/main.c", 10, 0},
  };
  lgs_frame_t flat[2] = {
      {0x7f0000002000, "libc.so.6", "calloc", "", 0, 0},
      {0x403000, "app", "load_table", "/src/app/table.c", 7, 0},
  };
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(lgst_stack(s, 1, 2, LG_SPACE_HOST, grow, 3), 0);
  assert_int_equal(lgst_stack(s, 1, 3, LG_SPACE_HOST, flat, 2), 0);
  for (int k = 0; k < 20; k++) {
    set_site(&p->sites[2], 64 * KiB * (k + 1), k + 1, (uint64_t)(64 * KiB * (k + 1)), (uint64_t)(k + 1), 0);
    set_site(&p->sites[3], 1 * MiB, 1, 1 * MiB, 1, 0);
    p->live_bytes = p->sites[2].live_bytes + p->sites[3].live_bytes;
    p->live_blocks = p->sites[2].live_blocks + 1;
    if (p->live_bytes > p->peak_live_bytes) p->peak_live_bytes = p->live_bytes;
    atomic_store(&p->hdr->steps, 0);
    assert_int_equal(lgst_begin(s), 0);
    assert_int_equal(lgst_snapshot(s, p, p->start_ns + (uint64_t)(k + 1) * 1000000000ULL, 1 * GiB, 2 * GiB, k == 19),
                     0);
    assert_int_equal(lgst_commit(s), 0);
  }
  p->ended = 1;
  p->end_ns = p->start_ns + 20000000000ULL;
  snprintf(p->end_reason, sizeof p->end_reason, "exit");
  p->exit_status = 3;
  assert_int_equal(lgst_proc(s, p), 0);
  /* between the first and the final (full) snapshot the flat site has no rows: the
   * report must carry its value forward */
  assert_int_equal(q_int(lgst_db(s), "SELECT count(*) FROM samples WHERE stack=3 AND seq < 19"), 1);
  lgst_close(s);
  free_proc(p);
}

/* The rank key (lgr_rank_sites): the flake of a CI run, a two-block step at the very end
 * of a 4-s run ranked above the planted linear leak, must rank second; over long spans
 * the rate decides; a site without growth comes last. */
static lgr_site_t ranked(int stack, double rate, double conf, double since, double until) {
  lgr_site_t s;
  memset(&s, 0, sizeof s);
  s.stack = stack;
  s.r.growth_bytes_per_s = rate;
  s.r.confidence = conf;
  s.r.since_s = since;
  s.r.until_s = until;
  return s;
}

static void test_rank_sites(void **state) {
  (void)state;
  lgr_site_t a[3] = {
      ranked(1, 721 * KiB, 0.71, 3.8, 4.1), /* step seen for 0.3 s */
      ranked(2, 0, 0.9, 0.1, 4.1),          /* no growth */
      ranked(3, 700 * KiB, 0.94, 0.1, 4.1), /* linear, the whole run */
  };
  lgr_rank_sites(a, 3);
  assert_int_equal(a[0].stack, 3);
  assert_int_equal(a[1].stack, 1);
  assert_int_equal(a[2].stack, 2);
  /* tau = max(1 s, 4.0 s / 10) = 1 s */
  assert_true(fabs(a[0].strength - 700.0 * KiB * 0.94 * 4.0 / 5.0) < 1e-6);
  assert_true(fabs(a[1].strength - 721.0 * KiB * 0.71 * 0.3 / 1.3) < 1e-6);
  assert_true(a[2].strength == 0);
  lgr_site_t b[2] = {
      ranked(1, 1 * MiB, 0.9, 0, 100), /* tau 10 s: both seen for 10 tau */
      ranked(2, 2 * MiB, 0.8, 0, 100),
  };
  lgr_rank_sites(b, 2);
  assert_int_equal(b[0].stack, 2);
  assert_int_equal(b[1].stack, 1);
  lgr_site_t c[1] = {ranked(7, NAN, NAN, NAN, NAN)};
  lgr_rank_sites(c, 1);
  assert_true(c[0].strength == 0);
}

static cJSON *report_json(const char *path, const lgr_options_t *o) {
  lgr_db_t *s = NULL;
  char why[512] = "";
  assert_int_equal(lgr_open(path, &s, why, sizeof why), 0);
  lgr_report_t r;
  int rc = lgr_build(s, o, &r, why, sizeof why);
  if (rc != 0) print_error("lgr_build: %s\n", why);
  assert_int_equal(rc, 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  assert_non_null(mem);
  lgo_render_opts_t wo = {.top = o->top};
  assert_int_equal(lgo_render_json(mem, &r, &wo), 0);
  assert_int_equal(fclose(mem), 0);
  lgr_free(&r);
  lgr_close(s);
  assert_true(len > 0 && buf[len - 1] == '\n');
  cJSON *j = cJSON_Parse(buf);
  if (!j) print_error("invalid JSON near: %.80s\n", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
  free(buf);
  assert_non_null(j);
  return j;
}

static const cJSON *field(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!v) print_error("missing JSON field \"%s\"\n", name);
  assert_non_null(v);
  return v;
}

static double num(const cJSON *o, const char *name) {
  const cJSON *v = field(o, name);
  assert_true(cJSON_IsNumber(v));
  return v->valuedouble;
}

static const char *str(const cJSON *o, const char *name) {
  const cJSON *v = field(o, name);
  assert_true(cJSON_IsString(v));
  return v->valuestring;
}

static void test_report_json(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "report.lgdb");
  make_report_db(path);
  lgr_options_t o = {0};
  cJSON *j = report_json(path, &o);

  assert_true(num(j, "schema") == 1);
  assert_string_equal(str(j, "verdict"), "leak");
  assert_string_equal(str(j, "limit_source"), "cgroup");

  /* runs[0] */
  const cJSON *runs = field(j, "runs");
  assert_true(cJSON_IsArray(runs));
  assert_int_equal(cJSON_GetArraySize(runs), 1);
  const cJSON *run = cJSON_GetArrayItem(runs, 0);
  assert_true(num(run, "pid") == 4242);
  assert_true(num(run, "ppid") == 17);
  assert_string_equal(str(run, "command"), "./app --serve");
  assert_string_equal(str(run, "started_by"), "start");
  assert_string_equal(str(run, "end"), "exit");
  assert_true(num(run, "exit_status") == 3);
  assert_true(cJSON_IsNull(field(run, "signal")));
  assert_true(fabs(num(run, "duration_s") - 20.0) < 1e-9);
  const double final = 20 * 64 * KiB + 1 * MiB;
  assert_true(num(run, "peak_live_bytes") == final);
  assert_true(num(run, "final_live_bytes") == final);
  assert_true(num(run, "dropped_records") == 0);
  assert_true(num(run, "steps") == 0);
  assert_true(num(run, "snapshots") == 20);
  assert_true(num(run, "sample_bytes") == 0);
  assert_true(num(run, "limit_bytes") == 2 * GiB);

  /* suspects: the growing site only, machinery (malloc in libc) trimmed */
  const cJSON *sus = field(j, "suspects");
  assert_true(cJSON_IsArray(sus));
  assert_int_equal(cJSON_GetArraySize(sus), 1);
  const cJSON *s0 = cJSON_GetArrayItem(sus, 0);
  assert_true(num(s0, "stack") == 2);
  assert_true(num(s0, "rank") == 1);
  assert_true(num(s0, "pid") == 4242);
  assert_string_equal(str(s0, "space"), "host");
  assert_string_equal(str(s0, "pattern"), "linear-leak");
  assert_true(num(s0, "live_bytes") == 20 * 64 * KiB);
  assert_true(num(s0, "live_blocks") == 20);
  assert_true(fabs(num(s0, "growth_bytes_per_s") - 64 * KiB) < 0.01 * 64 * KiB);
  assert_true(cJSON_IsNull(field(s0, "growth_bytes_per_step"))); /* no steps marked */
  /* headroom 1 GiB at 64 KiB/s */
  assert_true(fabs(num(s0, "time_to_oom_s") - 16384.0) < 0.01 * 16384.0);
  double conf = num(s0, "confidence");
  assert_true(conf > 0 && conf <= 1);
  const cJSON *frames = field(s0, "frames");
  assert_true(cJSON_IsArray(frames));
  assert_int_equal(cJSON_GetArraySize(frames), 2);
  const cJSON *f0 = cJSON_GetArrayItem(frames, 0);
  assert_string_equal(str(f0, "function"), "grow_cache");
  assert_string_equal(str(f0, "file"), "/src/app/cache.c");
  assert_true(num(f0, "line") == 42);
  assert_string_equal(str(f0, "module"), "app");
  assert_string_equal(str(cJSON_GetArrayItem(frames, 1), "function"), "main");

  /* the flat site is context, not a suspect */
  const cJSON *oth = field(j, "largest_non_leaking");
  assert_int_equal(cJSON_GetArraySize(oth), 1);
  const cJSON *o0 = cJSON_GetArrayItem(oth, 0);
  assert_true(num(o0, "stack") == 3);
  assert_string_equal(str(o0, "pattern"), "stable");
  assert_true(num(o0, "live_bytes") == 1 * MiB);
  assert_null(cJSON_GetObjectItemCaseSensitive(o0, "rank"));
  assert_string_equal(str(cJSON_GetArrayItem(field(o0, "frames"), 0), "function"), "load_table");
  cJSON_Delete(j);

  /* --native keeps the allocator frame */
  o.native = 1;
  j = report_json(path, &o);
  const cJSON *nf = field(cJSON_GetArrayItem(field(j, "suspects"), 0), "frames");
  assert_int_equal(cJSON_GetArraySize(nf), 3);
  const cJSON *n0 = cJSON_GetArrayItem(nf, 0);
  assert_string_equal(str(n0, "function"), "malloc");
  assert_string_equal(str(n0, "module"), "libc.so.6");
  assert_true(cJSON_IsNull(field(n0, "file")));
  assert_true(cJSON_IsNull(field(n0, "line")));
  cJSON_Delete(j);
}

/* Holders: the stacks of one allocation site are one suspect, and its holders are those
 * of any of its stacks in the latest explain that found some: stack 4 reaches the same
 * line (cache.c:42) through realloc and another caller, so its holders are the site's;
 * stack 5 allocates at another line and is another site; an older explain is ignored. */
static void test_report_holders_merged_site(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "holders.lgdb");
  make_report_db(path);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  const char *sql = "INSERT INTO stacks VALUES(1,4,'host',3,'[901,902,903]'),(1,5,'host',2,'[904,905]');"
                    "INSERT INTO locations VALUES(1,901,1,'libc.so.6','realloc',NULL,NULL,0),"
                    " (1,902,2,'app','grow_cache','/src/app/cache.c',42,0),"
                    " (1,903,3,'app','warm_up','/src/app/main.c',20,0),"
                    " (1,904,4,'app','grow_cache','/src/app/cache.c',43,0),"
                    " (1,905,5,'app','main','/src/app/main.c',10,0);"
                    "INSERT INTO samples VALUES(1,4,19,4096,1,4096,1,NULL),(1,5,19,999,1,999,1,NULL);"
                    "INSERT INTO holders VALUES(1,5,1,7,'object','[\"app.other\"]',9,999999,NULL),"
                    " (1,4,1,7,'object','[\"app.cache (dict)\", \"[k]\"]',20,1310720,NULL),"
                    " (1,2,0,3,'object','[\"stale (older explain)\"]',1,1,NULL);";
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) print_error("%s\n", err);
  sqlite3_close(db);
  lgr_options_t o = {0};
  cJSON *j = report_json(path, &o);
  const cJSON *s0 = cJSON_GetArrayItem(field(j, "suspects"), 0);
  assert_true(num(s0, "stack") == 2);
  const cJSON *st = field(s0, "stacks");
  assert_int_equal(cJSON_GetArraySize(st), 2);
  assert_true(num(cJSON_GetArrayItem(st, 0), "stack") == 2);
  assert_true(num(cJSON_GetArrayItem(st, 1), "stack") == 4);
  assert_true(num(s0, "live_bytes") == 20 * 64 * KiB + 4096);
  const cJSON *site = field(s0, "site");
  assert_string_equal(str(site, "function"), "grow_cache");
  assert_true(num(site, "line") == 42);
  const cJSON *hl = field(s0, "holders");
  assert_int_equal(cJSON_GetArraySize(hl), 1);
  const cJSON *h0 = cJSON_GetArrayItem(hl, 0);
  assert_string_equal(cJSON_GetArrayItem(field(h0, "chain"), 0)->valuestring, "app.cache (dict)");
  assert_true(num(h0, "objects") == 20 && num(h0, "bytes") == 1310720);
  /* one leak, bound by its holder's root */
  const cJSON *leaks = field(j, "leaks");
  assert_int_equal(cJSON_GetArraySize(leaks), 1);
  const cJSON *l0 = cJSON_GetArrayItem(leaks, 0);
  assert_string_equal(str(l0, "by"), "holder");
  assert_string_equal(cJSON_GetArrayItem(field(field(l0, "holder"), "chain"), 0)->valuestring, "app.cache (dict)");
  assert_int_equal(cJSON_GetArraySize(field(l0, "suspects")), 1);
  cJSON_Delete(j);
  /* the suspect's first stack explained too, in the same explain: both, largest first */
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(
      sqlite3_exec(db, "INSERT INTO holders VALUES(1,2,1,7,'tensor','[\"app.own\"]',3,4096,NULL)", NULL, NULL, NULL),
      SQLITE_OK);
  sqlite3_close(db);
  j = report_json(path, &o);
  hl = field(cJSON_GetArrayItem(field(j, "suspects"), 0), "holders");
  assert_int_equal(cJSON_GetArraySize(hl), 2);
  assert_string_equal(cJSON_GetArrayItem(field(cJSON_GetArrayItem(hl, 0), "chain"), 0)->valuestring,
                      "app.cache (dict)");
  assert_string_equal(cJSON_GetArrayItem(field(cJSON_GetArrayItem(hl, 1), "chain"), 0)->valuestring, "app.own");
  cJSON_Delete(j);
}

/* A database with only the flat site: verdict "no-leak", no suspects. */
static void test_report_json_no_leak(void **state) {
  fixture_t *f = *state;
  char path[256];
  path_in(f, path, sizeof path, "noleak.lgdb");
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc(3);
  lgs_frame_t fr[1] = {{0x403000, "app", "load_table", "/src/app/table.c", 7, 0}};
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(lgst_stack(s, 1, 2, LG_SPACE_HOST, fr, 1), 0);
  for (int k = 0; k < 20; k++) {
    set_site(&p->sites[2], 1 * MiB + (k % 2) * 512, 1, 1 * MiB, 1, 0);
    assert_int_equal(lgst_snapshot(s, p, p->start_ns + (uint64_t)(k + 1) * 1000000000ULL, 0, 0, 0), 0);
  }
  lgst_close(s);
  free_proc(p);
  lgr_options_t o = {0};
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "no-leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "suspects")), 0);
  assert_int_equal(cJSON_GetArraySize(field(j, "largest_non_leaking")), 1);
  assert_null(cJSON_GetObjectItemCaseSensitive(j, "limit_source"));
  cJSON_Delete(j);
}

/* ------------------------------------------------------------------ findings (issue #10) */

/* A database of one process whose stacks follow value(k, stack, &blocks) over nsnap
 * snapshots 1 s apart (0.1 s when fine): stack ids 2.. with the frames given. */
typedef int64_t (*value_fn)(int k, int stack, int64_t *blocks);
typedef struct stack_def {
  const lgs_frame_t *fr;
  int nfr;
} stack_def_t;

static void make_series_db(const char *path, const stack_def_t *defs, int nstacks, int nsnap, value_fn value) {
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc((uint32_t)nstacks + 2);
  assert_int_equal(lgst_proc(s, p), 0);
  for (int i = 0; i < nstacks; i++)
    assert_int_equal(lgst_stack(s, 1, (uint32_t)i + 2, LG_SPACE_HOST, defs[i].fr, defs[i].nfr), 0);
  assert_int_equal(lgst_begin(s), 0);
  for (int k = 0; k < nsnap; k++) {
    p->live_bytes = 0;
    for (int i = 0; i < nstacks; i++) {
      int64_t blocks = 0, v = value(k, i, &blocks);
      set_site(&p->sites[i + 2], v, blocks, (uint64_t)v, (uint64_t)blocks, 0);
      p->live_bytes += v;
    }
    if (p->live_bytes > p->peak_live_bytes) p->peak_live_bytes = p->live_bytes;
    assert_int_equal(lgst_snapshot(s, p, p->start_ns + (uint64_t)(k + 1) * 1000000000ULL, 1 * GiB, 2 * GiB,
                                   k == nsnap - 1 ? LGST_ALL : LGST_CHANGED),
                     0);
  }
  assert_int_equal(lgst_commit(s), 0);
  p->ended = 1;
  p->end_ns = p->start_ns + (uint64_t)nsnap * 1000000000ULL;
  snprintf(p->end_reason, sizeof p->end_reason, "exit");
  assert_int_equal(lgst_proc(s, p), 0);
  lgst_close(s);
  free_proc(p);
}

static const lgs_frame_t F_TABLE[2] = {{0x1, "app", "load_tables", "/src/app/tables.c", 12, 0},
                                       {0x2, "app", "main", "/src/app/main.c", 5, 0}};
static const lgs_frame_t F_ROUTE[3] = {{0x3, "libc.so.6", "calloc", "", 0, 0},
                                       {0x4, "app", "route_for", "/src/app/routes.c", 30, 0},
                                       {0x5, "app", "serve", "/src/app/main.c", 40, 0}};
static const lgs_frame_t F_ROUTE2[3] = {{0x3, "libc.so.6", "calloc", "", 0, 0},
                                        {0x4, "app", "route_for", "/src/app/routes.c", 30, 0},
                                        {0x6, "app", "warm_up", "/src/app/main.c", 60, 0}};
static const lgs_frame_t F_NODE[2] = {{0x7, "app", "keep_node", "/src/app/list.c", 8, 0},
                                      {0x8, "app", "handle", "/src/app/main.c", 70, 0}};
static const lgs_frame_t F_DATA[2] = {{0x9, "app", "copy_payload", "/src/app/payload.c", 21, 0},
                                      {0x8, "app", "handle", "/src/app/main.c", 71, 0}};

static int g_routes; /* routes first used during the run */

/* A 4 MiB table, and a 16 KiB histogram per route at its first use. */
static int64_t first_uses(int k, int stack, int64_t *blocks) {
  if (stack == 0) {
    *blocks = 1;
    return 4 * MiB;
  }
  int64_t n = (int64_t)(k + 1) * g_routes / 40; /* routes opened so far, evenly over 40 s */
  *blocks = n;
  return n * 16 * KiB;
}

/* Minor growth, both sides of the rule: six first uses of 16 KiB in a 4 MiB process
 * are minor (no leak, listed apart); forty are 640 KiB, 15 % of the process: a leak. */
static void test_report_minor_first_uses(void **state) {
  fixture_t *f = *state;
  char path[256];
  stack_def_t defs[2] = {{F_TABLE, 2}, {F_ROUTE, 3}};
  lgr_options_t o = {0};
  g_routes = 6;
  path_in(f, path, sizeof path, "minor.lgdb");
  make_series_db(path, defs, 2, 40, first_uses);
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "no-leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "leaks")), 0);
  assert_int_equal(cJSON_GetArraySize(field(j, "suspects")), 0);
  const cJSON *mi = field(j, "minor_growth");
  assert_int_equal(cJSON_GetArraySize(mi), 1);
  assert_string_equal(str(field(cJSON_GetArrayItem(mi, 0), "site"), "function"), "route_for");
  cJSON_Delete(j);
  g_routes = 40;
  path_in(f, path, sizeof path, "many.lgdb");
  make_series_db(path, defs, 2, 40, first_uses);
  j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "leaks")), 1);
  assert_int_equal(cJSON_GetArraySize(field(j, "minor_growth")), 0);
  cJSON_Delete(j);
  /* the rule itself, at its edges */
  /* (growth, rate, size, blocks, time to OOM); 10 MiB at 2 KiB/s doubles in 85 min */
  assert_true(lgr_is_minor(100 * KiB, 2 * KiB, 10 * MiB, 1000, 30 * 86400.0));   /* 1 %, slow: however steady */
  assert_true(lgr_is_minor(190 * KiB, 2 * KiB, 10 * MiB, 1000, NAN));            /* 1.9 %, no limit known */
  assert_false(lgr_is_minor(210 * KiB, 2 * KiB, 10 * MiB, 1000, 30 * 86400.0));  /* 2.05 % */
  assert_false(lgr_is_minor(100 * KiB, 2 * KiB, 10 * MiB, 1000, 3600.0));        /* OOM in an hour */
  assert_false(lgr_is_minor(100 * KiB, 10 * KiB, 10 * MiB, 1000, 30 * 86400.0)); /* doubles in 17 min */
  assert_false(lgr_is_minor(300 * KiB, 2 * KiB, 10 * MiB, 1000, 30 * 86400.0));  /* 3 % */
  assert_true(lgr_is_minor(2 * MiB, 2 * KiB, 10 * MiB, 7, 30 * 86400.0));        /* 7 blocks, 20 % */
  assert_false(lgr_is_minor(3 * MiB, 2 * KiB, 10 * MiB, 7, 30 * 86400.0));       /* 7 blocks, 30 % */
  assert_false(lgr_is_minor(2 * MiB, 2 * KiB, 10 * MiB, 8, 30 * 86400.0));       /* 8 blocks, 20 % */
}

/* A 3-s stretch without snapshots (24 s of 0.2-s snapshots, none from 20 s to 23 s):
 * reported as the collector not running (runs[0].snapshot_gap) unless the process was
 * held by its own holder walk then: no snapshot is taken of a held process (the walk
 * at exit of a torch `total_loss += loss` run held it 2 s and the report blamed the
 * collector). A walk that covers only part of the hole leaves the rest a gap when that
 * is still one (over 2 s). */
static void make_gap_db(const char *path, double walk_from, double walk_to) {
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc(3);
  lgs_frame_t fr[2] = {
      {0x7f0000001000, "libc.so.6", "malloc", "", 0, 0},
      {0x401000, "app", "load_table", "/src/app/table.c", 7, 0},
  };
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(lgst_stack(s, 1, 2, LG_SPACE_HOST, fr, 2), 0);
  for (int i = 1; i <= 120; i++) {
    double t = i * 0.2;
    if (i > 100 && i < 115) continue;
    set_site(&p->sites[2], 1 * MiB, 1, 1 * MiB, 1, 0);
    p->live_bytes = p->peak_live_bytes = 1 * MiB;
    p->live_blocks = 1;
    atomic_store(&p->hdr->steps, 0);
    assert_int_equal(lgst_begin(s), 0);
    assert_int_equal(lgst_snapshot(s, p, p->start_ns + (uint64_t)(t * 1e9), 1 * GiB, 2 * GiB, i == 120), 0);
    assert_int_equal(lgst_commit(s), 0);
  }
  p->ended = 1;
  p->end_ns = p->start_ns + 24000000000ULL;
  snprintf(p->end_reason, sizeof p->end_reason, "exit");
  assert_int_equal(lgst_proc(s, p), 0);
  if (walk_to > walk_from) {
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO explains VALUES(1, 1, 0, %lld, 0, 'answered', 'exit', %.3f, 200000, 1, 3, NULL)",
             (long long)(p->start_ns + (uint64_t)(walk_to * 1e9)), walk_to - walk_from);
    assert_int_equal(sqlite3_exec(lgst_db(s), sql, NULL, NULL, NULL), SQLITE_OK);
  }
  lgst_close(s);
  free_proc(p);
}

static void test_report_gap_held_by_walk(void **state) {
  fixture_t *f = *state;
  char path[256];
  lgr_options_t o = {0};
  /* no walk; a walk of 2.7 s in it (0.3 s left); a walk of 0.4 s (2.6 s left) */
  const double walks[3][2] = {{0, 0}, {20.2, 22.9}, {22.5, 22.9}};
  const int gap[3] = {1, 0, 1};
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "gap%d.lgdb", i);
    path_in(f, path, sizeof path, name);
    make_gap_db(path, walks[i][0], walks[i][1]);
    cJSON *j = report_json(path, &o);
    const cJSON *g = field(cJSON_GetArrayItem(field(j, "runs"), 0), "snapshot_gap");
    if (gap[i]) {
      assert_true(cJSON_IsObject(g));
      assert_true(fabs(num(g, "from_s") - 20.0) < 0.01 && fabs(num(g, "to_s") - 23.0) < 0.01);
    } else {
      assert_true(cJSON_IsNull(g));
    }
    cJSON_Delete(j);
  }
}

/* Two stacks of one site (route_for reached from serve and from warm_up), each filling
 * once at a different time: a staircase that is two bounded fills, not a step leak.
 * (A fill that ends in the last seconds of a run cannot be told from a leak that began
 * there: docs/detection.md, limits.) */
static int64_t staircase(int k, int stack, int64_t *blocks) {
  if (stack == 0) {
    *blocks = 1;
    return 4 * MiB;
  }
  int from = stack == 1 ? 2 : 26, to = stack == 1 ? 8 : 32;
  int64_t n = k < from ? 0 : k >= to ? 500 : (int64_t)(k - from) * 500 / (to - from);
  *blocks = n;
  return n * 1024;
}

static void test_report_staircase_of_fills(void **state) {
  fixture_t *f = *state;
  char path[256];
  stack_def_t defs[3] = {{F_TABLE, 2}, {F_ROUTE, 3}, {F_ROUTE2, 3}};
  lgr_options_t o = {0};
  path_in(f, path, sizeof path, "stairs.lgdb");
  make_series_db(path, defs, 3, 40, staircase);
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "no-leak");
  /* the site is one entry of the context list, its two stacks merged */
  const cJSON *oth = field(j, "largest_non_leaking");
  int found = 0;
  for (int i = 0; i < cJSON_GetArraySize(oth); i++) {
    const cJSON *o0 = cJSON_GetArrayItem(oth, i);
    if (strcmp(str(field(o0, "site"), "function"), "route_for") != 0) continue;
    found = 1;
    assert_int_equal(cJSON_GetArraySize(field(o0, "stacks")), 2);
    assert_true(num(o0, "live_bytes") == 1000 * 1024);
  }
  assert_true(found);
  cJSON_Delete(j);
}

/* A list node and its payload leak together, one of each per request: two sites in two
 * functions that grow in lockstep are one leak. */
static int64_t lockstep(int k, int stack, int64_t *blocks) {
  if (stack == 0) {
    *blocks = 1;
    return 4 * MiB;
  }
  *blocks = (int64_t)(k + 1) * 50;
  return *blocks * (stack == 1 ? 24 : 2048);
}

static void test_report_lockstep_is_one_leak(void **state) {
  fixture_t *f = *state;
  char path[256];
  stack_def_t defs[3] = {{F_TABLE, 2}, {F_NODE, 2}, {F_DATA, 2}};
  lgr_options_t o = {0};
  path_in(f, path, sizeof path, "lockstep.lgdb");
  make_series_db(path, defs, 3, 40, lockstep);
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "suspects")), 2);
  const cJSON *leaks = field(j, "leaks");
  assert_int_equal(cJSON_GetArraySize(leaks), 1);
  const cJSON *l0 = cJSON_GetArrayItem(leaks, 0);
  assert_string_equal(str(l0, "by"), "lockstep");
  const cJSON *ls = field(l0, "suspects");
  assert_int_equal(cJSON_GetArraySize(ls), 2);
  assert_true(cJSON_GetArrayItem(ls, 0)->valuedouble == 1 && cJSON_GetArrayItem(ls, 1)->valuedouble == 2);
  /* the main suspect is the payload (faster growth) */
  assert_string_equal(str(field(cJSON_GetArrayItem(field(j, "suspects"), 0), "site"), "function"), "copy_payload");
  assert_true(fabs(num(l0, "growth_bytes_per_s") - 50 * (24 + 2048)) < 0.02 * 50 * (24 + 2048));
  cJSON_Delete(j);
}

/* The key and the value of a cache entry, allocated on two lines of one function, grow
 * at their own rates (values get more numerous as entries age): one leak,
 * bound by the function. The same two rates in two unrelated functions: two leaks. */
static const lgs_frame_t F_KEY[2] = {{0xa, "app", "cache_insert", "/src/app/cache.c", 10, 0},
                                     {0xb, "app", "handle", "/src/app/main.c", 80, 0}};
static const lgs_frame_t F_VAL[2] = {{0xc, "app", "cache_insert", "/src/app/cache.c", 11, 0},
                                     {0xb, "app", "handle", "/src/app/main.c", 80, 0}};
static const lgs_frame_t F_LOG[2] = {{0xd, "app", "log_line", "/src/app/log.c", 40, 0},
                                     {0xe, "app", "flush", "/src/app/main.c", 90, 0}};
static int64_t key_and_value(int k, int stack, int64_t *blocks) {
  if (stack == 0) {
    *blocks = 1;
    return 4 * MiB;
  }
  if (stack == 1) {
    *blocks = (int64_t)(k + 1) * 40;
    return *blocks * 480;
  }
  *blocks = (int64_t)(k + 1) * (k + 1) / 2; /* faster and faster: not in lockstep with the keys */
  return *blocks * 4000;
}

static void test_report_same_function_is_one_leak(void **state) {
  fixture_t *f = *state;
  char path[256];
  lgr_options_t o = {0};
  stack_def_t same[3] = {{F_TABLE, 2}, {F_KEY, 2}, {F_VAL, 2}};
  path_in(f, path, sizeof path, "function.lgdb");
  make_series_db(path, same, 3, 40, key_and_value);
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "suspects")), 2);
  assert_int_equal(cJSON_GetArraySize(field(j, "leaks")), 1);
  const cJSON *l0 = cJSON_GetArrayItem(field(j, "leaks"), 0);
  assert_string_equal(str(l0, "by"), "function");
  assert_int_equal(cJSON_GetArraySize(field(l0, "suspects")), 2);
  /* nothing flagged it while it ran (no flags rows): found at the end only */
  assert_true(cJSON_IsNull(field(l0, "detected_after_s")));
  assert_true(cJSON_IsNull(field(cJSON_GetArrayItem(field(j, "suspects"), 0), "detected_after_s")));
  cJSON_Delete(j);
  stack_def_t apart[3] = {{F_TABLE, 2}, {F_KEY, 2}, {F_LOG, 2}};
  path_in(f, path, sizeof path, "functions.lgdb");
  make_series_db(path, apart, 3, 40, key_and_value);
  j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "suspects")), 2);
  assert_int_equal(cJSON_GetArraySize(field(j, "leaks")), 2);
  cJSON_Delete(j);
}

/* A holder of bytes whose detail is {bound: {container, maxsize, size, full}}, or
 * without details (container NULL). */
static lgr_holder_t bound_holder(double bytes, const char *container, double maxsize, double size, int full) {
  lgr_holder_t h;
  memset(&h, 0, sizeof h);
  h.bytes = bytes;
  if (!container) return h;
  lgr_detail_t *b = calloc(4, sizeof *b), *bound = calloc(1, sizeof *bound), *d = calloc(1, sizeof *d);
  assert_non_null(b);
  assert_non_null(bound);
  assert_non_null(d);
  b[0] = (lgr_detail_t){.name = strdup("container"), .type = LGR_DETAIL_TEXT, .text = strdup(container)};
  b[1] = (lgr_detail_t){.name = strdup("maxsize"), .type = LGR_DETAIL_NUMBER, .number = maxsize};
  b[2] = (lgr_detail_t){.name = strdup("size"), .type = LGR_DETAIL_NUMBER, .number = size};
  b[3] = (lgr_detail_t){.name = strdup("full"), .type = full ? LGR_DETAIL_TRUE : LGR_DETAIL_FALSE};
  *bound = (lgr_detail_t){.name = strdup("bound"), .type = LGR_DETAIL_GROUP, .items = b, .nitems = 4};
  *d = (lgr_detail_t){.type = LGR_DETAIL_GROUP, .items = bound, .nitems = 1};
  h.detail = d;
  return h;
}

/* lgr_full_bound of a site held by the n holders h (given to it). */
static lgr_bound_t *full_bound(const lgr_holder_t *h, int n) {
  lgr_site_t s;
  memset(&s, 0, sizeof s);
  if (n) {
    s.holders = calloc((size_t)n, sizeof *s.holders);
    assert_non_null(s.holders);
    memcpy(s.holders, h, (size_t)n * sizeof *h);
    s.nholders = n;
  }
  lgr_bound_t *b = lgr_full_bound(&s);
  lgr_site_free(&s);
  return b;
}

/* The holder-aware verdict's rule: a bound reached by containers holding at least half
 * of the explained bytes. */
static void test_full_bound(void **state) {
  (void)state;
  lgr_holder_t full[2] = {bound_holder(1000, "lru_cache", 64, 64, 1), bound_holder(900, NULL, 0, 0, 0)};
  lgr_bound_t *b = full_bound(full, 2);
  assert_non_null(b);
  assert_string_equal(b->container, "lru_cache");
  assert_true(b->maxsize == 64 && b->size == 64);
  lgr_bound_free(b);
  lgr_holder_t minority[2] = {bound_holder(400, "deque", 8, 8, 1), bound_holder(600, NULL, 0, 0, 0)};
  assert_null(full_bound(minority, 2));
  lgr_holder_t not_full[1] = {bound_holder(1000, "deque", 8, 3, 0)};
  assert_null(full_bound(not_full, 1));
  assert_null(full_bound(NULL, 0));
  /* a holder of no bytes counts neither way */
  lgr_holder_t empty[2] = {bound_holder(0, "deque", 8, 8, 1), bound_holder(600, NULL, 0, 0, 0)};
  assert_null(full_bound(empty, 2));
}

/* Growth spread over 12 sites under one caller (say, every op of a graph kept alive),
 * each growing 3 KiB over the run (under the 4 KiB a site needs alone): one leak, the
 * group, under the shared caller. */
#define SPREAD_N 12
static lgs_frame_t g_spread_fr[SPREAD_N][3];
static char g_spread_fn[SPREAD_N][32];
static int64_t spread(int k, int stack, int64_t *blocks) {
  if (stack == 0) {
    *blocks = 1;
    return 256 * KiB;
  }
  *blocks = (k + 1) / 4;
  return (int64_t)(k + 1) * 3 * KiB / 40;
}

static void test_report_spread_growth(void **state) {
  fixture_t *f = *state;
  char path[256];
  stack_def_t defs[SPREAD_N + 1];
  defs[0] = (stack_def_t){F_TABLE, 2};
  for (int i = 0; i < SPREAD_N; i++) {
    snprintf(g_spread_fn[i], sizeof g_spread_fn[i], "op_%d", i);
    g_spread_fr[i][0] = (lgs_frame_t){0x100 + (uint64_t)i, "app", g_spread_fn[i], "/src/app/ops.c", 10 + i, 0};
    g_spread_fr[i][1] = (lgs_frame_t){0x200, "app", "forward", "/src/app/model.c", 77, 0};
    g_spread_fr[i][2] = (lgs_frame_t){0x300, "app", "main", "/src/app/main.c", 9, 0};
    defs[i + 1] = (stack_def_t){g_spread_fr[i], 3};
  }
  lgr_options_t o = {0};
  path_in(f, path, sizeof path, "spread.lgdb");
  make_series_db(path, defs, SPREAD_N + 1, 40, spread);
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "leak");
  const cJSON *sus = field(j, "suspects");
  assert_int_equal(cJSON_GetArraySize(sus), 1);
  const cJSON *s0 = cJSON_GetArrayItem(sus, 0);
  assert_true(num(s0, "spread_sites") == SPREAD_N);
  assert_string_equal(str(field(s0, "site"), "function"), "forward");
  assert_true(num(field(s0, "site"), "line") == 77);
  assert_int_equal(cJSON_GetArraySize(field(j, "leaks")), 1);
  assert_string_equal(str(cJSON_GetArrayItem(field(j, "leaks"), 0), "by"), "spread");
  cJSON_Delete(j);
}

/* A module's start-up: one site grows steadily for the whole run, as a leak would, but
 * only under importlib's frames (say, `import torch` until the exit). Not a leak, and
 * counted as start-up growth; the same curve and lines without the import is a leak. */
static const lgs_frame_t F_IMPORT[4] = {
    {0x10, "python", "<module>", "/usr/lib/mod/tables.py", 14, 0},
    {0x11, "python", "_call_with_frames_removed", "<frozen importlib._bootstrap>", 241, 0},
    {0x12, "python", "_find_and_load", "<frozen importlib._bootstrap>", 1176, 0},
    {0x13, "python", "<module>", "/src/train.py", 3, 0}};
static const lgs_frame_t F_NOIMPORT[2] = {{0x10, "python", "<module>", "/usr/lib/mod/tables.py", 14, 0},
                                          {0x13, "python", "<module>", "/src/train.py", 3, 0}};
static int64_t steady(int k, int stack, int64_t *blocks) {
  if (stack == 0) {
    *blocks = 1;
    return 4 * MiB;
  }
  *blocks = (int64_t)(k + 1) * 40;
  return *blocks * 1024;
}

static void test_report_startup_import(void **state) {
  fixture_t *f = *state;
  char path[256];
  lgr_options_t o = {0};
  stack_def_t defs[2] = {{F_TABLE, 2}, {F_IMPORT, 4}};
  path_in(f, path, sizeof path, "import.lgdb");
  make_series_db(path, defs, 2, 40, steady);
  cJSON *j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "no-leak");
  assert_int_equal(cJSON_GetArraySize(field(j, "leaks")), 0);
  assert_int_equal(cJSON_GetArraySize(field(j, "suspects")), 0);
  const cJSON *su = field(j, "startup_growth");
  assert_true(num(su, "sites") == 1);
  assert_true(num(su, "growth_bytes") > 30 * 40 * KiB && num(su, "growth_bytes") <= 40 * 40 * KiB);
  const cJSON *oth = field(j, "largest_non_leaking");
  int found = 0;
  for (int i = 0; i < cJSON_GetArraySize(oth); i++) {
    const cJSON *o0 = cJSON_GetArrayItem(oth, i);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o0, "startup");
    if (st && cJSON_IsString(st) && !strcmp(st->valuestring, "import")) found++;
  }
  assert_int_equal(found, 1);
  cJSON_Delete(j);
  defs[1] = (stack_def_t){F_NOIMPORT, 2};
  path_in(f, path, sizeof path, "noimport.lgdb");
  make_series_db(path, defs, 2, 40, steady);
  j = report_json(path, &o);
  assert_string_equal(str(j, "verdict"), "leak");
  assert_true(num(field(j, "startup_growth"), "sites") == 0);
  const cJSON *s0 = cJSON_GetArrayItem(field(j, "suspects"), 0);
  assert_true(num(field(s0, "site"), "line") == 14);
  cJSON_Delete(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_report_json, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_gap_held_by_walk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_json_no_leak, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_holders_merged_site, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_minor_first_uses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_staircase_of_fills, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_lockstep_is_one_leak, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_same_function_is_one_leak, setup, teardown),
      cmocka_unit_test(test_full_bound),
      cmocka_unit_test(test_rank_sites),
      cmocka_unit_test_setup_teardown(test_report_spread_growth, setup, teardown),
      cmocka_unit_test_setup_teardown(test_report_startup_import, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
