/* SPDX-License-Identifier: MIT */
/*
 * snapshot.c - snapshots (collector/collector.h): a process's counters summed from its region
 * into the store, its stacks queued for symbolization (the worker, symq.c) and stored
 * when symbolized, each assigned to its allocation site (sites.c), and the GPU parts.
 */
#include <errno.h>
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/collector_impl.h"

static void symframe_at(const void *frames, int i, const char **fn, const char **file, const char **module) {
  const lgs_frame_t *f = (const lgs_frame_t *)frames + i;
  *fn = f->function;
  *file = f->file;
  *module = f->module;
}

/* The site of a symbolized stack (the report's rule, findings/build.c: the innermost
 * Python line in the program's own code, or the innermost Python line when there is
 * none (lgr_own_frame: not the standard library, site-/dist-packages); else the first
 * frame that is not allocator machinery): its key, a label for people and its first
 * frames as JSON (for the suspects files). A native site is not moved past the
 * program's own allocation wrappers here: the report finds those from the shape of all
 * of a process's stacks (findings/headline.c), which the live view does not have. */
static void site_of_frames(const lgs_frame_t *fr, int nf, unsigned space, uint32_t id, char *key, size_t keylen,
                           char *label, size_t labellen, char **frames_json) {
  int k = 0;
  if (nf > 0 && !strcmp(fr[0].module, "python")) k = lgr_own_frame(fr, nf, 0, symframe_at);
  else k = lgr_site_frame(fr, nf, symframe_at);
  if (nf == 0) snprintf(label, labellen, "??");
  else if (fr[k].file[0]) {
    const char *b = strrchr(fr[k].file, '/');
    snprintf(label, labellen, "%s (%s:%d)", fr[k].function, b ? b + 1 : fr[k].file, fr[k].line);
  } else snprintf(label, labellen, "%s [%s]", fr[k].function, fr[k].module);
  if (nf == 0) snprintf(key, keylen, "#%u", id);
  else
    snprintf(key, keylen, "%s\x1f%s\x1f%d\x1f%s\x1f%u", fr[k].function, fr[k].file, fr[k].line,
             fr[k].file[0] ? "" : fr[k].module, space); /* space: space | device << 8 */
  cJSON *arr = cJSON_CreateArray();
  int ok = arr != NULL;
  for (int q = k; ok && q < nf && q < k + 8; q++) {
    cJSON *o = cJSON_CreateObject();
    ok = o && cJSON_AddStringToObject(o, "function", fr[q].function) &&
         cJSON_AddStringToObject(o, "file", fr[q].file) && cJSON_AddNumberToObject(o, "line", fr[q].line) &&
         cJSON_AddStringToObject(o, "module", fr[q].module);
    if (!ok) cJSON_Delete(o), o = NULL;
    ok = lgc_json_push(arr, o);
  }
  *frames_json = ok ? cJSON_PrintUnformatted(arr) : NULL; /* NULL: the site's frames are not in suspects files */
  cJSON_Delete(arr);
}

/* Queues stacks for symbolization and storage (the worker, collector/symq.c), and
 * assigns Python stacks to their site at once (their site is a Python line, read from
 * the region). A stack is queued when it holds 1 KiB or more, or (at the final
 * snapshot) 256 bytes. Programs such as Python make tens of thousands of short-lived
 * stacks at start-up; storing every one costs the collector seconds for nothing. Needs
 * the sums of lgm_collect.
 *
 * A stack that allocates and frees within a request (a decoder's scratch buffer) may
 * hold nothing at every snapshot, yet be the program's biggest allocator: the report's
 * site table sorts by bytes allocated too. At the final snapshot the HEAVY_TOP stacks
 * that allocated the most (at least HEAVY_MIN bytes) are queued as well, so whether
 * they are in the table does not depend on a snapshot catching them live. */
enum { HEAVY_TOP = 32 };
#define HEAVY_MIN ((uint64_t)1 << 20)

/* The ids of the unqueued stacks that allocated the most, most first: *n of them. */
static void heaviest(const lgm_proc_t *m, const uint8_t *queued, uint32_t *top, int *n) {
  *n = 0;
  for (uint32_t id = 2; id < m->nsites; id++) {
    uint64_t ab = m->sites[id].alloc_bytes;
    if (queued[id] || ab < HEAVY_MIN) continue;
    if (*n == HEAVY_TOP && ab <= m->sites[top[HEAVY_TOP - 1]].alloc_bytes) continue;
    int k = *n < HEAVY_TOP ? (*n)++ : HEAVY_TOP - 1;
    while (k > 0 && m->sites[top[k - 1]].alloc_bytes < ab) top[k] = top[k - 1], k--;
    top[k] = id;
  }
}

