/* SPDX-License-Identifier: MIT */
/*
 * pprof.c - the recording as a pprof profile (`leakguard report --format pprof`):
 * a gzipped profile.proto message, the format of Go's pprof, Pyroscope, Parca,
 * Grafana's profiles and speedscope (docs/json.md, "pprof").
 *
 * One sample per stored stack, leaf first, with six values: live bytes and blocks at
 * the end (inuse_space, inuse_objects), bytes and blocks allocated over the run
 * (alloc_space, alloc_objects), live bytes at the process's peak snapshot
 * (peak_inuse_space), and growth in bytes per second (growth_space_per_second: the
 * detector's rate of each leaking site, shared among its stacks by their live bytes at
 * the end; 0 for every stack of a site that does not leak). Labels: pid, space, and
 * the rank of a distributed job. Locations, functions (Python frames are functions
 * too, with their file and line) and mappings (the modules table) come from the
 * database, so the profile has the report's lines.
 *
 * The protobuf wire format is written by hand: a profile is eight message types of
 * varints and length-delimited fields (about a hundred lines below), where
 * protobuf-c would need pprof's .proto compiled at build time (protoc-c) and its
 * runtime for the same bytes. Compressed with zlib (gzip framing), as pprof expects.
 */
#include "output/pprof.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/strmap.h"
#include "output/report_impl.h"

/* ------------------------------------------------------------------ protobuf writer */

typedef struct pb {
  uint8_t *b;
  size_t n, cap;
  int oom;
} pb_t;

static void pb_put(pb_t *p, const void *d, size_t len) {
  if (p->oom || !len) return; /* (d may be NULL then: a buffer never grown) */
  if (p->n + len > p->cap) {
    size_t nc = p->cap ? p->cap : 256;
    while (nc < p->n + len) nc *= 2;
    uint8_t *nb = realloc(p->b, nc);
    if (!nb) {
      p->oom = 1;
      return;
    }
    p->b = nb;
    p->cap = nc;
  }
  memcpy(p->b + p->n, d, len);
  p->n += len;
}

static void pb_varint(pb_t *p, uint64_t v) {
  uint8_t t[10];
  size_t k = 0;
  do {
    t[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) t[k] |= 0x80;
    k++;
  } while (v);
  pb_put(p, t, k);
}

/* field with wire type 0 (varint); proto3 leaves zero values out */
static void pb_uint(pb_t *p, unsigned field, uint64_t v) {
  if (!v) return;
  pb_varint(p, (uint64_t)field << 3);
  pb_varint(p, v);
}

static void pb_bool(pb_t *p, unsigned field, int v) { pb_uint(p, field, v ? 1 : 0); }

/* field with wire type 2 (length-delimited) */
static void pb_bytes(pb_t *p, unsigned field, const void *d, size_t len) {
  pb_varint(p, (uint64_t)field << 3 | 2);
  pb_varint(p, len);
  pb_put(p, d, len);
}

/* a nested message, then sub is emptied for the next one */
static void pb_msg(pb_t *p, unsigned field, pb_t *sub) {
  if (sub->oom) p->oom = 1;
  pb_bytes(p, field, sub->b, sub->n);
  sub->n = 0;
}

/* ------------------------------------------------------------------ string table */

typedef struct strs {
  lgu_strmap_t map;
  pb_t out; /* string_table fields (6), in index order */
  int n;
} strs_t;

static int64_t str_id(strs_t *s, const char *v) {
  if (!v) v = "";
  int added = 0, id = lgu_strmap_get_or_add(&s->map, v, s->n, &added);
  if (id < 0) {
    s->out.oom = 1;
    return 0;
  }
  if (added) {
    pb_bytes(&s->out, 6, v, strlen(v));
    s->n++;
  }
  return id;
}

/* ------------------------------------------------------------------ the recording */

typedef lgr_stackval_t stk_t;
enum { V_INUSE = LGR_SV_INUSE, V_OBJECTS, V_ALLOC, V_ALLOC_OBJECTS, V_PEAK, V_GROWTH, NV = LGR_SV_N };

typedef struct loc {
  int proc;
  int64_t loc;
  uint64_t ip;
  int64_t function; /* pprof Function id */
  uint64_t mapping; /* pprof Mapping id, 0: none (Python frames) */
  int line, python;
} loc_t;

