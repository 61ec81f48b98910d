/* SPDX-License-Identifier: MIT */
/* store.c - the SQLite writer of leakguard databases (the reader: findings/reader.c). */
#include "output/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/detect.h"
#include "core/outfile.h"
#include "core/strmap.h"
#include "leakguard.h"

/* Text is bound with SQLITE_STATIC: every string outlives the step of its statement
 * (statements are finalized, or rebound, before their strings go). SQLITE_TRANSIENT
 * would copy it, and a failed copy leaves the parameter NULL while sqlite3_step still
 * succeeds: a row silently without its value (tests/unit/test_alloc_fail.c). */
/* The rows written once per process, module, label or flag (cached() below). */
#define LGST_CACHED 32

struct lgst {
  sqlite3 *db;
  sqlite3_stmt *ins_sample, *ins_snap, *ins_loc, *ins_stack;
  int cuda_schema; /* the CUDA tables exist (made on first use, end of this file) */
  int lock_fd;     /* created here: the claimed file, flock'ed while in use (core/outfile.c); -1 */
  char *path;      /* created here: its path (the reserve is beside it) */
  int reserve;     /* the reserve file exists (make_reserve) */
  /* Locations written so far: "proc ip inlined module function file line" -> loc id.
   * A frame is stored once however many stacks pass through it (pprof's model): the
   * 15 000 stacks of an `import torch` share 13 000 locations among 385 000 frames. */
  lgu_strmap_t locs;
  int nlocs;
  /* The writers' statements, prepared once (cached() below) */
  const char *cached_sql[LGST_CACHED];
  sqlite3_stmt *cached_st[LGST_CACHED];
  int ncached;
};

/* Made with synchronous=OFF: the switch to WAL goes through a rollback journal, and
 * with syncs it was six fdatasyncs (a directory's among them) at every start of
 * `leakguard run` (~0.2 ms each here, milliseconds on a real disk) for a file that
 * holds nothing yet: a crash then loses an empty database. NORMAL from the first row
 * on (lgst_create_ex). */
static const char *SCHEMA =
    "PRAGMA synchronous=OFF;"
    "PRAGMA journal_mode=WAL;"
    /* one transaction: each statement on its own was one (a header and a page written,
     * the WAL's locks taken) at every start of `leakguard run` */
    "BEGIN;"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE processes(proc INTEGER PRIMARY KEY, pid INTEGER, ppid INTEGER,"
    " parent_proc INTEGER, host TEXT, rank INTEGER, kind TEXT, command TEXT, exe TEXT,"
    " start_ns INTEGER, end_ns INTEGER, end_reason TEXT, exit_status INTEGER, signal INTEGER,"
    " sample_bytes INTEGER, steps INTEGER, dropped INTEGER, peak_live_bytes INTEGER,"
    " final_live_bytes INTEGER, snapshots INTEGER);"
    "CREATE TABLE modules(proc INTEGER, module INTEGER, path TEXT, start INTEGER, end INTEGER,"
    " bias INTEGER, PRIMARY KEY(proc, module));"
    "CREATE TABLE stacks(proc INTEGER, stack INTEGER, space TEXT, depth INTEGER, locs TEXT,"
    " PRIMARY KEY(proc, stack));"
    "CREATE TABLE locations(proc INTEGER, loc INTEGER, ip INTEGER, module TEXT, function TEXT, file TEXT,"
    " line INTEGER, inlined INTEGER, PRIMARY KEY(proc, loc)) WITHOUT ROWID;"
    /* every frame of every stack, for people and scripts that query the database
     * (docs/schema.md); the report reads stacks and locations itself */
    "CREATE VIEW frames AS SELECT s.proc AS proc, s.stack AS stack, CAST(j.key AS INTEGER) AS idx, l.ip AS ip,"
    " l.module AS module, l.function AS function, l.file AS file, l.line AS line, l.inlined AS inlined"
    " FROM stacks s JOIN json_each(s.locs) j JOIN locations l ON l.proc = s.proc AND l.loc = j.value;"
    "CREATE TABLE snapshots(proc INTEGER, seq INTEGER, t_ns INTEGER, step INTEGER,"
    " live_bytes INTEGER, live_blocks INTEGER, host_bytes INTEGER, mmap_bytes INTEGER,"
    " rss_bytes INTEGER, usage_bytes INTEGER, limit_bytes INTEGER, dropped INTEGER,"
    " PRIMARY KEY(proc, seq));"
    "CREATE TABLE samples(proc INTEGER, stack INTEGER, seq INTEGER, live_bytes INTEGER,"
    " live_blocks INTEGER, alloc_bytes INTEGER, alloc_blocks INTEGER, oldest_epoch INTEGER,"
    " PRIMARY KEY(proc, stack, seq)) WITHOUT ROWID;"
    "CREATE TABLE holders(proc INTEGER, stack INTEGER, explain INTEGER, step INTEGER, kind TEXT,"
    " chain TEXT, objects INTEGER, bytes INTEGER, detail TEXT);"
    "CREATE INDEX holders_stack ON holders(proc, stack, explain);"
    /* explains: each answer of a Python process (holders-PID-N.json), and each request
     * of the collector's that got none (outcome 'unanswered'): why a leak has no holder */
    "CREATE TABLE explains(proc INTEGER, explain INTEGER, request INTEGER, t_ns INTEGER, step INTEGER,"
    " outcome TEXT, why TEXT, elapsed_s REAL, objects INTEGER, truncated INTEGER, holders INTEGER, note TEXT);"
    /* what the report should say about a process beyond its numbers (one per kind) */
    "CREATE TABLE notes(proc INTEGER, kind TEXT, note TEXT, PRIMARY KEY(proc, kind)) WITHOUT ROWID;"
    "CREATE TABLE flags(proc INTEGER, stack INTEGER, t_ns INTEGER, growth_bytes_per_s REAL,"
    " PRIMARY KEY(proc, stack)) WITHOUT ROWID;"
    "CREATE TABLE labels(proc INTEGER, key TEXT, value TEXT, PRIMARY KEY(proc, key)) WITHOUT ROWID;"
    /* blocks freed by a stack, by age when freed (lg_age_bucket: 0 within one 100-ms
     * tick, b >= 1 for [2^(b-1), 2^b) ticks), written at a process's final snapshot */
    "CREATE TABLE lifetimes(proc INTEGER, stack INTEGER, bucket INTEGER, blocks INTEGER,"
    " PRIMARY KEY(proc, stack, bucket)) WITHOUT ROWID;"
    /* the same by age in steps (bucket 0: freed in the step it was born in), for a
     * process that marked steps; the frees before its first step are not in it */
    "CREATE TABLE step_lifetimes(proc INTEGER, stack INTEGER, bucket INTEGER, blocks INTEGER,"
    " PRIMARY KEY(proc, stack, bucket)) WITHOUT ROWID;"
    "COMMIT;";

void *lgst_db(lgst_t *s) { return s->db; }

static int prep(lgst_t *s, sqlite3_stmt **st, const char *sql) {
  return sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) == SQLITE_OK ? 0 : -EIO;
}