/* A module the loader names by a relative path (dlopen("./plug.so"): dl_iterate_phdr
 * gives the name as it was asked for) gets the absolute path of its mapping: the line
 * of /proc/PID/maps that maps its start (the kernel's path of the file); else the path
 * joined to the process's working directory. Otherwise the symbolizer took the name
 * for the vdso's and the leak came out as "?? []". The vdso keeps its name. */
static void absolute_module_path(int pid, uint64_t start, uint64_t end, char *path, size_t n) {
  if (!path[0] || path[0] == '/' || !strncmp(path, "linux-vdso", 10) || !strncmp(path, "linux-gate", 10)) return;
  char name[64], *line = NULL;
  size_t cap = 0;
  snprintf(name, sizeof name, "/proc/%d/maps", pid);
  FILE *f = fopen(name, "re");
  int found = 0;
  while (f && !found && getline(&line, &cap, f) > 0) {
    unsigned long lo, hi;
    int off = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || !off) continue;
    char *file = line + off;
    file[strcspn(file, "\n")] = 0;
    if (file[0] != '/' || start >= hi || (end && end <= lo) || start < lo) continue;
    const char *base = strrchr(path, '/'), *fbase = strrchr(file, '/');
    if (strcmp(base ? base + 1 : path, fbase + 1)) continue; /* another file at that address */
    if (strlen(file) >= n) break; /* would be cut: the name it has is better than half a path */
    snprintf(path, n, "%s", file);
    found = 1;
  }
  free(line);
  if (f) fclose(f);
  if (found) return;
  char cwd[PATH_MAX], joined[PATH_MAX * 2];
  snprintf(name, sizeof name, "/proc/%d/cwd", pid);
  ssize_t k = readlink(name, cwd, sizeof cwd - 1);
  if (k <= 0) return;
  cwd[k] = 0;
  snprintf(joined, sizeof joined, "%s/%s", cwd, path[0] == '.' && path[1] == '/' ? path + 2 : path);
  if (access(joined, R_OK) == 0 && strlen(joined) < n) snprintf(path, n, "%s", joined);
}

/* p->symbolized covering stacks [0, ns) (new ones 0: not queued yet); 0 or -ENOMEM. */
static int symbolized_cover(lgc_proc_t *p, uint32_t ns) {
  if (ns <= p->nsymbolized) return 0;
  uint8_t *n = realloc(p->symbolized, ns);
  if (!n) return -ENOMEM;
  memset(n + p->nsymbolized, 0, ns - p->nsymbolized);
  p->symbolized = n;
  p->nsymbolized = ns;
  return 0;
}

/* Queues stack id of p for symbolization (stored when the worker is done); a Python
 * stack is assigned to its site at once (its frames are the region's). */
static void queue_stack(lgc_collector_t *c, lgc_proc_t *p, uint32_t id) {
  lgm_proc_t *m = &p->m;
  lgs_frame_t py[LG_MAX_DEPTH];
  const uint64_t *ips;
  unsigned space = 0;
  unsigned depth = lgm_stack(m, id, &ips, &space);
  int is_py = depth > 0 && (ips[0] & LG_PYFRAME_BIT);
  p->symbolized[id] = 1;
  if (lgc_symq_stack(c->symq, p, p->sym, m, id) != 0) p->symbolized[id] = 0;
  m->sites[id].known = p->symbolized[id];
  if (!is_py) return;
  p->python = 1;
  int nf = 0, in_import = 0;
  for (unsigned k = 0; k < depth && nf < LG_MAX_DEPTH; k++) {
    const char *pf, *pfn;
    int pl;
    if (lgm_pyframe(m, ips[k], &pf, &pfn, &pl) != 0) break;
    py[nf++] = (lgs_frame_t){ips[k], "python", pfn, pf, pl, 0};
    in_import |= lgr_is_import_frame(pfn, pf);
  }
  char label[512], key[1200], *fj = NULL;
  unsigned dev = lgm_stack_device(m, id);
  site_of_frames(py, nf, space | dev << 8, id, key, sizeof key, label, sizeof label, &fj);
  lgc_sites_assign(&p->sites, id, key, label, fj, space, dev, in_import, 1);
  free(fj);
}

