/* SPDX-License-Identifier: MIT */
/*
 * render_html.c - the findings as one self-contained HTML page (`leakguard report
 * --format html`): inline CSS, JavaScript and SVG, no network, so it opens offline and
 * can be attached to a bug (docs/html.md).
 *
 * The page holds, as text rendered here: the verdict, the leaks with their lines and
 * holders, the processes and ranks. As data (one JSON script element) for its
 * script: the JSON report; each leak's memory curve per space over time and steps,
 * with its time to OOM; and every stored stack with its live bytes at the process's
 * peak, growth per second, live and allocated bytes (the pprof profile's values: the
 * recording, lgr_recording_t), from which the script draws a flame graph of the peak and one of growth,
 * and a sortable table of all allocation sites.
 *
 * The stacks are written as they are walked (a hundred thousand stacks would be millions
 * of cJSON nodes), so strings are escaped here: JSON's escapes, and "</" written
 * "<\/" so that no text closes the script element.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/strmap.h"
#include "core/util.h"
#include "findings/report.h"
#include "output/render.h"

extern const char lgr_html_css[], lgr_html_js[];

/* ------------------------------------------------------------------ escaping */

static void html_text(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else if (*p == '<' && p[1] == '/') fputs("<\\/", f), p++;
    else fputc(*p, f);
  }
  fputc('"', f);
}

/* A cJSON document's text with every "</" written "<\/" (valid JSON, inert in HTML). */
static void json_inert(FILE *f, const char *s) {
  for (; *s; s++) {
    if (s[0] == '<' && s[1] == '/') {
      fputs("<\\/", f);
      s++;
    } else {
      fputc(*s, f);
    }
  }
}

/* ------------------------------------------------------------------ text parts */

static const lgr_run_t *run_of(const lgr_report_t *r, int proc) {
  for (int i = 0; i < r->nruns; i++)
    if (r->runs[i].proc == proc) return &r->runs[i];
  return NULL;
}

static void frame_html(FILE *f, const lgr_frame_t *fr) {
  fputs("<code class=\"fn\">", f);
  html_text(f, fr->function);
  fputs("</code>", f);
  if (fr->file[0]) {
    const char *b = strrchr(fr->file, '/');
    fputs(" <span class=\"loc\">", f);
    html_text(f, b ? b + 1 : fr->file);
    fprintf(f, ":%d</span>", fr->line);
  } else if (fr->module[0]) {
    fputs(" <span class=\"loc\">[", f);
    html_text(f, fr->module);
    fputs("]</span>", f);
  }
}

/* A site as the text names it (render_text.c, site_label): its frame, and "via" the
 * frame it allocated through when that is library code, a system library's or the
 * program's allocation wrapper (the site's library_site). */
static void site_html(FILE *f, const lgr_site_t *s) {
  if (!s->nframes) {
    fputs("??", f);
    return;
  }
  frame_html(f, &s->frames[s->site_frame]);
  if (s->lib_frame > 0 && s->lib_frame <= s->nframes) {
    fputs(" <span class=\"via\">via</span> ", f);
    frame_html(f, &s->frames[s->lib_frame - 1]);
  }
}

