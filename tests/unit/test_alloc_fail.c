/* SPDX-License-Identifier: MIT */
/*
 * test_alloc_fail.c - allocation-failure injection, SQLite-style (issue #11), for the
 * store writer, the report and its printers, and `leakguard merge`. The collector's
 * own code: test_alloc_fail_collector.c.
 *
 * Every allocation goes through a counter (alloc_inject.h): leakguard's own, SQLite's
 * and cJSON's. For N = 1, 2, ... the Nth allocation fails, once ("transient") and then
 * every one from the Nth on ("persistent"), until a pass completes without reaching N.
 *
 * What must hold for every N: no crash, no leak (the ASan build runs this test with
 * detect_leaks=1), and no silent damage: a writer pass that reports success wrote a
 * database that opens and reports the same as the reference; a report pass that
 * returns success printed exactly the reference text, JSON, pprof and HTML; a merge
 * that returns success wrote a database that reports as the reference merge, and a
 * merge that fails left no file. A failure may only surface as an error (a non-zero
 * return, with a reason in `why`).
 *
 *   test_alloc_fail [--part=writer|report|merge] [DATABASE]
 *
 * DATABASE (a real run) gets the report passes too. --part runs one of the three parts
 * (each is a ctest of its own, so that they run side by side); none: all of them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_inject.h"
#include "core/model.h"
#include "core/region.h"
#include "leakguard.h"
#include "findings/diff.h"
#include "output/render.h"
#include "output/merge.h"
#include "findings/report.h"
#include "output/render.h"
#include "output/store.h"

#define check ai_check

/* ------------------------------------------------------------------ the writer */

#define NSITES 6
#define NSNAP 24

static const lgs_frame_t F_GROW[3] = {{0x7f0000001000, "libc.so.6", "malloc", "", 0, 0},
                                      {0x401000, "app", "grow_cache", "/src/app/cache.c", 42, 0},
                                      {0x402000, "app", "main", "/src/app/main.c", 10, 0}};
static const lgs_frame_t F_FLAT[2] = {{0x7f0000002000, "libc.so.6", "calloc", "", 0, 0},
                                      {0x403000, "app", "load_table", "/src/app/table.c", 7, 0}};
static const lgs_frame_t F_SAW[2] = {{0x404000, "app", "batch_buffer", "/src/app/batch.c", 31, 0},
                                     {0x402000, "app", "main", "/src/app/main.c", 11, 0}};

/* Live bytes of stack id s at snapshot k: 2 grows 64 KiB/s, 3 is flat, 4 saw-tooth. */
static int64_t value(int s, int k) {
  if (s == 2) return 65536LL * (k + 1);
  if (s == 3) return 1 << 20;
  return 4096LL * (k % 6 + 1);
}

/* One recording as the collector stores it, written to path. 0, or the first error. */
static int write_db(const char *path, lgm_proc_t *p) {
  lgst_t *s = NULL;
  const char *err = NULL;
  int rc = lgst_create(path, &s, &err);
  if (rc) return rc;
  lg_module_rec_t mod = {.start = 0x400000, .end = 0x500000, .bias = 0};
  snprintf(mod.path, sizeof mod.path, "/usr/bin/app");
  if ((rc = lgst_meta(s, "limit_source", "cgroup")) || (rc = lgst_proc(s, p)) || (rc = lgst_module(s, 1, 0, &mod)) ||
      (rc = lgst_stack(s, 1, 2, LG_SPACE_HOST, F_GROW, 3)) || (rc = lgst_stack(s, 1, 3, LG_SPACE_HOST, F_FLAT, 2)) ||
      (rc = lgst_stack(s, 1, 4, LG_SPACE_HOST, F_SAW, 2)) || (rc = lgst_label(s, 1, "rank", "0")))
    goto out;
  for (int k = 0; k < NSNAP; k++) {
    p->live_bytes = 0;
    for (int i = 2; i <= 4; i++) {
      lgm_site_t *x = &p->sites[i];
      x->live_bytes = value(i, k);
      x->live_blocks = x->live_bytes / 4096;
      x->alloc_bytes = (uint64_t)x->live_bytes;
      x->alloc_blocks = (uint64_t)x->live_blocks;
      p->live_bytes += x->live_bytes;
    }
    if (p->live_bytes > p->peak_live_bytes) p->peak_live_bytes = p->live_bytes;
    if ((rc = lgst_begin(s))) goto out;
    rc = lgst_snapshot(s, p, p->start_ns + (uint64_t)(k + 1) * 1000000000ULL, 1ULL << 30, 2ULL << 30,
                       k == NSNAP - 1 ? LGST_ALL : LGST_PARTIAL);
    if (k == 12 && !rc) rc = lgst_flag(s, 1, 2, p->start_ns + 13000000000ULL, 65536);
    int crc = lgst_commit(s);
    if (rc || (rc = crc)) goto out;
  }
  p->ended = 1;
  p->end_ns = p->start_ns + (uint64_t)NSNAP * 1000000000ULL;
  snprintf(p->end_reason, sizeof p->end_reason, "exit");
  rc = lgst_proc(s, p);
out:
  lgst_close(s);
  return rc;
}

