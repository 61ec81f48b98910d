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
#include "core/model.h"
#include "core/symbolize.h"
#include "core/util.h"
#include "guard/guard.h"
#include "output/live.h"
#include "output/metrics.h"
#include "output/report.h"
#include "output/store.h"

typedef struct run_opts {
  const char *output;
  double interval;
  int quiet, follow, fail_on_leak, mmap, top;
  uint64_t sample, limit;
  long depth;
  int guard, guard_dry_run;
  const char *guard_config, *metrics;
  long explain_at_step;
} run_opts_t;

typedef struct proc_ext {
  lgm_proc_t m;
  lgs_symbolizer_t *sym;
  lgd_series_t *series; /* per site, for the live view (NULL until the site matters) */
  char **labels;        /* per site: "function (file:line)" */
  char **frames_json;   /* per site: JSON array of the first frames (suspects files) */
  uint32_t nseries;
  uint64_t last_snap_ns;
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
          "  -i, --interval SEC    snapshot interval in seconds, 0.05-3600 (default 1)\n"
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

/* Symbolizes and stores stacks lazily: a stack is written when its site first holds
 * 1 KiB or more (or, at the final snapshot, 256 bytes). Programs such as Python make tens of
 * thousands of short-lived stacks at start-up; storing every one costs the collector
 * seconds for nothing. Needs the sums of lgm_collect. */
static void sync_symbols(collector_t *c, proc_ext_t *p, int final) {
  lgm_proc_t *m = &p->m;
  uint32_t nm = lgm_nmodules(m);
  for (uint32_t i = m->modules_stored; i < nm; i++) {
    const lg_module_rec_t *mod = lgm_module(m, i);
    char path[LG_MODULE_PATH + 1];
    memcpy(path, mod->path, LG_MODULE_PATH);
    path[LG_MODULE_PATH] = 0;
    if (p->sym) lgs_add_module(p->sym, path, mod->start, mod->end, mod->bias);
    if (c->db) lgst_module(c->db, m->proc, i, mod);
  }
  m->modules_stored = nm;
  uint32_t ns = m->nsites;
  if (ns > m->stacks_stored) {
  char **nl = realloc(p->labels, ns * sizeof *nl);
  if (!nl) return;
  p->labels = nl;
  char **nj = realloc(p->frames_json, ns * sizeof *nj);
  if (!nj) return;
  p->frames_json = nj;
  for (uint32_t i = m->stacks_stored; i < ns; i++) p->labels[i] = p->frames_json[i] = NULL;
  m->stacks_stored = ns;
  }
  lgs_frame_t *fr = malloc(sizeof *fr * LG_MAX_DEPTH * 8);
  if (!fr) return;
  for (uint32_t id = 2; id < ns; id++) {
    if (p->labels[id]) continue;
    int64_t live = m->sites[id].live_bytes;
    if (!(live >= 1024 || (final && live >= 256))) continue;
    const uint64_t *ips;
    unsigned space = 0;
    unsigned depth = lgm_stack(m, id, &ips, &space);
    int nf = 0;
    for (unsigned k = 0; k < depth && nf < LG_MAX_DEPTH * 8 - 8; k++) {
      const char *pf, *pfn;
      int pl;
      if (lgm_pyframe(m, ips[k], &pf, &pfn, &pl) == 0) {
        fr[nf++] = (lgs_frame_t){ips[k], "python", pfn, pf, pl, 0};
        continue;
      }
      nf += p->sym ? lgs_lookup(p->sym, ips[k], fr + nf, 8) : 0;
    }
    if (c->db) lgst_stack(c->db, m->proc, id, space, fr, nf);
    int k = 0;
    while (k < nf - 1 && lgr_is_machinery(fr[k].function, fr[k].file, fr[k].module)) k++;
    char label[512];
    if (nf == 0) snprintf(label, sizeof label, "??");
    else if (fr[k].file[0]) {
      const char *b = strrchr(fr[k].file, '/');
      snprintf(label, sizeof label, "%s (%s:%d)", fr[k].function, b ? b + 1 : fr[k].file, fr[k].line);
    } else snprintf(label, sizeof label, "%s [%s]", fr[k].function, fr[k].module);
    p->labels[id] = strdup(label);
    cJSON *arr = cJSON_CreateArray();
    for (int q = k; q < nf && q < k + 8; q++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "function", fr[q].function);
      cJSON_AddStringToObject(o, "file", fr[q].file);
      cJSON_AddNumberToObject(o, "line", fr[q].line);
      cJSON_AddStringToObject(o, "module", fr[q].module);
      cJSON_AddItemToArray(arr, o);
    }
    p->frames_json[id] = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
  }
  free(fr);
}