/* The prepared statement of sql, a string literal of this file (found by its address),
 * kept for the connection's life: a run of many short-lived processes writes a
 * process row, its modules and labels for each, and parsing their SQL anew each time
 * was a quarter of the collector's time (bench/wrappers.py). NULL on error. Each use
 * ends with done(), which resets it (or finalizes one the full cache did not keep). */
static sqlite3_stmt *cached(lgst_t *s, const char *sql) {
  for (int i = 0; i < s->ncached; i++)
    if (s->cached_sql[i] == sql) return s->cached_st[i];
  sqlite3_stmt *st;
  if (prep(s, &st, sql) != 0) return NULL;
  if (s->ncached < LGST_CACHED) {
    s->cached_sql[s->ncached] = sql;
    s->cached_st[s->ncached++] = st;
  }
  return st;
}

/* The end of a use of cached(): rc, the step's result, as 0 or -EIO. */
static int done(lgst_t *s, sqlite3_stmt *st, int rc) {
  int kept = 0;
  for (int i = 0; i < s->ncached && !kept; i++) kept = s->cached_st[i] == st;
  if (kept) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  } else sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -EIO;
}

void lgst_remove_journal(const char *path) {
  char side[4200];
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-reserve", path);
  unlink(side);
}

/* The reserve: LGST_RESERVE_BYTES of disk taken beside the database when it is made
 * (<path>-reserve, ours: O_EXCL|O_NOFOLLOW) and given back when the disk fills up, so
 * that how each process ended and why storing stopped can still be written (a
 * database that says "still running" of a process that exited misleads). Removed at
 * close. None where the space cannot be allocated: then nothing more is written. */
