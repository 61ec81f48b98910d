/* SPDX-License-Identifier: MIT */
/*
 * store.h - the SQLite store (schema in docs/schema.md).
 *
 * Writing: the collector commits one transaction per pass of its loop (the
 * snapshots, labels and symbols of that pass, lgc_db_begin/lgc_db_commit; WAL
 * journal), so a killed target, or a killed collector, leaves every snapshot up to the
 * last pass readable. Reading: the findings layer (findings/reader.h, lgr_open).
 */
#ifndef LG_OUTPUT_STORE_H
#define LG_OUTPUT_STORE_H

#include <stdint.h>

#include "core/model.h"
#include "core/symbolize.h"
#include "findings/reader.h" /* LG_SCHEMA_VERSION; reading a database */

typedef struct lgst lgst_t;

/* Creates the database at path, claimed first (core/outfile.h): never through a
 * symbolic link, never a file another recording has open; an existing file only with
 * LGST_FORCE. The file stays locked (in use) until lgst_close, which also checkpoints
 * the WAL into it. 0, or -errno with a one-line reason (naming path) in why: -EEXIST,
 * -EBUSY, -ELOOP, -EPERM, -EINVAL (core/outfile.h), -ENOSPC (disk full), -EIO. */
#define LGST_FORCE 1
int lgst_create_ex(const char *path, int flags, lgst_t **out, char *why, size_t whylen);
/* lgst_create_ex in two steps, so that what SQLite does to make the file (its schema,
 * ~1.5 ms) can overlap the start of the program it records (cli/cmd_run.c): the claim
 * (the file and the journal files beside it, made and locked; the same refusals), then
 * the database made in it. On a failed lgst_open, s is closed and its files removed. */
int lgst_claim(const char *path, int flags, lgst_t **out, char *why, size_t whylen);
int lgst_open(lgst_t *s, char *why, size_t whylen);
/* lgst_create_ex with LGST_FORCE (tests and tools that own the path); *errmsg: the
 * reason on failure (thread-local). */
int lgst_create(const char *path, lgst_t **out, const char **errmsg);
/* Removes the -wal and -shm files beside a database (stale ones, or of a removed file). */
void lgst_remove_journal(const char *path);
void lgst_close(lgst_t *s);
/* The errno of the last failed SQLite call (ENOSPC: disk full, EIO...). */
int lgst_errno(lgst_t *s);
int lgst_rollback(lgst_t *s);
/* Gives back the disk space reserved beside a database made by lgst_create_ex (once
 * the disk is full): 0, or -errno (no reserve). */
int lgst_use_reserve(lgst_t *s);
int lgst_has_reserve(const lgst_t *s);
/* Closes a database made by lgst_create_ex and removes it (nothing was recorded). */
void lgst_discard(lgst_t *s, const char *path);
void *lgst_db(lgst_t *s); /* the sqlite3 handle */

int lgst_begin(lgst_t *s);
int lgst_commit(lgst_t *s);
int lgst_meta(lgst_t *s, const char *key, const char *value);
/* Inserts or updates the process row. */
int lgst_proc(lgst_t *s, const lgm_proc_t *p);
int lgst_module(lgst_t *s, int proc, uint32_t idx, const lg_module_rec_t *m);
int lgst_stack(lgst_t *s, int proc, uint32_t id, unsigned space, const lgs_frame_t *f, int nframes);
/* One holder of a suspect's memory (Python reference chain), from an explain. */
typedef struct lgst_holder {
  uint32_t stack;
  int explain; /* sequence number of the explain in this process */
  int64_t step;
  const char *kind;       /* "tensor", "autograd-graph", "object" */
  const char *chain_json; /* JSON array of strings, root first */
  int64_t objects, bytes;
  const char *detail_json; /* JSON object or NULL */
} lgst_holder_t;
int lgst_holder(lgst_t *s, int proc, const lgst_holder_t *h);
/* One explain of a Python process: an answer (outcome "answered" or "failed"), or a
 * request of the collector's that got none ("unanswered"). Strings may be NULL. */
