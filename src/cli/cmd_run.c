/* SPDX-License-Identifier: MIT */
/*
 * cmd_run.c - `leakguard run`: starts the target under the recorder and collects.
 *
 * Sequence: check the target (exists, dynamically linked, not setuid) -> listen on a
 * private Unix socket -> fork; the child waits on a pipe -> create the database (now
 * that the pid is known) -> release the child, which execs with LD_PRELOAD -> loop:
 * accept recorded process images, advance their epoch clock, snapshot every
 * interval and at step markers, show the live view -> when the target exits, take
 * final snapshots from the regions (still mapped here, so nothing recorded is lost
 * even after SIGKILL), print the report, exit with the target's status.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analysis/detect.h"
#include "cli/commands.h"
#include "collector/sites.h"
#include "collector/symq.h"
#include "core/model.h"
#include "core/nvml.h"
#include "core/symbolize.h"
#include "core/util.h"
#include "guard/guard.h"
#include "output/live.h"
#include "output/metrics.h"
#include "output/report.h"
#include "output/store.h"

/* The live analysis runs every LIVE_TICK_NS, or at the snapshot interval when that is
 * shorter (in memory; the database gets snapshots at the snapshot interval), so a leak
 * is flagged a few ticks after it begins whatever the interval. Every snapshot, those
 * at step markers too, is also a point of the live series. */
#define LIVE_TICK_NS 250000000ULL
/* Small sites' changes are written this often (LGST_CHANGED, store.h). */
#define CHANGED_EVERY_NS 2000000000ULL

typedef struct run_opts {
  const char *output;
  double interval;
  int quiet, follow, fail_on_leak, mmap, top;
  uint64_t sample, limit;
  long depth;
  int guard, guard_dry_run;
  int cuda_um;          /* --cuda-um: CUPTI Unified Memory counters (docs/cuda.md) */
  const char *guard_config, *metrics;
  long explain_at_step;
} run_opts_t;

typedef struct proc_ext {
  lgm_proc_t m;
  lgs_symbolizer_t *sym;
  lgc_sites_t sites;    /* stacks grouped by allocation site, for the live analysis */
  uint8_t *symbolized;  /* per stack: 1 once symbolized (stored, assigned to a site) */
  uint32_t nsymbolized;
  uint64_t last_snap_ns;
  uint64_t last_changed_ns; /* last LGST_CHANGED snapshot */
  uint64_t last_tick_ns;    /* last point of the live site series */
  uint64_t exit_begin_ns;   /* when the process began to exit (lg_exiting), 0: not yet */
  int python;               /* runs Python code (Python frames seen): live explains */
  double *explained;        /* per site group: its live bytes when last explained (0: never) */
  uint32_t nexplained;
  uint64_t last_explain_ns;
  int explain_seq;
  /* Process lifetime (see conn_eof): the connection's EOF alone does not end an
   * image, the program may have closed our socket. */
  int pidfd;            /* the process, -1 if pidfd_open is not available */
  int detached;         /* connection closed while the process lives on */
  int status_known;     /* exit status or signal set (by our waitpid or a reaper's ring) */
  uint64_t reaped_next; /* next entry of the region's reaped ring to read */
} proc_ext_t;

typedef struct collector {
  run_opts_t o;
  lgst_t *db;
  proc_ext_t **procs;
  int nprocs, cap;
  int listen_fd;
  pid_t child;
  int child_done, child_status;
  uint64_t limit;
  const char *limit_source;
  uint64_t t0;
  lgv_view_t *view;
  int db_failed;
  lgg_guard_t *guard;
  uint64_t next_guard;
  lgx_registry_t *reg;
  lgx_server_t *srv;
  char dir[64];         /* private directory: socket, suspects/holders files */
  lgc_symq_t *symq;     /* symbolization worker */
  lgn_t *nvml;          /* GPU timeline (docs/cuda.md), opened when a process uses CUDA */
  int nvml_tried;
  int in_txn;
  int explains;
  /* Children that a recorded process reaped before their hello was accepted (a
   * short-lived child of a busy collector): applied when it arrives. */
  struct {
    int pid, status;
  } pending[64];
  int npending;
} collector_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: leakguard run [OPTIONS] [--] COMMAND [ARGS...]\n"
          "\n"
          "Runs COMMAND with the recorder preloaded, shows growing allocation sites while it\n"
          "runs, stores everything in a SQLite database and prints a leak report at the end.\n"
          "\n"
          "  -o, --output FILE     database path (default leakguard-<program>-<pid>.db)\n"
          "  -i, --interval SEC    snapshot interval in seconds, 0.05-3600 (default: 0.1 s\n"
          "                        while the run is young, growing to 1 s after 30 s)\n"
          "  -s, --sample BYTES    sample allocations: one sample per BYTES allocated on\n"
          "                        average (Poisson, weighted); e.g. 512K. Default: record all\n"
          "  -d, --depth N         native stack depth, 1-256 (default 64)\n"
          "  -l, --limit BYTES     memory limit for time-to-OOM (default: cgroup, else RAM)\n"
          "      --no-follow       do not record forked or exec'd children\n"
          "      --no-mmap         do not record anonymous mmap regions\n"
          "      --fail-on-leak    exit with status 97 when a leak is found\n"
          "      --guard           act before the OOM killer: graded levels on the target's\n"
          "                        memory, system memory and leakguard's memory cgroup,\n"
          "                        published to the target's breaker API (docs/guard.md)\n"
          "      --guard-config F  guard levels and actions from an INI file (implies --guard)\n"
          "      --guard-dry-run   the guard only logs what it would do (implies --guard)\n"
          "      --metrics ADDR    serve Prometheus metrics on ADDR:PORT (e.g. 127.0.0.1:9464;\n"
          "                        loopback unless another address is given)\n"
          "      --cuda-um         CUDA Unified Memory: page faults and migrations per managed\n"
          "                        allocation site (CUPTI; docs/cuda.md)\n"
          "      --explain-at-step N  Python: find who holds the suspects' memory at step N\n"
          "                        (also done at exit; docs/python.md)\n"
          "  -n, --top N           suspects in the final report (default 10)\n"
          "  -q, --quiet           no live view and no final text report\n"
          "  -h, --help            this help\n"
          "\n"
          "Exit status: the target's (128+N if killed by signal N); 97 with --fail-on-leak\n"
          "and a leak; 127 command not found; 126 cannot be recorded (static, setuid);\n"
          "2 usage error; 98 internal error.\n");
}

/* ------------------------------------------------------------------ target checks */

static int find_command(const char *cmd, char *out, size_t n) {
  if (strchr(cmd, '/')) {
    if (access(cmd, F_OK) != 0) return -ENOENT;
    snprintf(out, n, "%s", cmd);
    return access(cmd, X_OK) == 0 ? 0 : -EACCES;
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  int found_noexec = 0;
  while (*path) {
    const char *e = strchr(path, ':');
    size_t len = e ? (size_t)(e - path) : strlen(path);
    snprintf(out, n, "%.*s/%s", (int)len, len ? path : ".", cmd);
    struct stat st;
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(out, X_OK) == 0) return 0;
      found_noexec = 1;
    }
    path += len + (e ? 1 : 0);
    if (!e) break;
  }
  return found_noexec ? -EACCES : -ENOENT;
}

/* 1 static ELF, 0 dynamic or not ELF (scripts), -errno on read error. */
static int is_static_elf(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  Elf64_Ehdr eh;
  int r = 0;
  if (read(fd, &eh, sizeof eh) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
      eh.e_ident[EI_CLASS] == ELFCLASS64) {
    r = 1;
    for (int i = 0; i < eh.e_phnum; i++) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) != (ssize_t)sizeof ph) break;
      if (ph.p_type == PT_INTERP || ph.p_type == PT_DYNAMIC) {
        r = 0;
        break;
      }
    }
  }
  close(fd);
  return r;
}

static int find_library(char *out, size_t n) {
  const char *env = getenv("LEAKGUARD_LIBRARY");
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
  }
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k > 0) {
    self[k] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = 0;
      const char *rel[] = {"../lib/libleakguard.so", "../lib/x86_64-linux-gnu/libleakguard.so",
                           "../lib64/libleakguard.so", "libleakguard.so"};
      for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(out, n, "%s/%s", self, rel[i]);
        if (access(out, R_OK) == 0) {
          char *r = realpath(out, NULL);
          if (r) {
            snprintf(out, n, "%s", r);
            free(r);
          }
          return 0;
        }
      }
    }
  }
  snprintf(out, n, "%s/libleakguard.so", LG_INSTALL_LIBDIR);
  if (access(out, R_OK) == 0) return 0;
  snprintf(out, n, "%s/libleakguard.so", LG_BUILD_LIBDIR);
  if (access(out, R_OK) == 0) return 0;
  return -ENOENT;
}

