/* SPDX-License-Identifier: MIT */
/* symq.c - the symbolization worker (see symq.h). */
#include "collector/symq.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
  struct job *next;
  int kind; /* 0 module, 1 stack, 2 stacks [id, to) warmed */
  lgs_symbolizer_t *sym;
  /* module */
  char *path;
  uint64_t start, end, bias;
  /* stack */
  void *owner;
  const lgm_proc_t *m;
  uint32_t id, to;
} job_t;

typedef struct res {
  struct res *next;
  lgc_symres_t r;
} res_t;

struct lgc_symq {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t more, idle;
  job_t *head, *tail;
  res_t *rhead, *rtail;
  unsigned pending; /* queued + running */
  int stop;
  atomic_int draining; /* lgc_symq_drain: what only warms a cache is skipped */
};

/* Symbolizes one stack as the collector stores it: Python frames from the region,
 * native ones through libdwfl (inlined frames expanded, up to 8 per address). */
static void symbolize(job_t *j, lgc_symres_t *out) {
  const uint64_t *ips;
  unsigned space = 0;
  unsigned depth = lgm_stack(j->m, j->id, &ips, &space);
  out->owner = j->owner;
  out->id = j->id;
  out->space = space;
  out->nframes = 0;
  out->frames = malloc(sizeof *out->frames * (depth ? depth : 1) * 8);
  if (!out->frames) return;
  int nf = 0;
  for (unsigned k = 0; k < depth; k++) {
    const char *pf, *pfn;
    int pl;
    if (lgm_pyframe(j->m, ips[k], &pf, &pfn, &pl) == 0) {
      out->frames[nf++] = (lgs_frame_t){ips[k], "python", pfn, pf, pl, 0};
      continue;
    }
    nf += j->sym ? lgs_lookup(j->sym, ips[k], out->frames + nf, 8) : 0;
  }
  out->nframes = nf;
}

/* Looks up the native frames of stacks [j->id, j->to) for the cache alone; given up
 * when the queue is drained (the recording ends: nothing is waiting for a cache). */
static void warm(lgc_symq_t *q, job_t *j) {
  lgs_frame_t f[8];
  for (uint32_t id = j->id; id < j->to && !atomic_load_explicit(&q->draining, memory_order_relaxed); id++) {
    const uint64_t *ips;
    unsigned space = 0, depth = lgm_stack(j->m, id, &ips, &space);
    for (unsigned k = 0; k < depth; k++) {
      const char *pf, *pfn;
      int pl;
      if (lgm_pyframe(j->m, ips[k], &pf, &pfn, &pl) != 0) (void)lgs_lookup(j->sym, ips[k], f, 8);
    }
  }
}

static void *worker(void *arg) {
  lgc_symq_t *q = arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->head && !q->stop) pthread_cond_wait(&q->more, &q->mu);
    if (!q->head && q->stop) break;
    job_t *j = q->head;
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    res_t *r = NULL;
    if (j->kind == 0) {
      if (j->sym) lgs_add_module(j->sym, j->path, j->start, j->end, j->bias);
    } else if (j->kind == 2) {
      if (j->sym) warm(q, j);
    } else if ((r = calloc(1, sizeof *r))) {
      symbolize(j, &r->r);
    }
    free(j->path);
    free(j);
    pthread_mutex_lock(&q->mu);
    if (r) {
      if (q->rtail) q->rtail->next = r;
      else q->rhead = r;
      q->rtail = r;
    }
    if (--q->pending == 0) pthread_cond_broadcast(&q->idle);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

lgc_symq_t *lgc_symq_new(void) {
  lgc_symq_t *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->more, NULL);
  pthread_cond_init(&q->idle, NULL);
  /* The collector takes its signals through a signalfd: they must stay blocked in
   * every thread. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&q->th, NULL, worker, q);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&q->more);
    pthread_cond_destroy(&q->idle);
    pthread_mutex_destroy(&q->mu);
    free(q);
    return NULL;
  }
  return q;
}

void lgc_symq_free(lgc_symq_t *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  pthread_cond_broadcast(&q->more);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->th, NULL);
  for (res_t *r = q->rhead, *n; r; r = n) {
    n = r->next;
    free(r->r.frames);
    free(r);
  }
  pthread_cond_destroy(&q->more);
  pthread_cond_destroy(&q->idle);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

static int push(lgc_symq_t *q, job_t *j) {
  pthread_mutex_lock(&q->mu);
  if (q->tail) q->tail->next = j;
  else q->head = j;
  q->tail = j;
  q->pending++;
  pthread_cond_signal(&q->more);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

int lgc_symq_module(lgc_symq_t *q, lgs_symbolizer_t *sym, const char *path, uint64_t start, uint64_t end,
                    uint64_t bias) {
  job_t *j = calloc(1, sizeof *j);
  if (!j || !(j->path = strdup(path ? path : ""))) {
    free(j);
    return -ENOMEM;
  }
  j->kind = 0;
  j->sym = sym;
  j->start = start;
  j->end = end;
  j->bias = bias;
  return push(q, j);
}

/* A job on stacks of m: kind 1 stack id (the result carries owner), 2 [id, to) warmed. */
static int push_stacks(lgc_symq_t *q, int kind, void *owner, lgs_symbolizer_t *sym, const lgm_proc_t *m, uint32_t id,
                       uint32_t to) {
  job_t *j = calloc(1, sizeof *j);
  if (!j) return -ENOMEM;
  *j = (job_t){.kind = kind, .sym = sym, .owner = owner, .m = m, .id = id, .to = to};
  return push(q, j);
}

int lgc_symq_stack(lgc_symq_t *q, void *owner, lgs_symbolizer_t *sym, const lgm_proc_t *m, uint32_t id) {
  return push_stacks(q, 1, owner, sym, m, id, 0);
}

int lgc_symq_warm(lgc_symq_t *q, lgs_symbolizer_t *sym, const lgm_proc_t *m, uint32_t from, uint32_t to) {
  return push_stacks(q, 2, NULL, sym, m, from, to);
}

int lgc_symq_take(lgc_symq_t *q, lgc_symres_t *out) {
  pthread_mutex_lock(&q->mu);
  res_t *r = q->rhead;
  if (r) {
    q->rhead = r->next;
    if (!q->rhead) q->rtail = NULL;
  }
  pthread_mutex_unlock(&q->mu);
  if (!r) return 0;
  *out = r->r;
  free(r);
  return 1;
}

void lgc_symq_release(lgc_symres_t *r) {
  free(r->frames);
  r->frames = NULL;
  r->nframes = 0;
}

void lgc_symq_drain(lgc_symq_t *q) {
  atomic_store(&q->draining, 1);
  pthread_mutex_lock(&q->mu);
  while (q->pending) pthread_cond_wait(&q->idle, &q->mu);
  pthread_mutex_unlock(&q->mu);
}

unsigned lgc_symq_pending(lgc_symq_t *q) {
  pthread_mutex_lock(&q->mu);
  unsigned n = q->pending;
  pthread_mutex_unlock(&q->mu);
  return n;
}
