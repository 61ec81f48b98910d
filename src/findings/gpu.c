/* SPDX-License-Identifier: MIT */
/*
 * gpu.c - GPU memory in the report (docs/cuda.md): the devices' memory, NVML's
 * view of it, CUPTI Unified Memory counters and the room left on a device. Tables
 * written by the collector only for processes that used CUDA; older databases have
 * none, and every query here tolerates that. Separate from build.c: its own tables,
 * asked for by the site analysis and the leaks (a GPU site's device, its headroom).
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "findings/report.h"
#include "findings/impl.h"

static int gpu_space(const char *space) {
  return !strcmp(space, "device") || !strcmp(space, "managed") || !strcmp(space, "pinned");
}

/* The GPU ordinal of a site of a GPU space (cuda_stacks), else -1. */
int lgr_gpu_site_device(sqlite3 *db, const lgr_site_t *s) {
  if (!gpu_space(s->space)) return -1;
  sqlite3_stmt *st;
  int dev = 0;
  if (lgr_prepare(db, "SELECT device FROM cuda_stacks WHERE proc=? AND stack=?", -1, &st, NULL) != SQLITE_OK) return 0;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  if (lgr_row(st)) dev = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return dev;
}

/* CUPTI Unified Memory counters of a managed site (--cuda-um). */
void lgr_gpu_site_um(sqlite3 *db, lgr_site_t *s) {
  if (strcmp(s->space, "managed") != 0) return;
  sqlite3_stmt *st;
  if (lgr_prepare(db,
                  "SELECT cpu_page_faults, gpu_page_faults, bytes_htod, bytes_dtoh, thrashing FROM cuda_um"
                  " WHERE proc=? AND stack=?",
                  -1, &st, NULL) != SQLITE_OK)
    return;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  if (lgr_row(st)) {
    s->has_um = 1;
    s->um_cpu_faults = sqlite3_column_int64(st, 0);
    s->um_gpu_faults = sqlite3_column_int64(st, 1);
    s->um_bytes_htod = sqlite3_column_int64(st, 2);
    s->um_bytes_dtoh = sqlite3_column_int64(st, 3);
    s->um_thrashing = sqlite3_column_int64(st, 4);
  }
  sqlite3_finalize(st);
}

/* Room left for a growing site: device and managed memory grow toward the device's
 * memory (NVML's use of the whole device when sampled, else what was recorded), host
 * memory toward the host limit. */
double lgr_gpu_headroom(const lgr_report_t *r, const lgr_site_t *s, double host_headroom) {
  if (s->device < 0 || !strcmp(s->space, "pinned")) return host_headroom;
  for (int i = 0; i < r->ngpus; i++) {
    const lgr_gpu_t *g = &r->gpus[i];
    if (g->proc != s->proc || g->device != s->device) continue;
    uint64_t total = g->total_bytes ? g->total_bytes : g->nvml_total_bytes;
    if (!total) break;
    double used = (double)(g->device_bytes + g->managed_bytes);
    if (g->has_nvml && (double)g->nvml_used_bytes > used) used = (double)g->nvml_used_bytes;
    return (double)total > used ? (double)total - used : 0;
  }
  return host_headroom;
}

static int64_t q_int64(sqlite3 *db, const char *sql, const int64_t *args, int nargs, int64_t dflt, int *found) {
  sqlite3_stmt *st;
  if (found) *found = 0;
  if (lgr_prepare(db, sql, -1, &st, NULL) != SQLITE_OK) return dflt;
  for (int i = 0; i < nargs; i++) sqlite3_bind_int64(st, i + 1, args[i]);
  int64_t v = dflt;
  if (lgr_row(st) && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    v = sqlite3_column_int64(st, 0);
    if (found) *found = 1;
  }
  sqlite3_finalize(st);
  return v;
}