static void print_leaks_html(FILE *f, const lgr_report_t *r) {
  char b1[32], b2[32], b3[32];
  fprintf(f, "<section id=\"leaks\"><h2>%d leak%s</h2>\n", r->nleaks, r->nleaks == 1 ? "" : "s");
  if (!r->nleaks) fputs("<p>No allocation site's live memory keeps growing significantly.</p>\n", f);
  for (int j = 0; j < r->nleaks; j++) {
    const lgr_leak_t *L = &r->leaks[j];
    const lgr_site_t *m = &r->suspects[L->suspects[0]];
    const lgr_run_t *u = run_of(r, L->proc);
    fprintf(f, "<div class=\"leak\" id=\"leak-%d\"><h3>L%d <span class=\"rate\">+%s/s</span>", j + 1, j + 1,
            lgu_fmt_bytes(b1, sizeof b1, L->growth_bytes_per_s));
    if (!isnan(L->growth_bytes_per_step))
      fprintf(f, " <span class=\"rate\">(+%s/step)</span>", lgu_fmt_bytes(b2, sizeof b2, L->growth_bytes_per_step));
    fprintf(f, " holds %s, %s", lgu_fmt_bytes(b3, sizeof b3, (double)L->live_bytes), lg_pattern_name(L->pattern));
    if (!isnan(L->time_to_oom_s)) fprintf(f, ", OOM in %s", lgu_fmt_duration(b1, sizeof b1, L->time_to_oom_s));
    fprintf(f, "</h3>\n<p>%s ", m->spread_sites ? "spread over sites under" : "allocated at");
    site_html(f, m);
    if (L->nsuspects > 1) fprintf(f, " and %d more site%s", L->nsuspects - 1, L->nsuspects > 2 ? "s" : "");
    fprintf(f, "; pid %d", L->pid);
    if (u && u->host) {
      fputs(" on ", f);
      html_text(f, u->host);
    }
    if (L->rank >= 0) fprintf(f, ", rank %d", L->rank);
    fputs("</p>\n", f);
    if (m->source) {
      fputs("<pre class=\"src\">", f);
      html_text(f, m->source);
      fputs("</pre>\n", f);
    }
    if (L->holder) {
      fputs("<p class=\"holder\">held by ", f);
      for (int k = 0; k < L->holder->nchain; k++) {
        if (k) fputs(" \u2192 ", f);
        html_text(f, L->holder->chain[k] ? L->holder->chain[k] : "?");
      }
      fputs("</p>\n", f);
    } else if (L->no_holder) {
      fputs("<p class=\"holder none\">no holder: ", f);
      html_text(f, L->no_holder);
      fputs("</p>\n", f);
    }
    if (L->fix) {
      fputs("<p class=\"fix\">fix: ", f);
      html_text(f, L->fix);
      fputs("</p>\n", f);
    }
    fprintf(f, "<div class=\"chart\" data-leak=\"%d\"></div></div>\n", j);
  }
  fputs("</section>\n", f);
}

/* The largest sites at the peak that grew then released (lgr_site_t.released): not
 * leaks, said with their figures as the text says them. */
static void print_released_html(FILE *f, const lgr_report_t *r) {
  char b1[32], b2[32];
  int n = 0;
  for (int i = 0; i < r->nat_peak; i++) {
    const lgr_site_t *s = &r->at_peak[i];
    if (!s->released) continue;
    if (!n++)
      fputs("<section id=\"released\"><h2>Grew then released</h2>\n<p class=\"note\">Not leaks: memory "
            "held for a while and given back by the end.</p><ul>\n",
            f);
    fputs("<li class=\"released\">", f);
    site_html(f, s);
    fprintf(f, ": grew then released: grew to %s by %.1f s, released to %s by the end; pid %d</li>\n",
            lgu_fmt_bytes(b1, sizeof b1, (double)s->released_peak_bytes), s->released_peak_s,
            lgu_fmt_bytes(b2, sizeof b2, (double)s->released_end_bytes), s->pid);
  }
  if (n) fputs("</ul></section>\n", f);
}