/* ------------------------------------------------------------------ the report */

typedef struct out {
  char *text, *json;
  size_t ntext, njson;
} out_t;

static void out_free(out_t *o) {
  free(o->text);
  free(o->json);
  memset(o, 0, sizeof *o);
}

/* The report of path as text and JSON. 0, or the error (why says). */
static int report(const char *path, out_t *o, char *why, size_t whylen) {
  memset(o, 0, sizeof *o);
  lgr_db_t *s = NULL;
  int rc = lgr_open(path, &s, why, whylen);
  if (rc) return rc;
  lgr_options_t opt = {.top = 10, .min_growth_bytes = 4096, .recording = 1};
  lgo_render_opts_t wo = {.top = 10};
  lgr_report_t r;
  rc = lgr_build(s, &opt, &r, why, whylen);
  if (rc == 0) {
    /* open_memstream allocates inside libc: not counted, never fails here */
    FILE *ft = open_memstream(&o->text, &o->ntext), *fj = open_memstream(&o->json, &o->njson);
    if (!ft || !fj) abort();
    lgo_render_text(ft, &r, &wo);
    rc = lgo_render_json(fj, &r, &wo);
    if (rc) snprintf(why, whylen, "lgo_render_json: %d", rc);
    /* and `leakguard diff` of the report against itself */
    lgr_diff_t d;
    if (rc == 0 && (rc = lgr_diff_compare(&r, &r, LGR_DIFF_WORSE_RATIO, &d)) != 0)
      snprintf(why, whylen, "lgr_diff_compare: %d", rc);
    if (rc == 0) {
      lgo_render_diff_text(ft, &d, &(lgo_render_opts_t){.base = "a.db", .source = "a.db"});
      rc = lgo_render_diff_json(fj, &d, &(lgo_render_opts_t){.base = "a.db", .source = "a.db"});
      if (rc) snprintf(why, whylen, "lgo_render_diff_json: %d", rc);
      lgr_diff_free(&d);
    }
    /* and the pprof profile (gzip without a time stamp: the same bytes every time) */
    if (rc == 0 && (rc = lgo_render_pprof(fj, &r, &wo)) != 0) snprintf(why, whylen, "lgo_render_pprof: %d", rc);
    /* and the HTML page, and the folded stacks */
    if (rc == 0 && (rc = lgo_render_html(fj, &r, &wo)) != 0) snprintf(why, whylen, "lgo_render_html: %d", rc);
    if (rc == 0 && (rc = lgo_render_folded(ft, &r, &wo)) != 0) snprintf(why, whylen, "lgo_render_folded: %d", rc);
    fclose(ft);
    fclose(fj);
    lgr_free(&r);
  }
  lgr_close(s);
  return rc;
}

/* Report passes over db against the reference output ref. */
static long report_passes(const char *db, const out_t *ref, int pers) {
  long n;
  for (n = 1; n < 200000; n++) {
    char why[512] = "";
    out_t o;
    ai_arm(n, pers);
    int rc = report(db, &o, why, sizeof why);
    ai_disarm();
    if (rc == 0) {
      check(o.ntext == ref->ntext && !memcmp(o.text, ref->text, ref->ntext),
            "%s report of %s, allocation %ld failed: success, but the text differs", pers ? "persistent" : "transient",
            db, n);
      check(o.njson == ref->njson && !memcmp(o.json, ref->json, ref->njson),
            "%s report of %s, allocation %ld failed: success, but the JSON differs", pers ? "persistent" : "transient",
            db, n);
    } else {
      check(why[0] != 0, "report of %s, allocation %ld failed: error %d without a reason", db, n, rc);
    }
    out_free(&o);
    if (!ai_hit()) break; /* the pass needed fewer than n allocations: done */
    if (ai_failures() > 20) break;
  }
  return n;
}