#define LGST_RESERVE_BYTES (512 * 1024)
static int make_reserve(lgst_t *s) {
  char r[4200];
  if (!s->path) return 0;
  snprintf(r, sizeof r, "%s-reserve", s->path);
  int fd = open(r, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno == ENOSPC || errno == EDQUOT ? -ENOSPC : 0;
  int e = posix_fallocate(fd, 0, LGST_RESERVE_BYTES);
  if (e) unlink(r);
  else s->reserve = 1;
  close(fd);
  return e == ENOSPC || e == EDQUOT ? -ENOSPC : 0;
}

int lgst_use_reserve(lgst_t *s) {
  if (!s || !s->reserve || !s->path) return -ENOSPC;
  char r[4200];
  snprintf(r, sizeof r, "%s-reserve", s->path);
  s->reserve = 0;
  return unlink(r) == 0 ? 0 : -errno;
}

int lgst_has_reserve(const lgst_t *s) { return s && s->reserve; }

int lgst_errno(lgst_t *s) {
  switch (s && s->db ? sqlite3_errcode(s->db) : SQLITE_OK) {
  case SQLITE_FULL: return ENOSPC;
  case SQLITE_NOMEM: return ENOMEM;
  case SQLITE_READONLY: return EROFS;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB: return EBADMSG;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return EBUSY;
  default: return EIO;
  }
}

int lgst_rollback(lgst_t *s) { return sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO; }

/* A failed create after the claim: the reason, the connection closed, the file (made
 * or truncated by us) removed, its lock released. */
static int create_failed(lgst_t *s, const char *path, const char *text, char *why, size_t whylen) {
  int full = s && s->db && (sqlite3_extended_errcode(s->db) & 0xff) == SQLITE_FULL;
  snprintf(why, whylen, "%s: %s", path,
           full         ? "disk full"
           : text       ? text
           : s && s->db ? sqlite3_errmsg(s->db)
                        : "cannot open");
  int fd = s ? s->lock_fd : -1;
  if (s) s->lock_fd = -1;
  /* removed only while it is still the file we claimed, and before our lock goes: a
   * file that replaced it, or a run that claims it next, is not ours to remove */
  if (fd >= 0 && lgu_same_file(fd, path)) {
    unlink(path);
    lgst_remove_journal(path);
  }
  lgst_close(s);
  if (fd >= 0) close(fd);
  return full ? -ENOSPC : -EIO;
}

int lgst_claim(const char *path, int flags, lgst_t **out, char *why, size_t whylen) {
  int fd, created;
  int rc = lgu_claim_output(path, flags & LGST_FORCE, &fd, &created, why, whylen);
  if (rc) return rc;
  lgst_remove_journal(path); /* the file is ours now: what is beside it is stale */
  /* and its journal files are made by us (O_EXCL|O_NOFOLLOW) before SQLite opens them
   * by name: a link planted there beforehand is not followed */
  for (int k = 0; k < 2; k++) {
    char side[4200];
    snprintf(side, sizeof side, "%s-%s", path, k ? "shm" : "wal");
    int jfd = open(side, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (jfd < 0) {
      snprintf(why, whylen, "%s: cannot create %s: %s", path, side, strerror(errno));
      if (created && lgu_same_file(fd, path)) unlink(path);
      close(fd);
      return -EEXIST;
    }
    close(jfd);
  }
  lgst_t *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    if (created) unlink(path);
    snprintf(why, whylen, "%s: out of memory", path);
    return -ENOMEM;
  }
  s->lock_fd = fd; /* held until lgst_close: the file is in use */
  if (!(s->path = strdup(path))) {
    lgst_discard(s, path);
    snprintf(why, whylen, "%s: out of memory", path);
    return -ENOMEM;
  }
  /* a disk without room for the reserve is refused here, before the program starts
   * (lgst_open then runs beside its start) */
  if (make_reserve(s) != 0) {
    lgst_discard(s, path);
    snprintf(why, whylen, "%s: disk full", path);
    return -ENOSPC;
  }
  *out = s;
  return 0;
}

int lgst_open(lgst_t *s, char *why, size_t whylen) {
  const char *path = s->path;
  int fd = s->lock_fd;
  /* SQLITE_OPEN_NOFOLLOW, and the inode checked: SQLite opens the file by its name */
  if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW, NULL) !=
      SQLITE_OK)
    return create_failed(s, path, NULL, why, whylen);
  if (!lgu_same_file(fd, path)) return create_failed(s, path, "replaced while it was opened: refused", why, whylen);
  /* A reader that opens the file the moment it appears (a script polling for the
   * flags table, `leakguard report` on a run just started) holds a shared lock for its
   * query, and switching the new file to WAL needs it alone: without a wait the run
   * ended at once, "database is locked" (attach_python_holders, beside two CPU hogs).
   * The collector waits for such a reader, never the target. */
  sqlite3_busy_timeout(s->db, 10000);
  char *err = NULL;
  if (sqlite3_exec(s->db, SCHEMA, NULL, NULL, &err) != SQLITE_OK) {
    char text[256];
    snprintf(text, sizeof text, "%s", err ? err : "schema");
    sqlite3_free(err);
    return create_failed(s, path, text, why, whylen);
  }
  if (sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK)
    return create_failed(s, path, NULL, why, whylen);
  if (prep(s, &s->ins_sample, "INSERT OR REPLACE INTO samples VALUES(?,?,?,?,?,?,?,?)") ||
      prep(s, &s->ins_snap, "INSERT OR REPLACE INTO snapshots VALUES(?,?,?,?,?,?,?,?,?,?,?,?)") ||
      prep(s, &s->ins_loc, "INSERT OR REPLACE INTO locations VALUES(?,?,?,?,?,?,?,?)") ||
      prep(s, &s->ins_stack, "INSERT OR REPLACE INTO stacks VALUES(?,?,?,?,?)"))
    return create_failed(s, path, NULL, why, whylen);
  char v[32];
  snprintf(v, sizeof v, "%d", LG_SCHEMA_VERSION);
  if (lgst_meta(s, "schema", v)) /* without its version the file is not a leakguard database */
    return create_failed(s, path, NULL, why, whylen);
  return 0;
}

int lgst_create_ex(const char *path, int flags, lgst_t **out, char *why, size_t whylen) {
  lgst_t *s;
  int rc = lgst_claim(path, flags, &s, why, whylen);
  if (rc == 0 && (rc = lgst_open(s, why, whylen)) == 0) *out = s;
  return rc;
}

int lgst_create(const char *path, lgst_t **out, const char **errmsg) {
  static _Thread_local char buf[512];
  *errmsg = NULL;
  int rc = lgst_create_ex(path, LGST_FORCE, out, buf, sizeof buf);
  if (rc) *errmsg = buf;
  return rc;
}

void lgst_close(lgst_t *s) {
  if (!s) return;
  sqlite3_finalize(s->ins_sample);
  sqlite3_finalize(s->ins_snap);
  sqlite3_finalize(s->ins_loc);
  sqlite3_finalize(s->ins_stack);
  for (int i = 0; i < s->ncached; i++) sqlite3_finalize(s->cached_st[i]);
  /* a database written here ends whole in its own file: the WAL checkpointed into it
   * (a copy of the .db alone loses nothing), then the lock that said "in use" goes.
   * Without the checkpoint's two fdatasyncs (1.5 ms here, far more on a busy disk or
   * NFS, at the end of every `leakguard run`): the pages are in the kernel's cache and
   * reach the disk with its writeback, as perf.data or a core file does; a killed
   * program or collector loses nothing, a power cut in the next seconds may
   * (docs/schema.md). */
  if (s->lock_fd >= 0 && s->db) {
    sqlite3_exec(s->db, "PRAGMA synchronous=OFF", NULL, NULL, NULL);
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  }
  sqlite3_close(s->db);
  lgst_use_reserve(s);
  free(s->path);
  if (s->lock_fd >= 0) close(s->lock_fd);
  lgu_strmap_free(&s->locs);
  free(s);
}