/* The directory with the `leakguard` Python module and its sitecustomize hook:
 * next to the binary in the build tree, or the installed one. */
static int find_python_dir(char *out, size_t n) {
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) return -ENOENT;
  self[k] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return -ENOENT;
  *slash = 0;
  const char *rel[] = {"../python", "../lib/leakguard/python", "../lib/x86_64-linux-gnu/leakguard/python",
                       "../lib64/leakguard/python"};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
    snprintf(out, n, "%s/%s/sitecustomize.py", self, rel[i]);
    if (access(out, R_OK) == 0) {
      snprintf(out, n, "%s/%s", self, rel[i]);
      return 0;
    }
  }
  return -ENOENT;
}

/* ------------------------------------------------------------------ processes */

static void read_cmdline(int pid, char *out, size_t n) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  long k = lgu_read_file(path, buf, sizeof buf);
  if (k <= 0) {
    out[0] = 0;
    return;
  }
  for (long i = 0; i < k - 1; i++)
    if (buf[i] == 0) buf[i] = ' ';
  snprintf(out, n, "%s", buf);
}

static proc_ext_t *find_proc(collector_t *c, int pid, int alive_only) {
  for (int i = c->nprocs - 1; i >= 0; i--)
    if (c->procs[i]->m.pid == pid && (!alive_only || !c->procs[i]->m.ended)) return c->procs[i];
  return NULL;
}

static void db_begin(collector_t *c);

/* The site of a symbolized stack (the report's rule, output/report.c: the innermost
 * Python line, else the first frame that is not allocator machinery): its key, a label
 * for people and its first frames as JSON (for the suspects files). */
static void site_of_frames(const lgs_frame_t *fr, int nf, unsigned space, uint32_t id, char *key, size_t keylen,
                           char *label, size_t labellen, char **frames_json) {
  int k = 0;
  if (!(nf > 0 && !strcmp(fr[0].module, "python")))
    while (k < nf - 1 && lgr_is_machinery(fr[k].function, fr[k].file, fr[k].module)) k++;
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
  for (int q = k; q < nf && q < k + 8; q++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "function", fr[q].function);
    cJSON_AddStringToObject(o, "file", fr[q].file);
    cJSON_AddNumberToObject(o, "line", fr[q].line);
    cJSON_AddStringToObject(o, "module", fr[q].module);
    cJSON_AddItemToArray(arr, o);
  }
  *frames_json = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
}

/* Queues stacks for symbolization and storage (the worker, collector/symq.c), and
 * assigns Python stacks to their site at once (their site is a Python line, read from
 * the region). A stack is queued when it holds 1 KiB or more, or (at the final
 * snapshot) 256 bytes. Programs such as Python make tens of thousands of short-lived
 * stacks at start-up; storing every one costs the collector seconds for nothing. Needs
 * the sums of lgm_collect. */
static void sync_symbols(collector_t *c, proc_ext_t *p, int final) {
  lgm_proc_t *m = &p->m;
  uint32_t nm = lgm_nmodules(m);
  for (uint32_t i = m->modules_stored; i < nm; i++) {
    const lg_module_rec_t *mod = lgm_module(m, i);
    char path[LG_MODULE_PATH + 1];
    memcpy(path, mod->path, LG_MODULE_PATH);
    path[LG_MODULE_PATH] = 0;
    if (p->sym) lgc_symq_module(c->symq, p->sym, path, mod->start, mod->end, mod->bias);
    if (c->db) lgst_module(c->db, m->proc, i, mod);
  }
  m->modules_stored = nm;
  uint32_t ns = m->nsites;
  if (ns > p->nsymbolized) {
    uint8_t *n = realloc(p->symbolized, ns);
    if (!n) return;
    memset(n + p->nsymbolized, 0, ns - p->nsymbolized);
    p->symbolized = n;
    p->nsymbolized = ns;
  }
  m->stacks_stored = ns;
  lgs_frame_t py[LG_MAX_DEPTH];
  for (uint32_t id = 2; id < ns; id++) {
    if (p->symbolized[id]) continue;
    int64_t live = m->sites[id].live_bytes;
    const uint64_t *ips;
    unsigned space = 0;
    unsigned depth = lgm_stack(m, id, &ips, &space);
    int is_py = depth > 0 && (ips[0] & LG_PYFRAME_BIT);
    if (!(live >= 1024 || (final && live >= 256))) continue;
    p->symbolized[id] = 1;
    if (lgc_symq_stack(c->symq, p, p->sym, m, id) != 0) p->symbolized[id] = 0;
    if (!is_py) continue;
    p->python = 1;
    int nf = 0;
    for (unsigned k = 0; k < depth && nf < LG_MAX_DEPTH; k++) {
      const char *pf, *pfn;
      int pl;
      if (lgm_pyframe(m, ips[k], &pf, &pfn, &pl) != 0) break;
      py[nf++] = (lgs_frame_t){ips[k], "python", pfn, pf, pl, 0};
    }
    char label[512], key[1200], *fj = NULL;
    unsigned dev = lgm_stack_device(m, id);
    site_of_frames(py, nf, space | dev << 8, id, key, sizeof key, label, sizeof label, &fj);
    lgc_sites_assign(&p->sites, id, key, label, fj, space, dev);
    free(fj);
  }
}

/* Stores the stacks the worker symbolized, and assigns the native ones to their site:
 * for at most budget_ns (0: all of them), so that the loop keeps its pace while a
 * program's start-up floods it with new stacks. */
static void take_symbols(collector_t *c, uint64_t budget_ns) {
  lgc_symres_t r;
  uint64_t t0 = lgu_now_ns();
  while ((!budget_ns || lgu_now_ns() - t0 < budget_ns) && lgc_symq_take(c->symq, &r)) {
    proc_ext_t *p = r.owner;
    if (c->db && !c->db_failed) {
      db_begin(c);
      lgst_stack(c->db, p->m.proc, r.id, r.space, r.frames, r.nframes);
    }
    if (!(r.nframes > 0 && !strcmp(r.frames[0].module, "python"))) {
      char label[512], key[1200], *fj = NULL;
      unsigned dev = lgm_stack_device(&p->m, r.id);
      site_of_frames(r.frames, r.nframes, r.space | dev << 8, r.id, key, sizeof key, label, sizeof label, &fj);
      lgc_sites_assign(&p->sites, r.id, key, label, fj, r.space, dev);
      free(fj);
    }
    lgc_symq_release(&r);
  }
}

/* One transaction per loop iteration that writes anything: opened on the first
 * write, committed by db_commit (per-statement transactions would each take the
 * file locks). */
static void db_begin(collector_t *c) {
  if (c->db && !c->db_failed && !c->in_txn) c->in_txn = lgst_begin(c->db) == 0;
}

static void db_commit(collector_t *c) {
  if (!c->in_txn) return;
  c->in_txn = 0;
  if (lgst_commit(c->db) != 0 && !c->db_failed) {
    lgu_err("cannot write the database %s; recording continues without storing", c->o.output);
    c->db_failed = 1;
  }
}

/* ---- GPU memory (docs/cuda.md): the CUDA part of a snapshot, and the notes of entry
 * points the recorder passed through untracked, each printed once. */
static void cuda_snapshot(collector_t *c, proc_ext_t *p) {
  lgm_proc_t *m = &p->m;
  uint32_t nn = atomic_load_explicit(&m->hdr->cuda_nnotes, memory_order_acquire);
  for (; m->cuda_notes_seen < nn && m->cuda_notes_seen < LG_CUDA_NOTES; m->cuda_notes_seen++)
    lgu_err("cuda: pid %d: %.*s", m->pid, LG_CUDA_NOTE_LEN, m->hdr->cuda_notes[m->cuda_notes_seen]);
  if (c->db && !c->db_failed) lgst_cuda_snapshot(c->db, m);
}

/* The NVML timeline, at the snapshot interval, once a recorded process uses CUDA;
 * without NVML, one line and nothing else. */
