/* SPDX-License-Identifier: MIT */
/*
 * render_json.c - the findings as JSON, for scripts (docs/json.md; fields are only
 * ever added): a cJSON tree, printed whole (render.h).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "findings/report.h"
#include "output/render.h"

/* The JSON report is a cJSON tree, and cJSON's constructors return NULL (or false)
 * when an allocation fails: every one of them goes through JPTR/JCHK, and a report
 * with a missing field is an error (-ENOMEM), never printed. One report is printed at
 * a time per thread. */
static _Thread_local int json_oom;
static void *jptr(void *p) {
  if (!p) json_oom = 1;
  return p;
}
#define JPTR(x) ((__typeof__(x))jptr(x))
/* Attach item to a parent; when that fails (item or parent NULL), item is freed. */
static void jobj(cJSON *parent, const char *key, cJSON *item) {
  if (!cJSON_AddItemToObject(parent, key, item)) {
    json_oom = 1;
    cJSON_Delete(item);
  }
}
static void jarr(cJSON *parent, cJSON *item) {
  if (!cJSON_AddItemToArray(parent, item)) {
    json_oom = 1;
    cJSON_Delete(item);
  }
}
#define JCHK(x)                                                                                                        \
  do {                                                                                                                 \
    if (!(x)) json_oom = 1;                                                                                            \
  } while (0)

static const lgr_run_t *run_of(const lgr_report_t *r, int proc) {
  for (int i = 0; i < r->nruns; i++)
    if (r->runs[i].proc == proc) return &r->runs[i];
  return NULL;
}

/* ------------------------------------------------------------------ JSON */

static cJSON *num_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static double round2(double v) { return isfinite(v) ? round(v * 100) / 100 : v; }

/* Significant figures for small and large values alike (lifetimes span us to hours). */
static double sig3(double v) {
  if (!isfinite(v) || v == 0) return v;
  double m = pow(10, 2 - floor(log10(fabs(v))));
  return round(v * m) / m;
}

/* Into d: "freed", the blocks freed by age bucket ([{"lt_s" or "lt_steps": the bucket's
 * bound (null: the open last one), "blocks"}], empty buckets left out), and the 50th,
 * 90th, 99th percentiles pct ("p50_lt_s"... or "p50_lt_steps"..., "kept" for a kept
 * block). */
static void ages_json(cJSON *d, const double *freed, const double pct[3], int steps) {
  static const char *const pn[2][3] = {{"p50_lt_s", "p90_lt_s", "p99_lt_s"},
                                       {"p50_lt_steps", "p90_lt_steps", "p99_lt_steps"}};
  const char *lt = steps ? "lt_steps" : "lt_s";
  cJSON *b = JPTR(cJSON_CreateArray());
  for (int i = 0; i < LGR_AGES; i++) {
    if (!(freed[i] > 0)) continue;
    cJSON *o = JPTR(cJSON_CreateObject());
    if (i == LGR_AGES - 1) jobj(o, lt, cJSON_CreateNull());
    else JCHK(cJSON_AddNumberToObject(o, lt, steps ? LGR_AGE_LE_STEPS(i) : LGR_AGE_LE_S(i)));
    JCHK(cJSON_AddNumberToObject(o, "blocks", round(freed[i])));
    jarr(b, o);
  }
  jobj(d, "freed", b);
  for (int i = 0; i < 3; i++)
    jobj(d, pn[steps][i], isinf(pct[i]) ? cJSON_CreateString("kept") : num_or_null(steps ? pct[i] : sig3(pct[i])));
}

