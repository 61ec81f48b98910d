/* SPDX-License-Identifier: MIT */
/*
 * proctable.c - the collector's process table (collector/collector.h): recorded process images
 * arrive (hello + region), are labelled (rank, host), end (exit, exec, or gone while the
 * connection was closed by the program), and get their exit status (our waitpid, or
 * the ring of children their recorded parent reaped itself).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/collector_impl.h"

lgc_proc_t *lgc_find_proc(lgc_collector_t *c, int pid, int alive_only) {
  for (int i = c->nprocs - 1; i >= 0; i--)
    if (c->procs[i]->m.pid == pid && (!alive_only || !c->procs[i]->m.ended)) return c->procs[i];
  return NULL;
}

/* Labels a process with its rank in a distributed job, from the environment it was
 * started with (torchrun and torch.distributed's launchers: RANK, LOCAL_RANK,
 * WORLD_SIZE; Open MPI; MPICH/PMI; Slurm), and with the host it runs on. A rank given
 * to the program another way (torch.multiprocessing.spawn's argument) reaches us later
 * through the Python module's labels file. */
void lgc_label_process(lgc_collector_t *c, const lgm_proc_t *m) {
  if (!c->db || c->db_failed) return;
  static const char *const keys[][2] = {{"RANK", "rank"},
                                        {"LOCAL_RANK", "local_rank"},
                                        {"WORLD_SIZE", "world_size"},
                                        {"OMPI_COMM_WORLD_RANK", "rank"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "local_rank"},
                                        {"OMPI_COMM_WORLD_SIZE", "world_size"},
                                        {"PMI_RANK", "rank"},
                                        {"PMI_SIZE", "world_size"},
                                        {"SLURM_PROCID", "rank"},
                                        {"SLURM_LOCALID", "local_rank"},
                                        {"SLURM_NTASKS", "world_size"}};
  char path[64], buf[65536];
  snprintf(path, sizeof path, "/proc/%d/environ", m->pid);
  long n = lgu_read_file(path, buf, sizeof buf);
  int have[3] = {0, 0, 0};
  lgc_db_begin(c);
  for (long i = 0; n > 0 && i < n;) {
    const char *e = buf + i;
    size_t len = strnlen(e, (size_t)(n - i));
    i += (long)len + 1;
    const char *eq = memchr(e, '=', len);
    if (!eq) continue;
    for (size_t k = 0; k < sizeof keys / sizeof *keys && lgc_db_ok(c); k++) {
      size_t kl = strlen(keys[k][0]);
      int slot = !strcmp(keys[k][1], "rank") ? 0 : !strcmp(keys[k][1], "local_rank") ? 1 : 2;
      if ((size_t)(eq - e) != kl || memcmp(e, keys[k][0], kl) != 0 || have[slot]) continue;
      long v;
      if (lgu_parse_long(eq + 1, 0, 1 << 24, &v) != 0) continue;
      char num[24];
      snprintf(num, sizeof num, "%ld", v);
      lgc_db_write(c, lgst_label(c->db, m->proc, keys[k][1], num));
      have[slot] = 1;
    }
  }
  char host[256];
  if (gethostname(host, sizeof host) == 0 && lgc_db_ok(c)) {
    host[sizeof host - 1] = 0;
    lgc_db_write(c, lgst_label(c->db, m->proc, "host", host));
  }
}

void lgc_store_proc(lgc_collector_t *c, lgc_proc_t *p) {
  lgc_db_begin(c);
  if (lgc_db_ok(c)) lgc_db_write(c, lgst_proc(c->db, &p->m));
}