static void print_runs_html(FILE *f, const lgr_report_t *r) {
  char b1[32], b2[32];
  fputs("<section id=\"processes\"><h2>Processes</h2><table><thead><tr><th>pid</th><th>host</th><th>rank</th>"
        "<th>command</th><th>end</th><th>duration</th><th>peak</th><th>at the end</th><th>curve</th></tr></thead>"
        "<tbody>\n",
        f);
  for (int i = 0; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i];
    if (u->helper) continue; /* folded: the table below */
    fprintf(f, "<tr%s><td>%d</td><td>", u->leaking ? " class=\"leaking\"" : "", u->pid);
    html_text(f, u->host ? u->host : "");
    fputs("</td><td>", f);
    if (u->rank >= 0) fprintf(f, "%d", u->rank);
    fputs("</td><td><code>", f);
    html_text(f, u->command);
    fputs("</code></td><td>", f);
    if (u->has_signal) fprintf(f, "signal %d", u->signal);
    else if (u->has_exit) fprintf(f, "exit %d", u->exit_status);
    else html_text(f, u->end_reason);
    fprintf(f, "</td><td>%.1f s</td><td>%s</td><td>%s</td><td>%s", u->duration_s,
            lgu_fmt_bytes(b1, sizeof b1, (double)u->peak_live_bytes),
            lgu_fmt_bytes(b2, sizeof b2, (double)u->final_live_bytes),
            u->pattern >= 0 ? lg_pattern_name((lg_pattern_t)u->pattern) : "");
    if (u->pattern >= 0 && u->pattern_from_s > 0) fprintf(f, " (from %.1f s on)", u->pattern_from_s);
    fputs("</td></tr>\n", f);
  }
  fputs("</tbody></table>\n", f);
  if (r->nhelpers) { /* the short-lived helpers (lgr_run_t.helper), folded */
    fprintf(f,
            "<details><summary>%d short-lived or idle helper processes (nothing growing)</summary><table>"
            "<thead><tr><th>pid</th><th>command</th><th>end</th><th>duration</th><th>peak</th></tr></thead><tbody>\n",
            r->nhelpers);
    for (int i = 0; i < r->nruns; i++) {
      const lgr_run_t *u = &r->runs[i];
      if (!u->helper) continue;
      fprintf(f, "<tr><td>%d</td><td><code>", u->pid);
      html_text(f, u->command);
      fputs("</code></td><td>", f);
      if (u->has_exit) fprintf(f, "exit %d", u->exit_status);
      else html_text(f, u->end_reason);
      fprintf(f, "</td><td>%.2f s</td><td>%s</td></tr>\n", u->duration_s,
              lgu_fmt_bytes(b1, sizeof b1, (double)u->peak_live_bytes));
    }
    fputs("</tbody></table></details>\n", f);
  }
  fputs("</section>\n", f);
}

/* ------------------------------------------------------------------ data */

/* Each leak's memory over the run, summed over its suspects per space: at most 2000
 * points (evenly decimated), time in seconds since the process started and steps. */
static void print_series(FILE *f, const lgr_report_t *r) {
  fputs("\"series\":[", f);
  for (int j = 0; j < r->nleaks; j++) {
    const lgr_leak_t *L = &r->leaks[j];
    const lgr_run_t *u = run_of(r, L->proc);
    fprintf(f, "%s{\"leak\":%d,\"rate\":%.3f,\"oom_s\":", j ? "," : "", j + 1,
            isfinite(L->growth_bytes_per_s) ? L->growth_bytes_per_s : 0);
    if (isfinite(L->time_to_oom_s)) fprintf(f, "%.1f", L->time_to_oom_s);
    else fputs("null", f);
    int64_t n = u && u->snap_t ? u->nsnap : 0;
    int64_t stride = n > 2000 ? (n + 1999) / 2000 : 1;
    fputs(",\"t\":[", f);
    int first = 1;
    for (int64_t k = 0; k < n; k += stride) {
      if (!isfinite(u->snap_t[k])) continue;
      fprintf(f, "%s%.3f", first ? "" : ",", u->snap_t[k]);
      first = 0;
    }
    fputs("],\"step\":[", f);
    first = 1;
    for (int64_t k = 0; k < n; k += stride) {
      if (!isfinite(u->snap_t[k])) continue;
      fprintf(f, "%s%.0f", first ? "" : ",", u->snap_step && isfinite(u->snap_step[k]) ? u->snap_step[k] : 0);
      first = 0;
    }
    fputs("],\"spaces\":{", f);
    int nsp = 0;
    for (int a = 0; a < L->nsuspects; a++) {
      const char *sp = r->suspects[L->suspects[a]].space;
      int seen = 0;
      for (int b = 0; b < a; b++) seen |= !strcmp(r->suspects[L->suspects[b]].space, sp);
      if (seen) continue;
      fprintf(f, "%s", nsp++ ? "," : "");
      json_str(f, sp);
      fputs(":[", f);
      first = 1;
      for (int64_t k = 0; k < n; k += stride) {
        if (!isfinite(u->snap_t[k])) continue;
        double v = 0;
        for (int b = 0; b < L->nsuspects; b++) {
          const lgr_site_t *s = &r->suspects[L->suspects[b]];
          if (!strcmp(s->space, sp) && s->series && isfinite(s->series[k])) v += s->series[k];
        }
        fprintf(f, "%s%.0f", first ? "" : ",", v);
        first = 0;
      }
      fputs("]", f);
    }
    fputs("}}", f);
  }
  fputs("]", f);
}