static cJSON *life_json(const lgr_life_t *l) {
  if (l->gen < 0) return cJSON_CreateNull();
  cJSON *x = JPTR(cJSON_CreateObject());
  JCHK(cJSON_AddStringToObject(x, "generation", lgr_gen_name(l->gen)));
  jobj(x, "mean_s", num_or_null(sig3(l->mean_s)));
  jobj(x, "below_s", l->below_s > 0 ? num_or_null(sig3(l->below_s)) : cJSON_CreateNull());
  jobj(x, "mean_steps", num_or_null(sig3(l->mean_steps)));
  JCHK(cJSON_AddNumberToObject(x, "kept", round2(l->kept)));
  /* the distribution (lifetimes table): null without one */
  if (l->nfreed > 0) {
    cJSON *d = JPTR(cJSON_CreateObject());
    JCHK(cJSON_AddNumberToObject(d, "resolution_s", 0.1));
    JCHK(cJSON_AddNumberToObject(d, "freed_blocks", round(l->nfreed)));
    const double pv[3] = {l->p50_le_s, l->p90_le_s, l->p99_le_s};
    ages_json(d, l->freed, pv, 0);
    /* the same in steps (step_lifetimes): null without steps */
    if (l->nsfreed > 0) {
      cJSON *sd = JPTR(cJSON_CreateObject());
      JCHK(cJSON_AddNumberToObject(sd, "freed_blocks", round(l->nsfreed)));
      const double sv[3] = {l->p50_le_steps, l->p90_le_steps, l->p99_le_steps};
      ages_json(sd, l->sfreed, sv, 1);
      jobj(d, "steps", sd);
    } else {
      jobj(d, "steps", cJSON_CreateNull());
    }
    jobj(x, "distribution", d);
  } else {
    jobj(x, "distribution", cJSON_CreateNull());
  }
  return x;
}

static cJSON *frame_json(const lgr_frame_t *fr) {
  cJSON *x = JPTR(cJSON_CreateObject());
  JCHK(cJSON_AddStringToObject(x, "function", fr->function));
  if (fr->file[0]) JCHK(cJSON_AddStringToObject(x, "file", fr->file));
  else JCHK(cJSON_AddNullToObject(x, "file"));
  if (fr->line) JCHK(cJSON_AddNumberToObject(x, "line", fr->line));
  else JCHK(cJSON_AddNullToObject(x, "line"));
  JCHK(cJSON_AddStringToObject(x, "module", fr->module));
  if (fr->inlined) JCHK(cJSON_AddTrueToObject(x, "inlined"));
  return x;
}

/* A holder's detail (findings/report.h: the Python module's, in its order). */
static cJSON *detail_json(const lgr_detail_t *d) {
  cJSON *j;
  switch (d->type) {
  case LGR_DETAIL_FALSE: return JPTR(cJSON_CreateFalse());
  case LGR_DETAIL_TRUE: return JPTR(cJSON_CreateTrue());
  case LGR_DETAIL_NUMBER: return JPTR(cJSON_CreateNumber(d->number));
  case LGR_DETAIL_TEXT: return JPTR(cJSON_CreateString(d->text));
  case LGR_DETAIL_LIST:
  case LGR_DETAIL_GROUP:
    j = JPTR(d->type == LGR_DETAIL_LIST ? cJSON_CreateArray() : cJSON_CreateObject());
    for (int i = 0; i < d->nitems; i++) {
      if (d->type == LGR_DETAIL_LIST) jarr(j, detail_json(&d->items[i]));
      else jobj(j, d->items[i].name, detail_json(&d->items[i]));
    }
    return j;
  default: return JPTR(cJSON_CreateNull());
  }
}

/* A holder {chain, objects, bytes, kind, detail, kept_at} (docs/json.md); a leak's
 * without its detail. */