/* One row: the n integers v, then the ntext strings text (NULL binds NULL). */
static int exec_row(lgst_t *s, const char *sql, const int64_t *v, int n, const char *const *text, int ntext) {
  sqlite3_stmt *st = cached(s, sql);
  if (!st) return -EIO;
  for (int i = 0; i < n; i++) sqlite3_bind_int64(st, i + 1, v[i]);
  for (int i = 0; i < ntext; i++) sqlite3_bind_text(st, n + i + 1, text[i], -1, SQLITE_STATIC);
  return done(s, st, sqlite3_step(st));
}

int lgst_note(lgst_t *s, int proc, const char *kind, const char *note) {
  int64_t v[1] = {proc};
  const char *t[2] = {kind, note};
  return exec_row(s, "INSERT OR REPLACE INTO notes VALUES(?,?,?)", v, 1, t, 2);
}

void lgst_discard(lgst_t *s, const char *path) {
  if (!s) return;
  /* while the lock is held (lgst_close releases it), and only if path is still it */
  if (s->lock_fd >= 0 && lgu_same_file(s->lock_fd, path)) {
    unlink(path);
    lgst_remove_journal(path);
  }
  lgst_close(s);
}

int lgst_begin(lgst_t *s) { return sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO; }
int lgst_commit(lgst_t *s) { return sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO; }

int lgst_meta(lgst_t *s, const char *key, const char *value) {
  const char *t[2] = {key, value};
  return exec_row(s, "INSERT OR REPLACE INTO meta VALUES(?,?)", NULL, 0, t, 2);
}

int lgst_proc(lgst_t *s, const lgm_proc_t *p) {
  sqlite3_stmt *st;
  const char *sql = "INSERT OR REPLACE INTO processes VALUES(?1,?2,?3,?4,"
                    " (SELECT value FROM labels WHERE proc=?1 AND key='host'),"
                    " (SELECT CAST(value AS INTEGER) FROM labels WHERE proc=?1 AND key='rank'),"
                    " ?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)";
  if (!(st = cached(s, sql))) return -EIO;
  int i = 1;
  sqlite3_bind_int(st, i++, p->proc);
  sqlite3_bind_int(st, i++, p->pid);
  sqlite3_bind_int(st, i++, p->ppid);
  if (p->parent_proc) sqlite3_bind_int(st, i++, p->parent_proc);
  else sqlite3_bind_null(st, i++);
  sqlite3_bind_text(st, i++, lgm_kind_name(p->kind), -1, SQLITE_STATIC);
  sqlite3_bind_text(st, i++, p->command, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, i++, p->exe, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)p->start_ns);
  if (p->ended) sqlite3_bind_int64(st, i++, (sqlite3_int64)p->end_ns);
  else sqlite3_bind_null(st, i++);
  sqlite3_bind_text(st, i++, p->end_reason[0] ? p->end_reason : "running", -1, SQLITE_STATIC);
  if (p->ended && !strcmp(p->end_reason, "exit")) sqlite3_bind_int(st, i++, p->exit_status);
  else sqlite3_bind_null(st, i++);
  if (p->ended && !strcmp(p->end_reason, "signal")) sqlite3_bind_int(st, i++, p->signal);
  else sqlite3_bind_null(st, i++);
  sqlite3_bind_int64(st, i++, p->hdr ? (sqlite3_int64)p->hdr->sample_bytes : 0);
  sqlite3_bind_int64(st, i++, p->hdr ? (sqlite3_int64)atomic_load(&p->hdr->steps) : 0);
  sqlite3_bind_int64(st, i++, p->hdr ? (sqlite3_int64)atomic_load(&p->hdr->dropped) : 0);
  sqlite3_bind_int64(st, i++, p->peak_live_bytes);
  sqlite3_bind_int64(st, i++, p->live_bytes);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)p->seq);
  return done(s, st, sqlite3_step(st));
}

int lgst_module(lgst_t *s, int proc, uint32_t idx, const lg_module_rec_t *m) {
  sqlite3_stmt *st;
  if (!(st = cached(s, "INSERT OR REPLACE INTO modules VALUES(?,?,?,?,?,?)"))) return -EIO;
  char path[LG_MODULE_PATH + 1];
  memcpy(path, m->path, LG_MODULE_PATH);
  path[LG_MODULE_PATH] = 0;
  sqlite3_bind_int(st, 1, proc);
  sqlite3_bind_int(st, 2, (int)idx);
  sqlite3_bind_text(st, 3, path, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)m->start);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)m->end);
  sqlite3_bind_int64(st, 6, (sqlite3_int64)m->bias);
  return done(s, st, sqlite3_step(st));
}

/* The location id of frame f of process proc, inserting it the first time. */
static int location(lgst_t *s, int proc, const lgs_frame_t *f) {
  char key[1536];
  snprintf(key, sizeof key, "%d\x1f%" PRIx64 "\x1f%d\x1f%s\x1f%s\x1f%s\x1f%d", proc, f->ip, f->inlined,
           f->module ? f->module : "", f->function ? f->function : "", f->file ? f->file : "", f->line);
  int added = 0;
  int loc = lgu_strmap_get_or_add(&s->locs, key, s->nlocs + 1, &added);
  if (loc < 0) return -ENOMEM;
  if (!added) return loc;
  s->nlocs++;
  sqlite3_stmt *st = s->ins_loc;
  sqlite3_reset(st);
  sqlite3_bind_int(st, 1, proc);
  sqlite3_bind_int(st, 2, loc);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)f->ip);
  sqlite3_bind_text(st, 4, f->module, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, f->function, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 6, f->file, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 7, f->line);
  sqlite3_bind_int(st, 8, f->inlined);
  if (sqlite3_step(st) != SQLITE_DONE) return -EIO;
  return loc;
}

