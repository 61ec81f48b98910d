/* SPDX-License-Identifier: MIT */
/*
 * test_diff.c - `leakguard diff`'s comparison (src/output/diff.c) on reports built by
 * hand: which site is new, worse, unchanged or fixed, how sites are matched (line,
 * moved line, another checkout's path, space, processes), and the JSON document.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "findings/diff.h"
#include "output/render.h"

/* Up to 8 sites per list, each with one frame (the site). */
typedef struct fake {
  lgr_report_t r;
  lgr_site_t sus[8], minor[8], oth[8];
  lgr_frame_t fr[24];
  int nfr;
} fake_t;

static lgr_site_t *add(fake_t *f, char list, int pid, const char *fn, const char *file, int line, double rate,
                       double per_step) {
  lgr_site_t *arr = list == 's' ? f->sus : list == 'm' ? f->minor : f->oth;
  int *n = list == 's' ? &f->r.nsuspects : list == 'm' ? &f->r.nminor : &f->r.nothers;
  f->r.suspects = f->sus;
  f->r.minor = f->minor;
  f->r.others = f->oth;
  lgr_site_t *s = &arr[(*n)++];
  memset(s, 0, sizeof *s);
  lgr_frame_t *fr = &f->fr[f->nfr++];
  fr->function = (char *)fn;
  fr->file = (char *)file;
  fr->module = (char *)"app";
  fr->line = line;
  s->frames = fr;
  s->nframes = 1;
  s->site_frame = 0;
  s->pid = pid;
  snprintf(s->space, sizeof s->space, "host");
  s->r.growth_bytes_per_s = rate;
  s->r.growth_bytes_per_step = per_step;
  s->live_bytes = (int64_t)(rate * 10);
  return s;
}

static const lgr_diff_entry_t *entry_for(const lgr_diff_t *d, const char *fn) {
  for (int i = 0; i < d->n; i++) {
    const lgr_site_t *s = d->e[i].new_site ? d->e[i].new_site : d->e[i].old_site;
    if (!strcmp(s->frames[s->site_frame].function, fn)) return &d->e[i];
  }
  return NULL;
}

static void test_kinds(void **state) {
  (void)state;
  fake_t *o = calloc(1, sizeof *o), *n = calloc(1, sizeof *n);
  /* OLD: cache_put leaks 1000 B/s, parse leaks 500 B/s, log_line grows a little */
  add(o, 's', 10, "cache_put", "/ci/a/src/cache.c", 40, 1000, NAN);
  add(o, 's', 10, "parse", "/ci/a/src/parse.c", 12, 500, NAN);
  add(o, 'm', 10, "log_line", "/ci/a/src/log.c", 7, 20, NAN);
  add(o, 'o', 10, "load_tables", "/ci/a/src/tables.c", 3, 0, NAN);
  /* NEW (another checkout): cache_put 3x as fast, its line moved 40 -> 44; parse fixed
   * (listed, not growing); log_line leaks now; tables leak; a new site; parse in
   * managed memory is another site */
  add(n, 's', 20, "cache_put", "/ci/b/src/cache.c", 44, 3000, NAN);
  add(n, 's', 20, "log_line", "/ci/b/src/log.c", 7, 800, NAN);
  add(n, 's', 20, "load_tables", "/ci/b/src/tables.c", 3, 100, NAN);
  add(n, 's', 20, "frame_copy", "/ci/b/src/frame.c", 90, 70, NAN);
  snprintf(add(n, 's', 20, "parse", "/ci/b/src/parse.c", 12, 60, NAN)->space, 16, "managed");
  add(n, 'o', 20, "parse", "/ci/b/src/parse.c", 12, 0, NAN);
  lgr_diff_t d;
  assert_int_equal(lgr_diff_compare(&o->r, &n->r, LGR_DIFF_WORSE_RATIO, &d), 0);
  assert_int_equal(d.count[LGR_DIFF_NEW], 4); /* log_line, load_tables, frame_copy, managed parse */
  assert_int_equal(d.count[LGR_DIFF_WORSE], 1);
  assert_int_equal(d.count[LGR_DIFF_UNCHANGED], 0);
  assert_int_equal(d.count[LGR_DIFF_FIXED], 1);
  assert_string_equal(lgr_diff_verdict(&d), "regressed");
  const lgr_diff_entry_t *e = entry_for(&d, "cache_put");
  assert_non_null(e);
  assert_int_equal(e->kind, LGR_DIFF_WORSE);
  assert_int_equal(e->line_moved, 1);
  assert_true(fabs(e->ratio - 3.0) < 1e-9);
  assert_int_equal(e->old_site->frames[0].line, 40);
  e = entry_for(&d, "log_line");
  assert_int_equal(e->kind, LGR_DIFF_NEW);
  assert_int_equal(e->old_state, LGR_DIFF_MINOR);
  e = entry_for(&d, "load_tables");
  assert_int_equal(e->kind, LGR_DIFF_NEW);
  assert_int_equal(e->old_state, LGR_DIFF_STABLE);
  assert_int_equal(entry_for(&d, "frame_copy")->old_state, LGR_DIFF_ABSENT);
  /* the fixed one is host parse, now listed and stable; the managed one is new */
  int fixed = 0, managed_new = 0;
  for (int i = 0; i < d.n; i++) {
    if (d.e[i].kind == LGR_DIFF_FIXED) {
      fixed++;
      assert_string_equal(d.e[i].old_site->frames[0].function, "parse");
      assert_int_equal(d.e[i].new_state, LGR_DIFF_STABLE);
      assert_string_equal(d.e[i].new_site->space, "host");
    }
    if (d.e[i].kind == LGR_DIFF_NEW && !strcmp(d.e[i].new_site->space, "managed")) managed_new++;
  }
  assert_int_equal(fixed, 1);
  assert_int_equal(managed_new, 1);
  /* groups in order (new, worse, unchanged, fixed), fastest first within one */
  assert_int_equal(d.e[0].kind, LGR_DIFF_NEW);
  assert_string_equal(d.e[0].new_site->frames[0].function, "log_line");
  assert_int_equal(d.e[d.n - 1].kind, LGR_DIFF_FIXED);
  /* a higher worse ratio makes cache_put unchanged */
  lgr_diff_free(&d);
  assert_int_equal(lgr_diff_compare(&o->r, &n->r, 4.0, &d), 0);
  assert_int_equal(entry_for(&d, "cache_put")->kind, LGR_DIFF_UNCHANGED);
  lgr_diff_free(&d);
  /* reversed: the four new ones are fixed; the worse one is unchanged (1/3) */
  assert_int_equal(lgr_diff_compare(&n->r, &o->r, LGR_DIFF_WORSE_RATIO, &d), 0);
  assert_int_equal(d.count[LGR_DIFF_FIXED], 4);
  assert_int_equal(d.count[LGR_DIFF_UNCHANGED], 1);
  assert_int_equal(d.count[LGR_DIFF_NEW], 1); /* host parse: stable in the old NEW */
  lgr_diff_free(&d);
  /* a run against itself */
  assert_int_equal(lgr_diff_compare(&n->r, &n->r, LGR_DIFF_WORSE_RATIO, &d), 0);
  assert_int_equal(d.count[LGR_DIFF_UNCHANGED], 5);
  assert_int_equal(d.n, 5);
  assert_string_equal(lgr_diff_verdict(&d), "same");
  lgr_diff_free(&d);
  free(o);
  free(n);
}

