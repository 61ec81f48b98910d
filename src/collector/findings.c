/* SPDX-License-Identifier: MIT */
/*
 * findings.c - the collector's live results (collector/collector.h): the live analysis of the
 * site groups at every tick (flags for detected_after_s), the live view, the guard's
 * growth hints, the Prometheus metrics, the suspects files and the requests for
 * explanations that the Python module reads (docs/python.md).
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/collector_impl.h"
#include "leakguard.h" /* LG_ISOLATE_* */

/* The isolated calls of the recorded processes (docs/isolate.md), summed from their
 * regions (core/region.h v6), which stay mapped for the whole run: counters by outcome
 * and a histogram of the children's peak memory growth. Published once a process made
 * one. */
static void publish_isolated(lgc_collector_t *c) {
  static const char *const outcome[LG_ISOLATE_NCODES] = {"ok", "budget", "forbidden", "timeout", "crash", "error"};
  _Static_assert(LG_ISOLATE_NCODES == 6 && LG_ISOLATE_RSS_BUCKETS == LG_ISO_BUCKETS,
                 "the outcome names and buckets of leakguard.h");
  static const double upper[LG_ISO_BUCKETS - 1] = {1 << 20,   4 << 20, 16 << 20,       64 << 20,
                                                   256 << 20, 1 << 30, 4.0 * (1 << 30)};
  uint64_t req[LG_ISOLATE_NCODES] = {0}, bucket[LG_ISO_BUCKETS] = {0}, total = 0;
  double sum = 0;
  for (int i = 0; i < c->nprocs; i++) {
    lg_region_hdr_t *h = c->procs[i]->m.hdr;
    if (!h) continue;
    for (int k = 0; k < LG_ISOLATE_NCODES; k++) {
      uint64_t v = atomic_load_explicit(&h->iso_requests[k], memory_order_relaxed);
      req[k] += v;
      total += v;
    }
    for (int k = 0; k < LG_ISO_BUCKETS; k++)
      bucket[k] += atomic_load_explicit(&h->iso_rss_bucket[k], memory_order_relaxed);
    sum += (double)atomic_load_explicit(&h->iso_rss_sum, memory_order_relaxed);
  }
  if (!total) return;
  lgx_registry_t *r = c->reg;
  lgx_declare_m(r, LGX_ISOLATED_REQUESTS);
  lgx_declare_m(r, LGX_ISOLATED_PEAK_RSS);
  for (int k = 0; k < LG_ISOLATE_NCODES; k++) {
    const char *l[] = {"outcome", outcome[k], NULL};
    lgx_set_m(r, LGX_ISOLATED_REQUESTS, l, (double)req[k]);
  }
  lgx_set_histogram_m(r, LGX_ISOLATED_PEAK_RSS, NULL, upper, bucket, LG_ISO_BUCKETS, sum);
}