int lgst_stack(lgst_t *s, int proc, uint32_t id, unsigned space, const lgs_frame_t *f, int nframes) {
  /* locs: the frames' location ids, innermost first, as a JSON array (the frames view
   * expands it with json_each) */
  size_t cap = 3 + (size_t)(nframes > 0 ? nframes : 0) * 12, n = 0;
  char *locs = malloc(cap);
  if (!locs) return -ENOMEM;
  locs[n++] = '[';
  for (int i = 0; i < nframes; i++) {
    int loc = location(s, proc, &f[i]);
    if (loc < 0) {
      free(locs);
      return loc;
    }
    n += (size_t)snprintf(locs + n, cap - n, "%s%d", i ? "," : "", loc);
  }
  locs[n++] = ']';
  locs[n] = 0;
  sqlite3_stmt *st = s->ins_stack;
  sqlite3_reset(st);
  sqlite3_bind_int(st, 1, proc);
  sqlite3_bind_int(st, 2, (int)id);
  const char *sn = lg_space_name((lg_space_t)space);
  sqlite3_bind_text(st, 3, sn ? sn : "host", -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 4, nframes);
  sqlite3_bind_text(st, 5, locs, (int)n, SQLITE_STATIC);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -EIO;
  sqlite3_reset(st); /* before locs goes */
  free(locs);
  return rc;
}

int lgst_holder(lgst_t *s, int proc, const lgst_holder_t *h) {
  sqlite3_stmt *st;
  if (!(st = cached(s, "INSERT INTO holders VALUES(?,?,?,?,?,?,?,?,?)"))) return -EIO;
  sqlite3_bind_int(st, 1, proc);
  sqlite3_bind_int(st, 2, (int)h->stack);
  sqlite3_bind_int(st, 3, h->explain);
  sqlite3_bind_int64(st, 4, h->step);
  sqlite3_bind_text(st, 5, h->kind ? h->kind : "object", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 6, h->chain_json, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 7, h->objects);
  sqlite3_bind_int64(st, 8, h->bytes);
  if (h->detail_json) sqlite3_bind_text(st, 9, h->detail_json, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 9);
  return done(s, st, sqlite3_step(st));
}

int lgst_explain(lgst_t *s, int proc, const lgst_explain_t *e) {
  sqlite3_stmt *st;
  if (!(st = cached(s, "INSERT INTO explains VALUES(?,?,?,?,?,?,?,?,?,?,?,?)"))) return -EIO;
  sqlite3_bind_int(st, 1, proc);
  if (e->explain > 0) sqlite3_bind_int(st, 2, e->explain);
  else sqlite3_bind_null(st, 2);
  sqlite3_bind_int64(st, 3, e->request);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)e->t_ns);
  sqlite3_bind_int64(st, 5, e->step);
  sqlite3_bind_text(st, 6, e->outcome, -1, SQLITE_STATIC);
  if (e->why) sqlite3_bind_text(st, 7, e->why, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 7);
  sqlite3_bind_double(st, 8, e->elapsed_s);
  sqlite3_bind_int64(st, 9, e->objects);
  sqlite3_bind_int(st, 10, e->truncated);
  sqlite3_bind_int(st, 11, e->holders);
  if (e->note) sqlite3_bind_text(st, 12, e->note, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 12);
  return done(s, st, sqlite3_step(st));
}

int lgst_snapshot(lgst_t *s, lgm_proc_t *p, uint64_t t_ns, uint64_t usage, uint64_t limit, int mode) {
  int full = mode;
  sqlite3_stmt *st = s->ins_snap;
  sqlite3_reset(st);
  int i = 1;
  sqlite3_bind_int(st, i++, p->proc);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)p->seq);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)t_ns);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)atomic_load(&p->hdr->steps));
  sqlite3_bind_int64(st, i++, p->live_bytes);
  sqlite3_bind_int64(st, i++, p->live_blocks);
  sqlite3_bind_int64(st, i++, p->host_bytes);
  sqlite3_bind_int64(st, i++, p->mmap_bytes);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)p->rss_bytes);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)usage);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)limit);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)atomic_load(&p->hdr->dropped));
  if (sqlite3_step(st) != SQLITE_DONE) return -EIO;
  st = s->ins_sample;
  for (uint32_t k = 1; k < p->nsites; k++) {
    lgm_site_t *c = &p->sites[k], *o = &p->stored[k];
    if (p->known_only && !c->known && c->space < LG_SPACE_DEVICE) continue;
    int changed = c->live_bytes != o->live_bytes || c->live_blocks != o->live_blocks;
    if (!changed && !(full == LGST_ALL && c->alloc_blocks > 0)) continue;
    /* In partial snapshots, sites that never held 4 KiB (below the detector's minimum
     * growth) are not written: programs like Python have 10^5 of them. The periodic
     * LGST_CHANGED snapshots give them a coarser history (the report sums the stacks of
     * one allocation site, and many small stacks can make a big site). */
    if (full == LGST_PARTIAL && c->live_bytes < (int64_t)LGD_MIN_GROWTH_BYTES &&
        o->live_bytes < (int64_t)LGD_MIN_GROWTH_BYTES && c->live_bytes >= 0)
      continue;
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, p->proc);
    sqlite3_bind_int(st, 2, (int)k);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)p->seq);
    sqlite3_bind_int64(st, 4, c->live_bytes);
    sqlite3_bind_int64(st, 5, c->live_blocks);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)c->alloc_bytes);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)c->alloc_blocks);
    if (c->oldest_epoch == UINT32_MAX) sqlite3_bind_null(st, 8);
    else sqlite3_bind_int64(st, 8, c->oldest_epoch);
    if (sqlite3_step(st) != SQLITE_DONE) return -EIO;
    *o = *c;
  }
  p->seq++;
  return 0;
}