static void gpu_timeline(collector_t *c, uint64_t now) {
  int pids[LGN_MAX_PROC], procs[LGN_MAX_PROC], np = 0;
  for (int i = 0; i < c->nprocs && np < LGN_MAX_PROC; i++) {
    lgm_proc_t *m = &c->procs[i]->m;
    if (m->ended || !atomic_load(&m->hdr->cuda_flags)) continue;
    pids[np] = m->pid;
    procs[np++] = m->proc;
  }
  if (!np) return;
  if (!c->nvml_tried) {
    char why[512];
    c->nvml_tried = 1;
    c->nvml = lgn_open(why, sizeof why);
    if (!c->nvml) lgu_err("%s", why);
    if (c->db) lgst_meta(c->db, "nvml", c->nvml ? "on" : why);
  }
  lgn_sample_t s;
  if (!c->nvml || lgn_sample(c->nvml, pids, np, &s) != 0 || !c->db || c->db_failed) return;
  db_begin(c);
  for (int d = 0; d < s.ndev; d++)
    if (s.dev[d].ok) lgst_nvml_device(c->db, now, d, s.dev[d].used, s.dev[d].total);
  for (int k = 0; k < s.nproc; k++)
    for (int i = 0; i < np; i++)
      if (pids[i] == s.proc[k].pid) lgst_nvml_process(c->db, now, s.proc[k].dev, pids[i], procs[i], s.proc[k].used);
}

/* Labels a process with its rank in a distributed job, from the environment it was
 * started with (torchrun and torch.distributed's launchers: RANK, LOCAL_RANK,
 * WORLD_SIZE; Open MPI; MPICH/PMI; Slurm), and with the host it runs on. A rank given
 * to the program another way (torch.multiprocessing.spawn's argument) reaches us later
 * through the Python module's labels file. */
static void label_process(collector_t *c, const lgm_proc_t *m) {
  if (!c->db || c->db_failed) return;
  static const char *const keys[][2] = {
      {"RANK", "rank"}, {"LOCAL_RANK", "local_rank"}, {"WORLD_SIZE", "world_size"},
      {"OMPI_COMM_WORLD_RANK", "rank"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "local_rank"},
      {"OMPI_COMM_WORLD_SIZE", "world_size"}, {"PMI_RANK", "rank"}, {"PMI_SIZE", "world_size"},
      {"SLURM_PROCID", "rank"}, {"SLURM_LOCALID", "local_rank"}, {"SLURM_NTASKS", "world_size"}};
  char path[64], buf[65536];
  snprintf(path, sizeof path, "/proc/%d/environ", m->pid);
  long n = lgu_read_file(path, buf, sizeof buf);
  int have[3] = {0, 0, 0};
  db_begin(c);
  for (long i = 0; n > 0 && i < n;) {
    const char *e = buf + i;
    size_t len = strnlen(e, (size_t)(n - i));
    i += (long)len + 1;
    const char *eq = memchr(e, '=', len);
    if (!eq) continue;
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
      size_t kl = strlen(keys[k][0]);
      int slot = !strcmp(keys[k][1], "rank") ? 0 : !strcmp(keys[k][1], "local_rank") ? 1 : 2;
      if ((size_t)(eq - e) != kl || memcmp(e, keys[k][0], kl) != 0 || have[slot]) continue;
      long v;
      if (lgu_parse_long(eq + 1, 0, 1 << 24, &v) != 0) continue;
      char num[24];
      snprintf(num, sizeof num, "%ld", v);
      lgst_label(c->db, m->proc, keys[k][1], num);
      have[slot] = 1;
    }
  }
  char host[256];
  if (gethostname(host, sizeof host) == 0) {
    host[sizeof host - 1] = 0;
    lgst_label(c->db, m->proc, "host", host);
  }
}

/* Takes one snapshot of p and stores it (mode: LGST_*). */
static void snapshot(collector_t *c, proc_ext_t *p, int mode) {
  int full = mode == LGST_ALL;
  lgm_proc_t *m = &p->m;
  uint64_t now = lgu_now_ns();
  db_begin(c);
  if (lgm_collect(m) != 0) return;
  sync_symbols(c, p, full);
  if (!m->ended) {
    uint64_t rss = lgu_rss_bytes(m->pid);
    if (rss) m->rss_bytes = rss;
  }
  uint64_t usage;
  if (c->o.limit) {
    usage = 0;
    for (int i = 0; i < c->nprocs; i++)
      if (!c->procs[i]->m.ended) usage += c->procs[i]->m.rss_bytes;
    if (usage < m->rss_bytes) usage = m->rss_bytes;
  } else {
    usage = lgu_memory_usage();
  }
  /* the process began to exit (lg_exiting): from here on it frees its teardown */
  if (!p->exit_begin_ns && atomic_load(&m->hdr->state) == LG_PS_EXITING) {
    p->exit_begin_ns = now;
    if (c->db && !c->db_failed) {
      char v[32];
      snprintf(v, sizeof v, "%" PRIu64, now);
      lgst_label(c->db, m->proc, "exit_begin_ns", v);
    }
  }
  /* every snapshot (step markers too) is a point of the live site series */
  lgc_sites_tick(&p->sites, (double)(now - m->start_ns) / 1e9, (double)atomic_load(&m->hdr->steps), m->sites,
                 m->nsites);
  p->last_tick_ns = now;
  cuda_snapshot(c, p);
  if (c->db && !c->db_failed) {
    lgst_snapshot(c->db, m, now, usage, c->limit, mode);
  } else {
    m->seq++;
  }
  p->last_snap_ns = now;
}

static void store_proc(collector_t *c, proc_ext_t *p) {
  db_begin(c);
  if (c->db && !c->db_failed) lgst_proc(c->db, &p->m);
}

static void end_proc(collector_t *c, proc_ext_t *p, const char *reason) {
  if (p->m.ended) return;
  snapshot(c, p, LGST_ALL);
  p->m.ended = 1;
  p->m.end_ns = lgu_now_ns();
  if (reason) snprintf(p->m.end_reason, sizeof p->m.end_reason, "%s", reason);
  if (p->m.conn >= 0) close(p->m.conn);
  p->m.conn = -1;
  if (p->pidfd >= 0) close(p->pidfd);
  p->pidfd = -1;
  store_proc(c, p);
}

/* ------------------------------------------------------------------ process lifetime
 * An image's connection reaching EOF means: it exec'd (the recorder marked its region
 * LG_PS_EXECED before calling exec), it is gone, or the program closed our socket
 * (close_range, closefrom, Python's closerange, a dup2 over it) and runs on. Only the
 * process itself tells the last two apart: a pidfd (Linux 5.3), polled with the
 * connections, becomes readable when the process exits; without one, /proc is read. */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5: a pidfd of the peer, race-free */
#endif

static int open_pidfd(int conn, int pid) {
  int fd = -1;
  socklen_t len = sizeof fd;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0) {
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
  }
#ifdef SYS_pidfd_open
  fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
#else
  (void)pid;
  return -1;
#endif
}

/* 1 while the process of p has not exited (a zombie has). */
static int proc_alive(const proc_ext_t *p) {
  if (p->pidfd >= 0) {
    struct pollfd q = {p->pidfd, POLLIN, 0};
    return poll(&q, 1, 0) == 0;
  }
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", p->m.pid);
  long k = lgu_read_file(path, buf, sizeof buf - 1);
  if (k <= 0) return 0;
  buf[k] = 0;
  const char *r = strrchr(buf, ')');
  return r && r[1] == ' ' && r[2] != 'Z' && r[2] != 'X';
}

/* The connection of p reached EOF (or failed). */
static void conn_eof(collector_t *c, proc_ext_t *p) {
  if (p->m.conn >= 0) close(p->m.conn);
  p->m.conn = -1;
  if (atomic_load(&p->m.hdr->state) == LG_PS_EXECED || !proc_alive(p)) {
    end_proc(c, p, "ended");
    return;
  }
  /* The program closed our socket: the region is still mapped on both sides, so
   * recording goes on until the process exits. */
  p->detached = 1;
}

/* Sets the exit status of the image q from a wait(2) status word. */
static void set_status(collector_t *c, proc_ext_t *q, int st) {
  /* The region is still mapped: the final snapshot loses nothing. */
  if (!q->m.ended) end_proc(c, q, NULL);
  if (WIFEXITED(st)) {
    q->m.exit_status = WEXITSTATUS(st);
    snprintf(q->m.end_reason, sizeof q->m.end_reason, "exit");
  } else if (WIFSIGNALED(st)) {
    q->m.signal = WTERMSIG(st);
    snprintf(q->m.end_reason, sizeof q->m.end_reason, "signal");
  } else {
    return;
  }
  q->status_known = 1;
  store_proc(c, q);
}

/* Reads the children that p reaped itself (its region's ring, lg_reaped_t) and gives
 * their images the exit status. */
