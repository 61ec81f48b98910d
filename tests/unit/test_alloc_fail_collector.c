/* SPDX-License-Identifier: MIT */
/*
 * test_alloc_fail_collector.c - allocation-failure injection, SQLite-style (issue #11),
 * for the collector's own code (src/collector): lgc_new, a recorded process's hello,
 * snapshots of its region and the symbols of its stacks, the live analysis with its
 * flags, suspects files and explanation requests, the metrics, the holders and labels
 * files the Python module writes, and the final snapshot.
 *
 * The process is a fake region built here in a memfd (core/region.h): a native site
 * that grows by 64 KiB a tick, one that stays flat, and a Python line that grows by
 * 32 KiB a tick, over stacks of this program's own functions (so that they symbolize
 * with their names and lines) and a Python frame. The clock is the test's
 * (lgu_now_ns is wrapped): a tick is 250 ms, so every pass makes the same calls and
 * the same allocations in the same order (alloc_inject.h: only this thread's count;
 * the symbolization worker's never fail).
 *
 * For N = 1, 2, ... the Nth allocation fails once, then every one from the Nth on.
 * What must hold: no crash, no leak (the ASan build), lgst_create and lgc_new fail
 * with a reason; and the database holds the same process, modules, stacks (with their
 * functions), labels and holders as the reference pass, unless the collector said
 * what it could not do (one "leakguard: ..." line: it stops storing when a write
 * fails, and names a process it cannot record or a file it cannot read). The memory
 * the live analysis could not get shows as later or fewer flags and snapshots: not
 * compared.
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sqlite3.h>

#include "alloc_inject.h"
#include "collector/collector.h"
#include "collector/collector_impl.h"
#include "core/platform.h"
#include "core/region.h"

#define check ai_check

/* ------------------------------------------------------------------ the clock */

static uint64_t fake_ns;
uint64_t __wrap_lgu_now_ns(void);
uint64_t __wrap_lgu_now_ns(void) { return fake_ns; }

/* ------------------------------------------------------------------ the fake region */

/* The functions the fake stacks are made of (their addresses symbolize to them). */
__attribute__((noinline, used)) void lgaf_grow_cache(void);
__attribute__((noinline, used)) void lgaf_load_table(void);
__attribute__((noinline, used)) void lgaf_python_alloc(void);
__attribute__((noinline, used)) void lgaf_main_loop(void);
void lgaf_grow_cache(void) { __asm__ volatile("" ::: "memory"); }
void lgaf_load_table(void) { __asm__ volatile("" ::: "memory"); }
void lgaf_python_alloc(void) { __asm__ volatile("" ::: "memory"); }
void lgaf_main_loop(void) { __asm__ volatile("" ::: "memory"); }

enum { S_GROW = 2, S_FLAT = 3, S_PY = 4, NSTACKS = 5, NTICKS = 16, HOLDERS_AT = 8 };

typedef struct fake {
  int fd;
  size_t size;
  lg_region_hdr_t *h;
  lg_site_ctr_t *ctr; /* the one chunk of the one shard: sites 0..63 */
} fake_t;

static int main_image(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  if (info->dlpi_name && info->dlpi_name[0]) return 0;
  lg_module_rec_t *m = arg;
  uintptr_t lo, hi;
  if (!lg_image_span(info, &lo, &hi)) return 0;
  m->start = lo;
  m->end = hi;
  m->bias = info->dlpi_addr;
  return 1;
}