static cJSON *holder_json(const lgr_holder_t *h, int with_detail) {
  cJSON *j = JPTR(cJSON_CreateObject());
  cJSON *c = JPTR(cJSON_AddArrayToObject(j, "chain"));
  for (int i = 0; i < h->nchain; i++) jarr(c, h->chain[i] ? cJSON_CreateString(h->chain[i]) : cJSON_CreateNull());
  JCHK(cJSON_AddNumberToObject(j, "objects", h->objects));
  JCHK(cJSON_AddNumberToObject(j, "bytes", h->bytes));
  JCHK(cJSON_AddStringToObject(j, "kind", h->kind));
  if (with_detail && h->detail) jobj(j, "detail", detail_json(h->detail));
  const lgr_kept_at_t *k = &h->kept_at;
  if (k->file) {
    cJSON *o = JPTR(cJSON_AddObjectToObject(j, "kept_at"));
    JCHK(cJSON_AddStringToObject(o, "file", k->file));
    JCHK(cJSON_AddNumberToObject(o, "line", k->line));
    JCHK(cJSON_AddStringToObject(o, "function", k->function));
    JCHK(cJSON_AddStringToObject(o, "container", k->container));
    if (k->source) JCHK(cJSON_AddStringToObject(o, "source", k->source));
  }
  return j;
}

/* A site that grew then released (lgr_site_t.released), or NULL. */
static cJSON *released_json(const lgr_site_t *s) {
  cJSON *j = JPTR(cJSON_CreateObject());
  JCHK(cJSON_AddNumberToObject(j, "first_bytes", (double)s->released_first_bytes));
  JCHK(cJSON_AddNumberToObject(j, "peak_bytes", (double)s->released_peak_bytes));
  jobj(j, "peak_at_s", num_or_null(round2(s->released_peak_s)));
  JCHK(cJSON_AddNumberToObject(j, "end_bytes", (double)s->released_end_bytes));
  return j;
}