static int cmp_stk(const void *a, const void *b) {
  const stk_t *x = a, *y = b;
  if (x->proc != y->proc) return x->proc < y->proc ? -1 : 1;
  return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static stk_t *find_stk(stk_t *v, size_t n, int proc, int stack) {
  if (!n) return NULL;
  stk_t key = {.proc = proc, .stack = stack};
  return bsearch(&key, v, n, sizeof *v, cmp_stk);
}

static int cmp_loc(const void *a, const void *b) {
  const loc_t *x = a, *y = b;
  if (x->proc != y->proc) return x->proc < y->proc ? -1 : 1;
  return x->loc < y->loc ? -1 : x->loc > y->loc;
}

static int rank_of(const lgr_report_t *r, int proc) {
  for (int i = 0; i < r->nruns; i++)
    if (r->runs[i].proc == proc) return r->runs[i].rank;
  return -1;
}

static int pid_of(const lgr_report_t *r, int proc) {
  for (int i = 0; i < r->nruns; i++)
    if (r->runs[i].proc == proc) return r->runs[i].pid;
  return 0;
}

/* The stacks that ever held memory, with their values at the end. */
static int load_stacks(sqlite3 *db, stk_t **out, size_t *nout) {
  const char *sql =
      "SELECT s.proc, s.stack, s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks, k.locs, k.space"
      " FROM samples s JOIN (SELECT proc, stack, max(seq) m, max(live_bytes) peak FROM samples"
      " GROUP BY proc, stack) l ON s.proc = l.proc AND s.stack = l.stack AND s.seq = l.m"
      " JOIN stacks k ON k.proc = s.proc AND k.stack = s.stack"
      " WHERE l.peak > 0 OR s.alloc_bytes > 0 ORDER BY s.proc, s.stack";
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -EIO;
  stk_t *v = NULL;
  size_t n = 0, cap = 0;
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 1024;
      stk_t *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        rc = -ENOMEM;
        break;
      }
      v = nv;
      cap = nc;
    }
    stk_t *s = &v[n];
    memset(s, 0, sizeof *s);
    s->proc = sqlite3_column_int(st, 0);
    s->stack = sqlite3_column_int(st, 1);
    for (int k = 0; k < 4; k++) s->v[k] = sqlite3_column_int64(st, 2 + k);
    const unsigned char *lt = sqlite3_column_text(st, 6), *sp = sqlite3_column_text(st, 7);
    s->locs = strdup(lt ? (const char *)lt : "[]");
    s->space = strdup(sp ? (const char *)sp : "host");
    n++;
    if (!s->locs || !s->space) {
      rc = -ENOMEM;
      break;
    }
  }
  if (rc == 0 && step != SQLITE_DONE) rc = -EIO;
  sqlite3_finalize(st);
  *out = v;
  *nout = n;
  return rc;
}

/* Live bytes of every stack at its process's peak snapshot: the last sample at or
 * before it (samples are written when they change), read in the primary key's order
 * (proc, stack, seq), one pass per process. */
static int load_peak(sqlite3 *db, stk_t *v, size_t n) {
  sqlite3_stmt *pk, *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT p.proc, (SELECT seq FROM snapshots x WHERE x.proc = p.proc"
                         " ORDER BY x.live_bytes DESC, x.seq LIMIT 1) FROM processes p",
                         -1, &pk, NULL) != SQLITE_OK)
    return -EIO;
  if (sqlite3_prepare_v2(db, "SELECT stack, live_bytes FROM samples WHERE proc = ? AND seq <= ? ORDER BY stack, seq",
                         -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(pk);
    return -EIO;
  }
  int rc = 0, step;
  while (rc == 0 && (step = sqlite3_step(pk)) == SQLITE_ROW) {
    if (sqlite3_column_type(pk, 1) == SQLITE_NULL) continue; /* no snapshot */
    int proc = sqlite3_column_int(pk, 0);
    sqlite3_bind_int(st, 1, proc);
    sqlite3_bind_int64(st, 2, sqlite3_column_int64(pk, 1));
    stk_t *cur = NULL;
    int cur_stack = -1, s2;
    while ((s2 = sqlite3_step(st)) == SQLITE_ROW) {
      int stack = sqlite3_column_int(st, 0);
      if (stack != cur_stack) {
        cur_stack = stack;
        cur = find_stk(v, n, proc, stack);
      }
      if (cur) cur->v[V_PEAK] = sqlite3_column_int64(st, 1); /* the last one stays */
    }
    if (s2 != SQLITE_DONE) rc = -EIO;
    sqlite3_reset(st);
  }
  if (rc == 0 && step != SQLITE_DONE) rc = -EIO;
  sqlite3_finalize(pk);
  sqlite3_finalize(st);
  return rc;
}