/* ------------------------------------------------------------------ CUDA and NVML
 * Tables made on first use, so a database of a program without GPU memory has none
 * (docs/schema.md, docs/cuda.md):
 *   cuda_stacks(proc, stack, device)            the GPU ordinal of a GPU site
 *   cuda_devices(proc, seq, device, ...)        the recorder's per-device gauges
 *   cuda_notes(proc, note)                      entry points passed through untracked
 *   cuda_um(proc, stack, ...)                   CUPTI Unified Memory counters (--cuda-um)
 *   cuda_torch(proc, seq, device, allocated_bytes, reserved_bytes)  torch.cuda's view
 *   nvml(t_ns, device, used_bytes, total_bytes) NVML, machine-wide, same clock
 *   nvml_processes(t_ns, device, pid, proc, used_bytes)  NVML, a recorded process */
static const char *CUDA_SCHEMA =
    "CREATE TABLE IF NOT EXISTS cuda_stacks(proc INTEGER, stack INTEGER, device INTEGER,"
    " PRIMARY KEY(proc, stack));"
    "CREATE TABLE IF NOT EXISTS cuda_devices(proc INTEGER, seq INTEGER, device INTEGER,"
    " device_bytes INTEGER, managed_bytes INTEGER, pinned_bytes INTEGER, registered_bytes INTEGER,"
    " pool_reserved_bytes INTEGER, pool_used_bytes INTEGER, vmm_mapped_bytes INTEGER, contexts INTEGER,"
    " contexts_created INTEGER, contexts_destroyed INTEGER, contexts_recreated INTEGER, total_bytes INTEGER,"
    " PRIMARY KEY(proc, seq, device));"
    "CREATE TABLE IF NOT EXISTS cuda_notes(proc INTEGER, note TEXT, PRIMARY KEY(proc, note));"
    "CREATE TABLE IF NOT EXISTS cuda_um(proc INTEGER, stack INTEGER, cpu_page_faults INTEGER,"
    " gpu_page_faults INTEGER, bytes_htod INTEGER, bytes_dtoh INTEGER, thrashing INTEGER, PRIMARY KEY(proc, stack));"
    "CREATE TABLE IF NOT EXISTS cuda_torch(proc INTEGER, seq INTEGER, device INTEGER, allocated_bytes INTEGER,"
    " reserved_bytes INTEGER, PRIMARY KEY(proc, seq, device));"
    "CREATE TABLE IF NOT EXISTS nvml(t_ns INTEGER, device INTEGER, used_bytes INTEGER, total_bytes INTEGER,"
    " PRIMARY KEY(t_ns, device));"
    "CREATE TABLE IF NOT EXISTS nvml_processes(t_ns INTEGER, device INTEGER, pid INTEGER, proc INTEGER,"
    " used_bytes INTEGER, PRIMARY KEY(t_ns, device, pid));";

static const char *const TABLES[] = {
    "processes", "modules",        "stacks",      "locations",      "snapshots",  "samples", "holders",
    "flags",     "labels",         "cuda_stacks", "cuda_devices",   "cuda_notes", "cuda_um", "cuda_torch",
    "nvml",      "nvml_processes", "lifetimes",   "step_lifetimes", "explains",   "notes",   NULL};
const char *const *lgst_tables(void) { return TABLES; }
int lgst_table_is_gpu(const char *name) { return !strncmp(name, "cuda_", 5) || !strncmp(name, "nvml", 4); }

int lgst_cuda_tables(lgst_t *s) {
  if (s->cuda_schema) return 0;
  if (sqlite3_exec(s->db, CUDA_SCHEMA, NULL, NULL, NULL) != SQLITE_OK) return -EIO;
  s->cuda_schema = 1;
  return 0;
}

/* ------------------------------------------------------------------ copies
 * (`leakguard merge`: another database's rows copied in, merge.c) */

/* Runs the SQL that sqlite3_vmprintf makes of fmt (%Q quotes a string, %w an
 * identifier: not printf's, so no format attribute). */
static int exec_fmt(sqlite3 *db, char *why, size_t whylen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *sql = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (!sql) {
    snprintf(why, whylen, "out of memory");
    return -ENOMEM;
  }
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    snprintf(why, whylen, "%s", err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return -EIO;
  }
  return 0;
}

/* 1 when schema has table name, 0 when it has not, -1 when that cannot be read (a
 * failed query is not an absent table: its rows would be left out unsaid). */
static int has_table(sqlite3 *db, const char *schema, const char *name) {
  char *sql = sqlite3_mprintf("SELECT 1 FROM %w.sqlite_master WHERE type='table' AND name=%Q", schema, name);
  sqlite3_stmt *st = NULL;
  int rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, NULL) : SQLITE_NOMEM;
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  sqlite3_finalize(st);
  sqlite3_free(sql);
  return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