/* Publishes the live analysis as Prometheus metrics (top sites only: bounded). */
static void publish_metrics(lgc_collector_t *c, const lgv_frame_t *fr, uint64_t usage) {
  lgx_registry_t *r = c->reg;
  lgx_declare_m(r, LGX_RSS_BYTES);
  lgx_declare_m(r, LGX_LEAK_SUSPECTS);
  lgx_declare_m(r, LGX_SITE_LIVE_BYTES);
  lgx_declare_m(r, LGX_SITE_GROWTH);
  lgx_declare_m(r, LGX_TIME_TO_OOM);
  lgx_declare_m(r, LGX_DROPPED_RECORDS);
  lgx_declare_m(r, LGX_STEPS);
  lgx_declare_m(r, LGX_TAG_LIVE_BYTES);
  lgx_declare_m(r, LGX_TAG_PEAK_BYTES);
  {
    /* leakguard_live_bytes by space and GPU, and the CUDA metrics (docs/cuda.md) */
    const lgm_proc_t *ps[256];
    int np = 0;
    for (int i = 0; i < c->nprocs && np < 256; i++) ps[np++] = &c->procs[i]->m;
    lgx_publish_memory(r, ps, np);
  }
  publish_isolated(c);
  lgx_set_m(r, LGX_RSS_BYTES, NULL, (double)fr->rss_bytes);
  lgx_set_m(r, LGX_LEAK_SUSPECTS, NULL, fr->nrows);
  lgx_set_m(r, LGX_DROPPED_RECORDS, NULL, (double)fr->dropped);
  lgx_set_m(r, LGX_STEPS, NULL, (double)fr->steps);
  double headroom = fr->limit > usage ? (double)(fr->limit - usage) : 0;
  const char *rl[] = {"source", "recorder", NULL};
  lgx_set_m(r, LGX_TIME_TO_OOM, rl, fr->growth_bps > 0 ? headroom / fr->growth_bps : INFINITY);
  lgx_clear_m(r, LGX_SITE_LIVE_BYTES);
  lgx_clear_m(r, LGX_SITE_GROWTH);
  for (int i = 0; i < fr->nrows && i < 10; i++) {
    char pid[16];
    snprintf(pid, sizeof pid, "%d", fr->rows[i].pid);
    const char *l[] = {"site", fr->rows[i].label, "pid", pid, NULL};
    lgx_set_m(r, LGX_SITE_LIVE_BYTES, l, fr->rows[i].live_bytes);
    lgx_set_m(r, LGX_SITE_GROWTH, l, fr->rows[i].growth_bps);
  }
  /* top tags by live bytes over all live processes */
  lgx_clear_m(r, LGX_TAG_LIVE_BYTES);
  lgx_clear_m(r, LGX_TAG_PEAK_BYTES);
  struct {
    const lg_tag_rec_t *t;
    int pid;
  } top[10];
  int ntop = 0;
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    if (p->m.ended) continue;
    const lg_region_hdr_t *h = p->m.hdr;
    uint32_t nt = atomic_load(&((lg_region_hdr_t *)h)->ntags);
    if (nt > h->tags_cap) nt = h->tags_cap;
    const lg_tag_rec_t *tags = LG_PTR(h, h->tags_off, const lg_tag_rec_t *);
    for (uint32_t k = 1; k < nt; k++) {
      int64_t live = atomic_load(&((lg_tag_rec_t *)&tags[k])->live_bytes);
      int at = ntop < 10 ? ntop++ : 9;
      if (at == 9 && ntop == 10 && top[9].t && atomic_load(&((lg_tag_rec_t *)top[9].t)->live_bytes) >= live) continue;
      top[at].t = &tags[k];
      top[at].pid = p->m.pid;
      for (; at > 0 && atomic_load(&((lg_tag_rec_t *)top[at - 1].t)->live_bytes) < live; at--) {
        __typeof__(top[0]) x = top[at];
        top[at] = top[at - 1];
        top[at - 1] = x;
      }
    }
  }
  for (int i = 0; i < ntop; i++) {
    char name[LG_TAG_NAME + 1], pid[16];
    memcpy(name, top[i].t->name, LG_TAG_NAME);
    name[LG_TAG_NAME] = 0;
    snprintf(pid, sizeof pid, "%d", top[i].pid);
    const char *l[] = {"tag", name, "pid", pid, NULL};
    lgx_set_m(r, LGX_TAG_LIVE_BYTES, l, (double)atomic_load(&((lg_tag_rec_t *)top[i].t)->live_bytes));
    lgx_set_m(r, LGX_TAG_PEAK_BYTES, l, (double)atomic_load(&((lg_tag_rec_t *)top[i].t)->peak_bytes));
  }
  if (c->guard) lgg_export(c->guard, r);
}