static cJSON *site_json(const lgr_report_t *r, const lgr_site_t *s, int rank, int with_rank) {
  cJSON *j = JPTR(cJSON_CreateObject());
  if (with_rank) JCHK(cJSON_AddNumberToObject(j, "rank", rank));
  JCHK(cJSON_AddNumberToObject(j, "pid", s->pid));
  const lgr_run_t *u = run_of(r, s->proc);
  if (u && u->rank >= 0) JCHK(cJSON_AddNumberToObject(j, "process_rank", u->rank));
  JCHK(cJSON_AddStringToObject(j, "space", s->space));
  if (s->device >= 0) JCHK(cJSON_AddNumberToObject(j, "device", s->device));
  if (s->has_um) {
    cJSON *um = JPTR(cJSON_AddObjectToObject(j, "unified_memory"));
    JCHK(cJSON_AddNumberToObject(um, "cpu_page_faults", (double)s->um_cpu_faults));
    JCHK(cJSON_AddNumberToObject(um, "gpu_page_faults", (double)s->um_gpu_faults));
    JCHK(cJSON_AddNumberToObject(um, "bytes_to_device", (double)s->um_bytes_htod));
    JCHK(cJSON_AddNumberToObject(um, "bytes_to_host", (double)s->um_bytes_dtoh));
    JCHK(cJSON_AddNumberToObject(um, "thrashing", (double)s->um_thrashing));
  }
  JCHK(cJSON_AddNumberToObject(j, "live_bytes", (double)s->live_bytes));
  JCHK(cJSON_AddNumberToObject(j, "live_blocks", (double)s->live_blocks));
  JCHK(cJSON_AddNumberToObject(j, "peak_live_bytes", (double)s->peak_live_bytes));
  JCHK(cJSON_AddNumberToObject(j, "allocated_bytes", (double)s->alloc_bytes));
  JCHK(cJSON_AddNumberToObject(j, "allocated_blocks", (double)s->alloc_blocks));
  jobj(j, "growth_bytes_per_s", num_or_null(round2(s->r.growth_bytes_per_s)));
  jobj(j, "growth_bytes_per_step", num_or_null(round2(s->r.growth_bytes_per_step)));
  jobj(j, "time_to_oom_s", num_or_null(round2(s->time_to_oom_s)));
  JCHK(cJSON_AddNumberToObject(j, "confidence", round2(s->r.confidence)));
  JCHK(cJSON_AddStringToObject(j, "pattern", lg_pattern_name(s->r.pattern)));
  jobj(j, "oldest_block_age_s", num_or_null(round2(s->oldest_age_s)));
  jobj(j, "lifetime", life_json(&s->life));
  if (with_rank) {
    jobj(j, "detected_after_s", num_or_null(round2(s->detected_after_s)));
    jobj(j, "growing_since_s", num_or_null(round2(s->r.since_s)));
    JCHK(cJSON_AddNumberToObject(j, "blocks_gained", (double)s->blocks_gained));
    JCHK(cJSON_AddNumberToObject(j, "held_bytes", (double)s->held_bytes));
    if (s->leak >= 0) JCHK(cJSON_AddNumberToObject(j, "leak", s->leak + 1));
    else JCHK(cJSON_AddNullToObject(j, "leak"));
  }
  JCHK(cJSON_AddNumberToObject(j, "stack", s->stack));
  if (s->spread_sites) JCHK(cJSON_AddNumberToObject(j, "spread_sites", s->spread_sites));
  if (s->nframes) {
    cJSON *site = frame_json(&s->frames[s->site_frame]);
    if (s->source) JCHK(cJSON_AddStringToObject(site, "source", s->source));
    jobj(j, "site", site);
    /* the innermost Python line when it is library code below the program's own */
    if (s->lib_frame > 0 && s->lib_frame <= s->nframes)
      jobj(j, "library_site", frame_json(&s->frames[s->lib_frame - 1]));
    else JCHK(cJSON_AddNullToObject(j, "library_site"));
  } else {
    JCHK(cJSON_AddNullToObject(j, "site"));
  }
  cJSON *hl = JPTR(cJSON_AddArrayToObject(j, "holders"));
  for (int k = 0; k < s->nholders; k++) jarr(hl, holder_json(&s->holders[k], 1));
  if (s->bounded) {
    cJSON *bd = JPTR(cJSON_CreateObject());
    if (s->bounded->container) JCHK(cJSON_AddStringToObject(bd, "container", s->bounded->container));
    if (!isnan(s->bounded->maxsize)) JCHK(cJSON_AddNumberToObject(bd, "maxsize", s->bounded->maxsize));
    if (!isnan(s->bounded->size)) JCHK(cJSON_AddNumberToObject(bd, "size", s->bounded->size));
    jobj(j, "bounded", bd);
  }
  if (s->startup) JCHK(cJSON_AddStringToObject(j, "startup", "import"));
  if (s->released) jobj(j, "released", released_json(s)); /* grew then released: not a leak */
  cJSON *fr = JPTR(cJSON_AddArrayToObject(j, "frames"));
  for (int k = 0; k < s->nframes; k++) jarr(fr, frame_json(&s->frames[k]));
  cJSON *st = JPTR(cJSON_AddArrayToObject(j, "stacks"));
  for (int k = 0; k < s->nstacks && k < 32; k++) {
    cJSON *x = JPTR(cJSON_CreateObject());
    JCHK(cJSON_AddNumberToObject(x, "stack", s->stacks[k].stack));
    JCHK(cJSON_AddNumberToObject(x, "live_bytes", (double)s->stacks[k].live_bytes));
    JCHK(cJSON_AddNumberToObject(x, "peak_live_bytes", (double)s->stacks[k].peak_live_bytes));
    jarr(st, x);
  }
  if (s->nstacks > 32) JCHK(cJSON_AddNumberToObject(j, "stacks_omitted", s->nstacks - 32));
  return j;
}

