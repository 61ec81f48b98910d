/* SPDX-License-Identifier: MIT */
/*
 * collector.c - the collector's life and loop (collector/collector.h): it listens for
 * recorded process images, polls their connections and pidfds, reaps, ticks their
 * clocks, the guard and the live analysis, snapshots at the interval and at step
 * markers, and ends when the program and every recorded descendant are gone.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "collector/collector_impl.h"

int lgc_new(const lgc_options_t *o, const char *dir, lgc_collector_t **out, char *why, size_t whylen) {
  lgc_collector_t *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(why, whylen, "out of memory");
    return -ENOMEM;
  }
  c->db = o->db;
  c->db_path = o->db_path ? o->db_path : "";
  c->interval = o->interval;
  c->limit = o->limit;
  c->limit_source = o->limit_source;
  c->limit_given = o->limit_given;
  c->view = o->view;
  c->guard = o->guard;
  c->reg = o->metrics;
  c->t0 = lgu_now_ns();
  c->listen_fd = -1;
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  snprintf(c->sock, sizeof c->sock, "%s/" LG_FILE_SOCK, dir);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", c->sock);
  /* The queue of connections not yet accepted: while the collector is stopped (SIGSTOP,
   * a paused container, swapped out) a forking target's children wait in it, not in
   * connect(). Past it a child waits LG_HELLO_WAIT_MS at most, then runs unrecorded
   * and says so (region.h). LEAKGUARD_BACKLOG sets it (the kernel caps it at
   * net.core.somaxconn). */
  const char *bl = secure_getenv("LEAKGUARD_BACKLOG");
  long backlog = bl && *bl ? strtol(bl, NULL, 10) : 4096;
  if (backlog < 1 || backlog > 65535) backlog = 4096;
  c->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->listen_fd < 0 || bind(c->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(c->listen_fd, (int)backlog) != 0) {
    int e = errno;
    snprintf(why, whylen, "cannot listen on %s: %s", c->sock, strerror(e));
    lgc_free(c);
    return -e;
  }
  c->symq = lgc_symq_new();
  c->symfiles = c->symq ? lgs_files_new() : NULL;
  if (!c->symfiles) {
    int e = errno ? errno : ENOMEM;
    snprintf(why, whylen, "cannot start the symbolization thread: %s", strerror(e));
    lgc_free(c);
    return -e;
  }
  *out = c;
  return 0;
}

const char *lgc_socket_path(const lgc_collector_t *c) { return c->sock; }
void lgc_set_child(lgc_collector_t *c, int pid) { c->child = pid; }
void lgc_set_attached(lgc_collector_t *c, int pid, uint64_t deadline_ns) {
  (void)pid;
  c->attached = 1;
  c->deadline_ns = deadline_ns;
}
int lgc_final_unanswered(const lgc_collector_t *c) {
  int got = c->explains - c->final_base;
  return c->final_asked > got ? c->final_asked - got : 0;
}
int lgc_child_status(const lgc_collector_t *c) { return c->child_status; }
double lgc_attach_gone_s(const lgc_collector_t *c) { return c->gone_ns ? (double)(c->gone_ns - c->t0) / 1e9 : -1; }
int lgc_nprocs(const lgc_collector_t *c) { return c->nprocs; }

void lgc_free(lgc_collector_t *c) {
  if (!c) return;
  lgc_symq_free(c->symq); /* first: the worker reads the regions */
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    lgs_free(p->sym);
    lgc_sites_free(&p->sites);
    free(p->symbolized);
    free(p->explained);
    free(p->explain_req);
    if (p->pidfd >= 0) close(p->pidfd);
    if (p->m.conn >= 0) close(p->m.conn);
    lgm_release(&p->m);
    free(p);
  }
  free(c->procs);
  lgs_files_free(c->symfiles); /* after the symbolizers, whose strings it holds */
  if (c->listen_fd >= 0) {
    close(c->listen_fd);
    unlink(c->sock);
  }
  lgc_remove_dir_files(c->dir);
  lgsm_timeline_close(c->nvml);
  free(c);
}

/* After a full disk: the reserve beside the database given back (store.c), how each
 * process ended and why storing stopped are written, so that the report does not say
 * "still running" of a process that exited. */