typedef struct lgst_explain {
  int explain;         /* the holders' explain number; 0 for an unanswered request */
  int64_t request;     /* the collector's request it answers (0: not asked by the collector) */
  uint64_t t_ns;       /* when the collector stored it */
  int64_t step;        /* the program's step then (-1 unknown) */
  const char *outcome; /* "answered", "failed", "unanswered" */
  const char *why;     /* what asked: "request", "exit", "step", "call" */
  double elapsed_s;    /* the walk's wall time */
  int64_t objects;     /* objects walked */
  int truncated;       /* the walk stopped at its budget or object cap */
  int holders;         /* holders found */
  const char *note;    /* failed: the error; unanswered: what was tried */
} lgst_explain_t;
int lgst_explain(lgst_t *s, int proc, const lgst_explain_t *e);
/* A note on process proc (0: the recording), one per kind, replaced (docs/schema.md). */
int lgst_note(lgst_t *s, int proc, const char *kind, const char *note);

/* When the live analysis flagged a stack's site as growing (the start of the current
 * episode of growth: a later flag replaces an earlier one). */
int lgst_flag(lgst_t *s, int proc, uint32_t stack, uint64_t t_ns, double growth_bytes_per_s);
/* A label of a process ("rank", "local_rank", "world_size", "host"); "rank" and "host"
 * also fill processes.rank and .host the next time the process row is written. */
int lgst_label(lgst_t *s, int proc, const char *key, const char *value);
/* The blocks stack freed by age (ages[b]: bucket b of lg_age_bucket) in ticks (the
 * lifetimes table) or with steps != 0 in steps (step_lifetimes); zero buckets are not
 * written. */
int lgst_lifetimes(lgst_t *s, int proc, uint32_t stack, int steps, const uint64_t *ages, int nages);
/* Creates the GPU tables (docs/cuda.md) if they are not there yet; 0 or -EIO. */
int lgst_cuda_tables(lgst_t *s);
/* The tables a database may hold besides meta (docs/schema.md), NULL-terminated, in an
 * order where a process's rows come before those that name it: what lgst_copy_in
 * copies. 1 for a GPU table, made by lgst_cuda_tables. */
const char *const *lgst_tables(void);
int lgst_table_is_gpu(const char *name);
/* Copies the leakguard database at path into s, in one transaction of its own
 * (`leakguard merge`, merge.c; docs/schema.md, "Merged databases"): every table of
 * lgst_tables() that path has, its process images renumbered after those s holds
 * (proc 0, the recording's own notes, stays 0), each image labelled `source` (path)
 * and `attached_at` when `leakguard attach` recorded it; with first, also path's
 * settings in meta (not its schema, version, command or attached_at). s must not be
 * inside a transaction. 0, or -errno with why in one line naming path (nothing of
 * path stays in s). */
int lgst_copy_in(lgst_t *s, const char *path, int first, char *why, size_t whylen);

/* What a snapshot writes (samples rows). */
enum {
  LGST_PARTIAL = 0, /* sites changed since the last snapshot that hold, or held, 4 KiB or more */
  LGST_ALL = 1,     /* every site that ever allocated (the final snapshot of a process) */
  LGST_CHANGED = 2, /* every site changed since the last snapshot */
};
/* Snapshot row plus samples rows as mode says (LGST_*). usage/limit: memory usage and
 * limit at that time. */
int lgst_snapshot(lgst_t *s, lgm_proc_t *p, uint64_t t_ns, uint64_t usage, uint64_t limit, int mode);

/* ------------------------------------------------------------------ CUDA, NVML
 * (end of store.c; tables made on first use, docs/schema.md) */

/* The GPU part of p's snapshot number p->seq (call before lgst_snapshot, which
 * advances seq): devices of new GPU sites, the per-device gauges, the notes. Nothing
 * when the process never used CUDA. 0 or -EIO. */
int lgst_cuda_snapshot(lgst_t *s, lgm_proc_t *p);
/* NVML samples on the collector's clock: a device, and a recorded process on it. */
int lgst_nvml_device(lgst_t *s, uint64_t t_ns, int device, uint64_t used, uint64_t total);
int lgst_nvml_process(lgst_t *s, uint64_t t_ns, int device, int pid, int proc, uint64_t used);

#endif