static int fake_new(fake_t *f) {
  const size_t hdr = 4096, stacks = hdr, frames = stacks + 8 * sizeof(lg_stack_rec_t), nframes = 16,
               modules = frames + nframes * 8, pyframes = modules + 2 * sizeof(lg_module_rec_t),
               pystr = pyframes + 2 * sizeof(lg_pyframe_rec_t), shards = pystr + 256,
               chunkdir = shards + sizeof(lg_shard_desc_t), arena = (chunkdir + 8 + 4095) / 4096 * 4096,
               size = arena + LG_SITES_PER_CHUNK * sizeof(lg_site_ctr_t);
  f->fd = memfd_create("leakguard-test-region", MFD_CLOEXEC);
  if (f->fd < 0 || ftruncate(f->fd, (off_t)size) != 0) return -1;
  f->size = size;
  f->h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
  if (f->h == MAP_FAILED) return -1;
  lg_region_hdr_t *h = f->h;
  h->magic = LG_REGION_MAGIC;
  h->version = LG_REGION_VERSION;
  h->hdr_size = sizeof *h;
  h->size = size;
  h->pid = getpid();
  h->ppid = getppid();
  h->max_depth = LG_DEFAULT_DEPTH;
  h->state = LG_PS_RUNNING;
  h->stacks_off = stacks;
  h->stacks_cap = 8;
  h->frames_off = frames;
  h->frames_cap = nframes;
  h->modules_off = modules;
  h->modules_cap = 2;
  h->pyframes_off = pyframes;
  h->pyframes_cap = 2;
  h->pystr_off = pystr;
  h->pystr_cap = 256;
  h->shards_off = shards;
  h->shards_cap = 1;
  h->arena_off = arena;
  h->arena_cap = size - arena;
  /* the program itself, the module its stacks are in */
  lg_module_rec_t *mod = LG_PTR(h, modules, lg_module_rec_t *);
  if (!dl_iterate_phdr(main_image, mod)) return -1;
  ssize_t k = readlink("/proc/self/exe", mod->path, sizeof mod->path - 1);
  if (k <= 0) return -1;
  h->nmodules = 1;
  /* stacks: innermost first; a return address is inside its function */
  uint64_t *fr = LG_PTR(h, frames, uint64_t *);
  const uint64_t main_ra = (uintptr_t)lgaf_main_loop + 1;
  const uint64_t ips[3][2] = {{(uintptr_t)lgaf_grow_cache + 1, main_ra},
                              {(uintptr_t)lgaf_load_table + 1, main_ra},
                              {LG_PYFRAME_BIT | 1, (uintptr_t)lgaf_python_alloc + 1}};
  lg_stack_rec_t *st = LG_PTR(h, stacks, lg_stack_rec_t *);
  for (int i = 0; i < 3; i++) {
    fr[2 * i] = ips[i][0];
    fr[2 * i + 1] = ips[i][1];
    st[S_GROW + i] = (lg_stack_rec_t){.hash = 0x1000u + (unsigned)i, .frames = (uint32_t)(2 * i), .depth = 2};
  }
  h->frames_used = 6;
  h->nstacks = NSTACKS;
  /* the Python frame: train.py:12 in step() */
  char *strs = LG_PTR(h, pystr, char *);
  memcpy(strs, "/srv/app/train.py\0step", sizeof "/srv/app/train.py\0step");
  LG_PTR(h, pyframes, lg_pyframe_rec_t *)[1] = (lg_pyframe_rec_t){.code = 0x5000, .line = 12, .file = 0, .func = 18};
  h->pystr_used = 23;
  h->npyframes = 2;
  /* one shard, one chunk of counters */
  lg_shard_desc_t *sd = LG_PTR(h, shards, lg_shard_desc_t *);
  sd->nchunks_cap = 1;
  sd->chunk_dir = chunkdir;
  *LG_PTR(h, chunkdir, uint64_t *) = arena;
  h->nshards = 1;
  f->ctr = LG_PTR(h, arena, lg_site_ctr_t *);
  return 0;
}

/* The counters at tick k: the grower and the Python line keep what they allocate, the
 * flat site holds 1 MiB throughout. */
static void fake_tick(fake_t *f, int k) {
  struct {
    int site;
    int64_t bytes, blocks;
  } v[3] = {
      {S_GROW, 65536LL * (k + 1), 16LL * (k + 1)}, {S_FLAT, 1 << 20, 256}, {S_PY, 32768LL * (k + 1), 8LL * (k + 1)}};
  for (int i = 0; i < 3; i++) {
    lg_site_ctr_t *x = &f->ctr[v[i].site];
    x->live_bytes = v[i].bytes;
    x->live_blocks = v[i].blocks;
    x->alloc_bytes = (uint64_t)v[i].bytes;
    x->alloc_blocks = (uint64_t)v[i].blocks;
    memset(x->era_blocks, 0, sizeof x->era_blocks);
    x->era_blocks[0] = (int32_t)v[i].blocks;
  }
  f->h->steps = (uint64_t)k;
}