/* suspects-PID.json in the private directory, for `leakguard.suspects()` in the
 * target (docs/python.md). Written to a temporary name, then renamed: atomic. list is
 * taken (NULL: it could not be made whole; the last file stays). An empty list is not
 * written until a list was (a missing file reads as one): every process of a wrapper,
 * waiting for its lazy start, made a file at every tick, and a file's creation takes
 * ~0.8 ms of the collector's loop on some disks (this VM's ext4 /tmp). */
static void write_suspects(lgc_collector_t *c, lgc_proc_t *p, double elapsed, cJSON *list) {
  if (list && !p->suspects_written && cJSON_GetArraySize(list) == 0) {
    cJSON_Delete(list);
    return;
  }
  cJSON *root = cJSON_CreateObject();
  int ok = root && cJSON_AddNumberToObject(root, "pid", p->m.pid) && cJSON_AddNumberToObject(root, "t", elapsed);
  ok = lgc_json_put(ok ? root : NULL, "suspects", list) && ok;
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (!text) return;
  char tmp[128], path[128];
  snprintf(tmp, sizeof tmp, "%s/" LG_FILE_SUSPECTS_TMP, c->dir, p->m.pid);
  snprintf(path, sizeof path, "%s/" LG_FILE_SUSPECTS, c->dir, p->m.pid);
  FILE *f = lgu_fopen_new(tmp);
  if (f) {
    fputs(text, f);
    if (fclose(f) == 0 && rename(tmp, path) == 0) p->suspects_written = 1;
  }
  free(text);
}

/* GPU totals of the live view: recorded bytes, and the memory of the GPUs used. */
static void live_gpu_totals(lgv_frame_t *fr, const lgm_proc_t *m) {
  fr->gpu_bytes += m->gpu_bytes;
  lgm_gpu_t g[LG_GPU_MAX_DEVICES];
  int nd = lgm_gpus(m->hdr, g, LG_GPU_MAX_DEVICES);
  for (int d = 0; d < nd; d++) {
    fr->gpu_usage += (uint64_t)(m->gpu_space_bytes[d][0] + m->gpu_space_bytes[d][1]);
    if (g[d].total_bytes > fr->gpu_total) fr->gpu_total = g[d].total_bytes; /* one GPU, several processes */
  }
}

/* Stores a flag row for every stack of group g (the report dates a suspect by them). */
static void store_flags(lgc_collector_t *c, lgc_proc_t *p, const lgc_group_t *g, int gi) {
  if (!lgc_db_ok(c)) return;
  lgc_db_begin(c);
  uint64_t t_ns = p->m.start_ns + (uint64_t)(g->flag_t * 1e9);
  for (uint32_t id = 2; id < p->sites.nstacks && id < p->m.nsites && lgc_db_ok(c); id++)
    if (p->sites.group_of[id] == gi) lgc_db_write(c, lgst_flag(c->db, p->m.proc, id, t_ns, g->r.growth_bytes_per_s));
}

/* One live tick of every running process: sums its counters, samples its site groups
 * and analyses them (stores the flags of groups that began to grow). */
void lgc_live_tick(lgc_collector_t *c, uint64_t now) {
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    if (p->m.ended || atomic_load(&p->m.hdr->held)) continue; /* held by our own explanation */
    double t = (double)(now - p->m.start_ns) / 1e9;
    if (now - p->last_tick_ns >= LIVE_TICK_NS / 2) { /* no snapshot gave a point lately */
      if (lgm_collect(&p->m) != 0) continue;
      lgc_sites_tick(&p->sites, t, (double)atomic_load(&p->m.hdr->steps), p->m.sites, p->m.nsites);
      p->last_tick_ns = now;
    }
    double headroom = c->limit > lgsm_memory_usage() ? (double)(c->limit - lgsm_memory_usage()) : 0;
    if (lgc_sites_analyse(&p->sites, t, (double)p->m.live_bytes, headroom) > 0)
      for (int gi = 0; gi < p->sites.n; gi++)
        if (p->sites.g[gi].growing && p->sites.g[gi].flag_t == t) store_flags(c, p, &p->sites.g[gi], gi);
  }
}