/* The growth of each leaking site, shared among its stacks by their live bytes at the
 * end (evenly when none holds any). */
static void add_growth(const lgr_report_t *r, stk_t *v, size_t n) {
  for (int i = 0; i < r->nsuspects; i++) {
    const lgr_site_t *s = &r->suspects[i];
    double rate = s->r.growth_bytes_per_s, sum = 0;
    if (!isfinite(rate) || rate <= 0 || s->nstacks <= 0) continue;
    for (int k = 0; k < s->nstacks; k++) sum += s->stacks[k].live_bytes > 0 ? (double)s->stacks[k].live_bytes : 0;
    for (int k = 0; k < s->nstacks; k++) {
      stk_t *x = find_stk(v, n, s->proc, s->stacks[k].stack);
      if (!x) continue;
      double w = sum > 0 ? (s->stacks[k].live_bytes > 0 ? (double)s->stacks[k].live_bytes : 0) / sum : 1.0 / s->nstacks;
      x->v[V_GROWTH] += (int64_t)llround(rate * w);
    }
  }
}

int lgr_stack_values(sqlite3 *db, const lgr_report_t *r, lgr_stackval_t **out, size_t *nout) {
  int rc = load_stacks(db, out, nout);
  if (rc == 0) rc = load_peak(db, *out, *nout);
  if (rc == 0) add_growth(r, *out, *nout);
  if (rc != 0) {
    lgr_stack_values_free(*out, *nout);
    *out = NULL;
    *nout = 0;
  }
  return rc;
}

void lgr_stack_values_free(lgr_stackval_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i].locs);
    free(v[i].space);
  }
  free(v);
}

/* Mappings (the modules table), functions and locations, written to prof as they are
 * numbered; *locs_out sorted by (proc, loc). */