static void read_reaped(collector_t *c, proc_ext_t *p) {
  lg_region_hdr_t *h = p->m.hdr;
  if (!h || h->hdr_size < offsetof(lg_region_hdr_t, reaped_off) + sizeof h->reaped_off || !h->reaped_off ||
      h->reaped_off + (uint64_t)LG_REAPED_RING * sizeof(lg_reaped_t) > p->m.map_size)
    return;
  lg_reaped_t *ring = LG_PTR(h, h->reaped_off, lg_reaped_t *);
  uint64_t head = atomic_load_explicit(&h->reaped_head, memory_order_acquire);
  if (head - p->reaped_next > LG_REAPED_RING) p->reaped_next = head - LG_REAPED_RING; /* lost */
  while (p->reaped_next < head) {
    uint64_t n = p->reaped_next;
    lg_reaped_t *e = &ring[n % LG_REAPED_RING];
    uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (s1 < n + 1) break; /* being written: next time */
    int32_t pid = __atomic_load_n(&e->pid, __ATOMIC_RELAXED), st = __atomic_load_n(&e->status, __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&e->seq, memory_order_relaxed);
    p->reaped_next++;
    if (s1 != n + 1 || s2 != n + 1) continue; /* overwritten: lost */
    proc_ext_t *q = find_proc(c, pid, 0);
    if (q && q != p && !q->status_known && pid != c->child) {
      set_status(c, q, st);
    } else if (!q && pid != c->child) { /* its hello may still be in the backlog */
      const int cap = (int)(sizeof c->pending / sizeof c->pending[0]);
      if (c->npending == cap) { /* the oldest goes */
        memmove(&c->pending[0], &c->pending[1], (size_t)(cap - 1) * sizeof c->pending[0]);
        c->npending--;
      }
      c->pending[c->npending].pid = pid;
      c->pending[c->npending].status = st;
      c->npending++;
    }
  }
}

/* A new image with pid: the status its parent reaped before we saw it, if any. */
static void apply_pending(collector_t *c, proc_ext_t *p) {
  for (int i = c->npending - 1; i >= 0; i--) {
    if (c->pending[i].pid != p->m.pid) continue;
    int st = c->pending[i].status;
    memmove(&c->pending[i], &c->pending[i + 1], (size_t)(c->npending - i - 1) * sizeof c->pending[0]);
    c->npending--;
    set_status(c, p, st);
    return;
  }
}

/* Accepts one pending connection; 1 when there was one. */
static int accept_hello(collector_t *c) {
  int s = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (s < 0) return 0;
  lg_hello_t h;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = {&h, sizeof h};
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = u.buf;
  msg.msg_controllen = sizeof u.buf;
  ssize_t k;
  do k = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
  while (k < 0 && errno == EINTR);
  int fd = -1;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(cm), sizeof fd);
  if (k != (ssize_t)sizeof h || h.magic != LG_HELLO_MAGIC || h.version != LG_REGION_VERSION || fd < 0) {
    if (fd >= 0) close(fd);
    close(s);
    return 1;
  }
  h.exe[sizeof h.exe - 1] = 0;
  /* An image that connects with the pid of an earlier one that was not reaped has
   * exec'd (its old connection may already have closed: that EOF came first). */
  proc_ext_t *prev = h.kind == LG_HELLO_START ? find_proc(c, h.pid, 0) : NULL;
  if (prev && prev->m.ended && strcmp(prev->m.end_reason, "ended") != 0) prev = NULL;
  if (prev) {
    if (!prev->m.ended) end_proc(c, prev, "exec");
    snprintf(prev->m.end_reason, sizeof prev->m.end_reason, "exec");
    store_proc(c, prev);
  }
  if (c->nprocs == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 8;
    proc_ext_t **np = realloc(c->procs, (size_t)c->cap * sizeof *np);
    if (!np) goto fail;
    c->procs = np;
  }
  proc_ext_t *p = calloc(1, sizeof *p);
  if (!p) goto fail;
  p->pidfd = -1;
  if (lgm_attach(&p->m, fd, h.region_size) != 0) {
    free(p);
    goto fail;
  }
  close(fd);
  p->m.proc = c->nprocs + 1;
  p->m.pid = h.pid;
  p->m.ppid = h.ppid;
  p->m.kind = h.kind == LG_HELLO_FORK ? LGM_FORK : prev ? LGM_EXEC : c->nprocs == 0 ? LGM_START : LGM_SPAWN;
  p->m.conn = s;
  p->pidfd = open_pidfd(s, h.pid);
  p->m.start_ns = lgu_now_ns();
  snprintf(p->m.exe, sizeof p->m.exe, "%s", h.exe);
  proc_ext_t *parent = prev ? prev : find_proc(c, h.ppid, 0);
  /* A forked image runs its parent's program; /proc may already show a later exec. */
  if (h.kind == LG_HELLO_FORK && parent) snprintf(p->m.command, sizeof p->m.command, "%s", parent->m.command);
  else read_cmdline(h.pid, p->m.command, sizeof p->m.command);
  if (!p->m.command[0]) snprintf(p->m.command, sizeof p->m.command, "%s", h.exe);
  p->m.parent_proc = parent ? parent->m.proc : 0;
  if (prev) p->m.ppid = prev->m.ppid;
  p->sym = lgs_new();
  c->procs[c->nprocs++] = p;
  if (c->guard) lgg_watch_pid(c->guard, p->m.pid);
  label_process(c, &p->m);
  store_proc(c, p);
  if (c->npending) apply_pending(c, p);
  return 1;
fail:
  close(fd);
  close(s);
  return 1;
}

/* ------------------------------------------------------------------ main loop */

static void reap(collector_t *c) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
    proc_ext_t *p = find_proc(c, pid, 0);
    if (p) set_status(c, p, st);
    if (pid == c->child) {
      c->child_done = 1;
      c->child_status = st;
    }
  }
}

/* Publishes the live analysis as Prometheus metrics (top sites only: bounded). */
static void publish_metrics(collector_t *c, const lgv_frame_t *fr, uint64_t usage) {
  lgx_registry_t *r = c->reg;
  lgx_declare(r, "leakguard_rss_bytes", LGX_GAUGE, "Resident memory of the recorded processes");
  lgx_declare(r, "leakguard_leak_suspects", LGX_GAUGE, "Allocation sites whose live bytes keep growing");
  lgx_declare(r, "leakguard_site_live_bytes", LGX_GAUGE, "Live bytes of the fastest-growing sites (top 10)");
  lgx_declare(r, "leakguard_site_growth_bytes_per_second", LGX_GAUGE, "Growth of the fastest-growing sites (top 10)");
  lgx_declare(r, "leakguard_time_to_oom_seconds", LGX_GAUGE, "Projected seconds until the memory limit (+Inf: not growing)");
  lgx_declare(r, "leakguard_dropped_records_total", LGX_COUNTER, "Allocations the recorder could not attribute");
  lgx_declare(r, "leakguard_steps_total", LGX_COUNTER, "Step markers (leakguard_step) seen");
  lgx_declare(r, "leakguard_tag_live_bytes", LGX_GAUGE, "Live bytes per request tag (top 10 tags)");
  lgx_declare(r, "leakguard_tag_peak_bytes", LGX_GAUGE, "Peak live bytes per request tag (top 10 tags)");
  {
    /* leakguard_live_bytes by space and GPU, and the CUDA metrics (docs/cuda.md) */
    const lgm_proc_t *ps[256];
    int np = 0;
    for (int i = 0; i < c->nprocs && np < 256; i++) ps[np++] = &c->procs[i]->m;
    lgx_publish_memory(r, ps, np);
  }
  lgx_set(r, "leakguard_rss_bytes", NULL, (double)fr->rss_bytes);
  lgx_set(r, "leakguard_leak_suspects", NULL, fr->nrows);
  lgx_set(r, "leakguard_dropped_records_total", NULL, (double)fr->dropped);
  lgx_set(r, "leakguard_steps_total", NULL, (double)fr->steps);
  double headroom = fr->limit > usage ? (double)(fr->limit - usage) : 0;
  const char *rl[] = {"source", "recorder", NULL};
  lgx_set(r, "leakguard_time_to_oom_seconds", rl, fr->growth_bps > 0 ? headroom / fr->growth_bps : INFINITY);
  lgx_clear(r, "leakguard_site_live_bytes");
  lgx_clear(r, "leakguard_site_growth_bytes_per_second");
  for (int i = 0; i < fr->nrows && i < 10; i++) {
    char pid[16];
    snprintf(pid, sizeof pid, "%d", fr->rows[i].pid);
    const char *l[] = {"site", fr->rows[i].label, "pid", pid, NULL};
    lgx_set(r, "leakguard_site_live_bytes", l, fr->rows[i].live_bytes);
    lgx_set(r, "leakguard_site_growth_bytes_per_second", l, fr->rows[i].growth_bps);
  }
  /* top tags by live bytes over all live processes */
  lgx_clear(r, "leakguard_tag_live_bytes");
  lgx_clear(r, "leakguard_tag_peak_bytes");
  struct { const lg_tag_rec_t *t; int pid; } top[10];
  int ntop = 0;
  for (int i = 0; i < c->nprocs; i++) {
    proc_ext_t *p = c->procs[i];
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
    lgx_set(r, "leakguard_tag_live_bytes", l, (double)atomic_load(&((lg_tag_rec_t *)top[i].t)->live_bytes));
    lgx_set(r, "leakguard_tag_peak_bytes", l, (double)atomic_load(&((lg_tag_rec_t *)top[i].t)->peak_bytes));
  }
  if (c->guard) lgg_export(c->guard, r);
}