/* The calling-context tree of the stored stacks: node i > 0 is (parent, name), node 0
 * the root. Looked up by (parent, name) in an open-addressing table of 64-bit keys:
 * millions of lookups for 10^5 stacks, one line of hashing; no library of Debian's
 * offers a plain integer map in C. */
typedef struct cct {
  uint32_t *par, *nam; /* nodes */
  uint32_t n, cap;
  uint64_t *key; /* table: parent << 32 | name, + 1 (0: empty) */
  uint32_t *val;
  uint32_t tcap;
} cct_t;

static int cct_grow_table(cct_t *t) {
  uint32_t nc = t->tcap ? t->tcap * 2 : 1u << 16;
  uint64_t *nk = calloc(nc, sizeof *nk);
  uint32_t *nv = malloc((size_t)nc * sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return -ENOMEM;
  }
  for (uint32_t i = 0; i < t->tcap; i++) {
    if (!t->key[i]) continue;
    uint32_t h = (uint32_t)((t->key[i] * LG_HASH_GOLDEN64) >> 32) & (nc - 1);
    while (nk[h]) h = (h + 1) & (nc - 1);
    nk[h] = t->key[i];
    nv[h] = t->val[i];
  }
  free(t->key);
  free(t->val);
  t->key = nk;
  t->val = nv;
  t->tcap = nc;
  return 0;
}

/* The child (parent, name), made when new; 0 (the root, never a child) when out of
 * memory. */
static uint32_t cct_child(cct_t *t, uint32_t parent, uint32_t name) {
  if ((uint64_t)(t->n + 1) * 2 > t->tcap && cct_grow_table(t)) return 0;
  uint64_t k = ((uint64_t)parent << 32 | name) + 1;
  uint32_t h = (uint32_t)((k * LG_HASH_GOLDEN64) >> 32) & (t->tcap - 1);
  while (t->key[h]) {
    if (t->key[h] == k) return t->val[h];
    h = (h + 1) & (t->tcap - 1);
  }
  if (t->n == t->cap) {
    uint32_t nc = t->cap ? t->cap * 2 : 1u << 16;
    uint32_t *np = realloc(t->par, (size_t)nc * sizeof *np);
    if (!np) return 0;
    t->par = np;
    uint32_t *nn = realloc(t->nam, (size_t)nc * sizeof *nn);
    if (!nn) return 0;
    t->nam = nn;
    t->cap = nc;
  }
  uint32_t id = t->n++;
  t->par[id] = parent;
  t->nam[id] = name;
  t->key[h] = k;
  t->val[h] = id;
  return id;
}

/* The tree with its root, node 0 (not in the table: no (parent, name) names it). */
static int cct_init(cct_t *t) {
  memset(t, 0, sizeof *t);
  t->cap = 1u << 16;
  t->par = malloc((size_t)t->cap * sizeof *t->par);
  t->nam = malloc((size_t)t->cap * sizeof *t->nam);
  if (!t->par || !t->nam || cct_grow_table(t)) return -ENOMEM;
  t->par[0] = t->nam[0] = 0;
  t->n = 1;
  return 0;
}

static void cct_free(cct_t *t) {
  free(t->par);
  free(t->nam);
  free(t->key);
  free(t->val);
}