int lgc_sync_modules(lgc_collector_t *c, lgc_proc_t *p) {
  lgm_proc_t *m = &p->m;
  uint32_t nm = lgm_nmodules(m);
  for (uint32_t i = m->modules_stored; i < nm; i++) {
    lg_module_rec_t fixed = *lgm_module(m, i);
    const lg_module_rec_t *mod = &fixed;
    char path[LG_MODULE_PATH + 1];
    memcpy(path, mod->path, LG_MODULE_PATH);
    path[LG_MODULE_PATH] = 0;
    absolute_module_path(m->pid, mod->start, mod->end, path, sizeof fixed.path);
    memcpy(fixed.path, path, sizeof fixed.path);
    /* out of memory: this module and the stacks that may need it, next time (their
     * frames would stay unnamed for good) */
    if (lgc_symq_module(c->symq, p->sym, path, mod->start, mod->end, mod->bias) != 0) return -ENOMEM;
    if (lgc_db_ok(c)) lgc_db_write(c, lgst_module(c->db, m->proc, i, mod));
    m->modules_stored = i + 1;
  }
  return 0;
}

static void sync_symbols(lgc_collector_t *c, lgc_proc_t *p, int final) {
  lgm_proc_t *m = &p->m;
  if (lgc_sync_modules(c, p) != 0) return;
  uint32_t ns = m->nsites;
  if (symbolized_cover(p, ns) != 0) return;
  m->stacks_stored = ns;
  uint32_t heavy[HEAVY_TOP];
  int nheavy = 0;
  if (final) heaviest(m, p->symbolized, heavy, &nheavy);
  for (uint32_t id = 2; id < ns; id++) {
    if (p->symbolized[id]) continue;
    int64_t live = m->sites[id].live_bytes;
    int heavy_one = 0;
    for (int k = 0; k < nheavy && !heavy_one; k++) heavy_one = heavy[k] == id;
    if (!(live >= 1024 || (final && live >= 256) || heavy_one)) continue;
    queue_stack(c, p, id);
  }
}

/* A short program's stacks were all symbolized after it exited: its first snapshot is
 * its last one, and the worker then looked every frame up while `leakguard run` waited
 * (10-13 ms of a 15-ms `python3 -S -c pass`, recorded from its start). In its first
 * seconds a process's new modules and stacks are handed to the worker as they appear,
 * every 5 ms, to look their frames up while the program runs (on another core): the
 * stacks its snapshots then queue find their frames in the symbolizer's cache. Only
 * the cache is warmed: what is stored and when does not change. */
#define WARM_FOR_NS 2000000000ULL
#define WARM_EVERY_NS 5000000ULL
#define WARM_MAX_STACKS 20000u
void lgc_warm_symbols(lgc_collector_t *c, lgc_proc_t *p, uint64_t now) {
  lgm_proc_t *m = &p->m;
  if (m->ended || now - m->start_ns > WARM_FOR_NS || now - p->warmed_ns < WARM_EVERY_NS || !m->hdr ||
      atomic_load(&m->hdr->lazy) == LG_LAZY_WAITING)
    return;
  p->warmed_ns = now;
  lgc_db_begin(c); /* the module rows in the pass's transaction, as a snapshot's */
  if (lgc_sync_modules(c, p) != 0) return;
  uint32_t n = lgm_nstacks(m), from = p->warmed < 2 ? 2 : p->warmed;
  if (n > WARM_MAX_STACKS) n = WARM_MAX_STACKS;
  if (n > from && lgc_symq_warm(c->symq, p->sym, m, from, n) == 0) p->warmed = n;
}

/* A stack the report will need although its site stays small (the holder's kept_at,
 * issue #34: a list's item array, a tensor bound to a name), symbolized and stored as a
 * growing one's is. */
void lgc_want_stack(lgc_collector_t *c, lgc_proc_t *p, uint32_t id) {
  lgm_proc_t *m = &p->m;
  if (id < 2 || id >= m->nsites || symbolized_cover(p, m->nsites) != 0) return;
  if (!p->symbolized[id]) queue_stack(c, p, id);
}

/* Stores the stacks the worker symbolized, and assigns the native ones to their site:
 * for at most budget_ns (0: all of them), so that the loop keeps its pace while a
 * program's start-up floods it with new stacks. */