static void db_full_finish(lgc_collector_t *c) {
  if (!c->db || !c->db_failed || !c->db_full || lgst_use_reserve(c->db) != 0) return;
  c->db_failed = 0;
  lgc_db_begin(c);
  for (int i = 0; lgc_db_ok(c) && i < c->nprocs; i++) lgc_db_write(c, lgst_proc(c->db, &c->procs[i]->m));
  char note[200];
  snprintf(note, sizeof note,
           "the disk filled up %.1f s after the start: nothing was stored after that but how each process ended",
           (double)(c->db_failed_ns - c->t0) / 1e9);
  if (lgc_db_ok(c)) lgc_db_write(c, lgst_note(c->db, 0, "disk_full", note));
  lgc_db_commit(c);
  c->db_failed = 1; /* nothing more */
}

static int any_connected(const lgc_collector_t *c) {
  for (int i = 0; i < c->nprocs; i++)
    if (!c->procs[i]->m.ended) return 1;
  return 0;
}

void lgc_signals(sigset_t *mask) {
  static const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGTSTP};
  sigemptyset(mask);
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(mask, sigs[i]);
}

double lgc_adaptive_interval_s(double age) {
  double iv = age / 30.0; /* young: 0.1 s, up to 1 s at 30 s */
  if (iv < 0.1) iv = 0.1;
  if (iv > 1.0) iv = 1.0;
  if (age > 600.0) iv = age / 600.0; /* old: coarser with age, 1 s at 10 min, 6 s at 1 h */
  if (iv > 60.0) iv = 60.0;
  return iv;
}

/* The snapshot interval at time now: -i when given, else adaptive (collector.h). */
uint64_t lgc_snapshot_interval_ns(const lgc_collector_t *c, uint64_t now) {
  if (c->interval > 0) return (uint64_t)(c->interval * 1e9);
  return (uint64_t)(lgc_adaptive_interval_s((double)(now - c->t0) / 1e9) * 1e9);
}

/* How `leakguard attach` ends: at --duration or an interrupt, a Python process is first
 * asked who holds its growing sites (an attached program does not exit, so no exit hook
 * explains) and given FINAL_EXPLAIN_NS to answer; a second interrupt, or the process
 * gone, ends it at once. */
#define FINAL_EXPLAIN_NS 4000000000ULL
static void attach_end(lgc_collector_t *c, uint64_t now) {
  if (c->deadline_ns && now >= c->deadline_ns && !c->detach_req) c->detach_req = 1;
  if (c->nprocs && !any_connected(c)) {
    if (!c->detach_req && !c->gone_ns) c->gone_ns = now;
    c->stop = 1;
  }
  if (!c->detach_req || c->stop) return;
  if (!c->final_until) {
    c->final_base = c->explains;
    c->final_asked = c->detach_req == 1 ? lgc_explain_final(c) : 0;
    c->final_until = now + (c->final_asked ? FINAL_EXPLAIN_NS : 0);
  }
  if (c->final_asked && now >= c->final_look) { /* the answers, without waiting for a snapshot */
    lgc_ingest_holders(c);
    c->final_look = now + 50000000ULL;
  }
  if (c->detach_req > 1 || now >= c->final_until || c->explains - c->final_base >= c->final_asked) c->stop = 1;
}

/* The run loop's state (lgc_run). */
typedef struct {
  int sfd; /* signalfd, -1: none */
  struct pollfd *pf;
  int pfcap;
  int stopping_since; /* interrupts forwarded: a second one kills the target */
  uint64_t next_snap, next_tick, next_live;
  uint64_t committed; /* when the last pass's transaction was committed */
} loop_t;

/* The poll set: the signals, the listening socket, then per image its connection and
 * its pidfd (-1: not polled). Its size, -ENOMEM. */
static int poll_set(lgc_collector_t *c, loop_t *L) {
  int n = 2 + 2 * c->nprocs;
  if (n > L->pfcap) {
    int cap = n * 2;
    struct pollfd *np = realloc(L->pf, (size_t)cap * sizeof *np);
    if (!np) return -ENOMEM;
    L->pf = np;
    L->pfcap = cap;
  }
  struct pollfd *pf = L->pf;
  pf[0] = (struct pollfd){L->sfd, POLLIN, 0};
  pf[1] = (struct pollfd){c->listen_fd, POLLIN, 0};
  int k = 2;
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    pf[k++] = (struct pollfd){p->m.ended ? -1 : p->m.conn, POLLIN, 0};
    pf[k++] = (struct pollfd){p->m.ended ? -1 : p->pidfd, POLLIN, 0};
  }
  return k;
}

/* What poll found for the np images of the poll set: connections closed, processes
 * ended, hellos, signals. */