/* suspects-PID.json in the private directory, for `leakguard.suspects()` in the
 * target (docs/python.md). Written to a temporary name, then renamed: atomic. */
static void write_suspects(collector_t *c, proc_ext_t *p, double elapsed, cJSON *list) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "pid", p->m.pid);
  cJSON_AddNumberToObject(root, "t", elapsed);
  cJSON_AddItemToObject(root, "suspects", list);
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) return;
  char tmp[128], path[128];
  snprintf(tmp, sizeof tmp, "%s/.suspects-%d.tmp", c->dir, p->m.pid);
  snprintf(path, sizeof path, "%s/suspects-%d.json", c->dir, p->m.pid);
  FILE *f = fopen(tmp, "w");
  if (f) {
    fputs(text, f);
    if (fclose(f) == 0) rename(tmp, path);
  }
  free(text);
}

/* Stores labels-PID.json files ({"rank": 1, "world_size": 2, ...}) that the Python
 * module writes once a process knows its rank (torch.distributed initialised). */
static void ingest_labels(collector_t *c, const char *name) {
  int pid = 0;
  char tail[8] = "";
  if (sscanf(name, "labels-%d.jso%1s", &pid, tail) != 2) return;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  char buf[4096];
  long k = lgu_read_file(path, buf, sizeof buf);
  unlink(path);
  proc_ext_t *p = find_proc(c, pid, 0);
  cJSON *root = k > 0 ? cJSON_Parse(buf) : NULL;
  if (p && root && c->db && !c->db_failed) {
    static const char *const keys[] = {"rank", "local_rank", "world_size"};
    db_begin(c);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
      const cJSON *v = cJSON_GetObjectItem(root, keys[i]);
      if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (1 << 24)) continue;
      char num[24];
      snprintf(num, sizeof num, "%d", (int)v->valuedouble);
      lgst_label(c->db, p->m.proc, keys[i], num);
    }
    lgst_proc(c->db, &p->m);
  }
  cJSON_Delete(root);
}

/* Stores the holders-PID-N.json files that explains in the targets wrote. */
static void ingest_holders(collector_t *c) {
  DIR *d = opendir(c->dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    int pid = 0, n = 0;
    if (!strncmp(de->d_name, "labels-", 7)) ingest_labels(c, de->d_name);
    if (sscanf(de->d_name, "holders-%d-%d.json", &pid, &n) != 2) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    char chunk[65536];
    size_t k;
    while (mem && (k = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, k, mem);
    fclose(f);
    if (mem) fclose(mem);
    unlink(path);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    proc_ext_t *p = find_proc(c, pid, 0);
    db_begin(c);
    if (!root || !p || !c->db) {
      cJSON_Delete(root);
      continue;
    }
    int explain = ++c->explains;
    int64_t step = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(root, "step"));
    cJSON *h;
    cJSON_ArrayForEach(h, cJSON_GetObjectItem(root, "holders")) {
      cJSON *chain = cJSON_GetObjectItem(h, "chain"), *detail = cJSON_GetObjectItem(h, "detail");
      const cJSON *kind = cJSON_GetObjectItem(h, "kind");
      char *cj = chain ? cJSON_PrintUnformatted(chain) : NULL, *dj = detail ? cJSON_PrintUnformatted(detail) : NULL;
      double stack = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "stack"));
      if (cj && stack >= 1) {
        lgst_holder_t row = {(uint32_t)stack, explain, step, cJSON_IsString(kind) ? kind->valuestring : "object", cj,
                             (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(h, "objects")),
                             (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(h, "bytes")), dj};
        lgst_holder(c->db, p->m.proc, &row);
      }
      free(cj);
      free(dj);
    }
    cJSON_Delete(root);
  }
  closedir(d);
}

/* GPU totals of the live view: recorded bytes, and the memory of the GPUs used. */
static void live_gpu_totals(lgv_frame_t *fr, const lgm_proc_t *m) {
  fr->gpu_bytes += m->gpu_bytes;
  uint32_t nd = atomic_load(&m->hdr->cuda_ndev);
  for (uint32_t d = 0; d < nd && d < LG_CUDA_MAX_DEVICES; d++) {
    fr->gpu_usage += (uint64_t)(m->gpu_space_bytes[d][0] + m->gpu_space_bytes[d][1]);
    uint64_t t = atomic_load(&m->hdr->cuda[d].total_bytes);
    if (t > fr->gpu_total) fr->gpu_total = t; /* several processes on one GPU: counted once */
  }
}

/* Stores a flag row for every stack of group g (the report dates a suspect by them). */
static void store_flags(collector_t *c, proc_ext_t *p, const lgc_group_t *g, int gi) {
  if (!c->db || c->db_failed) return;
  db_begin(c);
  uint64_t t_ns = p->m.start_ns + (uint64_t)(g->flag_t * 1e9);
  for (uint32_t id = 2; id < p->sites.nstacks && id < p->m.nsites; id++)
    if (p->sites.group_of[id] == gi) lgst_flag(c->db, p->m.proc, id, t_ns, g->r.growth_bytes_per_s);
}

/* One live tick of every running process: sums its counters, samples its site groups
 * and analyses them (stores the flags of groups that began to grow). */
static void live_tick(collector_t *c, uint64_t now) {
  for (int i = 0; i < c->nprocs; i++) {
    proc_ext_t *p = c->procs[i];
    if (p->m.ended) continue;
    double t = (double)(now - p->m.start_ns) / 1e9;
    if (now - p->last_tick_ns >= LIVE_TICK_NS / 2) { /* no snapshot gave a point lately */
      if (lgm_collect(&p->m) != 0) continue;
      lgc_sites_tick(&p->sites, t, (double)atomic_load(&p->m.hdr->steps), p->m.sites, p->m.nsites);
      p->last_tick_ns = now;
    }
    double headroom = c->limit > lgu_memory_usage() ? (double)(c->limit - lgu_memory_usage()) : 0;
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
static void request_explain(collector_t *c, proc_ext_t *p, uint64_t now) {
  if (!p->python || now - p->last_explain_ns < 1000000000ULL) return;
  if ((uint32_t)p->sites.n > p->nexplained) {
    double *n = realloc(p->explained, (size_t)p->sites.n * sizeof *n);
    if (!n) return;
    for (uint32_t i = p->nexplained; i < (uint32_t)p->sites.n; i++) n[i] = 0;
    p->explained = n;
    p->nexplained = (uint32_t)p->sites.n;
  }
  cJSON *ids = NULL;
  for (int gi = 0; gi < p->sites.n; gi++) {
    const lgc_group_t *g = &p->sites.g[gi];
    /* still growing a second after it was flagged: a start-up burst (imports) is over by then */
    double age = (double)(now - p->m.start_ns) / 1e9 - g->flag_t;
    if (!g->growing || age < 1.0 || (p->explained[gi] > 0 && g->live < 2 * p->explained[gi])) continue;
    if (!ids) ids = cJSON_CreateArray();
    p->explained[gi] = g->live > 1 ? g->live : 1;
    for (uint32_t id = 2, k = 0; id < p->sites.nstacks && k < 256; id++)
      if (p->sites.group_of[id] == gi) cJSON_AddItemToArray(ids, cJSON_CreateNumber(id)), k++;
  }
  if (!ids) return;
  p->last_explain_ns = now;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "seq", ++p->explain_seq);
  cJSON_AddItemToObject(root, "stacks", ids);
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  char tmp[128], path[128];
  snprintf(tmp, sizeof tmp, "%s/.explain-%d.tmp", c->dir, p->m.pid);
  snprintf(path, sizeof path, "%s/explain-%d.json", c->dir, p->m.pid);
  FILE *f = text ? fopen(tmp, "w") : NULL;
  if (f) {
    fputs(text, f);
    if (fclose(f) == 0) rename(tmp, path);
  }
  free(text);
}

/* The live results of every running process: the live view, guard hints, metrics,
 * suspects files for the Python module. */
static void live_update(collector_t *c, double elapsed) {
  lgv_frame_t fr;
  memset(&fr, 0, sizeof fr);
  fr.elapsed_s = elapsed;
  fr.limit = c->limit;
  fr.limit_source = c->limit_source;
  for (int i = 0; i < c->nprocs; i++) {
    proc_ext_t *p = c->procs[i];
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
      cJSON *o = cJSON_CreateObject();
      cJSON_AddBoolToObject(o, "significant", pass == 0);
      cJSON_AddNumberToObject(o, "stack", g->rep_stack);
      cJSON *ids = cJSON_AddArrayToObject(o, "stacks");
      for (uint32_t id = 2, k = 0; id < p->sites.nstacks && k < 256; id++)
        if (p->sites.group_of[id] == gi) cJSON_AddItemToArray(ids, cJSON_CreateNumber(id)), k++;
      cJSON_AddNumberToObject(o, "growth_bytes_per_s", r->growth_bytes_per_s);
      cJSON_AddNumberToObject(o, "live_bytes", g->live);
      cJSON_AddStringToObject(o, "pattern", lg_pattern_name(r->pattern));
      cJSON_AddNumberToObject(o, "flagged_at_s", g->flag_t);
      cJSON *fj = g->frames_json ? cJSON_Parse(g->frames_json) : NULL;
      cJSON_AddItemToObject(o, "frames", fj ? fj : cJSON_CreateArray());
      cJSON_AddItemToArray(sus, o);
    }
    if (c->guard && proc_growth > 0) lgg_hint_growth(c->guard, p->m.pid, proc_growth);
    write_suspects(c, p, elapsed, sus);
    request_explain(c, p, lgu_now_ns());
  }
  uint64_t usage = c->o.limit ? (uint64_t)fr.rss_bytes : lgu_memory_usage();
  fr.usage = usage;
  if (c->view) lgv_draw(c->view, &fr);
  if (c->reg) publish_metrics(c, &fr, usage);
}