static int load_locations(sqlite3 *db, pb_t *prof, strs_t *strs, loc_t **locs_out, size_t *nlocs) {
  lgu_strmap_t maps = {0}, funcs = {0};
  pb_t m = {0};
  loc_t *v = NULL;
  size_t n = 0, cap = 0;
  int rc = 0, step, nmaps = 0, nfuncs = 0;
  char key[1024];
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT proc, path, start, end FROM modules ORDER BY proc, start", -1, &st, NULL) !=
      SQLITE_OK)
    return -EIO;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    /* keyed as locations name their module: the file name of the path (symbolize.c) */
    const char *path = (const char *)sqlite3_column_text(st, 1);
    if (!path || !*path) continue; /* the vdso and friends: no file, no location names them */
    const char *base = strrchr(path, '/');
    snprintf(key, sizeof key, "%d\x1f%s", sqlite3_column_int(st, 0), base ? base + 1 : path);
    int added = 0;
    if (lgu_strmap_get_or_add(&maps, key, nmaps + 1, &added) < 0) {
      rc = -ENOMEM;
      break;
    }
    if (!added) continue; /* one mapping per module and process */
    nmaps++;
    pb_uint(&m, 1, (uint64_t)nmaps);
    pb_uint(&m, 2, (uint64_t)sqlite3_column_int64(st, 2));
    pb_uint(&m, 3, (uint64_t)sqlite3_column_int64(st, 3));
    pb_uint(&m, 5, (uint64_t)str_id(strs, path));
    pb_bool(&m, 7, 1); /* has_functions, has_filenames, has_line_numbers */
    pb_bool(&m, 8, 1);
    pb_bool(&m, 9, 1);
    pb_msg(prof, 3, &m);
  }
  sqlite3_finalize(st);
  if (rc == 0 && step != SQLITE_DONE) rc = -EIO;
  if (rc == 0 &&
      sqlite3_prepare_v2(db, "SELECT proc, loc, ip, module, function, file, line FROM locations ORDER BY proc, loc", -1,
                         &st, NULL) != SQLITE_OK)
    rc = -EIO;
  else if (rc == 0) {
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 4096;
        loc_t *nv = realloc(v, nc * sizeof *nv);
        if (!nv) {
          rc = -ENOMEM;
          break;
        }
        v = nv;
        cap = nc;
      }
      const char *mod = (const char *)sqlite3_column_text(st, 3), *fn = (const char *)sqlite3_column_text(st, 4),
                 *file = (const char *)sqlite3_column_text(st, 5);
      loc_t *l = &v[n++];
      l->proc = sqlite3_column_int(st, 0);
      l->loc = sqlite3_column_int64(st, 1);
      l->ip = (uint64_t)sqlite3_column_int64(st, 2);
      l->line = sqlite3_column_int(st, 6);
      l->python = lgr_is_python_module(mod);
      snprintf(key, sizeof key, "%s\x1f%s", fn && *fn ? fn : "??", file ? file : "");
      int added = 0, fid = lgu_strmap_get_or_add(&funcs, key, nfuncs + 1, &added);
      if (fid < 0) {
        rc = -ENOMEM;
        break;
      }
      if (added) {
        nfuncs++;
        pb_uint(&m, 1, (uint64_t)fid);
        int64_t name = str_id(strs, fn && *fn ? fn : "??");
        pb_uint(&m, 2, (uint64_t)name);
        pb_uint(&m, 3, (uint64_t)name);
        pb_uint(&m, 4, (uint64_t)str_id(strs, file ? file : ""));
        pb_msg(prof, 5, &m);
      }
      l->function = fid;
      l->mapping = 0;
      if (mod && strcmp(mod, "python")) {
        snprintf(key, sizeof key, "%d\x1f%s", l->proc, mod);
        int madded = 0, mid = lgu_strmap_get_or_add(&maps, key, 0, &madded);
        if (mid < 0) {
          rc = -ENOMEM;
          break;
        }
        l->mapping = (uint64_t)mid; /* 0 for a module the modules table does not have */
      }
    }
    sqlite3_finalize(st);
    if (rc == 0 && step != SQLITE_DONE) rc = -EIO;
  }
  lgu_strmap_free(&maps);
  lgu_strmap_free(&funcs);
  if (m.oom) rc = -ENOMEM;
  free(m.b);
  /* Location messages: id = index + 1 */
  pb_t lm = {0}, ln = {0};
  for (size_t i = 0; rc == 0 && i < n; i++) {
    pb_uint(&lm, 1, (uint64_t)i + 1);
    pb_uint(&lm, 2, v[i].mapping);
    pb_uint(&lm, 3, v[i].ip);
    pb_uint(&ln, 1, (uint64_t)v[i].function);
    pb_uint(&ln, 2, (uint64_t)(v[i].line > 0 ? v[i].line : 0));
    pb_msg(&lm, 4, &ln);
    pb_msg(prof, 4, &lm);
  }
  if (lm.oom || ln.oom) rc = -ENOMEM;
  free(lm.b);
  free(ln.b);
  *locs_out = v;
  *nlocs = n;
  return rc;
}

static int64_t loc_id(const loc_t *v, size_t n, int proc, int64_t loc) {
  if (!n) return 0;
  loc_t key = {.proc = proc, .loc = loc};
  const loc_t *l = bsearch(&key, v, n, sizeof *v, cmp_loc);
  return l ? (int64_t)(l - v) + 1 : 0;
}

/* One sample per stack: location ids leaf first (the native frames under the
 * innermost Python line, then the Python frames outward; docs/schema.md stores a
 * Python stack as its Python frames, innermost first, then those native frames). */