void lgc_take_symbols(lgc_collector_t *c, uint64_t budget_ns) {
  lgc_symres_t r;
  uint64_t t0 = lgu_now_ns();
  while ((!budget_ns || lgu_now_ns() - t0 < budget_ns) && lgc_symq_take(c->symq, &r)) {
    lgc_proc_t *p = r.owner;
    if (lgc_db_ok(c)) {
      lgc_db_begin(c);
      lgc_db_write(c, lgst_stack(c->db, p->m.proc, r.id, r.space, r.frames, r.nframes));
    }
    if (!(r.nframes > 0 && !strcmp(r.frames[0].module, "python"))) {
      char label[512], key[1200], *fj = NULL;
      unsigned dev = lgm_stack_device(&p->m, r.id);
      site_of_frames(r.frames, r.nframes, r.space | dev << 8, r.id, key, sizeof key, label, sizeof label, &fj);
      lgc_sites_assign(&p->sites, r.id, key, label, fj, r.space, dev, 0, 0);
      free(fj);
    }
    lgc_symq_release(&r);
  }
}

/* ---- GPU memory (docs/cuda.md): the CUDA part of a snapshot, and the notes of entry
 * points the recorder passed through untracked, each printed once. */
static void cuda_snapshot(lgc_collector_t *c, lgc_proc_t *p) {
  lgm_proc_t *m = &p->m;
  lgm_gpu_state_t gs;
  lgm_gpu_state(m->hdr, &gs);
  for (; m->cuda_notes_seen < gs.nnotes; m->cuda_notes_seen++) {
    char note[LG_GPU_NOTE_LEN + 1];
    lgm_gpu_note(m->hdr, m->cuda_notes_seen, note);
    lgu_err("cuda: pid %d: %s", m->pid, note);
  }
  if (lgc_db_ok(c)) lgc_db_write(c, lgst_cuda_snapshot(c->db, m));
}

/* The NVML timeline, at the snapshot interval, once a recorded process uses CUDA;
 * without NVML, one line and nothing else. */
void lgc_gpu_timeline(lgc_collector_t *c, uint64_t now) {
  int pids[LGSM_TIMELINE_PROCS], procs[LGSM_TIMELINE_PROCS], np = 0;
  for (int i = 0; i < c->nprocs && np < LGSM_TIMELINE_PROCS; i++) {
    lgm_proc_t *m = &c->procs[i]->m;
    lgm_gpu_state_t gs;
    lgm_gpu_state(m->hdr, &gs);
    if (m->ended || !gs.flags) continue;
    pids[np] = m->pid;
    procs[np++] = m->proc;
  }
  if (!np) return;
  if (!c->nvml_tried) {
    char why[512];
    c->nvml_tried = 1;
    c->nvml = lgsm_timeline_open(why, sizeof why);
    if (!c->nvml) lgu_err("%s", why);
    if (lgc_db_ok(c)) lgc_db_write(c, lgst_meta(c->db, "nvml", c->nvml ? "on" : why));
  }
  lgsm_timeline_sample_t s;
  if (!c->nvml || lgsm_timeline_sample(c->nvml, pids, np, &s) != 0 || !lgc_db_ok(c)) return;
  lgc_db_begin(c);
  for (int d = 0; d < s.ndev; d++)
    if (s.dev[d].ok && lgc_db_ok(c)) lgc_db_write(c, lgst_nvml_device(c->db, now, d, s.dev[d].used, s.dev[d].total));
  for (int k = 0; k < s.nproc; k++)
    for (int i = 0; i < np; i++)
      if (pids[i] == s.proc[k].pid && lgc_db_ok(c))
        lgc_db_write(c, lgst_nvml_process(c->db, now, s.proc[k].dev, pids[i], procs[i], s.proc[k].used));
}

/* Takes one snapshot of p and stores it (mode: LGST_*). */
/* A forked process that renames itself shows its new title in /proc/PID/cmdline
 * (postgres' backends "postgres: user db [local] idle", nginx's "nginx: worker
 * process", gunicorn's workers): the report names it by that. Read again at most once a
 * second while it runs, and only while its executable is still the one it was forked
 * with: after an exec /proc shows the new program before its image says hello. */