/* Asks a Python process to explain who holds its growing sites while it runs (the
 * module's watcher thread polls explain-PID.json, docs/python.md): when a site still grows
 * a second after it was flagged, and again when its live memory doubled since it was
 * last asked about. At
 * most one request a second per process: each explain pauses the program's Python
 * threads while it walks the objects. A list in a function's locals can only be
 * explained while that function runs. */
/* Whether group gi of p is to be explained now (see request_explain). Only a Python
 * line's: a stack without a Python frame was allocated while no Python code ran (the
 * interpreter's own start-up, a C thread), and no object the walk can name points at it,
 * as the exit hook judges (lg_python_startup_largest). On a loaded machine the
 * interpreter's start-up (its static types, pycore_init_types) took two seconds, was
 * flagged still growing a second later, and a healthy program was paused for a walk
 * (python_3.13_module, the flake hunt of 2026-12-05). */
static int wants_explain(const lgc_proc_t *p, int gi, uint64_t now) {
  const lgc_group_t *g = &p->sites.g[gi];
  /* still growing a second after it was flagged: a start-up burst (imports) is over by then */
  double age = (double)(now - p->m.start_ns) / 1e9 - g->flag_t;
  return g->python && g->growing && age >= 1.0 && !(p->explained[gi] > 0 && g->live < 2 * p->explained[gi]);
}

/* Writes the request text into explain-PID.json (atomically: a temporary renamed). */
static int write_request(const lgc_collector_t *c, const lgc_proc_t *p, const char *text) {
  char tmp[128], path[128];
  snprintf(tmp, sizeof tmp, "%s/" LG_FILE_EXPLAIN_TMP, c->dir, p->m.pid);
  snprintf(path, sizeof path, "%s/" LG_FILE_EXPLAIN, c->dir, p->m.pid);
  FILE *f = text ? lgu_fopen_new(tmp) : NULL;
  if (!f) return 0;
  fputs(text, f);
  int ok = fclose(f) == 0 && rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  return ok;
}

/* A request is answered by a holders file that names it (files.c). Until then it is
 * written again every EXPLAIN_RESEND_NS (a notice the program's watcher missed: a
 * rewrite changes the file's time; the module serves each seq once, so a request it
 * is serving is not served twice), and given up after EXPLAIN_GIVE_UP_NS without an
 * answer: the main thread ran no Python code all that while (a long call in C, a
 * stopped or swapped-out process), or the module was not there to serve it. Giving
 * up is stored (explains, outcome 'unanswered'): the report says why a leak has no
 * holder. A later answer still counts. No new request while one waits: the module
 * would explain twice. The walk's budget is CPU time (src/python/explain.h): under
 * load its answer takes longer in wall time, hence the generous bound. */
#define EXPLAIN_RESEND_NS 3000000000ULL
#define EXPLAIN_GIVE_UP_NS 30000000000ULL

void lgc_explain_give_up(lgc_collector_t *c, lgc_proc_t *p, uint64_t now, const char *why) {
  if (!p->explain_pending) return;
  char note[256];
  snprintf(note, sizeof note, "asked %d time%s over %.1f s from %.1f s after the start: %s", p->explain_tries,
           p->explain_tries == 1 ? "" : "s", (double)(now - p->explain_asked_ns) / 1e9,
           (double)(p->explain_asked_ns - p->m.start_ns) / 1e9, why);
  lgst_explain_t e = {
      0, p->explain_pending, now, (int64_t)atomic_load(&p->m.hdr->steps), "unanswered", "request", 0, 0, 0, 0, note};
  if (lgc_db_ok(c)) {
    lgc_db_begin(c);
    lgc_db_write(c, lgst_explain(c->db, p->m.proc, &e));
  }
  p->explain_pending = 0;
  free(p->explain_req);
  p->explain_req = NULL;
}