/* ------------------------------------------------------------------ one pass */

typedef struct result {
  int stage; /* 0 done; 1 lgst_create failed; 2 lgc_new failed */
  int db_failed, nprocs;
  char why[512];
} result_t;

/* A file the Python module would write into the collector's directory (no allocation:
 * the test's own writes are not what is tested). */
static void put_file(const char *dir, const char *name, const char *text) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) abort();
  close(fd);
}

static void send_hello(lgc_collector_t *c, const fake_t *f, int *client) {
  *client = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", lgc_socket_path(c));
  if (*client < 0 || connect(*client, (struct sockaddr *)&sa, sizeof sa) != 0) abort();
  lg_hello_t h = {.magic = LG_HELLO_MAGIC, .version = LG_REGION_VERSION, .kind = LG_HELLO_START};
  h.pid = getpid();
  h.ppid = getppid();
  h.region_size = f->size;
  snprintf(h.exe, sizeof h.exe, "/srv/app/python3");
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct iovec iov = {&h, sizeof h};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &f->fd, sizeof(int));
  if (sendmsg(*client, &msg, 0) != (ssize_t)sizeof h) abort();
}

/* What `leakguard run` does with one process image, from lgc_new to lgc_free. In the
 * reference pass (ref), also checks what the Python module would read. */
static void pass(fake_t *f, const char *rundir, const char *dbpath, int ref, result_t *res) {
  memset(res, 0, sizeof *res);
  fake_ns = 1000000000000ULL;
  unlink(dbpath);
  lgst_t *db = NULL;
  const char *err = NULL;
  if (lgst_create(dbpath, &db, &err) != 0) {
    res->stage = 1;
    snprintf(res->why, sizeof res->why, "%s", err ? err : "");
    unlink(dbpath);
    return;
  }
  lgx_registry_t *reg = lgx_new(); /* the metrics: NULL when that failed (as --metrics would say) */
  lgc_options_t o = {.interval = 0.25,
                     .limit = 8ULL << 30,
                     .limit_source = "--limit",
                     .limit_given = 1,
                     .db = db,
                     .db_path = dbpath,
                     .metrics = reg};
  lgc_collector_t *c = NULL;
  if (lgc_new(&o, rundir, &c, res->why, sizeof res->why) != 0) {
    res->stage = 2;
    lgx_free(reg);
    lgst_close(db);
    return;
  }
  int client = -1;
  send_hello(c, f, &client);
  lgc_accept_hello(c);
  lgc_db_commit(c);
  char name[64], text[512];
  for (int k = 0; k < NTICKS && c->nprocs; k++) {
    lgc_proc_t *p = c->procs[0];
    fake_tick(f, k);
    fake_ns += 250000000ULL;
    lgc_snapshot(c, p, LGST_PARTIAL);
    lgc_symq_drain(c->symq);
    lgc_take_symbols(c, 0);
    lgc_live_tick(c, fake_ns);
    lgc_live_update(c, (double)(fake_ns - c->t0) / 1e9);
    if (k == HOLDERS_AT) { /* the module explained and learnt its rank */
      snprintf(name, sizeof name, LG_FILE_HOLDERS, (int)getpid(), 1);
      snprintf(text, sizeof text,
               "{\"step\": %d, \"holders\": [{\"stack\": %d, \"chain\": [\"__main__.history (list)\"], "
               "\"kind\": \"object\", \"objects\": 40, \"bytes\": 400000, \"detail\": {\"len\": 40}}]}",
               k, S_PY);
      put_file(rundir, name, text);
      snprintf(name, sizeof name, LG_FILE_LABELS, (int)getpid());
      put_file(rundir, name, "{\"rank\": 3, \"world_size\": 4}");
      /* and a module's temporary file, which must be left alone */
      snprintf(name, sizeof name, LG_FILE_HOLDERS ".tmp", (int)getpid(), 2);
      put_file(rundir, name, "{\"holders\": [");
      lgc_ingest_holders(c);
      if (ref) {
        snprintf(text, sizeof text, "%s/%s", rundir, name);
        check(access(text, F_OK) == 0, "a file that only begins like a holders file is not read nor removed");
      }
    }
    lgc_db_commit(c);
  }
  if (ref && c->nprocs) {
    char path[600], buf[8192] = "";
    snprintf(name, sizeof name, LG_FILE_SUSPECTS, (int)getpid());
    snprintf(path, sizeof path, "%s/%s", rundir, name);
    FILE *sf = fopen(path, "r");
    size_t n = sf ? fread(buf, 1, sizeof buf - 1, sf) : 0;
    buf[n] = 0;
    if (sf) fclose(sf);
    check(strstr(buf, "\"significant\":true") && strstr(buf, "lgaf_grow_cache") && strstr(buf, "train.py"),
          "the suspects file names both growing sites, significant: %.300s", buf);
    snprintf(name, sizeof name, LG_FILE_EXPLAIN, (int)getpid());
    snprintf(path, sizeof path, "%s/%s", rundir, name);
    check(access(path, F_OK) == 0, "an explanation was asked of the Python process (%s)", name);
  }
  if (c->nprocs) lgc_end_proc(c, c->procs[0], "ended");
  lgc_symq_drain(c->symq);
  lgc_take_symbols(c, 0);
  lgc_db_commit(c);
  res->db_failed = c->db_failed;
  res->nprocs = c->nprocs;
  close(client);
  lgc_free(c);
  lgx_free(reg);
  lgst_close(db);
}