static void retitle(lgc_collector_t *c, lgc_proc_t *p, uint64_t now) {
  if (p->m.kind != LGM_FORK || p->m.ended || now - p->title_ns < 1000000000ull) return;
  p->title_ns = now;
  char path[64], exe[sizeof p->m.exe], cmd[sizeof p->m.command];
  snprintf(path, sizeof path, "/proc/%d/exe", p->m.pid);
  ssize_t n = readlink(path, exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  if (strcmp(exe, p->m.exe) != 0) return;
  lgu_read_cmdline(p->m.pid, cmd, sizeof cmd);
  if (!cmd[0] || !strcmp(cmd, p->m.command)) return;
  snprintf(p->m.command, sizeof p->m.command, "%s", cmd);
  lgc_db_begin(c);
  if (lgc_db_ok(c)) lgc_db_write(c, lgst_proc(c->db, &p->m));
}

/* The lazy start (core/region.h LG_LAZY_*) as labels, each once: lazy=waiting for an
 * image that records nothing yet (replaced when it begins), lazy=began with
 * lazy_began_ns (the recorder's CLOCK_MONOTONIC, as the collector's) and
 * lazy_before_bytes. The report folds an image that never began with the helpers and
 * says when the others began. */
static void store_lazy(lgc_collector_t *c, lgc_proc_t *p) {
  const lg_region_hdr_t *h = p->m.hdr;
  uint32_t st = atomic_load_explicit(&((lg_region_hdr_t *)h)->lazy, memory_order_acquire);
  if (st == p->lazy_said || st > LG_LAZY_BEGAN || !lgc_db_ok(c)) return;
  p->lazy_said = st;
  if (st == LG_LAZY_WAITING) {
    lgc_db_write(c, lgst_label(c->db, p->m.proc, "lazy", "waiting"));
    return;
  }
  char v[32];
  lgc_db_write(c, lgst_label(c->db, p->m.proc, "lazy", "began"));
  snprintf(v, sizeof v, "%" PRIu64, h->lazy_began_ns);
  lgc_db_write(c, lgst_label(c->db, p->m.proc, "lazy_began_ns", v));
  snprintf(v, sizeof v, "%" PRIu64, h->lazy_before_bytes);
  lgc_db_write(c, lgst_label(c->db, p->m.proc, "lazy_before_bytes", v));
}

void lgc_snapshot(lgc_collector_t *c, lgc_proc_t *p, int mode) {
  int full = mode == LGST_ALL;
  lgm_proc_t *m = &p->m;
  uint64_t now = lgu_now_ns();
  lgc_db_begin(c);
  if (lgm_collect(m) != 0) return;
  sync_symbols(c, p, full);
  if (!m->ended) {
    uint64_t rss = lgu_rss_bytes(m->pid);
    if (rss) m->rss_bytes = rss;
    retitle(c, p, now);
  }
  uint64_t usage;
  if (c->limit_given) {
    usage = 0;
    for (int i = 0; i < c->nprocs; i++)
      if (!c->procs[i]->m.ended) usage += c->procs[i]->m.rss_bytes;
    if (usage < m->rss_bytes) usage = m->rss_bytes;
  } else {
    /* The machine's or cgroup's: the same for every image, read at most every 20 ms
     * (a dozen files, /proc/self/mountinfo among them: read at each of a process's
     * snapshots it was a quarter of the collector's time with many short-lived ones) */
    if (!c->usage_ns || now - c->usage_ns >= 20000000ULL) {
      c->usage = lgsm_memory_usage();
      c->usage_ns = now;
    }
    usage = c->usage;
  }
  /* The process began to exit (lg_exiting): from here on it frees its teardown. The
   * state is read after the counters, so the previous snapshot (state still running
   * after its counters were read) is the last one that shows the process as it ran;
   * this one may already hold part of the teardown. */
  if (!p->exit_begin_ns && atomic_load(&m->hdr->state) == LG_PS_EXITING) {
    p->exit_begin_ns = p->last_tick_ns ? p->last_tick_ns : now;
    if (lgc_db_ok(c)) {
      char v[32];
      snprintf(v, sizeof v, "%" PRIu64, p->exit_begin_ns);
      lgc_db_write(c, lgst_label(c->db, m->proc, "exit_begin_ns", v));
    }
  }
  store_lazy(c, p);
  /* every snapshot (step markers too) is a point of the live site series */
  lgc_sites_tick(&p->sites, (double)(now - m->start_ns) / 1e9, (double)atomic_load(&m->hdr->steps), m->sites,
                 m->nsites);
  p->last_tick_ns = now;
  cuda_snapshot(c, p);
  if (lgc_db_ok(c)) {
    lgc_db_write(c, lgst_snapshot(c->db, m, now, usage, c->limit, mode));
    /* the final snapshot: the lifetimes of the blocks each stored stack freed */
    int steps = atomic_load(&m->hdr->steps) > 0;
    for (uint32_t id = 2; full && id < m->nsites && id < p->nsymbolized; id++) {
      uint64_t ages[LG_AGES];
      if (!p->symbolized[id]) continue;
      for (int k = 0; k <= steps; k++)
        if (lgm_freed_ages(m, id, k, ages) == 0) lgc_db_write(c, lgst_lifetimes(c->db, m->proc, id, k, ages, LG_AGES));
    }
  } else {
    m->seq++;
  }
  p->last_snap_ns = now;
}