static void poll_events(lgc_collector_t *c, loop_t *L, int np) {
  struct pollfd *pf = L->pf;
  /* EOFs before accepts: an exec'd image's old connection closes first. */
  for (int i = 0; i < np; i++) {
    struct pollfd *q = &pf[2 + 2 * i];
    if (q->fd >= 0 && (q->revents & (POLLIN | POLLHUP | POLLERR))) {
      char b;
      ssize_t got = recv(q->fd, &b, 1, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) lgc_conn_eof(c, c->procs[i]);
    }
  }
  /* Exited processes (a reaper's ring may give the status; else lgc_reap() does). */
  for (int i = 0; i < np; i++) {
    struct pollfd *q = &pf[3 + 2 * i];
    if (q->fd >= 0 && (q->revents & (POLLIN | POLLHUP | POLLERR)) && !c->procs[i]->m.ended) {
      for (int j = 0; j < c->nprocs; j++) lgc_read_reaped(c, c->procs[j]);
      if (!c->procs[i]->m.ended) lgc_end_proc(c, c->procs[i], "ended");
    }
  }
  /* Every pending hello (a burst of forks must not wait 10 ms each). */
  if (pf[1].revents & POLLIN)
    for (int a = 0; a < 256 && lgc_accept_hello(c); a++) continue;
  if (!(pf[0].revents & POLLIN)) return;
  struct signalfd_siginfo si;
  while (read(L->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
    if (si.ssi_signo == SIGWINCH) {
      if (c->view) lgv_resized(c->view);
    } else if (si.ssi_signo == SIGTSTP) {
      /* ^Z: the terminal's whole screen back to the shell, the target stopped with us
       * (it is on the same terminal: the terminal stopped it too), then on SIGCONT the
       * view's region again */
      if (c->view) lgv_suspend(c->view);
      if (!c->attached && c->child > 0 && !c->child_done) kill(c->child, SIGTSTP);
      raise(SIGSTOP);
      if (c->view) lgv_resume(c->view);
    } else if (si.ssi_signo == SIGCHLD) lgc_reap(c);
    else if (c->attached && si.ssi_signo != SIGUSR1 && si.ssi_signo != SIGUSR2) c->detach_req++; /* detach */
    else if (si.ssi_signo == SIGUSR1 || si.ssi_signo == SIGUSR2) {
      /* A guard signalling the processes of a cgroup reaches us too: it meant
       * the program, so pass it on (never fatal to the collector). */
      if (c->child > 0 && !c->child_done) kill(c->child, (int)si.ssi_signo);
    } else if (c->child > 0) {
      /* Forward to the target; a second interrupt stops waiting for it. */
      kill(c->child, (int)si.ssi_signo);
      if (L->stopping_since++ >= 1) kill(c->child, SIGKILL);
    }
  }
}

/* Each pass's work at time now: ended images, ticks, the guard, snapshots (all of
 * them when one is due, else of an image that marked a step), the live view, holders,
 * symbols, the commit. */
static void periodic(lgc_collector_t *c, loop_t *L, uint64_t now) {
  lgc_reap(c);
  if (c->attached) attach_end(c, now);
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    lgc_read_reaped(c, p);
    /* No pidfd: a detached image is watched through /proc. */
    if (!p->m.ended && p->detached && p->pidfd < 0 && !lgc_proc_alive(p)) lgc_end_proc(c, p, "ended");
  }
  if (now >= L->next_tick) {
    for (int i = 0; i < c->nprocs; i++) {
      lgc_proc_t *p = c->procs[i];
      if (!p->m.ended) lgm_tick(&p->m, now);
    }
    L->next_tick = now + LG_TICK_NS;
  }
  if (c->guard && now >= c->next_guard) {
    lgg_tick(c->guard, (double)now / 1e9);
    c->next_guard = now + (uint64_t)(lgg_tick_interval(c->guard) * 1e9);
  }
  int full = now >= L->next_snap;
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    if (p->m.ended) continue;
    lgc_warm_symbols(c, p, now);
    if (atomic_load(&p->m.hdr->held)) continue; /* leakguard's explanation holds it (region.h) */
    uint64_t steps = atomic_load(&p->m.hdr->steps);
    if (full || (steps != p->m.steps_seen && now - p->last_snap_ns >= 10000000ULL)) {
      p->m.steps_seen = steps;
      /* every CHANGED_EVERY_NS, the small sites' changes too (store.h) */
      int mode = full && now - p->last_changed_ns >= CHANGED_EVERY_NS ? LGST_CHANGED : LGST_PARTIAL;
      if (mode == LGST_CHANGED) p->last_changed_ns = now;
      lgc_snapshot(c, p, mode);
    }
  }
  int live = now >= L->next_live;
  if (live) {
    lgc_live_tick(c, now);
    uint64_t tick = lgc_snapshot_interval_ns(c, now) < LIVE_TICK_NS ? lgc_snapshot_interval_ns(c, now) : LIVE_TICK_NS;
    L->next_live += tick;
    if (L->next_live < now) L->next_live = now + tick;
  }
  if (full) lgc_ingest_holders(c);
  if (full) lgc_gpu_timeline(c, now);
  lgc_take_symbols(c, 20000000ULL);
  /* A transaction at most every 10 ms: a burst of short-lived processes wakes the loop
   * at each hello and exit, and a commit each time (WAL frames, locks) was a tenth of
   * the collector's time (bench/wrappers.py). finish() commits the last one. */
  if (full || now - L->committed >= 10000000ULL) {
    lgc_db_commit(c);
    L->committed = now;
  }
  if (live) lgc_live_update(c, (double)(now - c->t0) / 1e9);
  if (full) {
    L->next_snap += lgc_snapshot_interval_ns(c, now);
    if (L->next_snap < now) L->next_snap = now + lgc_snapshot_interval_ns(c, now);
  }
}

