/* SPDX-License-Identifier: MIT */
/*
 * render_text.c - the findings as text (for people), folded stacks (for flame graphs)
 * and liblgpool's site profile: the renderers that print lines (render.h). The JSON
 * report is render_json.c's.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "findings/report.h"
#include "output/render.h"

/* ------------------------------------------------------------------ text */

static const char *basename_of(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static void print_frame(FILE *f, const lgr_frame_t *fr, const char *lead, const char *mark) {
  fprintf(f, "%s%s", lead, fr->function[0] ? fr->function : "??");
  if (fr->file[0]) fprintf(f, " (%s:%d)", fr->file, fr->line);
  else if (fr->module[0]) fprintf(f, " [%s]", fr->module);
  fprintf(f, "%s%s\n", fr->inlined ? " [inlined]" : "", mark);
}

static void print_run_end(FILE *f, const lgr_run_t *u) {
  if (u->has_signal)
    fprintf(f, "killed by signal %d (SIG%s)", u->signal, sigabbrev_np(u->signal) ? sigabbrev_np(u->signal) : "?");
  else if (u->has_exit) fprintf(f, "exited with status %d", u->exit_status);
  else if (!strcmp(u->end_reason, "exec")) fprintf(f, "replaced itself (exec)");
  else if (!strcmp(u->end_reason, "running")) fprintf(f, "was still running when recording stopped");
  else if (!strcmp(u->end_reason, "ended"))
    fprintf(f, "ended (exit status unknown: reaped by a process that was not recorded)");
  else fprintf(f, "ended (%s)", u->end_reason);
}

/* A helper's name in the folded line (lgr_run_t.helper): its program's basename, or
 * for a launcher (env, a shell) running a script, the script's: "pyenv-exec", not
 * "bash"; "bash -c" for an inline script. */
static void helper_name(const char *cmd, char *out, size_t n) {
  static const char *const launchers[] = {"env", "bash", "sh", "dash", "zsh", "ksh", "nice", "nohup", NULL};
  snprintf(out, n, "?");
  const char *p = cmd;
  while (*p) {
    while (*p == ' ') p++;
    const char *e = strchr(p, ' ');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (!len) break;
    if (p[0] == '-' || memchr(p, '=', len)) { /* an option, an environment assignment */
      if (len == 2 && !strncmp(p, "-c", 2)) {
        size_t l = strlen(out);
        if (l + 4 < n) memcpy(out + l, " -c", 4);
        return;
      }
      p += len;
      continue;
    }
    const char *b = p + len;
    while (b > p && b[-1] != '/') b--;
    snprintf(out, n, "%.*s", (int)(p + len - b), b);
    int launcher = 0;
    for (int i = 0; launchers[i]; i++) launcher |= !strcmp(out, launchers[i]);
    if (!launcher) return;
    p += len;
  }
}

/* The folded line of the short-lived helpers: how many, by name (most first). */
static void print_helpers(FILE *f, const lgr_report_t *r) {
  enum { NAMES = 64 };
  struct {
    char name[48];
    int n;
  } v[NAMES];
  int nv = 0, other = 0, nonzero = 0;
  for (int i = 0; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i];
    if (!u->helper) continue;
    if (u->has_exit && u->exit_status != 0) nonzero++;
    char name[48];
    helper_name(u->command ? u->command : "", name, sizeof name);
    int k = 0;
    while (k < nv && strcmp(v[k].name, name)) k++;
    if (k == nv && nv == NAMES) {
      other++;
      continue;
    }
    if (k == nv) {
      memcpy(v[nv].name, name, sizeof name);
      v[nv++].n = 0;
    }
    v[k].n++;
  }
  for (int i = 1; i < nv; i++) /* most first, then by first appearance */
    for (int j = i; j > 0 && v[j].n > v[j - 1].n; j--) {
      __typeof__(v[0]) t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  fprintf(f, "  %d short-lived or idle helper processes (nothing growing):", r->nhelpers);
  int shown = nv < 6 ? nv : 6;
  for (int i = 0; i < shown; i++) fprintf(f, "%s %s %d", i ? "," : "", v[i].name, v[i].n);
  int rest = other;
  for (int i = shown; i < nv; i++) rest += v[i].n;
  if (rest) fprintf(f, ", %d more", rest);
  if (nonzero) fprintf(f, " (%d exited with a non-zero status)", nonzero);
  fprintf(f, "\n");
}

/* "site (file:line)" of a site, into buf. */
/* A lifetime in seconds, us to days. */
static const char *fmt_life_s(char *buf, size_t n, double v) {
  if (v < 1e-5) snprintf(buf, n, "%.1f us", v * 1e6);
  else if (v < 1e-3) snprintf(buf, n, "%.0f us", v * 1e6);
  else if (v < 0.1) snprintf(buf, n, "%.1f ms", v * 1e3);
  else if (v < 1) snprintf(buf, n, "%.0f ms", v * 1e3);
  else lgu_fmt_duration(buf, n, v);
  return buf;
}

/* A percentile's bound: "< 0.4 s" or "kept". */
static const char *fmt_pct(char *buf, size_t n, double le) {
  char d[32];
  if (isinf(le)) snprintf(buf, n, "kept");
  else snprintf(buf, n, "< %s", fmt_life_s(d, sizeof d, le));
  return buf;
}

/* A percentile's bound in steps: "< 1 step" (freed in its birth step), "< 4 steps",
 * "kept" (the callers print only the bounded ones beside the times). */
static const char *fmt_pct_steps(char *buf, size_t n, double le) {
  if (isinf(le)) snprintf(buf, n, "kept");
  else snprintf(buf, n, "< %.0f step%s", le, le == 1 ? "" : "s");
  return buf;
}

/* "young, blocks live ~0.4 ms" / "old, 97 % kept", then the distribution's median and
 * 90th percentile where there is one: "; p50 < 100 ms, p90 kept", and the 90th in
 * steps where the program marked steps and it is not a kept block: "; p90 < 1 step"
 * (docs/lifetimes.md). */
static const char *life_text(char *buf, size_t n, const lgr_life_t *l) {
  char d[32], p50[40], p90[40];
  int k;
  if (l->below_s > 0)
    k = snprintf(buf, n, "%s: blocks live < %s", lgr_gen_name(l->gen), fmt_life_s(d, sizeof d, l->below_s));
  else if (l->kept >= 0.5) k = snprintf(buf, n, "%s: %.0f %% of its blocks kept", lgr_gen_name(l->gen), l->kept * 100);
  else k = snprintf(buf, n, "%s: blocks live ~%s", lgr_gen_name(l->gen), fmt_life_s(d, sizeof d, l->mean_s));
  if (k > 0 && (size_t)k < n && !isnan(l->p50_le_s)) {
    int w = snprintf(buf + k, n - (size_t)k, "; p50 %s, p90 %s", fmt_pct(p50, sizeof p50, l->p50_le_s),
                     fmt_pct(p90, sizeof p90, l->p90_le_s));
    if (w > 0) k += w;
  }
  if (k > 0 && (size_t)k < n && !isnan(l->p90_le_steps) && !isinf(l->p90_le_steps))
    snprintf(buf + k, n - (size_t)k, "; p90 %s", fmt_pct_steps(p90, sizeof p90, l->p90_le_steps));
  return buf;
}

static int frame_label(char *buf, size_t n, const lgr_frame_t *f) {
  if (f->file[0]) return snprintf(buf, n, "%s (%s:%d)", f->function, basename_of(f->file), f->line);
  return snprintf(buf, n, "%s [%s]", f->function, f->module);
}

/* A site in one line: its frame (the program's own line or caller), and "via" the
 * frame it allocated through when that is library code, a system library's or the
 * program's allocation wrapper (the site's library_site, docs/detection.md):
 * "retain_store (wrapped_server.c:106) via srv__alloc_mem (srv_mem.c:18)". */
static const char *site_label(char *buf, size_t n, const lgr_site_t *s) {
  if (!s->nframes) {
    snprintf(buf, n, "??");
    return buf;
  }
  int k = frame_label(buf, n, &s->frames[s->site_frame]);
  if (s->lib_frame > 0 && s->lib_frame <= s->nframes && k > 0 && (size_t)k + 5 < n) {
    memcpy(buf + k, " via ", 6);
    frame_label(buf + k + 5, n - (size_t)k - 5, &s->frames[s->lib_frame - 1]);
  }
  return buf;
}

static void print_chain(FILE *f, const lgr_holder_t *h) {
  for (int i = 0; i < h->nchain; i++) fprintf(f, "%s%s", i ? " \u2192 " : "", h->chain[i] ? h->chain[i] : "?");
}

static const lgr_run_t *run_of(const lgr_report_t *r, int proc) {
  for (int i = 0; i < r->nruns; i++)
    if (r->runs[i].proc == proc) return &r->runs[i];
  return NULL;
}

/* 1 when the runs were recorded on more than one host (merged databases): the text
 * then names each process's host, since pids collide across nodes. */
static int many_hosts(const lgr_report_t *r) {
  const char *first = NULL;
  for (int i = 0; i < r->nruns; i++) {
    const char *h = r->runs[i].host;
    if (!h) continue;
    if (!first) first = h;
    else if (strcmp(first, h)) return 1;
  }
  return 0;
}

/* Frames of a suspect, innermost first: at most 3 native frames before the site frame
 * (the rest summarised), the site with its source line, then up to 5 callers. */
static void print_frames(FILE *f, const lgr_site_t *s) {
  int shown = 0;
  const char *lead_first = s->spread_sites ? "   under " : "   allocated at ";
  for (int k = 0; k < s->nframes; k++) {
    int before = k < s->site_frame;
    if (before && k >= 3 && k < s->site_frame - 1) {
      if (k == 3) {
        int py = 0; /* library Python frames among the hidden ones (lgr_own_frame) */
        for (int i = 3; i < s->site_frame - 1; i++) py += lgr_is_python_module(s->frames[i].module);
        if (py) fprintf(f, "      ... %d more frames (%d of them Python library code)\n", s->site_frame - 4, py);
        else fprintf(f, "      ... %d more native frames\n", s->site_frame - 4);
      }
      continue;
    }
    if (k > s->site_frame + 5) {
      fprintf(f, "      ... %d more callers\n", s->nframes - k);
      break;
    }
    const char *mark = k == s->site_frame && s->site_frame > 0 ? "   <- allocation site" : "";
    print_frame(f, &s->frames[k], shown == 0 ? lead_first : "      called from ", mark);
    if (k == s->site_frame && s->source) fprintf(f, "         %5d | %s\n", s->frames[k].line, s->source);
    shown++;
  }
}

static void print_holders(FILE *f, const lgr_site_t *s) {
  char b1[32];
  for (int i = 0; i < s->nholders; i++) {
    const lgr_holder_t *h = &s->holders[i];
    fprintf(f, "   held by ");
    print_chain(f, h);
    if (h->bytes > 0 || h->objects == 0)
      fprintf(f, "  (%s, %.0f objects, %s)\n", h->kind ? h->kind : "object", h->objects,
              lgu_fmt_bytes(b1, sizeof b1, h->bytes));
    else /* inferred, not measured (the graph's own nodes, counted in its chain): no
          * "0 B" beside the site's bytes */
      fprintf(f, "  (%s, bytes not measured)\n", h->kind ? h->kind : "object");
  }
}

/* Where the reference that keeps a leak's objects is made (the holder's kept_at):
 * "appended at train (train.py:41): activation_log.append(h)". */
static void print_kept_at(FILE *f, const lgr_kept_at_t *k) {
  const char *file = k->file, *fn = k->function, *what = k->container, *src = k->source;
  if (!file || !what) return;
  const char *verb = !strcmp(what, "list") ? "appended at" : !strcmp(what, "dict") ? "stored at" : "bound at";
  const char *b = strrchr(file, '/');
  fprintf(f, "      %s %s (%s:%d)", verb, fn && *fn ? fn : "?", b ? b + 1 : file, k->line);
  if (src) fprintf(f, ": %s", src);
  fprintf(f, "\n");
}

static void print_leaks(FILE *f, const lgr_report_t *r) {
  char b1[32], b2[32], b3[32], lab[512];
  fprintf(f, "\n%d leak%s (one cause each, strongest first):\n", r->nleaks, r->nleaks > 1 ? "s" : "");
  for (int j = 0; j < r->nleaks; j++) {
    const lgr_leak_t *L = &r->leaks[j];
    const lgr_site_t *m = &r->suspects[L->suspects[0]];
    fprintf(f, "  L%d  +%s/s", j + 1, lgu_fmt_bytes(b1, sizeof b1, L->growth_bytes_per_s));
    if (!isnan(L->growth_bytes_per_step))
      fprintf(f, " (+%s/step)", lgu_fmt_bytes(b2, sizeof b2, L->growth_bytes_per_step));
    fprintf(f, "  holds %s  %s", lgu_fmt_bytes(b3, sizeof b3, (double)L->live_bytes), lg_pattern_name(L->pattern));
    if (!isnan(L->time_to_oom_s)) fprintf(f, "  OOM in %s", lgu_fmt_duration(b1, sizeof b1, L->time_to_oom_s));
    fprintf(f, "  pid %d", L->pid);
    const lgr_run_t *lu = run_of(r, L->proc);
    if (many_hosts(r) && lu && lu->host) fprintf(f, " on %s", lu->host);
    if (L->rank >= 0) fprintf(f, " (rank %d)", L->rank);
    fprintf(f, "\n      ");
    if (m->spread_sites) fprintf(f, "spread over %d sites under %s", m->spread_sites, site_label(lab, sizeof lab, m));
    else fprintf(f, "allocated at %s", site_label(lab, sizeof lab, m));
    if (L->nsuspects > 1) fprintf(f, " and %d more site%s", L->nsuspects - 1, L->nsuspects > 2 ? "s" : "");
    fprintf(f, ": suspect%s", L->nsuspects > 1 ? "s" : "");
    for (int k = 0; k < L->nsuspects; k++) fprintf(f, "%s#%d", k ? ", " : " ", L->suspects[k] + 1);
    fprintf(f, "\n");
    if (L->holder) {
      fprintf(f, "      held by ");
      print_chain(f, L->holder);
      fprintf(f, "\n");
      print_kept_at(f, &L->holder->kept_at);
    } else if (L->no_holder) {
      fprintf(f, "      no holder: %s\n", L->no_holder);
    }
    if (L->fix) fprintf(f, "      fix: %s\n", L->fix);
    if (!isnan(L->detected_after_s))
      fprintf(f, "      flagged %.1fs after %s\n", L->detected_after_s,
              lu && lu->attached ? "recording began" : "the process started");
    else fprintf(f, "      found in the final analysis\n");
  }
}

/* The GPU section of the text report (docs/cuda.md). */
static void print_gpus(FILE *f, const lgr_report_t *r) {
  char b1[32], b2[32], b3[32], b4[32];
  if (r->ngpus) fprintf(f, "\nGPU memory (recorded at the CUDA driver API):\n");
  for (int i = 0; i < r->ngpus; i++) {
    const lgr_gpu_t *g = &r->gpus[i];
    fprintf(f, "  pid %d GPU %d: device %s, managed %s, pinned %s live at the end (device+managed peak %s)", g->pid,
            g->device, lgu_fmt_bytes(b1, sizeof b1, (double)g->device_bytes),
            lgu_fmt_bytes(b2, sizeof b2, (double)g->managed_bytes),
            lgu_fmt_bytes(b3, sizeof b3, (double)g->pinned_bytes),
            lgu_fmt_bytes(b4, sizeof b4, (double)g->peak_device_bytes));
    if (g->total_bytes) fprintf(f, " of %s", lgu_fmt_bytes(b1, sizeof b1, (double)g->total_bytes));
    fprintf(f, "\n     contexts: %lld created, %lld destroyed, %lld recreated", (long long)g->contexts_created,
            (long long)g->contexts_destroyed, (long long)g->contexts_recreated);
    if (g->pool_reserved_bytes || g->pool_used_bytes)
      fprintf(f, "; pools: %s reserved, %s used", lgu_fmt_bytes(b1, sizeof b1, (double)g->pool_reserved_bytes),
              lgu_fmt_bytes(b2, sizeof b2, (double)g->pool_used_bytes));
    if (g->registered_bytes)
      fprintf(f, "; host registered %s", lgu_fmt_bytes(b1, sizeof b1, (double)g->registered_bytes));
    if (g->vmm_mapped_bytes) fprintf(f, "; VMM mapped %s", lgu_fmt_bytes(b1, sizeof b1, (double)g->vmm_mapped_bytes));
    fprintf(f, "\n");
    if (g->has_nvml)
      fprintf(f,
              "     NVML: this process %s, untracked %s (contexts, modules, pool and driver caches); device %s of %s "
              "used\n",
              lgu_fmt_bytes(b1, sizeof b1, (double)g->nvml_process_bytes),
              lgu_fmt_bytes(b2, sizeof b2, (double)g->untracked_bytes),
              lgu_fmt_bytes(b3, sizeof b3, (double)g->nvml_used_bytes),
              lgu_fmt_bytes(b4, sizeof b4, (double)g->nvml_total_bytes));
    if (g->has_torch)
      fprintf(f,
              "     torch.cuda: %s allocated by tensors, %s reserved by the caching allocator (%s cached, "
              "peak reserve %s)\n",
              lgu_fmt_bytes(b1, sizeof b1, (double)g->torch_allocated_bytes),
              lgu_fmt_bytes(b2, sizeof b2, (double)g->torch_reserved_bytes),
              lgu_fmt_bytes(b3, sizeof b3, (double)(g->torch_reserved_bytes - g->torch_allocated_bytes)),
              lgu_fmt_bytes(b4, sizeof b4, (double)g->torch_peak_reserved_bytes));
  }
  if (r->nvml_status) fprintf(f, "  %s\n", r->nvml_status);
  if (r->num) fprintf(f, "  Unified Memory (CUPTI, --cuda-um), per managed allocation site:\n");
  for (int i = 0; i < r->num; i++) {
    const lgr_um_t *u = &r->um[i];
    fprintf(f, "    pid %.0f %s: %.0f GPU page faults, %.0f CPU page faults, %s to the GPU, %s to the host",
            u->has_pid ? (double)u->pid : -NAN /* printed "-nan", as ever */, u->site, u->gpu_page_faults,
            u->cpu_page_faults, lgu_fmt_bytes(b1, sizeof b1, u->bytes_to_device),
            lgu_fmt_bytes(b2, sizeof b2, u->bytes_to_host));
    if (u->thrashing > 0) fprintf(f, ", %.0f thrashing", u->thrashing);
    fprintf(f, "\n");
  }
  for (int i = 0; i < r->ncuda_notes; i++) fprintf(f, "  note: %s\n", r->cuda_notes[i]);
  if (r->torch_cuda)
    fprintf(f, "  PyTorch CUDA: its caching allocator keeps freed blocks, so the driver sees reserved segments; a\n"
               "  site is the Python line that made a segment grow. leakguard.cuda_memory() shows\n"
               "  torch.cuda.memory_allocated/reserved per device; PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync\n"
               "  makes every tensor one cuMemAllocAsync, attributed exactly (docs/cuda.md).\n");
}

int lgo_render_text(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o) {
  char b1[32], b2[32], b3[32], lab[512];
  int top = o->top > 0 ? o->top : 10;
  if (r->nleaks) fprintf(f, "leakguard report: LEAK\n");
  else fprintf(f, "leakguard report: no leak found\n");
  for (int i = 0; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i];
    if (u->helper) continue; /* folded: print_helpers */
    fprintf(f, "  process %d", u->pid);
    if (many_hosts(r) && u->host) fprintf(f, " on %s", u->host);
    fprintf(f, " (%s) ", u->command);
    if (u->source) fprintf(f, "from %s, ", u->source); /* merged: the input it came from */
    if (u->rank >= 0) {
      fprintf(f, "rank %d", u->rank);
      if (u->world_size > 0) fprintf(f, " of %d", u->world_size);
      fprintf(f, "%s, ", u->leaking ? " LEAKS" : "");
    }
    if (r->live && !strcmp(u->end_reason, "running")) { /* the recording goes on: not stopped */
      fprintf(f, "is still running (a live recording, still being written) at %.1fs", u->duration_s);
    } else {
      print_run_end(f, u);
      fprintf(f, " after %.1fs", u->duration_s);
    }
    fprintf(f, "; live %s at the end, peak %s", lgu_fmt_bytes(b1, sizeof b1, (double)u->final_live_bytes),
            lgu_fmt_bytes(b2, sizeof b2, (double)u->peak_live_bytes));
    if (u->steps) fprintf(f, ", %llu steps", (unsigned long long)u->steps);
    if (u->sample_bytes) fprintf(f, ", sampled every %s", lgu_fmt_bytes(b3, sizeof b3, (double)u->sample_bytes));
    if (u->dropped) fprintf(f, ", %llu records DROPPED", (unsigned long long)u->dropped);
    if (u->lazy == LGR_LAZY_WAITING) fprintf(f, "; nothing recorded (it never passed its lazy start: --lazy)");
    else if (u->lazy == LGR_LAZY_BEGAN)
      fprintf(f, "; recorded from %.2fs on (lazy start; %s allocated before it, not attributed)", u->lazy_began_s,
              lgu_fmt_bytes(b3, sizeof b3, (double)u->lazy_before_bytes));
    if (u->pattern >= 0 && u->pattern_from_s > 0)
      fprintf(f, "; memory curve from %.1fs on: %s", u->pattern_from_s, lg_pattern_name((lg_pattern_t)u->pattern));
    else if (u->pattern >= 0)
      fprintf(f, "; memory curve%s: %s", u->attached ? " since attach" : "", lg_pattern_name((lg_pattern_t)u->pattern));
    fprintf(f, "\n");
    if (!isnan(u->gap_from_s))
      fprintf(f,
              "    no snapshots from %.1f s to %.1f s: the collector did not run (stopped, paused or starved); "
              "judged on the points before and after\n",
              u->gap_from_s, u->gap_to_s);
    for (const char *n = u->notes; n && *n;) {
      const char *e = strchr(n, '\n');
      int len = e ? (int)(e - n) : (int)strlen(n);
      fprintf(f, "    note: %.*s\n", len, n);
      n = e ? e + 1 : n + len;
    }
  }
  if (r->nhelpers) print_helpers(f, r);
  if (r->import_sample)
    fprintf(f, "  Python imports sampled every %s (start-up; `--import-sample 0` records them in full)\n",
            lgu_fmt_bytes(b1, sizeof b1, (double)r->import_sample));
  print_gpus(f, r);
  if (r->nleaks) print_leaks(f, r);
  if (!r->nsuspects) {
    fprintf(f, "\nNo allocation site's live memory keeps growing significantly.\n");
  } else {
    fprintf(f, "\n%d growing allocation site%s (strongest first):\n", r->nsuspects, r->nsuspects > 1 ? "s" : "");
  }
  for (int i = 0; i < r->nsuspects && i < top; i++) {
    const lgr_site_t *s = &r->suspects[i];
    fprintf(f, "\n#%d %s  +%s/s", i + 1, lg_pattern_name(s->r.pattern),
            lgu_fmt_bytes(b1, sizeof b1, s->r.growth_bytes_per_s));
    if (!isnan(s->r.growth_bytes_per_step))
      fprintf(f, " (+%s/step)", lgu_fmt_bytes(b2, sizeof b2, s->r.growth_bytes_per_step));
    fprintf(f, "  live %s in %lld blocks", lgu_fmt_bytes(b3, sizeof b3, (double)s->live_bytes),
            (long long)s->live_blocks);
    if (s->peak_live_bytes > s->live_bytes * 2)
      fprintf(f, " (peak %s, freed at exit)", lgu_fmt_bytes(b2, sizeof b2, (double)s->peak_live_bytes));
    fprintf(f, "  confidence %.2f", s->r.confidence);
    if (!isnan(s->time_to_oom_s)) fprintf(f, "  OOM in %s", lgu_fmt_duration(b1, sizeof b1, s->time_to_oom_s));
    fprintf(f, "\n   pid %d", s->pid);
    const lgr_run_t *u = run_of(r, s->proc);
    if (u && u->rank >= 0) fprintf(f, " (rank %d)", u->rank);
    fprintf(f, ", %s memory", s->space);
    if (s->device >= 0) fprintf(f, " on GPU %d", s->device);
    if (s->spread_sites) fprintf(f, ", %d sites together", s->spread_sites);
    else if (s->nstacks > 1) fprintf(f, ", %d stacks merged", s->nstacks);
    if (!isnan(s->oldest_age_s)) fprintf(f, ", oldest live block ~%.0fs old", s->oldest_age_s);
    if (!isnan(s->r.since_s) && s->r.since_s > 0.2 * (u ? u->duration_s : 0) && s->r.since_s > 1)
      fprintf(f, ", growing since %.1fs", s->r.since_s);
    if (!isnan(s->detected_after_s)) fprintf(f, ", flagged after %.1fs", s->detected_after_s);
    if (s->leak >= 0) fprintf(f, "  [L%d]", s->leak + 1);
    fprintf(f, "\n");
    print_frames(f, s);
    print_holders(f, s);
  }
  if (r->nminor) {
    fprintf(f, "\nMinor growth (not a leak: small against the process, or a handful of first uses):\n");
    for (int i = 0; i < r->nminor && i < top; i++) {
      const lgr_site_t *s = &r->minor[i];
      fprintf(f, "  grew %s in %lld blocks (+%s/s)  %-10s %s  pid %d\n", lgu_fmt_bytes(b2, sizeof b2, s->growth_bytes),
              (long long)s->blocks_gained, lgu_fmt_bytes(b1, sizeof b1, s->r.growth_bytes_per_s),
              lg_pattern_name(s->r.pattern), site_label(lab, sizeof lab, s), s->pid);
    }
  }
  if (r->nat_peak) { /* at the peak, as the HTML site table: a table freed at exit holds nothing at the end */
    fprintf(f, "\nLargest live sites at the peak (the snapshot where their process held the most), not growing:\n");
    for (int i = 0; i < r->nat_peak; i++) {
      const lgr_site_t *s = &r->at_peak[i];
      fprintf(f, "  %10s  %-10s %s", lgu_fmt_bytes(b1, sizeof b1, (double)s->peak_proc_bytes),
              s->unjudged   ? "-"
              : s->released ? "released"
                            : lg_pattern_name(s->r.pattern),
              site_label(lab, sizeof lab, s));
      if (s->unjudged) fprintf(f, "  (freed by the end)");
      if (s->released) /* rule 7 (docs/detection.md): never a leak */
        fprintf(f, "  (grew then released: grew to %s by %.1f s, released to %s by the end)",
                lgu_fmt_bytes(b2, sizeof b2, (double)s->released_peak_bytes), s->released_peak_s,
                lgu_fmt_bytes(b3, sizeof b3, (double)s->released_end_bytes));
      const lgr_bound_t *bd = s->bounded;
      const char *ct = bd ? bd->container : NULL;
      if (ct && !strcmp(ct, "dict"))
        fprintf(f, "  (held as the values of a dict whose length stopped growing, %.0f keys: not a leak)", bd->size);
      else if (ct) fprintf(f, "  (held by a %s at its bound, %.0f of %.0f: not a leak)", ct, bd->size, bd->maxsize);
      if (s->startup) fprintf(f, "  (grew while modules were imported: start-up)");
      if (s->life.gen >= 0) fprintf(f, "  [%s]", life_text(lab, sizeof lab, &s->life));
      fprintf(f, "\n");
    }
  }
  if (r->nstartup)
    fprintf(f, "\nStart-up (not a leak): %d site%s grew by %s only while modules were imported.\n", r->nstartup,
            r->nstartup == 1 ? "" : "s", lgu_fmt_bytes(b1, sizeof b1, r->startup_growth));
  return 0;
}