void lgc_end_proc(lgc_collector_t *c, lgc_proc_t *p, const char *reason) {
  if (p->m.ended) return;
  lgc_snapshot(c, p, LGST_ALL);
  lgc_explain_give_up(c, p, lgu_now_ns(), "the process ended before it answered");
  p->m.ended = 1;
  p->m.end_ns = lgu_now_ns();
  if (reason) snprintf(p->m.end_reason, sizeof p->m.end_reason, "%s", reason);
  if (p->m.conn >= 0) close(p->m.conn);
  p->m.conn = -1;
  if (p->pidfd >= 0) close(p->pidfd);
  p->pidfd = -1;
  lgc_store_proc(c, p);
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
int lgc_proc_alive(const lgc_proc_t *p) {
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
void lgc_conn_eof(lgc_collector_t *c, lgc_proc_t *p) {
  if (p->m.conn >= 0) close(p->m.conn);
  p->m.conn = -1;
  if (atomic_load(&p->m.hdr->state) == LG_PS_EXECED || !lgc_proc_alive(p)) {
    lgc_end_proc(c, p, "ended");
    return;
  }
  /* The program closed our socket: the region is still mapped on both sides, so
   * recording goes on until the process exits. */
  p->detached = 1;
}

/* Sets the exit status of the image q from a wait(2) status word. */
static void set_status(lgc_collector_t *c, lgc_proc_t *q, int st) {
  /* The region is still mapped: the final snapshot loses nothing. */
  if (!q->m.ended) lgc_end_proc(c, q, NULL);
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
  lgc_store_proc(c, q);
}

/* Reads the children that p reaped itself (its region's ring, lg_reaped_t) and gives
 * their images the exit status. */
void lgc_read_reaped(lgc_collector_t *c, lgc_proc_t *p) {
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
    lgc_proc_t *q = lgc_find_proc(c, pid, 0);
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
static void apply_pending(lgc_collector_t *c, lgc_proc_t *p) {
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
int lgc_accept_hello(lgc_collector_t *c) {
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
  lgc_proc_t *prev = h.kind == LG_HELLO_START ? lgc_find_proc(c, h.pid, 0) : NULL;
  if (prev && prev->m.ended && strcmp(prev->m.end_reason, "ended") != 0) prev = NULL;
  if (prev) {
    if (!prev->m.ended) lgc_end_proc(c, prev, "exec");
    snprintf(prev->m.end_reason, sizeof prev->m.end_reason, "exec");
    lgc_store_proc(c, prev);
  }
  int e = ENOMEM;
  if (c->nprocs == c->cap) { /* the capacity grows only with the array */
    int cap = c->cap ? c->cap * 2 : 8;
    lgc_proc_t **np = realloc(c->procs, (size_t)cap * sizeof *np);
    if (!np) goto fail;
    c->procs = np;
    c->cap = cap;
  }
  lgc_proc_t *p = calloc(1, sizeof *p);
  if (!p) goto fail;
  p->pidfd = -1;
  /* Each process has a symbolizer of its own (its map of modules), over the files all
   * share (c->symfiles): a fork child reports the modules it inherited, which costs a
   * stat each, and reads no debug information again (a forking server's children each
   * took seconds of the worker under ASan when each read its own: fault_stalled). */
  p->sym = lgs_new(c->symfiles);
  e = p->sym ? -lgm_attach(&p->m, fd, h.region_size) : ENOMEM;
  if (e) {
    lgs_free(p->sym);
    free(p);
    goto fail;
  }
  close(fd);
  p->m.known_only = 1; /* samples of the stacks it stores only (core/model.h) */
  p->m.proc = c->nprocs + 1;
  p->m.pid = h.pid;
  p->m.ppid = h.ppid;
  p->m.kind = h.kind == LG_HELLO_FORK ? LGM_FORK : prev ? LGM_EXEC : c->nprocs == 0 ? LGM_START : LGM_SPAWN;
  p->m.conn = s;
  p->pidfd = open_pidfd(s, h.pid);
  p->m.start_ns = lgu_now_ns();
  /* A waiting image's fork child says hello when it begins (capture/lifecycle.c
   * lazy_fork_child); its region says when it was forked. */
  uint64_t hs = p->m.hdr->start_ns;
  if (h.kind == LG_HELLO_FORK && hs && hs >= c->t0 && hs < p->m.start_ns) p->m.start_ns = hs;
  snprintf(p->m.exe, sizeof p->m.exe, "%s", h.exe);
  lgc_proc_t *parent = prev ? prev : lgc_find_proc(c, h.ppid, 0);
  /* A forked image runs its parent's program; /proc may already show a later exec. */
  if (h.kind == LG_HELLO_FORK && parent) snprintf(p->m.command, sizeof p->m.command, "%s", parent->m.command);
  else lgu_read_cmdline(h.pid, p->m.command, sizeof p->m.command);
  if (!p->m.command[0]) snprintf(p->m.command, sizeof p->m.command, "%s", h.exe);
  p->m.parent_proc = parent ? parent->m.proc : 0;
  if (prev) p->m.ppid = prev->m.ppid;
  c->procs[c->nprocs++] = p;
  if (c->guard) lgg_watch_pid(c->guard, p->m.pid);
  lgc_label_process(c, &p->m);
  lgc_store_proc(c, p);
  if (c->npending) apply_pending(c, p);
  return 1;
fail: /* the program runs on, unrecorded: say so */
  lgu_err("cannot record pid %d (%s): %s", h.pid, h.exe, strerror(e));
  close(fd);
  close(s);
  return 1;
}

/* ------------------------------------------------------------------ main loop */

void lgc_reap(lgc_collector_t *c) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
    /* Only an end ends a process. A stop reaches us only from a process we trace (no
     * WUNTRACED here): one that `attach`'s injector left traced. inject.c lets every
     * one go; this is the guard. Taken for an exit, such a stop would end the
     * recording of a running target; left alone, the process would stay stopped. */
    if (WIFSTOPPED(st)) {
      ptrace(PTRACE_DETACH, pid, NULL, NULL);
      continue;
    }
    if (WIFCONTINUED(st)) continue;
    lgc_proc_t *p = lgc_find_proc(c, pid, 0);
    if (p) set_status(c, p, st);
    if (pid == c->child) {
      c->child_done = 1;
      c->child_status = st;
    }
  }
}
