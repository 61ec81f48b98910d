/* SPDX-License-Identifier: MIT */
/*
 * symq.h - symbolization off the collector's loop (collector layer).
 *
 * The first address looked up in a large library makes libdwfl read its symbol table
 * and debug information: seconds for libtorch. Done in the collector's loop, that
 * stopped live analysis, the guard and the metrics endpoint for as long (6.6 s at a
 * time, measured on a torch script). A worker thread does it instead: the loop queues
 * modules and stacks, and takes the symbolized stacks back at its own pace.
 *
 * Contract: one worker per queue. A symbolizer (lgs_symbolizer_t) handed to the queue
 * is used by the worker only, until lgc_symq_drain() returned and no more jobs for it
 * are queued. The process model (lgm_proc_t) of a job is only read (its region stays
 * mapped until the caller releases it, after the queue is drained or freed). Results
 * are taken and released by the loop's thread.
 */
#ifndef LG_COLLECTOR_SYMQ_H
#define LG_COLLECTOR_SYMQ_H

#include <stdint.h>

#include "core/model.h"
#include "core/symbolize.h"

typedef struct lgc_symq lgc_symq_t;

typedef struct lgc_symres {
  void *owner; /* as given to lgc_symq_stack */
  uint32_t id; /* stack id */
  unsigned space;
  lgs_frame_t *frames; /* innermost first; strings owned by the symbolizer or the region */
  int nframes;
} lgc_symres_t;

/* Starts the worker (all signals blocked in it). NULL when out of memory or threads. */
lgc_symq_t *lgc_symq_new(void);
/* Stops the worker after the queued jobs (lgc_symq_drain first to keep results). */
void lgc_symq_free(lgc_symq_t *q);
/* Queues a module for sym (path copied). 0 or -ENOMEM. */
int lgc_symq_module(lgc_symq_t *q, lgs_symbolizer_t *sym, const char *path, uint64_t start, uint64_t end,
                    uint64_t bias);
/* Queues stack id of m for sym; the result carries owner. 0 or -ENOMEM. */
int lgc_symq_stack(lgc_symq_t *q, void *owner, lgs_symbolizer_t *sym, const lgm_proc_t *m, uint32_t id);
/* Queues stacks [from, to) of m to be looked up in sym without a result: its cache
 * warmed for the lgc_symq_stack of the same stacks later. 0 or -ENOMEM. */
int lgc_symq_warm(lgc_symq_t *q, lgs_symbolizer_t *sym, const lgm_proc_t *m, uint32_t from, uint32_t to);
/* Takes one finished stack: 1 (then release it), 0 when none is ready. */
int lgc_symq_take(lgc_symq_t *q, lgc_symres_t *out);
void lgc_symq_release(lgc_symres_t *r);
/* Waits until every queued job is done; from then on the warming jobs are skipped. */
void lgc_symq_drain(lgc_symq_t *q);
/* Jobs queued and not yet done. */
unsigned lgc_symq_pending(lgc_symq_t *q);

#endif