static void track_series(proc_ext_t *p, double t) {
  lgm_proc_t *m = &p->m;
  if (m->nsites > p->nseries) {
    lgd_series_t *ns = realloc(p->series, m->nsites * sizeof *ns);
    if (!ns) return;
    for (uint32_t i = p->nseries; i < m->nsites; i++) ns[i].pts = NULL, ns[i].n = ns[i].cap = 0, ns[i].max_points = 0;
    p->series = ns;
    p->nseries = m->nsites;
  }
  double step = (double)atomic_load(&m->hdr->steps);
  for (uint32_t i = 2; i < m->nsites; i++) {
    lgd_series_t *s = &p->series[i];
    if (!s->max_points) {
      if (m->sites[i].live_bytes < 16384) continue;
      lgd_series_init(s, 512);
    }
    lgd_series_add(s, t, (double)m->sites[i].live_bytes, step);
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

/* Takes one snapshot of p (and stores it). */
static void snapshot(collector_t *c, proc_ext_t *p, int full) {
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
  track_series(p, (double)(now - m->start_ns) / 1e9);
  if (c->db && !c->db_failed) {
    lgst_snapshot(c->db, m, now, usage, c->limit, full);
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
  snapshot(c, p, 1);
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
  if (!h || h->hdr_size < offsetof(lg_region_hdr_t, reaped) + sizeof h->reaped) return;
  uint64_t head = atomic_load_explicit(&h->reaped_head, memory_order_acquire);
  if (head - p->reaped_next > LG_REAPED_RING) p->reaped_next = head - LG_REAPED_RING; /* lost */
  while (p->reaped_next < head) {
    uint64_t n = p->reaped_next;
    lg_reaped_t *e = &h->reaped[n % LG_REAPED_RING];
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
  lgx_declare(r, "leakguard_live_bytes", LGX_GAUGE, "Live bytes recorded in the watched processes");
  lgx_declare(r, "leakguard_rss_bytes", LGX_GAUGE, "Resident memory of the recorded processes");
  lgx_declare(r, "leakguard_leak_suspects", LGX_GAUGE, "Allocation sites whose live bytes keep growing");
  lgx_declare(r, "leakguard_site_live_bytes", LGX_GAUGE, "Live bytes of the fastest-growing sites (top 10)");
  lgx_declare(r, "leakguard_site_growth_bytes_per_second", LGX_GAUGE, "Growth of the fastest-growing sites (top 10)");
  lgx_declare(r, "leakguard_time_to_oom_seconds", LGX_GAUGE, "Projected seconds until the memory limit (+Inf: not growing)");
  lgx_declare(r, "leakguard_dropped_records_total", LGX_COUNTER, "Allocations the recorder could not attribute");
  lgx_declare(r, "leakguard_steps_total", LGX_COUNTER, "Step markers (leakguard_step) seen");
  lgx_declare(r, "leakguard_tag_live_bytes", LGX_GAUGE, "Live bytes per request tag (top 10 tags)");
  lgx_declare(r, "leakguard_tag_peak_bytes", LGX_GAUGE, "Peak live bytes per request tag (top 10 tags)");
  lgx_set(r, "leakguard_live_bytes", NULL, (double)fr->live_bytes);
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

/* Stores the holders-PID-N.json files that explains in the targets wrote. */
static void ingest_holders(collector_t *c) {
  DIR *d = opendir(c->dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    int pid = 0, n = 0;
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

/* Live analysis of every running process: the live view, guard hints, metrics,
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
    if (!fr.pid) {
      fr.pid = p->m.pid;
      snprintf(fr.command, sizeof fr.command, "%s", p->m.command);
    }
    double proc_growth = 0;
    cJSON *sus = cJSON_CreateArray();
    for (uint32_t s = 2; s < p->nseries; s++) {
      lgd_series_t *se = &p->series[s];
      if (se->n < 6) continue;
      lgd_result_t r;
      lgd_options_t lo = {0, 1};
      lgd_analyze(se->pts, se->n, &lo, &r);
      if (!r.leak) continue;
      fr.growth_bps += r.growth_bytes_per_s;
      proc_growth += r.growth_bytes_per_s;
      lgv_row_t row = {r.growth_bytes_per_s, (double)p->m.sites[s].live_bytes, r.pattern, p->m.pid,
                       p->labels && s < p->m.stacks_stored && p->labels[s] ? p->labels[s] : "??"};
      lgv_add_row(&fr, &row);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "stack", s);
      cJSON_AddNumberToObject(o, "growth_bytes_per_s", r.growth_bytes_per_s);
      cJSON_AddNumberToObject(o, "live_bytes", (double)p->m.sites[s].live_bytes);
      cJSON_AddStringToObject(o, "pattern", lg_pattern_name(r.pattern));
      cJSON *fj = p->frames_json && s < p->m.stacks_stored && p->frames_json[s] ? cJSON_Parse(p->frames_json[s]) : NULL;
      cJSON_AddItemToObject(o, "frames", fj ? fj : cJSON_CreateArray());
      cJSON_AddItemToArray(sus, o);
    }
    if (c->guard && proc_growth > 0) lgg_hint_growth(c->guard, p->m.pid, proc_growth);
    write_suspects(c, p, elapsed, sus);
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

static int collect_loop(collector_t *c) {
  sigset_t mask;
  collector_signals(&mask);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  uint64_t interval_ns = (uint64_t)(c->o.interval * 1e9);
  uint64_t next_snap = lgu_now_ns() + interval_ns;
  uint64_t next_tick = lgu_now_ns();
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
        snapshot(c, p, 0);
      }
    }
    if (full) ingest_holders(c);
    db_commit(c);
    if (full) {
      live_update(c, (double)(now - c->t0) / 1e9);
      next_snap += interval_ns;
      if (next_snap < now) next_snap = now + interval_ns;
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
      snapshot(c, p, 1);
      snprintf(p->m.end_reason, sizeof p->m.end_reason, "running");
    }
    store_proc(c, p);
  }
  db_commit(c);
  free(pf);
  close(sfd);
  return 0;
}

/* ------------------------------------------------------------------ entry */

enum { OPT_NO_FOLLOW = 256, OPT_FAIL_ON_LEAK, OPT_NO_MMAP, OPT_GUARD, OPT_GUARD_CONFIG, OPT_GUARD_DRY, OPT_METRICS,
       OPT_EXPLAIN_AT };

int lg_cmd_run(int argc, char **argv) {
  run_opts_t o = {.interval = 1.0, .follow = 1, .mmap = 1, .depth = LG_DEFAULT_DEPTH, .top = 10};
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
    snprintf(v, sizeof v, "%g", o.interval);
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
    for (uint32_t s = 0; s < p->nseries; s++) lgd_series_free(&p->series[s]);
    free(p->series);
    for (uint32_t s = 0; s < p->m.stacks_stored && p->labels; s++) free(p->labels[s]);
    for (uint32_t s = 0; s < p->m.stacks_stored && p->frames_json; s++) free(p->frames_json[s]);
    free(p->labels);
    free(p->frames_json);
    lgm_release(&p->m);
    free(p);
  }
  free(c.procs);
  lgst_close(c.db);
  if (c.srv) lgx_stop(c.srv);
  lgx_free(c.reg);
  lgg_free(c.guard);
  if (o.fail_on_leak && leak) return LG_EXIT_LEAK;
  return rc;
}
