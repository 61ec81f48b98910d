/* SPDX-License-Identifier: MIT */
/* The pre-forked pool of isolated children (docs/isolate.md).
 *
 * pool_size children are forked ahead from the caller as it is when the pool is made
 * (warm it up first), each already isolated (filter installed, inherited sockets
 * closed) and blocked on its channel. A call takes one, sends it the input and waits
 * as lg_isolate_call does; the child serves that one request and exits (with
 * reuse_k > 1, up to reuse_k requests: it goes back to the ready list while it says it
 * serves again, see child_main). A background
 * thread forks replacements; when none is ready a call forks its own child (the same
 * result, the latency of a plain call). Thread-safe. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "isolate/isolate.h"

struct lg_isolate_pool {
  lg_isolate_fn fn;
  lg_isolate_opts_t opts;
  pthread_mutex_t mu;
  pthread_cond_t want, have; /* want: the refiller has work; have: a child is ready */
  lgiso_job_t *ready;
  int nready, size, stop;
  int inflight; /* calls between taking a child and their answer */
  pthread_t refiller;
};

static void discard(lgiso_job_t *j) {
  kill(j->pid, SIGKILL);
  lgiso_reap(j);
  close(j->sock);
}

/* A request's budget in the child's cgroup: its limit is what the child holds now plus
 * the budget, and its peak starts from here (v1; v2 cannot reset memory.peak, so a
 * reused child's later requests report the peak the child measures itself). */
static void rebase_cgroup(lgiso_job_t *j) {
  if (!j->cg.v || !j->reusable) return; /* a fresh child: its limit and peak are its own */
  int64_t now = lgiso_cg_current(&j->cg);
  j->cg_base = now > 0 ? now : 0;
  (void)lgiso_cg_limit(&j->cg, (size_t)j->cg_base + j->opts.max_rss);
  j->cg_peak_ok = lgiso_cg_reset_peak(&j->cg) == 0 || !j->reusable;
}

static void *refill(void *arg) {
  lg_isolate_pool_t *p = arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the caller's threads' */
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    /* the children that answered and were exiting: reaped here, with their cgroups
     * removed, rather than on a call's path */
    pthread_mutex_unlock(&p->mu);
    lgiso_reap_deferred();
    pthread_mutex_lock(&p->mu);
    if (p->stop) break; /* set while the lock was let go: its broadcast is past */
    /* fork() write-locks the caller's address space while it copies the page tables
     * (milliseconds for a large caller): a call's page faults would wait for it. So
     * the pool refills while no call is in flight, unless it is empty. */
    /* with reuse_k, a child in flight may come back: it counts as ready */
    int pending = p->opts.reuse_k > 1 ? p->inflight : 0;
    if (p->nready + pending >= p->size || (p->inflight > 0 && p->nready > 0)) {
      pthread_cond_wait(&p->want, &p->mu);
      continue;
    }
    pthread_mutex_unlock(&p->mu);
    lgiso_job_t j;
    lg_isolate_result_t res;
    int rc = lgiso_spawn(&j, p->fn, NULL, 0, 1, &p->opts, &res);
    if (rc == LG_ISOLATE_OK && lgiso_await_ready(&j) < 0) {
      discard(&j);
      rc = LG_ISOLATE_ERROR;
    }
    pthread_mutex_lock(&p->mu);
    if (rc != LG_ISOLATE_OK) {
      /* fork failed (EAGAIN, ENOMEM): calls fork their own; retry in 100 ms */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 100000000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&p->want, &p->mu, &ts);
      continue;
    }
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      discard(&j);
      pthread_mutex_lock(&p->mu);
      break;
    }
    p->ready[p->nready++] = j;
    pthread_cond_signal(&p->have);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