static void remove_dir_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
}

static int any_connected(const collector_t *c) {
  for (int i = 0; i < c->nprocs; i++)
    if (!c->procs[i]->m.ended) return 1;
  return 0;
}

/* The signals the collector takes through its signalfd (blocked before the fork,
 * restored in the child). */
static void collector_signals(sigset_t *mask) {
  static const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  sigemptyset(mask);
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(mask, sigs[i]);
}

/* The snapshot interval at time now: -i when given, else adaptive: 0.1 s while the run
 * is young, growing with its age (age / 30) up to 1 s after 30 s, so short runs get
 * enough points for the detector and long ones a small database. */
static uint64_t snapshot_interval_ns(const collector_t *c, uint64_t now) {
  if (c->o.interval > 0) return (uint64_t)(c->o.interval * 1e9);
  double age = (double)(now - c->t0) / 1e9, iv = age / 30.0;
  if (iv < 0.1) iv = 0.1;
  if (iv > 1.0) iv = 1.0;
  return (uint64_t)(iv * 1e9);
}

static int collect_loop(collector_t *c) {
  sigset_t mask;
  collector_signals(&mask);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  uint64_t next_snap = lgu_now_ns() + snapshot_interval_ns(c, lgu_now_ns());
  uint64_t next_tick = lgu_now_ns(), next_live = next_tick + LIVE_TICK_NS;
  struct pollfd *pf = NULL;
  int pfcap = 0;
  int stopping_since = 0;
  /* Like strace -f: recording ends when the target and every recorded descendant
   * (still connected) are gone. */
  while (!c->child_done || any_connected(c)) {
    int n = 2 + 2 * c->nprocs;
    if (n > pfcap) {
      pfcap = n * 2;
      pf = realloc(pf, (size_t)pfcap * sizeof *pf);
      if (!pf) return -ENOMEM;
    }
    pf[0] = (struct pollfd){sfd, POLLIN, 0};
    pf[1] = (struct pollfd){c->listen_fd, POLLIN, 0};
    /* Per image: its connection, then its pidfd (-1: not polled). */
    int k = 2, np = c->nprocs;
    for (int i = 0; i < np; i++) {
      proc_ext_t *p = c->procs[i];
      pf[k++] = (struct pollfd){p->m.ended ? -1 : p->m.conn, POLLIN, 0};
      pf[k++] = (struct pollfd){p->m.ended ? -1 : p->pidfd, POLLIN, 0};
    }
    int r = poll(pf, (nfds_t)k, 10);
    uint64_t now = lgu_now_ns();
    if (r > 0) {
      /* EOFs before accepts: an exec'd image's old connection closes first. */
      for (int i = 0; i < np; i++) {
        struct pollfd *q = &pf[2 + 2 * i];
        if (q->fd >= 0 && (q->revents & (POLLIN | POLLHUP | POLLERR))) {
          char b;
          ssize_t got = recv(q->fd, &b, 1, MSG_DONTWAIT);
          if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) conn_eof(c, c->procs[i]);
        }
      }
      /* Exited processes (a reaper's ring may give the status; else reap() does). */
      for (int i = 0; i < np; i++) {
        struct pollfd *q = &pf[3 + 2 * i];
        if (q->fd >= 0 && (q->revents & (POLLIN | POLLHUP | POLLERR)) && !c->procs[i]->m.ended) {
          for (int j = 0; j < c->nprocs; j++) read_reaped(c, c->procs[j]);
          if (!c->procs[i]->m.ended) end_proc(c, c->procs[i], "ended");
        }
      }
      /* Every pending hello (a burst of forks must not wait 10 ms each). */
      if (pf[1].revents & POLLIN)
        for (int a = 0; a < 256 && accept_hello(c); a++) continue;
      if (pf[0].revents & POLLIN) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
          if (si.ssi_signo == SIGCHLD) reap(c);
          else if (si.ssi_signo == SIGUSR1 || si.ssi_signo == SIGUSR2) {
            /* A guard signalling the processes of a cgroup reaches us too: it meant
             * the program, so pass it on (never fatal to the collector). */
            if (c->child > 0 && !c->child_done) kill(c->child, (int)si.ssi_signo);
          } else if (c->child > 0) {
            /* Forward to the target; a second interrupt stops waiting for it. */
            kill(c->child, (int)si.ssi_signo);
            if (stopping_since++ >= 1) kill(c->child, SIGKILL);
          }
        }
      }
    }
    reap(c);
    for (int i = 0; i < c->nprocs; i++) {
      proc_ext_t *p = c->procs[i];
      read_reaped(c, p);
      /* No pidfd: a detached image is watched through /proc. */
      if (!p->m.ended && p->detached && p->pidfd < 0 && !proc_alive(p)) end_proc(c, p, "ended");
    }
    if (now >= next_tick) {
      for (int i = 0; i < c->nprocs; i++) {
        proc_ext_t *p = c->procs[i];
        if (!p->m.ended) atomic_store(&p->m.hdr->epoch, (uint32_t)((now - p->m.start_ns) / LG_TICK_NS));
      }
      next_tick = now + LG_TICK_NS;
    }
    if (c->guard && now >= c->next_guard) {
      lgg_tick(c->guard, (double)now / 1e9);
      c->next_guard = now + (uint64_t)(lgg_tick_interval(c->guard) * 1e9);
    }
    int full = now >= next_snap;
    for (int i = 0; i < c->nprocs; i++) {
      proc_ext_t *p = c->procs[i];
      if (p->m.ended) continue;
      uint64_t steps = atomic_load(&p->m.hdr->steps);
      if (full || (steps != p->m.steps_seen && now - p->last_snap_ns >= 10000000ULL)) {
        p->m.steps_seen = steps;
        /* every CHANGED_EVERY_NS, the small sites' changes too (store.h) */
        int mode = full && now - p->last_changed_ns >= CHANGED_EVERY_NS ? LGST_CHANGED : LGST_PARTIAL;
        if (mode == LGST_CHANGED) p->last_changed_ns = now;
        snapshot(c, p, mode);
      }
    }
    int live = now >= next_live;
    if (live) {
      live_tick(c, now);
      uint64_t tick = snapshot_interval_ns(c, now) < LIVE_TICK_NS ? snapshot_interval_ns(c, now) : LIVE_TICK_NS;
      next_live += tick;
      if (next_live < now) next_live = now + tick;
    }
    if (full) ingest_holders(c);
    if (full) gpu_timeline(c, now);
    take_symbols(c, 20000000ULL);
    db_commit(c);
    if (live) live_update(c, (double)(now - c->t0) / 1e9);
    if (full) {
      next_snap += snapshot_interval_ns(c, now);
      if (next_snap < now) next_snap = now + snapshot_interval_ns(c, now);
    }
  }
  /* Give the last connections a moment to close, then end everything. */
  for (int tries = 0; tries < 20; tries++) {
    int open = 0;
    for (int i = 0; i < c->nprocs; i++) {
      proc_ext_t *p = c->procs[i];
      if (p->m.ended || p->m.conn < 0) continue;
      struct pollfd q = {p->m.conn, POLLIN, 0};
      if (poll(&q, 1, 5) > 0) {
        char b;
        if (recv(p->m.conn, &b, 1, MSG_DONTWAIT) <= 0) end_proc(c, p, "ended");
      } else open++;
    }
    if (!open) break;
  }
  reap(c);
  for (int i = 0; i < c->nprocs; i++) read_reaped(c, c->procs[i]);
  ingest_holders(c);
  for (int i = 0; i < c->nprocs; i++) {
    proc_ext_t *p = c->procs[i];
    if (!p->m.ended) {
      snapshot(c, p, LGST_ALL);
      snprintf(p->m.end_reason, sizeof p->m.end_reason, "running");
    }
    store_proc(c, p);
  }
  /* every queued stack stored before the report reads the database */
  lgc_symq_drain(c->symq);
  take_symbols(c, 0);
  db_commit(c);
  free(pf);
  close(sfd);
  return 0;
}