/* A site of the text's "Largest live sites at the peak" (findings/peak.c). */
static cJSON *peak_json(const lgr_report_t *r, const lgr_site_t *s) {
  cJSON *j = JPTR(cJSON_CreateObject());
  JCHK(cJSON_AddNumberToObject(j, "pid", s->pid));
  const lgr_run_t *u = run_of(r, s->proc);
  if (u && u->rank >= 0) JCHK(cJSON_AddNumberToObject(j, "process_rank", u->rank));
  JCHK(cJSON_AddStringToObject(j, "space", s->space));
  JCHK(cJSON_AddNumberToObject(j, "live_bytes_at_peak", (double)s->peak_proc_bytes));
  JCHK(cJSON_AddNumberToObject(j, "live_bytes", (double)s->live_bytes));
  if (s->unjudged) JCHK(cJSON_AddNullToObject(j, "pattern"));
  else JCHK(cJSON_AddStringToObject(j, "pattern", lg_pattern_name(s->r.pattern)));
  JCHK(cJSON_AddNumberToObject(j, "stack", s->stack));
  if (s->nframes) jobj(j, "site", frame_json(&s->frames[s->site_frame]));
  else JCHK(cJSON_AddNullToObject(j, "site"));
  if (s->lib_frame > 0 && s->lib_frame <= s->nframes) /* as a suspect's (site_json) */
    jobj(j, "library_site", frame_json(&s->frames[s->lib_frame - 1]));
  else JCHK(cJSON_AddNullToObject(j, "library_site"));
  if (s->released) jobj(j, "released", released_json(s));
  return j;
}

static cJSON *leak_json(const lgr_report_t *r, int j) {
  const lgr_leak_t *L = &r->leaks[j];
  cJSON *x = JPTR(cJSON_CreateObject());
  JCHK(cJSON_AddNumberToObject(x, "rank", j + 1));
  cJSON *sus = JPTR(cJSON_AddArrayToObject(x, "suspects"));
  for (int k = 0; k < L->nsuspects; k++) jarr(sus, cJSON_CreateNumber(L->suspects[k] + 1));
  JCHK(cJSON_AddStringToObject(x, "by", L->by));
  if (L->holder) {
    jobj(x, "holder", holder_json(L->holder, 0));
  } else {
    JCHK(cJSON_AddNullToObject(x, "holder"));
  }
  if (L->no_holder) JCHK(cJSON_AddStringToObject(x, "no_holder", L->no_holder));
  else JCHK(cJSON_AddNullToObject(x, "no_holder"));
  if (L->fix) JCHK(cJSON_AddStringToObject(x, "fix", L->fix));
  else JCHK(cJSON_AddNullToObject(x, "fix"));
  JCHK(cJSON_AddNumberToObject(x, "pid", L->pid));
  if (L->rank >= 0) JCHK(cJSON_AddNumberToObject(x, "process_rank", L->rank));
  else JCHK(cJSON_AddNullToObject(x, "process_rank"));
  const lgr_run_t *lu = run_of(r, L->proc);
  if (lu && lu->host) JCHK(cJSON_AddStringToObject(x, "host", lu->host));
  else JCHK(cJSON_AddNullToObject(x, "host"));
  JCHK(cJSON_AddNumberToObject(x, "live_bytes", (double)L->live_bytes));
  jobj(x, "growth_bytes_per_s", num_or_null(round2(L->growth_bytes_per_s)));
  jobj(x, "growth_bytes_per_step", num_or_null(round2(L->growth_bytes_per_step)));
  JCHK(cJSON_AddStringToObject(x, "pattern", lg_pattern_name(L->pattern)));
  JCHK(cJSON_AddNumberToObject(x, "confidence", round2(L->confidence)));
  jobj(x, "detected_after_s", num_or_null(round2(L->detected_after_s)));
  jobj(x, "time_to_oom_s", num_or_null(round2(L->time_to_oom_s)));
  return x;
}