/* CUPTI Unified Memory counters (--cuda-um), every managed site that has some. */
static void load_um(sqlite3 *db, lgr_report_t *r) {
  sqlite3_stmt *st;
  if (lgr_prepare(db,
                  "SELECT proc, stack, cpu_page_faults, gpu_page_faults, bytes_htod, bytes_dtoh, thrashing"
                  " FROM cuda_um ORDER BY gpu_page_faults + cpu_page_faults DESC",
                  -1, &st, NULL) != SQLITE_OK)
    return;
  int cap = 0;
  while (lgr_row(st)) {
    lgr_um_t u;
    memset(&u, 0, sizeof u);
    lgr_site_t o;
    memset(&o, 0, sizeof o);
    o.proc = sqlite3_column_int(st, 0);
    o.stack = sqlite3_column_int(st, 1);
    for (int i = 0; i < r->nruns; i++)
      if (r->runs[i].proc == o.proc && !u.has_pid) u.has_pid = 1, u.pid = r->runs[i].pid;
    u.stack = o.stack;
    char where[600] = "(not in a recorded managed block)";
    if (o.stack >= 2 && lgr_load_frames(db, &o, 0) == 0 && o.nframes > 0) {
      const lgr_frame_t *f = &o.frames[0];
      if (f->file[0]) snprintf(where, sizeof where, "%s (%s:%d)", f->function, f->file, f->line);
      else snprintf(where, sizeof where, "%s [%s]", f->function, f->module);
    }
    lgr_site_free(&o);
    double v[5];
    for (int k = 0; k < 5; k++) v[k] = (double)sqlite3_column_int64(st, 2 + k);
    /* Stacks of one line (a loop unrolled, several return addresses) are one site here. */
    lgr_um_t *same = NULL;
    for (int i = 0; i < r->num; i++)
      if (u.has_pid && r->um[i].has_pid && r->um[i].pid == u.pid && !strcmp(r->um[i].site, where)) same = &r->um[i];
    if (!same) {
      if (r->num == cap) {
        lgr_um_t *g = realloc(r->um, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *g);
        if (!g) {
          lgr_fail(-ENOMEM);
          break;
        }
        r->um = g;
      }
      same = &r->um[r->num++];
      *same = u;
      if (!(same->site = lgr_strdup(where))) lgr_fail(-ENOMEM);
    }
    same->cpu_page_faults += v[0];
    same->gpu_page_faults += v[1];
    same->bytes_to_device += v[2];
    same->bytes_to_host += v[3];
    same->thrashing += v[4];
  }
  sqlite3_finalize(st);
}