/* Copies src.T into main.T with proc and parent_proc shifted by off. */
static int copy_table(sqlite3 *db, const char *t, long long off, char *why, size_t whylen) {
  char *sql = sqlite3_mprintf("PRAGMA src.table_info(%Q)", t);
  sqlite3_stmt *st = NULL;
  if (!sql || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_free(sql);
    snprintf(why, whylen, "cannot read the columns of %s", t);
    return -EIO;
  }
  sqlite3_free(sql);
  char cols[2048] = "", exprs[2048] = "";
  size_t nc = 0, ne = 0;
  int ok = 1, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    const char *c = (const char *)sqlite3_column_text(st, 1);
    if (!c) { /* out of memory: every column or none */
      ok = 0;
      break;
    }
    int shift = !strcmp(c, "proc") || !strcmp(c, "parent_proc");
    int a = snprintf(cols + nc, sizeof cols - nc, "%s\"%s\"", nc ? "," : "", c);
    /* proc 0 is no image (notes of the recording itself): it stays 0 */
    int b = shift ? snprintf(exprs + ne, sizeof exprs - ne, "%sCASE WHEN \"%s\" = 0 THEN 0 ELSE \"%s\" + %lld END",
                             ne ? "," : "", c, c, off)
                  : snprintf(exprs + ne, sizeof exprs - ne, "%s\"%s\"", ne ? "," : "", c);
    if (a < 0 || b < 0 || (size_t)a >= sizeof cols - nc || (size_t)b >= sizeof exprs - ne) {
      ok = 0;
      break;
    }
    nc += (size_t)a;
    ne += (size_t)b;
  }
  sqlite3_finalize(st);
  if (ok && step != SQLITE_DONE) {
    snprintf(why, whylen, "cannot read the columns of %s: %s", t, sqlite3_errstr(step));
    return -EIO;
  }
  if (!ok || !nc) {
    snprintf(why, whylen, "table %s: unexpected columns", t);
    return -EIO;
  }
  /* nvml has no image key: two machines' samples at one instant keep the first; two
   * inputs' notes on the recording itself (proc 0) keep the first of each kind */
  return exec_fmt(db, why, whylen, "INSERT %s INTO main.\"%w\"(%s) SELECT %s FROM src.\"%w\"",
                  strcmp(t, "nvml") && strcmp(t, "notes") ? "" : "OR IGNORE", t, cols, exprs, t);
}