/* 1 while a request of p waits for its answer (sent again, or given up, here). */
static int explain_waiting(lgc_collector_t *c, lgc_proc_t *p, uint64_t now) {
  if (!p->explain_pending) return 0;
  if (now - p->explain_asked_ns >= EXPLAIN_GIVE_UP_NS) {
    lgc_explain_give_up(c, p, now, "no answer; the program's main thread ran no Python code meanwhile");
    return 0;
  }
  if (now - p->explain_sent_ns >= EXPLAIN_RESEND_NS && write_request(c, p, p->explain_req)) {
    p->explain_sent_ns = now;
    p->explain_tries++;
  }
  return 1;
}

/* all: every growing group now, whatever its age or the last request (detach). 1 when a
 * request was written. */
static int request_explain(lgc_collector_t *c, lgc_proc_t *p, uint64_t now, int all) {
  if (!p->python || (!all && now - p->last_explain_ns < 1000000000ULL)) return 0;
  if (!all && explain_waiting(c, p, now)) return 0;
  if ((uint32_t)p->sites.n > p->nexplained) {
    double *n = realloc(p->explained, (size_t)p->sites.n * sizeof *n);
    if (!n) return 0;
    for (uint32_t i = p->nexplained; i < (uint32_t)p->sites.n; i++) n[i] = 0;
    p->explained = n;
    p->nexplained = (uint32_t)p->sites.n;
  }
  cJSON *ids = NULL;
  int ok = 1, any = 0;
  for (int gi = 0; ok && gi < p->sites.n; gi++) {
    if (!(all ? p->sites.g[gi].growing && p->sites.g[gi].python : wants_explain(p, gi, now))) continue;
    if (!any++) ok = (ids = cJSON_CreateArray()) != NULL;
    for (uint32_t id = 2, k = 0; ok && id < p->sites.nstacks && k < 256; id++)
      if (p->sites.group_of[id] == gi) ok = lgc_json_push(ids, cJSON_CreateNumber(id)), k++;
  }
  if (!any) return 0;
  cJSON *root = ok ? cJSON_CreateObject() : NULL;
  ok = root && cJSON_AddNumberToObject(root, "seq", p->explain_seq + 1);
  ok = lgc_json_put(ok ? root : NULL, "stacks", ids) && ok;
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  /* asked: not again until its memory doubled; a request that could not be made
   * (out of memory) is made at the next tick */
  if (!write_request(c, p, text)) {
    free(text);
    return 0;
  }
  p->explain_seq++;
  p->last_explain_ns = now;
  free(p->explain_req);
  p->explain_req = text;
  p->explain_pending = p->explain_seq;
  p->explain_asked_ns = p->explain_sent_ns = now;
  p->explain_tries = 1;
  for (int gi = 0; gi < p->sites.n; gi++)
    if (all ? p->sites.g[gi].growing && p->sites.g[gi].python : wants_explain(p, gi, now))
      p->explained[gi] = p->sites.g[gi].live > 1 ? p->sites.g[gi].live : 1;
  return 1;
}

/* `leakguard attach` is about to detach: every Python process still connected is asked
 * to explain all its growing sites now (the program goes on running, so no exit hook
 * will). The number of processes asked. */
int lgc_explain_final(lgc_collector_t *c) {
  int asked = 0;
  uint64_t now = lgu_now_ns();
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" LG_FILE_PYBOOT, c->dir, p->m.pid);
    if (access(path, F_OK) == 0) continue; /* the module could not be set up there */
    if (!p->m.ended && p->m.conn >= 0) asked += request_explain(c, p, now, 1);
  }
  return asked;
}

/* The live results of every running process: the live view, guard hints, metrics,
 * suspects files for the Python module. */