void lgr_load_gpus(sqlite3 *db, lgr_report_t *r) {
  sqlite3_stmt *st;
  const char *sql =
      "SELECT proc, device, device_bytes, managed_bytes, pinned_bytes, registered_bytes, pool_reserved_bytes,"
      " pool_used_bytes, vmm_mapped_bytes, contexts, contexts_created, contexts_destroyed, contexts_recreated,"
      " total_bytes, (SELECT max(device_bytes + managed_bytes) FROM cuda_devices x"
      "  WHERE x.proc=c.proc AND x.device=c.device)"
      " FROM cuda_devices c WHERE seq=(SELECT max(seq) FROM cuda_devices y WHERE y.proc=c.proc AND y.device=c.device)"
      " ORDER BY proc, device";
  if (lgr_prepare(db, sql, -1, &st, NULL) != SQLITE_OK) return; /* no GPU memory recorded */
  int cap = 0;
  while (lgr_row(st)) {
    if (r->ngpus == cap) {
      cap = cap ? cap * 2 : 4;
      lgr_gpu_t *n = realloc(r->gpus, (size_t)cap * sizeof *n);
      if (!n) {
        lgr_fail(-ENOMEM);
        break;
      }
      r->gpus = n;
    }
    lgr_gpu_t *g = &r->gpus[r->ngpus++];
    memset(g, 0, sizeof *g);
    int c = 0;
    g->proc = sqlite3_column_int(st, c++);
    g->device = sqlite3_column_int(st, c++);
    g->device_bytes = sqlite3_column_int64(st, c++);
    g->managed_bytes = sqlite3_column_int64(st, c++);
    g->pinned_bytes = sqlite3_column_int64(st, c++);
    g->registered_bytes = sqlite3_column_int64(st, c++);
    g->pool_reserved_bytes = sqlite3_column_int64(st, c++);
    g->pool_used_bytes = sqlite3_column_int64(st, c++);
    g->vmm_mapped_bytes = sqlite3_column_int64(st, c++);
    g->contexts = sqlite3_column_int64(st, c++);
    g->contexts_created = sqlite3_column_int64(st, c++);
    g->contexts_destroyed = sqlite3_column_int64(st, c++);
    g->contexts_recreated = sqlite3_column_int64(st, c++);
    g->total_bytes = (uint64_t)sqlite3_column_int64(st, c++);
    g->peak_device_bytes = sqlite3_column_int64(st, c++);
    for (int i = 0; i < r->nruns; i++)
      if (r->runs[i].proc == g->proc) g->pid = r->runs[i].pid;
    /* NVML: the last sample that saw this process, and what was recorded then. */
    int64_t a[2] = {g->proc, g->device}, t_ns;
    int found;
    t_ns = q_int64(db, "SELECT max(t_ns) FROM nvml_processes WHERE proc=? AND device=?", a, 2, 0, &found);
    if (found) {
      int64_t b[3] = {g->proc, g->device, t_ns}, d[2] = {t_ns, g->device};
      g->has_nvml = 1;
      g->nvml_process_bytes =
          q_int64(db, "SELECT used_bytes FROM nvml_processes WHERE proc=?1 AND device=?2 AND t_ns=?3", b, 3, 0, NULL);
      g->nvml_used_bytes =
          (uint64_t)q_int64(db, "SELECT used_bytes FROM nvml WHERE t_ns=?1 AND device=?2", d, 2, 0, NULL);
      g->nvml_total_bytes =
          (uint64_t)q_int64(db, "SELECT total_bytes FROM nvml WHERE t_ns=?1 AND device=?2", d, 2, 0, NULL);
      int64_t tracked =
          q_int64(db,
                  "SELECT c.device_bytes FROM cuda_devices c JOIN snapshots s ON s.proc=c.proc AND"
                  " s.seq=c.seq WHERE c.proc=?1 AND c.device=?2 AND s.t_ns<=?3 ORDER BY s.t_ns DESC LIMIT 1",
                  b, 3, 0, NULL);
      g->untracked_bytes = g->nvml_process_bytes - tracked;
    }
    /* torch.cuda's view (the Python module): the last figures and the highest reserve */
    int64_t last = q_int64(db, "SELECT max(seq) FROM cuda_torch WHERE proc=? AND device=?", a, 2, 0, &found);
    if (found) {
      int64_t b[3] = {g->proc, g->device, last};
      g->has_torch = 1;
      g->torch_allocated_bytes =
          q_int64(db, "SELECT allocated_bytes FROM cuda_torch WHERE proc=?1 AND device=?2 AND seq=?3", b, 3, 0, NULL);
      g->torch_reserved_bytes =
          q_int64(db, "SELECT reserved_bytes FROM cuda_torch WHERE proc=?1 AND device=?2 AND seq=?3", b, 3, 0, NULL);
      g->torch_peak_reserved_bytes =
          q_int64(db, "SELECT max(reserved_bytes) FROM cuda_torch WHERE proc=? AND device=?", a, 2, 0, NULL);
    }
  }
  sqlite3_finalize(st);
  if (lgr_prepare(db, "SELECT DISTINCT note FROM cuda_notes ORDER BY note", -1, &st, NULL) == SQLITE_OK) {
    while (lgr_row(st)) {
      char **n = realloc(r->cuda_notes, (size_t)(r->ncuda_notes + 1) * sizeof *n);
      if (!n) {
        lgr_fail(-ENOMEM);
        break;
      }
      r->cuda_notes = n;
      r->cuda_notes[r->ncuda_notes++] = lgr_dupstr(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
  }
  load_um(db, r);
  int found;
  q_int64(db,
          "SELECT 1 FROM meta WHERE key='torch_cuda' UNION ALL SELECT 1 FROM modules WHERE path LIKE"
          " '%libc10_cuda.so%' OR path LIKE '%libtorch_cuda.so%' LIMIT 1",
          NULL, 0, 0, &found);
  r->torch_cuda = found && r->ngpus > 0;
  if (lgr_prepare(db, "SELECT value FROM meta WHERE key='nvml'", -1, &st, NULL) == SQLITE_OK) {
    if (lgr_row(st) && r->ngpus > 0) {
      const unsigned char *v = sqlite3_column_text(st, 0);
      if (v && strncmp((const char *)v, "on", 2) != 0) r->nvml_status = lgr_dupstr(v);
    }
    sqlite3_finalize(st);
  }
}