int lgst_copy_in(lgst_t *s, const char *path, int first, char *why, size_t whylen) {
  sqlite3 *db = s->db;
  /* one transaction per input (SQLite attaches outside transactions) */
  int rc = exec_fmt(db, why, whylen, "ATTACH %Q AS src", path);
  if (rc) return rc;
  rc = exec_fmt(db, why, whylen, "BEGIN");
  long long off = 0;
  sqlite3_stmt *st = NULL;
  /* the inputs' process keys are shifted past those merged so far: a failed query
   * here must fail the merge, or this input's processes would replace earlier ones */
  if (rc == 0 &&
      sqlite3_prepare_v2(db, "SELECT coalesce(max(proc), 0) FROM main.processes", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    off = sqlite3_column_int64(st, 0);
  else if (rc == 0) {
    snprintf(why, whylen, "cannot read the merged processes: %s", sqlite3_errmsg(db));
    rc = -EIO;
  }
  sqlite3_finalize(st);
  for (int k = 0; rc == 0 && TABLES[k]; k++) {
    int has = has_table(db, "src", TABLES[k]);
    if (has < 0) {
      snprintf(why, whylen, "cannot read the tables of %s: %s", path, sqlite3_errmsg(db));
      rc = -EIO;
      break;
    }
    if (!has) continue;
    if (lgst_table_is_gpu(TABLES[k]) && (rc = lgst_cuda_tables(s)) != 0) {
      snprintf(why, whylen, "cannot create the GPU tables");
      break;
    }
    rc = copy_table(db, TABLES[k], off, why, whylen);
  }
  /* where each image came from; the image `leakguard attach` attached to (meta
   * attached_at, its first image, of kind start) stays attached, a label of its own:
   * the merged meta is not one input's; the first input's settings (interval, limit) */
  if (rc == 0)
    rc = exec_fmt(db, why, whylen,
                  "INSERT OR REPLACE INTO main.labels(proc, key, value) SELECT proc + %lld, 'source', %Q"
                  " FROM src.processes",
                  off, path);
  if (rc == 0)
    rc = exec_fmt(db, why, whylen,
                  "INSERT OR REPLACE INTO main.labels(proc, key, value) SELECT p.proc + %lld, 'attached_at', m.value"
                  " FROM src.processes p JOIN src.meta m ON m.key = 'attached_at' WHERE p.kind = 'start'",
                  off);
  if (rc == 0 && first)
    rc = exec_fmt(db, why, whylen,
                  "INSERT OR IGNORE INTO main.meta(key, value) SELECT key, value FROM src.meta"
                  " WHERE key NOT IN ('schema', 'version', 'command', 'attached_at')");
  char w2[256];
  if (rc != 0 && strncmp(why, path, strlen(path))) { /* the error names the input it came from */
    char w3[1024];
    snprintf(w3, sizeof w3, "%s: %s", path, why);
    snprintf(why, whylen, "%s", w3);
  }
  if (rc == 0) rc = exec_fmt(db, why, whylen, "COMMIT");
  else exec_fmt(db, w2, sizeof w2, "ROLLBACK"); /* the first error is the reason */
  int drc = exec_fmt(db, w2, sizeof w2, "DETACH src");
  if (rc == 0 && drc != 0) {
    snprintf(why, whylen, "%s", w2);
    rc = drc;
  }
  return rc;
}

int lgst_cuda_snapshot(lgst_t *s, lgm_proc_t *p) {
  const lg_region_hdr_t *h = p->hdr;
  lgm_gpu_state_t gs;
  lgm_gpu_state(h, &gs);
  if (!gs.flags) return 0;
  if (lgst_cuda_tables(s) != 0) return -EIO;
  int rc = 0;
  for (uint32_t id = p->gpu_stacks_stored > 2 ? p->gpu_stacks_stored : 2; id < p->nsites; id++) {
    if (p->sites[id].space < LG_SPACE_DEVICE || p->sites[id].space > LG_SPACE_PINNED) continue;
    int64_t v[3] = {p->proc, id, p->sites[id].device};
    rc |= exec_row(s, "INSERT OR REPLACE INTO cuda_stacks VALUES(?,?,?)", v, 3, NULL, 0);
  }
  p->gpu_stacks_stored = p->nsites;
  lgm_gpu_t gpu[LG_GPU_MAX_DEVICES];
  int nd = lgm_gpus(h, gpu, LG_GPU_MAX_DEVICES);
  for (int d = 0; d < nd; d++) {
    const lgm_gpu_t *g = &gpu[d];
    int64_t v[15] = {p->proc,
                     (int64_t)p->seq,
                     d,
                     p->gpu_space_bytes[d][0],
                     p->gpu_space_bytes[d][1],
                     p->gpu_space_bytes[d][2],
                     g->registered_bytes,
                     g->pool_reserved_bytes,
                     g->pool_used_bytes,
                     g->vmm_mapped_bytes,
                     g->contexts,
                     g->contexts_created,
                     g->contexts_destroyed,
                     g->contexts_recreated,
                     (int64_t)g->total_bytes};
    rc |= exec_row(s, "INSERT OR REPLACE INTO cuda_devices VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", v, 15, NULL, 0);
    if (g->torch_seen) {
      int64_t tv[5] = {p->proc, (int64_t)p->seq, d, g->torch_allocated_bytes, g->torch_reserved_bytes};
      rc |= exec_row(s, "INSERT OR REPLACE INTO cuda_torch VALUES(?,?,?,?,?)", tv, 5, NULL, 0);
    }
  }
  for (int i = 0; i < LG_CUDA_UM_SITES; i++) {
    lgm_gpu_um_t u;
    uint32_t site = lgm_gpu_um(h, i, &u);
    if (!site) continue;
    int64_t v[7] = {p->proc,
                    site,
                    (int64_t)u.cpu_page_faults,
                    (int64_t)u.gpu_page_faults,
                    (int64_t)u.bytes_htod,
                    (int64_t)u.bytes_dtoh,
                    (int64_t)u.thrashing};
    rc |= exec_row(s, "INSERT OR REPLACE INTO cuda_um VALUES(?,?,?,?,?,?,?)", v, 7, NULL, 0);
  }
  if (gs.flags & LG_CUDA_TORCH) rc |= lgst_meta(s, "torch_cuda", "1");
  for (uint32_t i = 0; i < gs.nnotes; i++) {
    char note[LG_GPU_NOTE_LEN + 1];
    lgm_gpu_note(h, i, note);
    int64_t v[1] = {p->proc};
    const char *t[1] = {note};
    rc |= exec_row(s, "INSERT OR IGNORE INTO cuda_notes VALUES(?,?)", v, 1, t, 1);
  }
  return rc ? -EIO : 0;
}

int lgst_nvml_device(lgst_t *s, uint64_t t_ns, int device, uint64_t used, uint64_t total) {
  if (lgst_cuda_tables(s) != 0) return -EIO;
  int64_t v[4] = {(int64_t)t_ns, device, (int64_t)used, (int64_t)total};
  return exec_row(s, "INSERT OR REPLACE INTO nvml VALUES(?,?,?,?)", v, 4, NULL, 0);
}

int lgst_nvml_process(lgst_t *s, uint64_t t_ns, int device, int pid, int proc, uint64_t used) {
  if (lgst_cuda_tables(s) != 0) return -EIO;
  int64_t v[5] = {(int64_t)t_ns, device, pid, proc, (int64_t)used};
  return exec_row(s, "INSERT OR REPLACE INTO nvml_processes VALUES(?,?,?,?,?)", v, 5, NULL, 0);
}

int lgst_flag(lgst_t *s, int proc, uint32_t stack, uint64_t t_ns, double growth_bytes_per_s) {
  sqlite3_stmt *st;
  if (!(st = cached(s, "INSERT OR REPLACE INTO flags VALUES(?,?,?,?)"))) return -EIO;
  sqlite3_bind_int(st, 1, proc);
  sqlite3_bind_int(st, 2, (int)stack);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)t_ns);
  sqlite3_bind_double(st, 4, growth_bytes_per_s);
  return done(s, st, sqlite3_step(st));
}

int lgst_lifetimes(lgst_t *s, int proc, uint32_t stack, int steps, const uint64_t *ages, int nages) {
  sqlite3_stmt *st;
  const char *sql = steps ? "INSERT OR REPLACE INTO step_lifetimes VALUES(?,?,?,?)"
                          : "INSERT OR REPLACE INTO lifetimes VALUES(?,?,?,?)";
  if (!(st = cached(s, sql))) return -EIO;
  int rc = SQLITE_DONE;
  for (int b = 0; b < nages && rc == SQLITE_DONE; b++) {
    if (!ages[b]) continue;
    sqlite3_bind_int(st, 1, proc);
    sqlite3_bind_int(st, 2, (int)stack);
    sqlite3_bind_int(st, 3, b);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)ages[b]);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
  }
  return done(s, st, rc);
}

int lgst_label(lgst_t *s, int proc, const char *key, const char *value) {
  int64_t v[1] = {proc};
  const char *t[2] = {key, value};
  return exec_row(s, "INSERT OR REPLACE INTO labels VALUES(?,?,?)", v, 1, t, 2);
}