/* ------------------------------------------------------------------ merge */

/* `leakguard merge` of the n databases in[] into out, against the report ref of the
 * merge made without injection: success must mean a database that reports the same;
 * a failure must leave no file at out. */
static long merge_passes(const char *const *in, int n, const char *out, const out_t *ref, int pers) {
  long k;
  for (k = 1; k < 200000; k++) {
    char why[512] = "";
    unlink(out);
    ai_arm(k, pers);
    int rc = lgst_merge(out, in, n, why, sizeof why);
    ai_disarm();
    const char *mode = pers ? "persistent" : "transient";
    if (rc == 0) {
      out_t o;
      char why2[512] = "";
      int r2 = report(out, &o, why2, sizeof why2);
      check(r2 == 0 && o.ntext == ref->ntext && !memcmp(o.text, ref->text, ref->ntext) && o.njson == ref->njson &&
                !memcmp(o.json, ref->json, ref->njson),
            "%s merge, allocation %ld failed: success, but the merged database does not report as the reference (%s)",
            mode, k, r2 ? why2 : "different output");
      out_free(&o);
    } else {
      check(why[0] != 0, "%s merge, allocation %ld failed: error %d without a reason", mode, k, rc);
      check(access(out, F_OK) != 0, "%s merge, allocation %ld failed: error %d, but %s was left behind", mode, k, rc,
            out);
    }
    if (!ai_hit() || ai_failures() > 20) break;
  }
  return k;
}

/* A process as the collector models it when it first connects (the store reads the
 * region header's steps, dropped and sample_bytes only). */
static void new_proc(lgm_proc_t *p, lg_region_hdr_t *hdr, lgm_site_t *sites, lgm_site_t *stored) {
  memset(p, 0, sizeof *p);
  memset(hdr, 0, sizeof *hdr);
  memset(sites, 0, NSITES * sizeof *sites);
  memset(stored, 0, NSITES * sizeof *stored);
  p->hdr = hdr;
  p->sites = sites;
  p->stored = stored;
  p->nsites = NSITES;
  p->proc = 1;
  p->pid = 4242;
  p->ppid = 17;
  p->conn = -1;
  snprintf(p->command, sizeof p->command, "./app --serve");
  snprintf(p->exe, sizeof p->exe, "/usr/bin/app");
  p->start_ns = 5000000000ULL;
}