/* Every stored stack: [peak, growth/s, live at the end, allocated, site, leaf node,
 * lifetime..., library site] of the tree ("nodes": parent, name pairs; names:
 * "function\tfile:line"), root first: its process ("pid N rank R on HOST\tcommand"),
 * then the Python callers outermost first, then the native frames under the innermost
 * Python line, down to the allocation. The site is the frame the report names a site
 * by (lgr_stackval_t.site: the program's own line or caller), the library site the
 * innermost frame passed over to reach it (-1: none). */
static int print_stacks(FILE *f, const lgr_report_t *r) {
  const lgr_recording_t *rec = &r->rec;
  int rc = 0;
  const lgr_loc_t **lv = malloc(LGR_MAX_FRAMES * sizeof *lv);
  int *ids = malloc(LGR_MAX_FRAMES * sizeof *ids);
  lgu_strmap_t names = {0};
  int nnames = 0;
  cct_t t;
  if (cct_init(&t) || !lv || !ids) rc = -ENOMEM;
  fputs("\"stacks\":[", f);
  char key[1200];
  size_t shown = 0;
  for (size_t i = 0; rc == 0 && i < rec->nstacks; i++) {
    const lgr_stackval_t *s = &rec->stacks[i];
    if (!s->stored) continue;
    int n = s->nframes < LGR_MAX_FRAMES ? s->nframes : LGR_MAX_FRAMES;
    for (int k = 0; k < n; k++) lv[k] = &rec->locs[s->frames[k]];
    for (int k = 0; k < n && rc == 0; k++) {
      const lgr_loc_t *l = lv[k];
      if (l->file && l->file[0]) snprintf(key, sizeof key, "%s\t%s:%d", l->function, l->file, l->line);
      else snprintf(key, sizeof key, "%s\t[%s]", l->function, l->module ? l->module : "");
      int added = 0, id = lgu_strmap_get_or_add(&names, key, nnames, &added);
      if (id < 0) rc = -ENOMEM;
      nnames += added;
      ids[k] = id;
    }
    if (rc) break;
    int npy = 0;
    while (npy < n && lgr_is_python_module(lv[npy]->module)) npy++;
    int site = s->site >= 0 && s->site < n ? ids[s->site] : -1, lib = s->lib >= 0 && s->lib < n ? ids[s->lib] : -1;
    /* the first level: the process (a run has several: forks, workers, ranks) */
    const lgr_run_t *u = run_of(r, s->proc);
    int pl = snprintf(key, sizeof key, "pid %d", u ? u->pid : 0);
    if (u && u->rank >= 0) pl += snprintf(key + pl, sizeof key - (size_t)pl, " rank %d", u->rank);
    if (u && u->host && pl < (int)sizeof key) pl += snprintf(key + pl, sizeof key - (size_t)pl, " on %s", u->host);
    if (pl < (int)sizeof key) snprintf(key + pl, sizeof key - (size_t)pl, "\t%s", u ? u->command : "");
    int added = 0, pid_name = lgu_strmap_get_or_add(&names, key, nnames, &added);
    if (pid_name < 0) {
      rc = -ENOMEM;
      break;
    }
    nnames += added;
    uint32_t node = cct_child(&t, 0, (uint32_t)pid_name);
    if (!node) {
      rc = -ENOMEM;
      break;
    }
    for (int k = npy - 1; k >= 0 && node != UINT32_MAX; k--)
      if (!(node = cct_child(&t, node, (uint32_t)ids[k]))) rc = -ENOMEM, node = UINT32_MAX;
    for (int k = n - 1; k >= npy && node != UINT32_MAX; k--)
      if (!(node = cct_child(&t, node, (uint32_t)ids[k]))) rc = -ENOMEM, node = UINT32_MAX;
    if (rc) break;
    /* the lifetime of the stack's site (docs/lifetimes.md): generation (-1: none),
     * mean seconds, the bound when no block was ever seen live, and the 90th
     * percentile's upper bound (0: no distribution, -1: a kept block) */
    const lgr_life_t *lf = lgr_stack_life(r, s->proc, s->stack);
    double p90 = !lf || isnan(lf->p90_le_s) ? 0 : isinf(lf->p90_le_s) ? -1 : lf->p90_le_s;
    fprintf(f, "%s[%lld,%lld,%lld,%lld,%d,%u,%d,%.3g,%.3g,%.3g,%d]", shown++ ? "," : "", (long long)s->v[LGR_SV_PEAK],
            (long long)s->v[LGR_SV_GROWTH], (long long)s->v[LGR_SV_INUSE], (long long)s->v[LGR_SV_ALLOC], site, node,
            lf ? lf->gen : -1, lf && isfinite(lf->mean_s) ? lf->mean_s : 0, lf ? lf->below_s : 0, p90, lib);
  }
  fputs("],\"nodes\":[", f);
  for (uint32_t i = 1; rc == 0 && i < t.n; i++) fprintf(f, "%s%u,%u", i > 1 ? "," : "", t.par[i], t.nam[i]);
  fputs("],\"names\":[", f);
  if (rc == 0) {
    char **order = calloc((size_t)nnames + 1, sizeof *order); /* the map's keys by index */
    if (!order) rc = -ENOMEM;
    for (size_t k = 0; order && k < names.cap; k++)
      if (names.keys[k]) order[names.vals[k]] = names.keys[k];
    for (int k = 0; order && k < nnames; k++) {
      if (k) fputc(',', f);
      json_str(f, order[k]);
    }
    free(order);
  }
  fputs("]", f);
  cct_free(&t);
  lgu_strmap_free(&names);
  free(lv);
  free(ids);
  return rc;
}