/* "gpus", "cuda_notes", "torch_cuda", "nvml" (docs/json.md). */
static void gpus_json(cJSON *root, const lgr_report_t *r) {
  cJSON *arr = JPTR(cJSON_AddArrayToObject(root, "gpus"));
  for (int i = 0; i < r->ngpus; i++) {
    const lgr_gpu_t *g = &r->gpus[i];
    cJSON *j = JPTR(cJSON_CreateObject());
    JCHK(cJSON_AddNumberToObject(j, "pid", g->pid));
    JCHK(cJSON_AddNumberToObject(j, "device", g->device));
    JCHK(cJSON_AddNumberToObject(j, "device_bytes", (double)g->device_bytes));
    JCHK(cJSON_AddNumberToObject(j, "managed_bytes", (double)g->managed_bytes));
    JCHK(cJSON_AddNumberToObject(j, "pinned_bytes", (double)g->pinned_bytes));
    JCHK(cJSON_AddNumberToObject(j, "peak_device_bytes", (double)g->peak_device_bytes));
    JCHK(cJSON_AddNumberToObject(j, "registered_bytes", (double)g->registered_bytes));
    JCHK(cJSON_AddNumberToObject(j, "pool_reserved_bytes", (double)g->pool_reserved_bytes));
    JCHK(cJSON_AddNumberToObject(j, "pool_used_bytes", (double)g->pool_used_bytes));
    JCHK(cJSON_AddNumberToObject(j, "vmm_mapped_bytes", (double)g->vmm_mapped_bytes));
    JCHK(cJSON_AddNumberToObject(j, "contexts_created", (double)g->contexts_created));
    JCHK(cJSON_AddNumberToObject(j, "contexts_destroyed", (double)g->contexts_destroyed));
    JCHK(cJSON_AddNumberToObject(j, "contexts_recreated", (double)g->contexts_recreated));
    if (g->total_bytes) JCHK(cJSON_AddNumberToObject(j, "total_bytes", (double)g->total_bytes));
    else JCHK(cJSON_AddNullToObject(j, "total_bytes"));
    if (g->has_nvml) {
      cJSON *n = JPTR(cJSON_AddObjectToObject(j, "nvml"));
      JCHK(cJSON_AddNumberToObject(n, "process_bytes", (double)g->nvml_process_bytes));
      JCHK(cJSON_AddNumberToObject(n, "untracked_bytes", (double)g->untracked_bytes));
      JCHK(cJSON_AddNumberToObject(n, "device_used_bytes", (double)g->nvml_used_bytes));
      JCHK(cJSON_AddNumberToObject(n, "device_total_bytes", (double)g->nvml_total_bytes));
    } else {
      JCHK(cJSON_AddNullToObject(j, "nvml"));
    }
    if (g->has_torch) {
      JCHK(cJSON_AddNumberToObject(j, "torch_allocated_bytes", (double)g->torch_allocated_bytes));
      JCHK(cJSON_AddNumberToObject(j, "torch_reserved_bytes", (double)g->torch_reserved_bytes));
      JCHK(cJSON_AddNumberToObject(j, "torch_peak_reserved_bytes", (double)g->torch_peak_reserved_bytes));
    } else {
      JCHK(cJSON_AddNullToObject(j, "torch_allocated_bytes"));
      JCHK(cJSON_AddNullToObject(j, "torch_reserved_bytes"));
      JCHK(cJSON_AddNullToObject(j, "torch_peak_reserved_bytes"));
    }
    jarr(arr, j);
  }
  cJSON *notes = JPTR(cJSON_AddArrayToObject(root, "cuda_notes"));
  for (int i = 0; i < r->ncuda_notes; i++) jarr(notes, cJSON_CreateString(r->cuda_notes[i]));
  if (r->torch_cuda) JCHK(cJSON_AddTrueToObject(root, "torch_cuda"));
  if (r->nvml_status) JCHK(cJSON_AddStringToObject(root, "nvml", r->nvml_status));
  cJSON *um = JPTR(cJSON_AddArrayToObject(root, "unified_memory"));
  for (int i = 0; i < r->num; i++) {
    const lgr_um_t *u = &r->um[i];
    cJSON *j = JPTR(cJSON_CreateObject());
    if (u->has_pid) JCHK(cJSON_AddNumberToObject(j, "pid", u->pid));
    JCHK(cJSON_AddNumberToObject(j, "stack", u->stack));
    JCHK(cJSON_AddStringToObject(j, "site", u->site));
    JCHK(cJSON_AddNumberToObject(j, "cpu_page_faults", u->cpu_page_faults));
    JCHK(cJSON_AddNumberToObject(j, "gpu_page_faults", u->gpu_page_faults));
    JCHK(cJSON_AddNumberToObject(j, "bytes_to_device", u->bytes_to_device));
    JCHK(cJSON_AddNumberToObject(j, "bytes_to_host", u->bytes_to_host));
    JCHK(cJSON_AddNumberToObject(j, "thrashing", u->thrashing));
    jarr(um, j);
  }
}

