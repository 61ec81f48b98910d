/* SPDX-License-Identifier: MIT */
/* Internal interface of isolated calls (src/isolate, docs/isolate.md).
 *
 * lg_isolate_call() is lgi_spawn() + lgi_wait(). */
#ifndef LG_ISOLATE_INTERNAL_H
#define LG_ISOLATE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "leakguard.h"

/* One child in flight. */
typedef struct lgi_job {
  pid_t pid;
  int pidfd; /* pidfd_open(pid), -1 when unavailable (then waitpid WNOHANG polling) */
  int sock;  /* the parent's end of the result channel */
  lg_isolate_opts_t opts;
  double t0;    /* CLOCK_MONOTONIC seconds at spawn */
  int reusable; /* set by lgi_wait: the child answered and waits for another request
                 * (reuse_k); its pid, pidfd and sock stay open */
} lgi_job_t;

/* Validates the arguments, builds (or reuses) the seccomp program, forks. In the
 * child, runs opts->after_fork_child, installs the filter, runs fn and never
 * returns. In the parent fills *job. Returns LG_ISOLATE_OK or LG_ISOLATE_ERROR
 * (res->message says why). */
int lgi_spawn(lgi_job_t *job, lg_isolate_fn fn, const void *in, size_t inlen, int pooled, const lg_isolate_opts_t *opts,
              lg_isolate_result_t *res);
/* pooled: the child, once isolated, waits for its input on job->sock (a uint64_t
 * length, then the bytes: lgi_send_request) instead of taking in/inlen. */
int lgi_send_request(lgi_job_t *job, const void *in, size_t inlen);

/* Waits for the child of job (budget polling, timeout), reaps it, fills res and
 * *out, *outlen (LG_ISOLATE_OK only), counts the outcome. Returns res->code. A pooled
 * child that will serve again (reuse_k) is not reaped: job->reusable is set. */
int lgi_wait(lgi_job_t *job, void **out, size_t *outlen, lg_isolate_result_t *res);

/* The seccomp program for allow (seccomp.c): instructions in *prog (static storage,
 * shared: do not free), count in *len. The instruction comparing kill's pid holds
 * LGI_SELF_PID, replaced with the child's pid in the child. 0 or -errno. */
#define LGI_SELF_PID 0x7ffffff0u
struct sock_filter;
int lgi_filter(unsigned allow, const struct sock_filter **prog, size_t *len);

/* Name of syscall nr on this architecture into buf ("syscall-NR" when unknown). */
void lgi_syscall_name(int nr, char *buf, size_t size);

/* Counts one finished call (stats). */
void lgi_count(int code, size_t peak_rss);

#endif