/* ------------------------------------------------------------------ folded */

static void put_folded(FILE *f, const char *fn, int *first) {
  fputs(*first ? "" : ";", f);
  for (const char *p = fn && *fn ? fn : "??"; *p; p++) fputc(*p == ';' || *p == ' ' ? '_' : *p, f);
  *first = 0;
}

/* Every stack that holds memory at the end, root first: the Python callers (outermost
 * first), then the native frames under the innermost Python line, down to the
 * allocation; weighted by its live bytes. */
int lgo_render_folded(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o) {
  (void)o;
  const lgr_recording_t *rec = &r->rec;
  for (size_t i = 0; i < rec->nstacks; i++) {
    const lgr_stackval_t *s = &rec->stacks[i];
    if (s->v[LGR_SV_INUSE] <= 0) continue;
    const int *fr = s->frames;
    int n = s->nframes, npy = 0;
    while (npy < n && !strcmp(rec->locs[fr[npy]].module, "python")) npy++;
    int first = 1;
    for (int k = npy - 1; k >= 0; k--) put_folded(f, rec->locs[fr[k]].function, &first);
    for (int k = n - 1; k >= npy; k--) put_folded(f, rec->locs[fr[k]].function, &first);
    if (first) fprintf(f, "[unknown]");
    fprintf(f, " %lld\n", (long long)s->v[LGR_SV_INUSE]);
  }
  return 0;
}