/* Two lines of one function leak in NEW, one did in OLD; which one moved is unknown
 * when OLD had both: matching by function alone needs one candidate line. The same
 * site in four processes (ranks) is one entry, the fastest; rates per step are
 * compared when both runs mark steps. */
static void test_matching(void **state) {
  (void)state;
  fake_t *o = calloc(1, sizeof *o), *n = calloc(1, sizeof *n);
  add(o, 's', 1, "step", "/w/train.py", 30, 100, 4096);
  add(o, 'o', 1, "step", "/w/train.py", 31, 0, NAN);
  for (int p = 0; p < 4; p++) add(n, 's', 100 + p, "step", "/w/train.py", 30, 400 - p, 4096 * 1.2);
  add(n, 's', 100, "step", "/w/train.py", 33, 50, NAN);
  lgr_diff_t d;
  assert_int_equal(lgr_diff_compare(&o->r, &n->r, LGR_DIFF_WORSE_RATIO, &d), 0);
  assert_int_equal(d.n, 2);
  const lgr_diff_entry_t *e30 = NULL, *e33 = NULL;
  for (int i = 0; i < d.n; i++) {
    if (d.e[i].new_site->frames[0].line == 30) e30 = &d.e[i];
    if (d.e[i].new_site->frames[0].line == 33) e33 = &d.e[i];
  }
  assert_non_null(e30);
  assert_non_null(e33);
  assert_int_equal(e30->kind, LGR_DIFF_UNCHANGED); /* 1.2x per step, though 4x per second */
  assert_int_equal(e30->per_step, 1);
  assert_true(fabs(e30->ratio - 1.2) < 1e-9);
  assert_int_equal(e30->new_site->pid, 100); /* the fastest process */
  assert_int_equal(e33->kind, LGR_DIFF_NEW); /* OLD had lines 30 and 31: not a moved line */
  assert_int_equal(e33->line_moved, 0);
  assert_int_equal(e33->old_state, LGR_DIFF_ABSENT);
  /* the JSON document */
  char *buf = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&buf, &len);
  assert_non_null(mf);
  assert_int_equal(lgo_render_diff_json(mf, &d, &(lgo_render_opts_t){.base = "old.db", .source = "new.db"}), 0);
  fclose(mf);
  cJSON *j = cJSON_Parse(buf);
  assert_non_null(j);
  assert_string_equal(cJSON_GetObjectItem(j, "verdict")->valuestring, "regressed");
  assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "counts"), "new")->valuedouble == 1);
  const cJSON *sites = cJSON_GetObjectItem(j, "sites");
  assert_int_equal(cJSON_GetArraySize(sites), 2);
  const cJSON *s0 = cJSON_GetArrayItem(sites, 0);
  assert_string_equal(cJSON_GetObjectItem(s0, "kind")->valuestring, "new");
  assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(s0, "site"), "line")->valuedouble == 33);
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(s0, "old"), "state")->valuestring, "absent");
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(s0, "ratio")));
  const cJSON *s1 = cJSON_GetArrayItem(sites, 1);
  assert_true(cJSON_GetObjectItem(s1, "ratio")->valuedouble == 1.2);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(s1, "per_step")));
  cJSON_Delete(j);
  free(buf);
  /* the text */
  buf = NULL;
  mf = open_memstream(&buf, &len);
  lgo_render_diff_text(mf, &d, &(lgo_render_opts_t){.base = "old.db", .source = "new.db"});
  fclose(mf);
  assert_non_null(strstr(buf, "New leaks (growing in NEW, not in OLD): 1\n  step (w/train.py:33)\n"));
  assert_non_null(strstr(buf, "Unchanged (growing in both): 1\n  step (w/train.py:30)\n"));
  assert_non_null(strstr(buf, "(1.20\u00d7)"));
  assert_non_null(strstr(buf, "Verdict: regressed (1 new, 0 worse, 1 unchanged, 0 fixed)\n"));
  free(buf);
  lgr_diff_free(&d);
  free(o);
  free(n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kinds),
      cmocka_unit_test(test_matching),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