int lgo_render_html(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o) {
  /* the JSON report first (into memory): a failure prints nothing */
  char *js = NULL;
  size_t jn = 0;
  FILE *m = open_memstream(&js, &jn);
  if (!m) return -ENOMEM;
  int rc = lgo_render_json(m, r, o); /* as `report --format json` prints it */
  if (fclose(m) != 0 && rc == 0) rc = -ENOMEM;
  if (rc) {
    free(js);
    return rc;
  }
  const char *cmd = r->nruns ? r->runs[r->main_run].command : ""; /* the process that did the work */
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>leakguard report: ",
        f);
  fputs(r->nleaks ? "LEAK" : "no leak", f);
  fputs(" \u2014 ", f);
  html_text(f, cmd);
  fprintf(f,
          "</title>\n<style>%s</style></head>\n<body>\n<header><h1>leakguard report: <span id=\"verdict\" "
          "class=\"%s\">%s</span></h1>\n<p>",
          lgr_html_css, r->nleaks ? "v-leak" : "v-ok", r->nleaks ? "LEAK" : "no leak found");
  html_text(f, cmd);
  fputs("</p></header>\n<main>\n", f);
  print_leaks_html(f, r);
  print_released_html(f, r);
  print_runs_html(f, r);
  fputs("<section id=\"flames\"><h2>Live memory at the peak</h2><div class=\"flame\" id=\"flame-peak\"></div>\n"
        "<h2>Growth per second (leaking sites)</h2><div class=\"flame\" id=\"flame-growth\"></div></section>\n"
        "<section id=\"sites\"><h2>Allocation sites</h2><p class=\"note\" id=\"sites-note\"></p>"
        "<table id=\"sites-table\"><thead><tr><th data-k=\"name\">site</th><th data-k=\"growth\">growth/s</th>"
        "<th data-k=\"end\">live at the end</th><th data-k=\"peak\">at the peak</th><th data-k=\"alloc\">allocated"
        "</th><th data-k=\"stacks\">stacks</th><th "
        "data-k=\"life\">lifetime</th></tr></thead><tbody></tbody></table></section>\n</main>\n"
        "<script type=\"application/json\" id=\"lg-data\">{\"report\":",
        f);
  json_inert(f, js);
  free(js);
  fputc(',', f);
  print_series(f, r);
  fputc(',', f);
  rc = print_stacks(f, r);
  fprintf(f, "}</script>\n<script>%s</script>\n</body></html>\n", lgr_html_js);
  return rc;
}