int lgo_render_json(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o) {
  json_oom = 0;
  cJSON *root = JPTR(cJSON_CreateObject());
  JCHK(cJSON_AddNumberToObject(root, "schema", 1));
  JCHK(cJSON_AddStringToObject(root, "verdict", r->nleaks ? "leak" : "no-leak"));
  if (r->limit_source) JCHK(cJSON_AddStringToObject(root, "limit_source", r->limit_source));
  JCHK(cJSON_AddNumberToObject(root, "import_sample_bytes", (double)r->import_sample));
  JCHK(cJSON_AddBoolToObject(root, "live", r->live));
  JCHK(cJSON_AddNumberToObject(root, "main_run", r->main_run));
  cJSON *runs = JPTR(cJSON_AddArrayToObject(root, "runs"));
  for (int i = 0; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i];
    cJSON *j = JPTR(cJSON_CreateObject());
    JCHK(cJSON_AddNumberToObject(j, "pid", u->pid));
    JCHK(cJSON_AddNumberToObject(j, "ppid", u->ppid));
    JCHK(cJSON_AddStringToObject(j, "command", u->command));
    JCHK(cJSON_AddStringToObject(j, "started_by", u->attached ? "attach" : u->kind));
    JCHK(cJSON_AddStringToObject(j, "end", u->end_reason));
    JCHK(cJSON_AddBoolToObject(j, "helper", u->helper));
    if (u->lazy == LGR_LAZY_WAITING) JCHK(cJSON_AddStringToObject(j, "lazy", "waiting"));
    if (u->lazy == LGR_LAZY_BEGAN) {
      JCHK(cJSON_AddStringToObject(j, "lazy", "began"));
      JCHK(cJSON_AddNumberToObject(j, "lazy_began_s", u->lazy_began_s));
      JCHK(cJSON_AddNumberToObject(j, "lazy_before_bytes", (double)u->lazy_before_bytes));
    }
    if (u->has_exit) JCHK(cJSON_AddNumberToObject(j, "exit_status", u->exit_status));
    else JCHK(cJSON_AddNullToObject(j, "exit_status"));
    if (u->has_signal) JCHK(cJSON_AddNumberToObject(j, "signal", u->signal));
    else JCHK(cJSON_AddNullToObject(j, "signal"));
    JCHK(cJSON_AddNumberToObject(j, "duration_s", round2(u->duration_s)));
    JCHK(cJSON_AddNumberToObject(j, "peak_live_bytes", (double)u->peak_live_bytes));
    JCHK(cJSON_AddNumberToObject(j, "final_live_bytes", (double)u->final_live_bytes));
    JCHK(cJSON_AddNumberToObject(j, "dropped_records", (double)u->dropped));
    JCHK(cJSON_AddNumberToObject(j, "steps", (double)u->steps));
    JCHK(cJSON_AddNumberToObject(j, "snapshots", (double)u->snapshots));
    JCHK(cJSON_AddNumberToObject(j, "sample_bytes", (double)u->sample_bytes));
    JCHK(cJSON_AddNumberToObject(j, "limit_bytes", (double)u->limit_bytes));
    if (u->pattern >= 0) JCHK(cJSON_AddStringToObject(j, "memory_pattern", lg_pattern_name((lg_pattern_t)u->pattern)));
    else JCHK(cJSON_AddNullToObject(j, "memory_pattern"));
    JCHK(cJSON_AddNumberToObject(j, "memory_pattern_from_s", u->pattern_from_s));
    if (u->rank >= 0) JCHK(cJSON_AddNumberToObject(j, "rank", u->rank));
    else JCHK(cJSON_AddNullToObject(j, "rank"));
    if (u->local_rank >= 0) JCHK(cJSON_AddNumberToObject(j, "local_rank", u->local_rank));
    else JCHK(cJSON_AddNullToObject(j, "local_rank"));
    if (u->world_size >= 0) JCHK(cJSON_AddNumberToObject(j, "world_size", u->world_size));
    else JCHK(cJSON_AddNullToObject(j, "world_size"));
    if (u->host) JCHK(cJSON_AddStringToObject(j, "host", u->host));
    else JCHK(cJSON_AddNullToObject(j, "host"));
    if (u->source) JCHK(cJSON_AddStringToObject(j, "source", u->source));
    else JCHK(cJSON_AddNullToObject(j, "source"));
    JCHK(cJSON_AddBoolToObject(j, "leaking", u->leaking));
    if (!isnan(u->gap_from_s)) {
      cJSON *g = JPTR(cJSON_AddObjectToObject(j, "snapshot_gap"));
      JCHK(cJSON_AddNumberToObject(g, "from_s", round2(u->gap_from_s)));
      JCHK(cJSON_AddNumberToObject(g, "to_s", round2(u->gap_to_s)));
    } else {
      JCHK(cJSON_AddNullToObject(j, "snapshot_gap"));
    }
    cJSON *nl = JPTR(cJSON_AddArrayToObject(j, "notes"));
    for (const char *n = u->notes; n && *n;) {
      const char *e = strchr(n, '\n');
      size_t len = e ? (size_t)(e - n) : strlen(n);
      char *one = strndup(n, len);
      if (!one) json_oom = 1;
      else jarr(nl, cJSON_CreateString(one));
      free(one);
      n = e ? e + 1 : n + len;
    }
    jarr(runs, j);
  }
  cJSON *leaks = JPTR(cJSON_AddArrayToObject(root, "leaks"));
  for (int j = 0; j < r->nleaks; j++) jarr(leaks, leak_json(r, j));
  cJSON *sus = JPTR(cJSON_AddArrayToObject(root, "suspects"));
  int top = o->top > 0 ? o->top : 10;
  for (int i = 0; i < r->nsuspects && i < top; i++) jarr(sus, site_json(r, &r->suspects[i], i + 1, 1));
  gpus_json(root, r);
  cJSON *mi = JPTR(cJSON_AddArrayToObject(root, "minor_growth"));
  for (int i = 0; i < r->nminor && i < top; i++) jarr(mi, site_json(r, &r->minor[i], 0, 0));
  cJSON *su = JPTR(cJSON_AddObjectToObject(root, "startup_growth"));
  JCHK(cJSON_AddNumberToObject(su, "sites", r->nstartup));
  JCHK(cJSON_AddNumberToObject(su, "growth_bytes", round(r->startup_growth)));
  cJSON *oth = JPTR(cJSON_AddArrayToObject(root, "largest_non_leaking"));
  for (int i = 0; i < r->nothers; i++) jarr(oth, site_json(r, &r->others[i], 0, 0));
  cJSON *pk = JPTR(cJSON_AddArrayToObject(root, "largest_at_peak"));
  for (int i = 0; i < r->nat_peak; i++) jarr(pk, peak_json(r, &r->at_peak[i]));
  char *s = json_oom ? NULL : cJSON_Print(root);
  cJSON_Delete(root);
  if (!s) return -ENOMEM;
  fputs(s, f);
  fputc('\n', f);
  free(s);
  return 0;
}