/* ------------------------------------------------------------------ pool profile */

/* r->gens comes sorted by key, most blocks first (life.c). */
int lgo_render_pool_profile(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o) {
  const char *source = o->source;
  fprintf(f, "# liblgpool site profile (LEAKGUARD_POOL_PROFILE, docs/pool.md)\n");
  fprintf(f, "# measured by leakguard in %s: the generation of the blocks each function or\n",
          source ? source : "a run");
  fprintf(f, "# Python line allocated (docs/lifetimes.md); a key of several sites takes the one that\n");
  fprintf(f, "# allocated most\n");
  char d[32];
  for (int i = 0; i < r->ngens; i++) {
    const lgr_genrow_t *g = &r->gens[i];
    if (i && !strcmp(g->key, r->gens[i - 1].key)) continue;
    fprintf(f, "%s %s  # ", g->key, lgr_gen_name(g->life.gen));
    if (g->life.below_s > 0) fprintf(f, "lifetime < %s", fmt_life_s(d, sizeof d, g->life.below_s));
    else fprintf(f, "lifetime ~%s", fmt_life_s(d, sizeof d, g->life.mean_s));
    if (!isnan(g->life.p90_le_s)) fprintf(f, ", p90 %s", fmt_pct(d, sizeof d, g->life.p90_le_s));
    if (!isnan(g->life.p90_le_steps) && !isinf(g->life.p90_le_steps))
      fprintf(f, " (%s)", fmt_pct_steps(d, sizeof d, g->life.p90_le_steps));
    fprintf(f, ", %.0f %% kept, %llu blocks\n", g->life.kept * 100, (unsigned long long)g->alloc_blocks);
  }
  return 0;
}