int main(int argc, char **argv) {
  if (ai_init() != 0) return 99;
  const char *part = NULL;
  if (argc > 1 && !strncmp(argv[1], "--part=", 7)) {
    part = argv[1] + 7;
    argc--, argv++;
    if (strcmp(part, "writer") && strcmp(part, "report") && strcmp(part, "merge")) {
      fprintf(stderr, "test_alloc_fail: --part is writer, report or merge\n");
      return 2;
    }
  }
#define PART(name) (!part || !strcmp(part, name))

  /* thousands of databases are written: in memory (tmpfs) when there is one, where
   * SQLite's syncs cost nothing */
  char dir[] = "/dev/shm/lgallocfail-XXXXXX";
  if (!mkdtemp(dir)) {
    memcpy(dir, "/tmp/lgallocfail-XXXXXX", sizeof "/tmp/lgallocfail-XXXXXX");
    if (!mkdtemp(dir)) return 99;
  }
  char ref_db[600], db[600], why[512];
  snprintf(ref_db, sizeof ref_db, "%s/ref.db", dir);
  snprintf(db, sizeof db, "%s/try.db", dir);

  lgm_proc_t *p = calloc(1, sizeof *p);
  lg_region_hdr_t *hdr = calloc(1, sizeof *hdr);
  lgm_site_t *sites = calloc(NSITES, sizeof *sites), *stored = calloc(NSITES, sizeof *stored);
  if (!p || !hdr || !sites || !stored) return 99;
  new_proc(p, hdr, sites, stored);

  /* the reference: no injection */
  check(write_db(ref_db, p) == 0, "reference database written");
  out_t ref;
  check(report(ref_db, &ref, why, sizeof why) == 0, "reference report: %s", why);
  check(ref.ntext > 0 && !strncmp(ref.text, "leakguard report: LEAK", 22) &&
            strstr(ref.text, "allocated at grow_cache (cache.c:42): suspect #1") != NULL,
        "the reference report names the leak at grow_cache (cache.c:42)");
  if (ai_failures()) return 1;
  if (getenv("LG_ALLOC_FAIL_KEEP")) {
    FILE *kf = fopen("/tmp/lgaf-ref.json", "w");
    if (kf) fwrite(ref.json, 1, ref.njson, kf), fclose(kf);
  }

  /* the writer: success must mean a complete database */
  long wn[2] = {1, 1};
  for (int pers = 0; PART("writer") && pers < 2; pers++) {
    long n;
    for (n = 1; n < 200000; n++) {
      new_proc(p, hdr, sites, stored);
      ai_arm(n, pers);
      int rc = write_db(db, p);
      ai_disarm();
      if (rc == 0) {
        out_t o;
        int r2 = report(db, &o, why, sizeof why);
        if (getenv("LG_ALLOC_FAIL_KEEP") && r2 == 0 && (o.njson != ref.njson || memcmp(o.json, ref.json, ref.njson))) {
          char kp[64];
          snprintf(kp, sizeof kp, "/tmp/lgaf-%ld.json", n);
          FILE *kf = fopen(kp, "w");
          if (kf) fwrite(o.json, 1, o.njson, kf), fclose(kf);
          fprintf(stderr, "kept %s\n", kp);
        }
        check(r2 == 0 && o.njson == ref.njson && !memcmp(o.json, ref.json, ref.njson),
              "%s writer, allocation %ld failed: success, but the database does not report as the reference (%s)",
              pers ? "persistent" : "transient", n, r2 ? why : "different JSON");
        out_free(&o);
      }
      if (!ai_hit() || ai_failures() > 20) break;
    }
    wn[pers] = n;
  }
  if (PART("writer")) printf("writer: %ld allocation points failed once, %ld persistently\n", wn[0] - 1, wn[1] - 1);

  const char *dbs[2] = {ref_db, argc > 1 ? argv[1] : NULL};
  for (int i = 0; PART("report") && i < 2 && dbs[i]; i++) {
    out_t r;
    if (report(dbs[i], &r, why, sizeof why) != 0) {
      check(0, "report of %s without injection: %s", dbs[i], why);
      continue;
    }
    long t = report_passes(dbs[i], &r, 0), q = report_passes(dbs[i], &r, 1);
    printf("report of %s: %ld allocation points failed once, %ld persistently\n", dbs[i], t - 1, q - 1);
    out_free(&r);
  }

  /* merge: the reference database and a copy under another name (the real run adds
   * nothing the merge code does not do for these, at many times the cost) */
  char copy_db[600], merged[600];
  snprintf(copy_db, sizeof copy_db, "%s/copy.db", dir);
  snprintf(merged, sizeof merged, "%s/merged.db", dir);
  new_proc(p, hdr, sites, stored);
  check(write_db(copy_db, p) == 0, "a second database written");
  const char *in[2] = {ref_db, copy_db};
  int nin = 2;
  out_t mref;
  unlink(merged);
  int mrc = PART("merge") ? lgst_merge(merged, in, nin, why, sizeof why) : -1;
  check(!PART("merge") || (mrc == 0 && report(merged, &mref, why, sizeof why) == 0),
        "reference merge and its report: %s", why);
  if (mrc == 0) {
    long t = merge_passes(in, nin, merged, &mref, 0), q = merge_passes(in, nin, merged, &mref, 1);
    printf("merge of %d databases: %ld allocation points failed once, %ld persistently\n", nin, t - 1, q - 1);
    out_free(&mref);
  }
  out_free(&ref);

  unlink(merged);
  unlink(copy_db);
  unlink(ref_db);
  unlink(db);
  char wal[640];
  snprintf(wal, sizeof wal, "%s-wal", db);
  unlink(wal);
  snprintf(wal, sizeof wal, "%s-shm", db);
  unlink(wal);
  rmdir(dir);
  free(hdr);
  free(sites);
  free(stored);
  free(p);
  printf("%s\n", ai_failures() ? "FAILED" : "all passes: errors reported, nothing silently lost");
  return ai_failures() ? 1 : 0;
}
