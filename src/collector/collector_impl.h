/* SPDX-License-Identifier: MIT */
/*
 * collector_impl.h - what the collector's files share (collector/collector.h is the
 * library's interface): the collector and process records, and the functions of
 * proctable.c, snapshot.c, findings.c and files.c that collector.c's loop calls.
 */
#ifndef LG_COLLECTOR_IMPL_H
#define LG_COLLECTOR_IMPL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/types.h>

#include "collector/collector.h"
#include "collector/sites.h"
#include "collector/symq.h"
#include "core/model.h"
#include "core/nvml.h"
#include "core/symbolize.h"
#include "core/sysmem.h"
#include "core/util.h"
#include "findings/report.h"

/* The live analysis runs every LIVE_TICK_NS, or at the snapshot interval when that is
 * shorter (in memory; the database gets snapshots at the snapshot interval), so a leak
 * is flagged a few ticks after it begins whatever the interval. Every snapshot, those
 * at step markers too, is also a point of the live series. */
#define LIVE_TICK_NS 250000000ULL
/* Small sites' changes are written this often (LGST_CHANGED, store.h). */
#define CHANGED_EVERY_NS 2000000000ULL

/* One recorded process image. */
typedef struct lgc_proc {
  lgm_proc_t m;
  lgs_symbolizer_t *sym;
  lgc_sites_t sites;   /* stacks grouped by allocation site, for the live analysis */
  uint8_t *symbolized; /* per stack: 1 once queued for symbolization (stored, assigned to a site) */
  uint32_t nsymbolized;
  uint64_t last_snap_ns;
  uint32_t warmed; /* stacks [2, warmed) handed to the worker ahead (lgc_warm_symbols) */
  uint64_t warmed_ns;
  uint64_t last_changed_ns; /* last LGST_CHANGED snapshot */
  uint64_t last_tick_ns;    /* last point of the live site series */
  uint64_t exit_begin_ns;   /* when the process began to exit (lg_exiting), 0: not yet */
  uint32_t lazy_said;       /* the lazy start's state last stored as a label (core/region.h LG_LAZY_*) */
  int python;               /* runs Python code (Python frames seen): live explains */
  double *explained;        /* per site group: its live bytes when last explained (0: never) */
  uint32_t nexplained;
  uint64_t last_explain_ns;
  int explain_seq;
  /* The request waiting for its answer (findings.c, explain_retry): its seq (0: none),
   * text (sent again: a notice the program missed), when first and last sent, how
   * many times. */
  int explain_pending;
  char *explain_req;
  uint64_t explain_asked_ns, explain_sent_ns;
  int explain_tries;
  int unrecorded_children; /* its forked children that could not reach us in time (files.c) */
  int suspects_written;    /* a suspects file was written for it (findings.c) */
  /* Process lifetime (see lgc_conn_eof): the connection's EOF alone does not end an
   * image, the program may have closed our socket. */
  int pidfd;            /* the process, -1 if pidfd_open is not available */
  int detached;         /* connection closed while the process lives on */
  int status_known;     /* exit status or signal set (by our waitpid or a reaper's ring) */
  uint64_t reaped_next; /* next entry of the region's reaped ring to read */
  uint64_t title_ns;    /* when its command line was last read again (snapshot.c) */
} lgc_proc_t;

struct lgc_collector {
  lgst_t *db;
  const char *db_path;
  int db_failed;
  int db_full;           /* it failed for a full disk (lgc_db_write) */
  uint64_t db_failed_ns; /* when */
  int in_txn;
  double interval; /* 0: adaptive */
  uint64_t limit;
  const char *limit_source;
  int limit_given;
  uint64_t usage, usage_ns; /* the memory in use (lgsm_memory_usage) and when read */
  lgc_proc_t **procs;
  int nprocs, cap;
  int listen_fd;
  char dir[64]; /* private directory: socket, suspects/holders files */
  char sock[96];
  pid_t child;
  int child_done, child_status;
  uint64_t t0;
  lgv_view_t *view;
  lgg_guard_t *guard;
  uint64_t next_guard;
  lgx_registry_t *reg;
  lgc_symq_t *symq;      /* symbolization worker */
  lgs_files_t *symfiles; /* the files every process's symbolizer shares (the worker's) */
  lgsm_timeline_t *nvml; /* GPU timeline (docs/cuda.md), opened when a process uses CUDA */
  int nvml_tried;
  int explains;
  int unrecorded_orphans; /* processes that could not reach us, parent not recorded */
  /* Children that a recorded process reaped before their hello was accepted (a
   * short-lived child of a busy collector): applied when it arrives. */
  struct {
    int pid, status;
  } pending[64];
  int npending;
  int attached, stop; /* lgc_set_attached; stop: end the loop */
  uint64_t deadline_ns;
  /* attach: detach asked for (1 by --duration or a first interrupt, 2 by a second);
   * the final explanations asked of the Python processes, and until when to wait */
  int detach_req, final_asked, final_base;
  uint64_t gone_ns; /* attach: when every recorded image had ended (0: they had not) */
  uint64_t final_until, final_look;
};