/* ------------------------------------------------------------------ what was stored */

typedef struct stored {
  long procs, modules, stacks, holders, flags, snapshots;
  char rank[16], functions[512];
} stored_t;

static int stored(const char *dbpath, stored_t *s) {
  memset(s, 0, sizeof *s);
  sqlite3 *db;
  if (sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return sqlite3_close(db), -1;
  static const char *const q[] = {"SELECT count(*) FROM processes", "SELECT count(*) FROM modules",
                                  "SELECT count(*) FROM stacks",    "SELECT count(*) FROM holders",
                                  "SELECT count(*) FROM flags",     "SELECT count(*) FROM snapshots"};
  long *v[] = {&s->procs, &s->modules, &s->stacks, &s->holders, &s->flags, &s->snapshots};
  int rc = 0;
  for (int i = 0; i < 6 && rc == 0; i++) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, q[i], -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) rc = -1;
    else *v[i] = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_stmt *st;
  if (rc == 0 && sqlite3_prepare_v2(db, "SELECT value FROM labels WHERE key = 'rank'", -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) snprintf(s->rank, sizeof s->rank, "%s", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  if (rc == 0 &&
      sqlite3_prepare_v2(db,
                         "SELECT group_concat(function, ',') FROM (SELECT DISTINCT function FROM frames WHERE "
                         "idx = 0 ORDER BY function)",
                         -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      snprintf(s->functions, sizeof s->functions, "%s", sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return rc;
}

/* ------------------------------------------------------------------ main */

/* Standard error goes to a file while the passes run: did the last pass write to it? */
static int said_something(void) {
  static off_t seen;
  off_t end = lseek(2, 0, SEEK_END);
  int said = end > seen;
  seen = end;
  return said;
}

static long passes(fake_t *f, const char *rundir, const char *dbpath, const stored_t *ref, int pers) {
  const char *mode = pers ? "persistent" : "transient";
  long n;
  for (n = 1; n < 200000; n++) {
    result_t r;
    said_something();
    ai_arm(n, pers);
    pass(f, rundir, dbpath, 0, &r);
    ai_disarm();
    int said = said_something();
    if (r.stage) {
      check(r.why[0] != 0, "%s, allocation %ld failed: %s failed without a reason", mode, n,
            r.stage == 1 ? "lgst_create" : "lgc_new");
    } else if (!r.nprocs) {
      check(said, "%s, allocation %ld failed: the process was not recorded, and nothing said so", mode, n);
    } else if (!said) {
      stored_t s;
      int rc = stored(dbpath, &s);
      check(!r.db_failed && rc == 0 && s.procs == ref->procs && s.modules == ref->modules && s.stacks == ref->stacks &&
                s.holders == ref->holders && !strcmp(s.rank, ref->rank) && !strcmp(s.functions, ref->functions),
            "%s, allocation %ld failed: nothing was said, but the database lost something: "
            "processes %ld/%ld modules %ld/%ld stacks %ld/%ld holders %ld/%ld rank '%s'/'%s' sites '%s'/'%s'",
            mode, n, s.procs, ref->procs, s.modules, ref->modules, s.stacks, ref->stacks, s.holders, ref->holders,
            s.rank, ref->rank, s.functions, ref->functions);
    }
    if (!ai_hit() || ai_failures() > 20) break;
  }
  return n;
}

int main(void) {
  if (ai_init() != 0) return 99;
  char dir[] = "/dev/shm/lgafc-XXXXXX";
  if (!mkdtemp(dir)) {
    memcpy(dir, "/tmp/lgafc-XXXXXX", sizeof "/tmp/lgafc-XXXXXX");
    if (!mkdtemp(dir)) return 99;
  }
  char rundir[600], dbpath[600];
  snprintf(rundir, sizeof rundir, "%s/run", dir);
  snprintf(dbpath, sizeof dbpath, "%s/run.db", dir);
  if (mkdir(rundir, 0700) != 0) return 99;
  fake_t f;
  if (fake_new(&f) != 0) {
    fprintf(stderr, "cannot build the fake region: %s\n", strerror(errno));
    return 99;
  }

  /* the reference pass: no injection */
  result_t r;
  pass(&f, rundir, dbpath, 1, &r);
  stored_t ref;
  check(r.stage == 0 && !r.db_failed && r.nprocs == 1, "reference pass: stage %d, db_failed %d, %d processes", r.stage,
        r.db_failed, r.nprocs);
  check(stored(dbpath, &ref) == 0 && ref.procs == 1 && ref.modules == 1 && ref.stacks == 3 && ref.holders == 1 &&
            !strcmp(ref.rank, "3") && ref.flags >= 2 && ref.snapshots > NTICKS &&
            !strcmp(ref.functions, "lgaf_grow_cache,lgaf_load_table,step"),
        "reference database: processes %ld modules %ld stacks %ld holders %ld flags %ld snapshots %ld rank '%s' "
        "sites '%s'",
        ref.procs, ref.modules, ref.stacks, ref.holders, ref.flags, ref.snapshots, ref.rank, ref.functions);
  if (ai_failures()) return 1;

  /* the collector's lines (database errors) would be thousands: kept in a file */
  char errlog[600];
  snprintf(errlog, sizeof errlog, "%s/stderr.log", dir);
  fflush(stderr);
  int saved = dup(2), lf = open(errlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (saved < 0 || lf < 0 || dup2(lf, 2) < 0) return 99;
  close(lf);
  long t = passes(&f, rundir, dbpath, &ref, 0), q = passes(&f, rundir, dbpath, &ref, 1);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (ai_failures()) { /* the FAIL lines, from among the collector's own */
    FILE *lg = fopen(errlog, "r");
    char line[1024];
    while (lg && fgets(line, sizeof line, lg))
      if (!strncmp(line, "FAIL ", 5)) fputs(line, stderr);
    if (lg) fclose(lg);
  }
  printf("collector: %ld allocation points failed once, %ld persistently\n", t - 1, q - 1);

  unlink(errlog);
  unlink(dbpath);
  char p2[640];
  snprintf(p2, sizeof p2, "%s-wal", dbpath);
  unlink(p2);
  snprintf(p2, sizeof p2, "%s-shm", dbpath);
  unlink(p2);
  rmdir(rundir);
  rmdir(dir);
  munmap(f.h, f.size);
  close(f.fd);
  printf("%s\n", ai_failures() ? "FAILED" : "all passes: errors reported, nothing silently lost");
  return ai_failures() ? 1 : 0;
}