void lgc_live_update(lgc_collector_t *c, double elapsed) {
  lgv_frame_t fr;
  memset(&fr, 0, sizeof fr);
  fr.elapsed_s = elapsed;
  fr.limit = c->limit;
  fr.limit_source = c->limit_source;
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    if (p->m.ended) continue;
    fr.nprocs++;
    fr.live_bytes += p->m.live_bytes;
    fr.rss_bytes += p->m.rss_bytes;
    fr.steps += atomic_load(&p->m.hdr->steps);
    fr.dropped += atomic_load(&p->m.hdr->dropped);
    live_gpu_totals(&fr, &p->m);
    if (!fr.pid) {
      fr.pid = p->m.pid;
      snprintf(fr.command, sizeof fr.command, "%s", p->m.command);
    }
    double proc_growth = 0;
    cJSON *sus = cJSON_CreateArray();
    int sus_ok = sus != NULL; /* a list missing a part is not written */
    /* significant growth first, then sites that grow but not (yet) significantly: the
     * Python module explains the first few of the list */
    for (int pass = 0; pass < 2; pass++)
      for (int gi = 0; gi < p->sites.n; gi++) {
        const lgc_group_t *g = &p->sites.g[gi];
        if (pass == 0 ? !g->growing : (g->growing || !g->r.leak)) continue;
        const lgd_result_t *r = &g->r;
        if (pass == 0) {
          lgv_row_t row = {r->growth_bytes_per_s, g->live, r->pattern, p->m.pid, g->label, NULL, 0};
          if (g->space >= LG_SPACE_DEVICE && g->space <= LG_SPACE_PINNED) {
            row.space = lg_space_name((lg_space_t)g->space);
            row.device = g->device;
          }
          if (g->space == LG_SPACE_DEVICE || g->space == LG_SPACE_MANAGED) {
            fr.gpu_growth_bps += r->growth_bytes_per_s; /* grows toward the GPU's memory, not the host limit */
          } else {
            fr.growth_bps += r->growth_bytes_per_s;
            proc_growth += r->growth_bytes_per_s;
          }
          lgv_add_row(&fr, &row);
        }
        if (!sus_ok) continue;
        cJSON *o = cJSON_CreateObject(), *ids = NULL;
        int ok = o && cJSON_AddBoolToObject(o, "significant", pass == 0) &&
                 cJSON_AddNumberToObject(o, "stack", g->rep_stack) && (ids = cJSON_AddArrayToObject(o, "stacks"));
        for (uint32_t id = 2, k = 0; ok && id < p->sites.nstacks && k < 256; id++)
          if (p->sites.group_of[id] == gi) ok = lgc_json_push(ids, cJSON_CreateNumber(id)), k++;
        ok = ok && cJSON_AddNumberToObject(o, "growth_bytes_per_s", r->growth_bytes_per_s) &&
             cJSON_AddNumberToObject(o, "live_bytes", g->live) &&
             cJSON_AddStringToObject(o, "pattern", lg_pattern_name(r->pattern)) &&
             cJSON_AddNumberToObject(o, "flagged_at_s", g->flag_t);
        cJSON *fj = ok && g->frames_json ? cJSON_Parse(g->frames_json) : NULL;
        ok = lgc_json_put(ok ? o : NULL, "frames", fj ? fj : cJSON_CreateArray()) && ok;
        if (!ok) cJSON_Delete(o), o = NULL;
        sus_ok = lgc_json_push(sus, o);
      }
    if (c->guard && proc_growth > 0) lgg_hint_growth(c->guard, p->m.pid, proc_growth);
    if (!sus_ok) cJSON_Delete(sus), sus = NULL;
    write_suspects(c, p, elapsed, sus);
    request_explain(c, p, lgu_now_ns(), 0);
  }
  uint64_t usage = c->limit_given ? (uint64_t)fr.rss_bytes : lgsm_memory_usage();
  fr.usage = usage;
  if (c->view) lgv_draw(c->view, &fr);
  if (c->reg) publish_metrics(c, &fr, usage);
}