/* The end of the recording: the last connections get a moment to close, then every
 * image gets its final snapshot and is stored, every queued stack symbolized. */
static void finish(lgc_collector_t *c) {
  for (int tries = 0; tries < 20; tries++) {
    int open = 0;
    for (int i = 0; i < c->nprocs; i++) {
      lgc_proc_t *p = c->procs[i];
      if (p->m.ended || p->m.conn < 0) continue;
      struct pollfd q = {p->m.conn, POLLIN, 0};
      if (poll(&q, 1, 5) > 0) {
        char b;
        if (recv(p->m.conn, &b, 1, MSG_DONTWAIT) <= 0) lgc_end_proc(c, p, "ended");
      } else open++;
    }
    if (!open) break;
  }
  lgc_reap(c);
  for (int i = 0; i < c->nprocs; i++) lgc_read_reaped(c, c->procs[i]);
  lgc_ingest_holders(c);
  for (int i = 0; i < c->nprocs; i++) {
    lgc_proc_t *p = c->procs[i];
    if (!p->m.ended) {
      lgc_snapshot(c, p, LGST_ALL);
      snprintf(p->m.end_reason, sizeof p->m.end_reason, "running");
    }
    lgc_store_proc(c, p);
  }
  /* every queued stack stored before the report reads the database */
  lgc_symq_drain(c->symq);
  lgc_take_symbols(c, 0);
  lgc_db_commit(c);
  db_full_finish(c);
}

int lgc_run(lgc_collector_t *c) {
  sigset_t mask;
  lgc_signals(&mask);
  loop_t L = {.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)};
  if (L.sfd < 0) /* children are still reaped at every pass (lgc_reap below) */
    lgu_err("cannot read signals (signalfd: %s): interrupts will not be passed on to the program", strerror(errno));
  L.next_snap = lgu_now_ns() + lgc_snapshot_interval_ns(c, lgu_now_ns());
  L.next_tick = lgu_now_ns();
  L.next_live = L.next_tick + LIVE_TICK_NS;
  /* Like strace -f: recording ends when the target and every recorded descendant
   * (still connected) are gone. */
  for (;;) {
    if (c->attached ? c->stop : (c->child_done && !any_connected(c))) {
      /* A hello still queued on the socket is a process that said it after the last
       * pass looked: a silent fork child says it as it exits (capture/lifecycle.c), and
       * its parent may reap it and end before the next pass. Taken, and waited for
       * like the rest; nothing queued: the end. */
      int got = 0;
      while (!c->attached && got < 256 && lgc_accept_hello(c)) got++;
      if (!got) break;
      continue;
    }
    int np = c->nprocs, k = poll_set(c, &L);
    if (k < 0) {
      free(L.pf);
      if (L.sfd >= 0) close(L.sfd);
      return -ENOMEM;
    }
    int r = poll(L.pf, (nfds_t)k, 10);
    uint64_t now = lgu_now_ns();
    if (r > 0) poll_events(c, &L, np);
    periodic(c, &L, now);
  }
  finish(c);
  free(L.pf);
  if (L.sfd >= 0) close(L.sfd);
  return 0;
}