lg_isolate_pool_t *lg_isolate_pool_new(lg_isolate_fn fn, const lg_isolate_opts_t *opts) {
  if (!fn || !opts || opts->pool_size <= 0 || opts->pool_size > 1024) {
    errno = EINVAL;
    return NULL;
  }
  /* The options are checked once here, by a spawn that is not run. */
  lg_isolate_pool_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->fn = fn;
  p->opts = *opts;
  p->size = opts->pool_size;
  p->ready = calloc((size_t)p->size, sizeof *p->ready);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->want, NULL);
  pthread_cond_init(&p->have, NULL);
  if (!p->ready || pthread_create(&p->refiller, NULL, refill, p) != 0) {
    free(p->ready);
    free(p);
    errno = ENOMEM;
    return NULL;
  }
  return p;
}

int lgiso_send_request(lgiso_job_t *job, const void *in, size_t inlen) {
  uint64_t len = inlen;
  if (send(job->sock, &len, sizeof len, MSG_NOSIGNAL) != (ssize_t)sizeof len) return -1;
  const char *s = in;
  while (inlen) {
    ssize_t n = send(job->sock, s, inlen, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    s += n;
    inlen -= (size_t)n;
  }
  return 0;
}

int lg_isolate_pool_call(lg_isolate_pool_t *p, const void *in, size_t inlen, void **out, size_t *outlen,
                         lg_isolate_result_t *res) {
  lg_isolate_result_t local;
  if (!res) res = &local;
  if (out) *out = NULL;
  if (outlen) *outlen = 0;
  if (!p || !out || !outlen || (!in && inlen)) {
    memset(res, 0, sizeof *res);
    res->syscall_nr = -1;
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message, "invalid argument: pool, out or outlen is NULL, or in is");
    lgiso_count(res->code, 0);
    return res->code;
  }
  for (int tries = 0; tries < 3; tries++) {
    lgiso_job_t j;
    int have = 0;
    pthread_mutex_lock(&p->mu);
    if (p->nready > 0) {
      j = p->ready[--p->nready];
      have = 1;
      p->inflight++;
    }
    pthread_mutex_unlock(&p->mu);
    if (!have) {
      lg_isolate_opts_t o = p->opts;
      o.pool_size = 0;
      if (lgiso_spawn(&j, p->fn, in, inlen, 0, &o, res) != LG_ISOLATE_OK) {
        lgiso_count(res->code, 0);
        return res->code;
      }
      return lgiso_wait(&j, out, outlen, res);
    }
    memset(res, 0, sizeof *res);
    res->syscall_nr = -1;
    int rc;
    rebase_cgroup(&j);
    if (lgiso_send_request(&j, in, inlen) < 0) {
      discard(&j); /* it died waiting (killed from outside): take another */
      rc = -1;
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      j.t0 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9; /* the budget and timeout start now */
      rc = lgiso_wait(&j, out, outlen, res);
    }
    pthread_mutex_lock(&p->mu);
    p->inflight--;
    int kept = 0;
    if (rc >= 0 && j.reusable && !p->stop && p->nready < p->size) { /* reuse_k: it serves again */
      p->ready[p->nready++] = j;
      kept = 1;
      pthread_cond_signal(&p->have);
    }
    pthread_cond_signal(&p->want);
    pthread_mutex_unlock(&p->mu);
    if (rc >= 0 && j.reusable && !kept) discard(&j);
    if (rc >= 0) return rc;
  }
  res->code = LG_ISOLATE_ERROR;
  snprintf(res->message, sizeof res->message, "pooled children keep dying before their request");
  lgiso_count(res->code, 0);
  return res->code;
}

int lg_isolate_pool_ready(lg_isolate_pool_t *p) {
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  int n = p->nready;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void lg_isolate_pool_free(lg_isolate_pool_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->want);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->refiller, NULL);
  lgiso_reap_deferred();
  for (int i = 0; i < p->nready; i++) discard(&p->ready[i]);
  pthread_cond_destroy(&p->want);
  pthread_cond_destroy(&p->have);
  pthread_mutex_destroy(&p->mu);
  free(p->ready);
  free(p);
}
