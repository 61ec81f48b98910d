/* SPDX-License-Identifier: MIT */
/* Internal interface of isolated calls (src/isolate, docs/isolate.md).
 *
 * lg_isolate_call() is lgiso_spawn() + lgiso_wait(). */
#ifndef LG_ISOLATE_INTERNAL_H
#define LG_ISOLATE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "leakguard.h"

/* A child's memory cgroup (cgroup.c). */
#include <limits.h>
typedef struct lgiso_cg {
  int v;        /* 1, 2; 0: none */
  int procs_fd; /* its cgroup.procs, for the child to enter (-1 once used) */
  char dir[PATH_MAX];
} lgiso_cg_t;
void lgiso_cg_init(lgiso_cg_t *cg);
/* Makes a cgroup for one child under parent (NULL: LEAKGUARD_ISOLATE_CGROUP or the
 * caller's memory cgroup) with limit bytes. 0, or -1 with why filled. */
int lgiso_cg_make(lgiso_cg_t *cg, const char *parent, size_t limit, char *why, size_t whylen);
int lgiso_cg_limit(lgiso_cg_t *cg, size_t limit);
int lgiso_cg_enter(lgiso_cg_t *cg); /* in the child: async-signal-safe */
int64_t lgiso_cg_current(const lgiso_cg_t *cg);
int64_t lgiso_cg_peak(const lgiso_cg_t *cg); /* -1 where the kernel has no peak (v2 < 5.19) */
int lgiso_cg_reset_peak(lgiso_cg_t *cg);     /* v1 only; -EOPNOTSUPP on v2 */
int64_t lgiso_cg_oom_kills(const lgiso_cg_t *cg);
void lgiso_cg_remove(lgiso_cg_t *cg); /* closes, rmdir; the child must be reaped */
/* At exit (isolate.c's destructor): kills what is left in this process's cgroups,
 * reaps it and removes them. */
void lgiso_cg_cleanup(void);
/* NULL when LG_BUDGET_AUTO can use cgroups (dir: where), else why not. */
const char *lgiso_cg_where(const char **dir);

/* One child in flight. */
typedef struct lgiso_job {
  pid_t pid;
  int pidfd; /* pidfd_open(pid), -1 when unavailable (then waitpid WNOHANG polling) */
  int sock;  /* the parent's end of the result channel */
  lg_isolate_opts_t opts;
  double t0;       /* CLOCK_MONOTONIC seconds at spawn */
  int reusable;    /* set by lgiso_wait: the child answered and waits for another request
                 * (reuse_k); its pid, pidfd and sock stay open */
  lgiso_cg_t cg;   /* its memory cgroup (cg.v 0: the budget is polled RSS) */
  int64_t cg_base; /* the cgroup's usage when the current request began */
  int cg_peak_ok;  /* the cgroup's peak counts this request only */
  int pooled;      /* a pool's child (its deferred reaps are the refill thread's) */
  int nocg;        /* it could not enter its cgroup: its budget is polled RSS */
} lgiso_job_t;

/* Validates the arguments, builds (or reuses) the seccomp program, forks. In the
 * child, runs opts->after_fork_child, installs the filter, runs fn and never
 * returns. In the parent fills *job. Returns LG_ISOLATE_OK or LG_ISOLATE_ERROR
 * (res->message says why). */
int lgiso_spawn(lgiso_job_t *job, lg_isolate_fn fn, const void *in, size_t inlen, int pooled,
                const lg_isolate_opts_t *opts, lg_isolate_result_t *res);
/* pooled: the child, once isolated, waits for its input on job->sock (a uint64_t
 * length, then the bytes: lgiso_send_request) instead of taking in/inlen. */
int lgiso_send_request(lgiso_job_t *job, const void *in, size_t inlen);

/* Reaps the children that answered and were still exiting when their call returned,
 * those that have exited since, and removes their cgroups (lgiso_wait of an unpooled
 * call does it first; a pool's refill thread for its own calls). */
void lgiso_reap_deferred(void);

/* Waits (up to 10 s) for a pooled child to say it is set up: in its cgroup (entering
 * one stalls forks and exits system-wide for a moment: better in the refill thread
 * than in a call) and filtered. 0, or -1: it failed or is stuck (discard it). */
int lgiso_await_ready(lgiso_job_t *job);

/* Reaps a child that has been killed or has exited, and removes its cgroup. */
void lgiso_reap(lgiso_job_t *job);

/* Waits for the child of job (budget polling, timeout), reaps it, fills res and
 * *out, *outlen (LG_ISOLATE_OK only), counts the outcome. Returns res->code. A pooled
 * child that will serve again (reuse_k) is not reaped: job->reusable is set. */
int lgiso_wait(lgiso_job_t *job, void **out, size_t *outlen, lg_isolate_result_t *res);

/* The seccomp program for allow (seccomp.c): instructions in *prog (static storage,
 * shared: do not free), count in *len. The instruction comparing kill's pid holds
 * LGISO_SELF_PID, replaced with the child's pid in the child. 0 or -errno. */
#define LGISO_SELF_PID 0x7ffffff0u
struct sock_filter;
int lgiso_filter(unsigned allow, const struct sock_filter **prog, size_t *len);

/* Name of syscall nr on this architecture into buf ("syscall-NR" when unknown). */
void lgiso_syscall_name(int nr, char *buf, size_t size);

/* Counts one finished call (stats). */
void lgiso_count(int code, size_t peak_rss);

#endif