/* ------------------------------------------------------------------ entry */

enum { OPT_NO_FOLLOW = 256, OPT_FAIL_ON_LEAK, OPT_NO_MMAP, OPT_GUARD, OPT_GUARD_CONFIG, OPT_GUARD_DRY, OPT_METRICS,
       OPT_EXPLAIN_AT, OPT_CUDA_UM };

int lg_cmd_run(int argc, char **argv) {
  run_opts_t o = {.interval = 0, .follow = 1, .mmap = 1, .depth = LG_DEFAULT_DEPTH, .top = 10};
  static const struct option longopts[] = {
      {"output", required_argument, NULL, 'o'},    {"interval", required_argument, NULL, 'i'},
      {"sample", required_argument, NULL, 's'},    {"depth", required_argument, NULL, 'd'},
      {"limit", required_argument, NULL, 'l'},     {"top", required_argument, NULL, 'n'},
      {"quiet", no_argument, NULL, 'q'},           {"help", no_argument, NULL, 'h'},
      {"no-follow", no_argument, NULL, OPT_NO_FOLLOW}, {"fail-on-leak", no_argument, NULL, OPT_FAIL_ON_LEAK},
      {"no-mmap", no_argument, NULL, OPT_NO_MMAP}, {"guard", no_argument, NULL, OPT_GUARD},
      {"guard-config", required_argument, NULL, OPT_GUARD_CONFIG},
      {"guard-dry-run", no_argument, NULL, OPT_GUARD_DRY}, {"metrics", required_argument, NULL, OPT_METRICS},
      {"explain-at-step", required_argument, NULL, OPT_EXPLAIN_AT},
      {"cuda-um", no_argument, NULL, OPT_CUDA_UM},
      {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int ch;
  long lv;
  while ((ch = getopt_long(argc, argv, "+o:i:s:d:l:n:qh", longopts, NULL)) != -1) {
    switch (ch) {
    case 'o': o.output = optarg; break;
    case 'i':
      if (lgu_parse_double(optarg, &o.interval) != 0 || o.interval < 0.05 || o.interval > 3600) {
        lgu_err("run: --interval must be a number of seconds between 0.05 and 3600, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case 's':
      if (lgu_parse_size(optarg, &o.sample) != 0 || o.sample < 1 || o.sample > (1ULL << 40)) {
        lgu_err("run: --sample must be a size between 1 and 1T bytes, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case 'd':
      if (lgu_parse_long(optarg, 1, LG_MAX_DEPTH, &lv) != 0) {
        lgu_err("run: --depth must be an integer between 1 and %d, not '%s'", LG_MAX_DEPTH, optarg);
        return LG_EXIT_USAGE;
      }
      o.depth = lv;
      break;
    case 'l':
      if (lgu_parse_size(optarg, &o.limit) != 0 || o.limit < 1) {
        lgu_err("run: --limit must be a size such as 8G or 512M, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case 'n':
      if (lgu_parse_long(optarg, 1, 100000, &lv) != 0) {
        lgu_err("run: --top must be an integer between 1 and 100000, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      o.top = (int)lv;
      break;
    case 'q': o.quiet = 1; break;
    case 'h': usage(stdout); return LG_EXIT_OK;
    case OPT_NO_FOLLOW: o.follow = 0; break;
    case OPT_FAIL_ON_LEAK: o.fail_on_leak = 1; break;
    case OPT_NO_MMAP: o.mmap = 0; break;
    case OPT_GUARD: o.guard = 1; break;
    case OPT_GUARD_CONFIG: o.guard = 1; o.guard_config = optarg; break;
    case OPT_GUARD_DRY: o.guard = 1; o.guard_dry_run = 1; break;
    case OPT_METRICS: o.metrics = optarg; break;
    case OPT_CUDA_UM: o.cuda_um = 1; break;
    case OPT_EXPLAIN_AT:
      if (lgu_parse_long(optarg, 1, LONG_MAX, &lv) != 0) {
        lgu_err("run: --explain-at-step must be a positive step number, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      o.explain_at_step = lv;
      break;
    default:
      if (optopt) lgu_err("run: unknown or incomplete option '-%c' (see leakguard run --help)", optopt);
      else lgu_err("run: unknown option '%s' (see leakguard run --help)", argv[optind - 1]);
      return LG_EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    lgu_err("run: no command given (usage: leakguard run [OPTIONS] -- COMMAND [ARGS...])");
    return LG_EXIT_USAGE;
  }
  char **targv = argv + optind;
  char path[PATH_MAX];
  int fr = find_command(targv[0], path, sizeof path);
  if (fr == -ENOENT) {
    lgu_err("cannot run '%s': command not found", targv[0]);
    return LG_EXIT_NOT_FOUND;
  }
  if (fr == -EACCES) {
    lgu_err("cannot run '%s': permission denied (not executable)", targv[0]);
    return LG_EXIT_CANNOT_EXEC;
  }
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID))) {
    lgu_err("cannot record '%s': it is set-user/group-ID, and the dynamic loader ignores LD_PRELOAD for such programs",
            path);
    return LG_EXIT_CANNOT_EXEC;
  }
  if (is_static_elf(path) == 1) {
    lgu_err("cannot record '%s': it is statically linked, so LD_PRELOAD cannot interpose its allocator (link it "
            "dynamically)",
            path);
    return LG_EXIT_CANNOT_EXEC;
  }
  char lib[PATH_MAX];
  if (find_library(lib, sizeof lib) != 0) {
    lgu_err("cannot find libleakguard.so (looked next to the leakguard binary and in %s); set LEAKGUARD_LIBRARY",
            LG_INSTALL_LIBDIR);
    return LG_EXIT_INTERNAL;
  }
  /* Output: check we can write there before starting anything. */
  char outbuf[PATH_MAX];
  if (o.output) {
    int fd = open(o.output, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      lgu_err("cannot write the output database '%s': %s", o.output, strerror(errno));
      return LG_EXIT_INTERNAL;
    }
    close(fd);
  } else if (access(".", W_OK) != 0) {
    lgu_err("cannot write the output database in the current directory: %s (use --output)", strerror(errno));
    return LG_EXIT_INTERNAL;
  }

  collector_t c;
  memset(&c, 0, sizeof c);
  c.o = o;
  c.t0 = lgu_now_ns();
  c.limit = o.limit ? o.limit : lgu_memory_limit(&c.limit_source);
  if (o.limit) c.limit_source = "--limit";

  char why[512];
  if (o.guard) {
    lgg_options_t go = {.config_path = o.guard_config, .dry_run = o.guard_dry_run, .log = NULL};
    if (lgg_new(&go, &c.guard, why, sizeof why) != 0) {
      lgu_err("run: --guard: %s", why);
      return LG_EXIT_USAGE;
    }
    lgg_default_log(c.guard, stderr);
    lgg_watch_system(c.guard);
    char cg[4096];
    if (lgu_memory_cgroup(cg, sizeof cg) == 0 && lgg_watch_cgroup(c.guard, cg, why, sizeof why) != 0)
      lgu_err("run: --guard: not watching leakguard's cgroup: %s", why);
  }
  if (o.metrics) {
    c.reg = lgx_new();
    if (!c.reg || lgx_serve(c.reg, o.metrics, &c.srv, why, sizeof why) != 0) {
      lgu_err("run: --metrics %s: %s", o.metrics, c.reg ? why : "out of memory");
      lgg_free(c.guard);
      lgx_free(c.reg);
      return LG_EXIT_USAGE;
    }
  }

  /* Private socket directory. */
  char dir[] = "/tmp/leakguard-XXXXXX";
  if (!mkdtemp(dir)) {
    lgu_err("cannot create a temporary directory: %s", strerror(errno));
    return LG_EXIT_INTERNAL;
  }
  char sock[sizeof dir + 16];
  snprintf(sock, sizeof sock, "%s/sock", dir);
  snprintf(c.dir, sizeof c.dir, "%s", dir);
  c.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
  if (c.listen_fd < 0 || bind(c.listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(c.listen_fd, 128) != 0) {
    lgu_err("cannot listen on %s: %s", sock, strerror(errno));
    rmdir(dir);
    return LG_EXIT_INTERNAL;
  }

  /* Environment of the target. */
  const char *old_pre = getenv("LD_PRELOAD");
  char *pre = malloc(strlen(lib) + (old_pre ? strlen(old_pre) : 0) + 2);
  sprintf(pre, "%s%s%s", lib, old_pre && *old_pre ? ":" : "", old_pre ? old_pre : "");
  char num[32];
  setenv("LD_PRELOAD", pre, 1);
  free(pre);
  setenv(LG_ENV_SOCK, sock, 1);
  snprintf(num, sizeof num, "%" PRIu64, o.sample);
  setenv(LG_ENV_SAMPLE, num, 1);
  snprintf(num, sizeof num, "%ld", o.depth);
  setenv(LG_ENV_DEPTH, num, 1);
  setenv(LG_ENV_FOLLOW, o.follow ? "1" : "0", 1);
  setenv(LG_ENV_MMAP, o.mmap ? "1" : "0", 1);
  if (o.cuda_um) setenv("LEAKGUARD_CUDA_UM", "1", 1);
  setenv("LEAKGUARD_DIR", dir, 1);
  if (o.explain_at_step) {
    snprintf(num, sizeof num, "%ld", o.explain_at_step);
    setenv("LEAKGUARD_EXPLAIN_AT_STEP", num, 1);
  }
  /* Python: small objects come from malloc, not pymalloc arenas, so they are
   * attributed one by one (docs/python.md); the leakguard module and its exit hook
   * are found first on the path. */
  setenv("PYTHONMALLOC", "malloc", 0);
  char pydir[PATH_MAX];
  if (find_python_dir(pydir, sizeof pydir) == 0) {
    const char *pp = getenv("PYTHONPATH");
    char *np = malloc(strlen(pydir) + (pp ? strlen(pp) : 0) + 2);
    if (np) {
      sprintf(np, "%s%s%s", pydir, pp && *pp ? ":" : "", pp ? pp : "");
      setenv("PYTHONPATH", np, 1);
      free(np);
    }
  }

  sigset_t mask, old;
  collector_signals(&mask);
  sigprocmask(SIG_BLOCK, &mask, &old);
  /* An inherited SIG_IGN for SIGCHLD would auto-reap the target and lose its status. */
  struct sigaction dfl = {.sa_handler = SIG_DFL}, old_chld;
  sigaction(SIGCHLD, &dfl, &old_chld);
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  c.symq = lgc_symq_new();
  if (!c.symq) {
    lgu_err("cannot start the symbolization thread: %s", strerror(errno));
    return LG_EXIT_INTERNAL;
  }
  int go[2], err[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    lgu_err("cannot create a pipe: %s", strerror(errno));
    return LG_EXIT_INTERNAL;
  }
  pid_t pid = fork();
  if (pid < 0) {
    lgu_err("cannot fork: %s", strerror(errno));
    return LG_EXIT_INTERNAL;
  }
  if (pid == 0) {
    sigaction(SIGCHLD, &old_chld, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(go[1]);
    close(err[0]);
    char b;
    if (read(go[0], &b, 1) != 1) _exit(LG_EXIT_INTERNAL);
    execv(path, targv);
    int e = errno;
    (void)!write(err[1], &e, sizeof e);
    _exit(LG_EXIT_CANNOT_EXEC);
  }
  close(go[0]);
  close(err[1]);
  c.child = pid;
  unsetenv("LD_PRELOAD");

  if (!o.output) {
    const char *b = strrchr(targv[0], '/');
    snprintf(outbuf, sizeof outbuf, "leakguard-%s-%d.db", b ? b + 1 : targv[0], (int)pid);
    o.output = c.o.output = outbuf;
  }
  const char *emsg = NULL;
  if (lgst_create(o.output, &c.db, &emsg) != 0) {
    lgu_err("cannot create the output database '%s': %s", o.output, emsg ? emsg : "error");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(sock);
    rmdir(dir);
    return LG_EXIT_INTERNAL;
  }
  {
    char v[64];
    lgst_meta(c.db, "version", LG_VERSION);
    if (o.interval > 0) snprintf(v, sizeof v, "%g", o.interval);
    else snprintf(v, sizeof v, "adaptive");
    lgst_meta(c.db, "interval_s", v);
    snprintf(v, sizeof v, "%" PRIu64, o.sample);
    lgst_meta(c.db, "sample_bytes", v);
    snprintf(v, sizeof v, "%" PRIu64, c.limit);
    lgst_meta(c.db, "limit_bytes", v);
    lgst_meta(c.db, "limit_source", c.limit_source ? c.limit_source : "physical");
    char cmd[2048] = "";
    for (char **a = targv; *a; a++) {
      size_t l = strlen(cmd);
      snprintf(cmd + l, sizeof cmd - l, "%s%s", l ? " " : "", *a);
    }
    lgst_meta(c.db, "command", cmd);
  }
  if (!o.quiet && isatty(2)) c.view = lgv_new(stderr, o.top < 10 ? o.top : 10);

  (void)!write(go[1], "g", 1);
  close(go[1]);
  int e = 0;
  ssize_t k;
  do k = read(err[0], &e, sizeof e);
  while (k < 0 && errno == EINTR);
  close(err[0]);
  if (k == (ssize_t)sizeof e) {
    lgu_err("cannot run '%s': %s", path, strerror(e));
    waitpid(pid, NULL, 0);
    lgst_close(c.db);
    unlink(o.output);
    unlink(sock);
    rmdir(dir);
    return e == ENOENT ? LG_EXIT_NOT_FOUND : LG_EXIT_CANNOT_EXEC;
  }

  collect_loop(&c);
  lgc_symq_free(c.symq);
  unlink(sock);
  remove_dir_files(dir);
  rmdir(dir);
  if (c.view) lgv_free(c.view);

  int status = c.child_status, rc;
  if (WIFEXITED(status)) rc = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);
  else rc = LG_EXIT_INTERNAL;
  if (c.nprocs == 0)
    lgu_err("the target never connected to the recorder (did it reset LD_PRELOAD?); nothing was recorded");

  /* The report, from the database only. */
  lgr_report_t rep;
  lgr_options_t ro = {.top = o.top};
  int leak = 0;
  if (lgr_build(c.db, &ro, &rep, why, sizeof why) == 0) {
    leak = rep.nsuspects > 0;
    if (!o.quiet) {
      fflush(stdout);
      lgr_print_text(stdout, &rep, &ro);
      printf("\nRecorded in %s (leakguard report %s --format json)\n", o.output, o.output);
    }
    lgr_free(&rep);
  } else {
    lgu_err("cannot build the report: %s", why);
  }
  for (int i = 0; i < c.nprocs; i++) {
    proc_ext_t *p = c.procs[i];
    lgs_free(p->sym);
    lgc_sites_free(&p->sites);
    free(p->explained);
    free(p->symbolized);
    lgm_release(&p->m);
    free(p);
  }
  free(c.procs);
  lgst_close(c.db);
  if (c.srv) lgx_stop(c.srv);
  lgx_free(c.reg);
  lgg_free(c.guard);
  lgn_close(c.nvml);
  if (o.fail_on_leak && leak) return LG_EXIT_LEAK;
  return rc;
}