/* ---- db.c */
/* One transaction per loop iteration that writes anything (begin on the first write). */
void lgc_db_begin(lgc_collector_t *c);
void lgc_db_commit(lgc_collector_t *c);
/* The result rc of a write to the store: a failed one (out of memory, a full disk) is
 * said once and storing stops (db_failed), the recording and the live view go on: a
 * database is complete, or the user was told it is not. Returns rc. */
int lgc_db_write(lgc_collector_t *c, int rc);
/* 1 when the store takes writes (there is one, and no write failed). */
static inline int lgc_db_ok(const lgc_collector_t *c) { return c->db && !c->db_failed; }

/* ---- collector.c */
uint64_t lgc_snapshot_interval_ns(const lgc_collector_t *c, uint64_t now);

/* cJSON's AddItem calls do not take the item when they fail (out of memory): these
 * free it then. 1 when it was added; a document missing a part is not written. */
static inline int lgc_json_push(cJSON *array, cJSON *item) {
  if (array && item && cJSON_AddItemToArray(array, item)) return 1;
  cJSON_Delete(item);
  return 0;
}
static inline int lgc_json_put(cJSON *object, const char *key, cJSON *item) {
  if (object && item && cJSON_AddItemToObject(object, key, item)) return 1;
  cJSON_Delete(item);
  return 0;
}

/* ---- proctable.c */
lgc_proc_t *lgc_find_proc(lgc_collector_t *c, int pid, int alive_only);
/* Accepts one pending hello: 1 when one was accepted. */
int lgc_accept_hello(lgc_collector_t *c);
void lgc_store_proc(lgc_collector_t *c, lgc_proc_t *p);
/* Ends an image (final snapshot, process row); reason: "ended", "exec", NULL. */
void lgc_end_proc(lgc_collector_t *c, lgc_proc_t *p, const char *reason);
/* Its connection reached EOF or failed. */
void lgc_conn_eof(lgc_collector_t *c, lgc_proc_t *p);
int lgc_proc_alive(const lgc_proc_t *p);
/* Children the process reaped itself (the region's ring): their statuses. */
void lgc_read_reaped(lgc_collector_t *c, lgc_proc_t *p);
/* waitpid for our children (the started program, orphans). */
void lgc_reap(lgc_collector_t *c);
void lgc_label_process(lgc_collector_t *c, const lgm_proc_t *m);

/* ---- snapshot.c */
/* One snapshot of p, stored (mode: LGST_*). */
void lgc_snapshot(lgc_collector_t *c, lgc_proc_t *p, int mode);
/* Stores what the symbolization worker finished, for at most budget_ns (0: all). */
void lgc_take_symbols(lgc_collector_t *c, uint64_t budget_ns);
/* Symbolizes and stores stack id of p although its site is small (a holder's kept_at). */
void lgc_want_stack(lgc_collector_t *c, lgc_proc_t *p, uint32_t id);
/* Queues p's modules not queued yet to the worker and stores them. 0 or -ENOMEM. */
int lgc_sync_modules(lgc_collector_t *c, lgc_proc_t *p);
/* A young process's new modules and stacks handed to the worker ahead of its
 * snapshots (snapshot.c: why). */
void lgc_warm_symbols(lgc_collector_t *c, lgc_proc_t *p, uint64_t now);
void lgc_gpu_timeline(lgc_collector_t *c, uint64_t now);

/* ---- findings.c */
/* One live tick of every running process (sum, sample, analyse, store flags). */
void lgc_live_tick(lgc_collector_t *c, uint64_t now);
/* The live view, guard hints, metrics, suspects files and explanation requests. */
void lgc_live_update(lgc_collector_t *c, double elapsed);

/* ---- files.c */
/* Ingests the holders-PID-N.json and labels-PID.json files of the private directory. */
void lgc_ingest_holders(lgc_collector_t *c);
/* ---- findings.c */
int lgc_explain_final(lgc_collector_t *c);
/* p ended (or the recording does) with a request unanswered: said in explains. */
void lgc_explain_give_up(lgc_collector_t *c, lgc_proc_t *p, uint64_t now, const char *why);
void lgc_remove_dir_files(const char *dir);

#endif