static void put_samples(pb_t *prof, strs_t *strs, const lgr_report_t *r, const stk_t *sv, size_t ns, const loc_t *lv,
                        size_t nl) {
  pb_t smp = {0}, ids = {0}, vals = {0}, lab = {0};
  int64_t raw[LGR_MAX_FRAMES], lid[LGR_MAX_FRAMES];
  int64_t k_pid = str_id(strs, "pid"), k_space = str_id(strs, "space"), k_rank = str_id(strs, "rank");
  for (size_t i = 0; i < ns; i++) {
    const stk_t *s = &sv[i];
    int n = lgr_parse_locs(s->locs, raw, LGR_MAX_FRAMES), k = 0;
    for (int j = 0; j < n; j++) {
      int64_t id = loc_id(lv, nl, s->proc, raw[j]);
      if (id) lid[k++] = id;
    }
    int npy = 0; /* the Python prefix */
    while (npy < k && lv[lid[npy] - 1].python) npy++;
    for (int j = npy; j < k; j++) pb_varint(&ids, (uint64_t)lid[j]);
    for (int j = 0; j < npy; j++) pb_varint(&ids, (uint64_t)lid[j]);
    pb_msg(&smp, 1, &ids);
    for (int v = 0; v < NV; v++) pb_varint(&vals, (uint64_t)s->v[v]);
    pb_msg(&smp, 2, &vals);
    pb_uint(&lab, 1, (uint64_t)k_pid);
    pb_uint(&lab, 3, (uint64_t)pid_of(r, s->proc));
    pb_msg(&smp, 3, &lab);
    pb_uint(&lab, 1, (uint64_t)k_space);
    pb_uint(&lab, 2, (uint64_t)str_id(strs, s->space));
    pb_msg(&smp, 3, &lab);
    int rank = rank_of(r, s->proc);
    if (rank >= 0) {
      pb_uint(&lab, 1, (uint64_t)k_rank);
      pb_varint(&lab, 3 << 3);
      pb_varint(&lab, (uint64_t)rank); /* num, also when 0 */
      pb_msg(&smp, 3, &lab);
    }
    pb_msg(prof, 2, &smp);
  }
  if (smp.oom || ids.oom || vals.oom || lab.oom) prof->oom = 1;
  free(smp.b);
  free(ids.b);
  free(vals.b);
  free(lab.b);
}

static void value_type(pb_t *prof, unsigned field, strs_t *strs, const char *type, const char *unit) {
  pb_t vt = {0};
  pb_uint(&vt, 1, (uint64_t)str_id(strs, type));
  pb_uint(&vt, 2, (uint64_t)str_id(strs, unit));
  pb_msg(prof, field, &vt);
  if (vt.oom) prof->oom = 1;
  free(vt.b);
}

int lgr_print_pprof(FILE *f, lgst_t *store, const lgr_report_t *r) {
  sqlite3 *db = lgst_db(store);
  pb_t prof = {0};
  strs_t strs = {0};
  stk_t *sv = NULL;
  loc_t *lv = NULL;
  size_t ns = 0, nl = 0;
  str_id(&strs, ""); /* string_table[0] must be "" */
  static const char *const TYPES[NV][2] = {{"inuse_space", "bytes"},      {"inuse_objects", "count"},
                                           {"alloc_space", "bytes"},      {"alloc_objects", "count"},
                                           {"peak_inuse_space", "bytes"}, {"growth_space_per_second", "bytes"}};
  for (int k = 0; k < NV; k++) value_type(&prof, 1, &strs, TYPES[k][0], TYPES[k][1]);
  int rc = lgr_stack_values(db, r, &sv, &ns);
  if (rc == 0) rc = load_locations(db, &prof, &strs, &lv, &nl);
  if (rc == 0) {
    put_samples(&prof, &strs, r, sv, ns, lv, nl);
    int64_t dur = 0;
    for (int i = 0; i < r->nruns; i++)
      if (isfinite(r->runs[i].duration_s) && r->runs[i].duration_s * 1e9 > (double)dur)
        dur = (int64_t)(r->runs[i].duration_s * 1e9);
    pb_uint(&prof, 10, (uint64_t)dur);
    value_type(&prof, 11, &strs, "space", "bytes");
    pb_uint(&prof, 14, (uint64_t)str_id(&strs, "inuse_space"));
    pb_uint(&prof, 13, (uint64_t)str_id(&strs, "leakguard: live memory per allocation stack; growth per leaking site"));
    /* the string table last: every string is numbered by now */
    pb_put(&prof, strs.out.b, strs.out.n);
    if (prof.oom || strs.out.oom) rc = -ENOMEM;
  }
  if (rc == 0) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      rc = -ENOMEM;
    } else {
      uLong bound = deflateBound(&z, (uLong)prof.n);
      uint8_t *gz = malloc(bound);
      if (!gz) {
        rc = -ENOMEM;
      } else {
        z.next_in = prof.b;
        z.avail_in = (uInt)prof.n;
        z.next_out = gz;
        z.avail_out = (uInt)bound;
        if (deflate(&z, Z_FINISH) != Z_STREAM_END) rc = -EIO;
        else if (fwrite(gz, 1, bound - z.avail_out, f) != bound - z.avail_out) rc = -EIO;
        free(gz);
      }
      deflateEnd(&z);
    }
  }
  lgr_stack_values_free(sv, ns);
  free(lv);
  free(prof.b);
  free(strs.out.b);
  lgu_strmap_free(&strs.map);
  return rc;
}
