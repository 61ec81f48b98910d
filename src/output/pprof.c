/* SPDX-License-Identifier: MIT */
/*
 * pprof.c - the recording as a pprof profile (`leakguard report --format pprof`):
 * a gzipped profile.proto message, the format of Go's pprof, Pyroscope, Parca,
 * Grafana's profiles and speedscope (docs/json.md, "pprof").
 *
 * One sample per stored stack, leaf first, with six values, in the order a leak hunter
 * reads them: growth in bytes per second (growth_space_per_second: the detector's rate
 * of each leaking site, shared among its stacks by their live bytes at the end; 0 for
 * every stack of a site that does not leak), live bytes at the process's peak snapshot
 * (peak_inuse_space), live bytes and blocks at the end (inuse_space, inuse_objects:
 * empty for a program that frees at exit), bytes and blocks allocated over the run
 * (alloc_space, alloc_objects). The default sample type (what `go tool pprof` shows
 * without -sample_index) is the growth, or the peak when nothing leaks (a growth of 0
 * everywhere would show "Total samples = 0"). Labels: pid, space, and the rank of a
 * distributed job. Locations, functions (Python frames are functions
 * too, with their file and line) and mappings (the modules table) come from the
 * recording the findings read (lgr_recording_t), so the profile has the report's lines.
 *
 * The protobuf wire format is written by hand: a profile is eight message types of
 * varints and length-delimited fields (about a hundred lines below), where
 * protobuf-c would need pprof's .proto compiled at build time (protoc-c) and its
 * runtime for the same bytes. Compressed with zlib (gzip framing), as pprof expects.
 */
#include <stdio.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/strmap.h"
#include "findings/report.h"
#include "output/render.h"

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

enum { NV = LGR_SV_N };

/* The sample types, in the profile's order: the growth first, then the peak. */
static const struct {
  int sv; /* LGR_SV_* */
  const char *type, *unit;
} TYPES[NV] = {{LGR_SV_GROWTH, "growth_space_per_second", "bytes"},
               {LGR_SV_PEAK, "peak_inuse_space", "bytes"},
               {LGR_SV_INUSE, "inuse_space", "bytes"},
               {LGR_SV_OBJECTS, "inuse_objects", "count"},
               {LGR_SV_ALLOC, "alloc_space", "bytes"},
               {LGR_SV_ALLOC_OBJECTS, "alloc_objects", "count"}};

/* A location's pprof Function and Mapping (ids; mapping 0: none, Python frames). */
typedef struct loc {
  int64_t function;
  uint64_t mapping;
} loc_t;

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

/* Mappings (the modules table), functions and locations, written to prof as they are
 * numbered; locs_out[i]: the ids of rec->locs[i], whose Location id is i + 1. */
static int put_locations(const lgr_recording_t *rec, pb_t *prof, strs_t *strs, loc_t **locs_out) {
  lgu_strmap_t maps = {0}, funcs = {0};
  pb_t m = {0};
  int rc = 0, nmaps = 0, nfuncs = 0;
  char key[1024];
  for (size_t i = 0; rc == 0 && i < rec->nmodules; i++) {
    /* keyed as locations name their module: the file name of the path (symbolize.c) */
    const char *path = rec->modules[i].path;
    if (!*path) continue; /* the vdso and friends: no file, no location names them */
    const char *base = strrchr(path, '/');
    snprintf(key, sizeof key, "%d\x1f%s", rec->modules[i].proc, base ? base + 1 : path);
    int added = 0;
    if (lgu_strmap_get_or_add(&maps, key, nmaps + 1, &added) < 0) {
      rc = -ENOMEM;
      break;
    }
    if (!added) continue; /* one mapping per module and process */
    nmaps++;
    pb_uint(&m, 1, (uint64_t)nmaps);
    pb_uint(&m, 2, rec->modules[i].start);
    pb_uint(&m, 3, rec->modules[i].end);
    pb_uint(&m, 5, (uint64_t)str_id(strs, path));
    pb_bool(&m, 7, 1); /* has_functions, has_filenames, has_line_numbers */
    pb_bool(&m, 8, 1);
    pb_bool(&m, 9, 1);
    pb_msg(prof, 3, &m);
  }
  loc_t *v = rec->nlocs ? calloc(rec->nlocs, sizeof *v) : NULL;
  if (rec->nlocs && !v) rc = -ENOMEM;
  for (size_t i = 0; rc == 0 && i < rec->nlocs; i++) {
    const lgr_loc_t *rl = &rec->locs[i];
    const char *fn = *rl->function ? rl->function : "??";
    snprintf(key, sizeof key, "%s\x1f%s", fn, rl->file);
    int added = 0, fid = lgu_strmap_get_or_add(&funcs, key, nfuncs + 1, &added);
    if (fid < 0) {
      rc = -ENOMEM;
      break;
    }
    if (added) {
      nfuncs++;
      pb_uint(&m, 1, (uint64_t)fid);
      int64_t name = str_id(strs, fn);
      pb_uint(&m, 2, (uint64_t)name);
      pb_uint(&m, 3, (uint64_t)name);
      pb_uint(&m, 4, (uint64_t)str_id(strs, rl->file));
      pb_msg(prof, 5, &m);
    }
    v[i].function = fid;
    if (strcmp(rl->module, "python")) {
      snprintf(key, sizeof key, "%d\x1f%s", rl->proc, rl->module);
      int madded = 0, mid = lgu_strmap_get_or_add(&maps, key, 0, &madded);
      if (mid < 0) {
        rc = -ENOMEM;
        break;
      }
      v[i].mapping = (uint64_t)mid; /* 0 for a module the modules table does not have */
    }
  }
  lgu_strmap_free(&maps);
  lgu_strmap_free(&funcs);
  if (m.oom) rc = -ENOMEM;
  free(m.b);
  /* Location messages: id = index + 1 */
  pb_t lm = {0}, ln = {0};
  for (size_t i = 0; rc == 0 && i < rec->nlocs; i++) {
    pb_uint(&lm, 1, (uint64_t)i + 1);
    pb_uint(&lm, 2, v[i].mapping);
    pb_uint(&lm, 3, rec->locs[i].ip);
    pb_uint(&ln, 1, (uint64_t)v[i].function);
    pb_uint(&ln, 2, (uint64_t)(rec->locs[i].line > 0 ? rec->locs[i].line : 0));
    pb_msg(&lm, 4, &ln);
    pb_msg(prof, 4, &lm);
  }
  if (lm.oom || ln.oom) rc = -ENOMEM;
  free(lm.b);
  free(ln.b);
  *locs_out = v;
  return rc;
}

/* One sample per stored stack: location ids leaf first (the native frames under the
 * innermost Python line, then the Python frames outward; docs/schema.md stores a
 * Python stack as its Python frames, innermost first, then those native frames). */
static void put_samples(pb_t *prof, strs_t *strs, const lgr_report_t *r) {
  const lgr_recording_t *rec = &r->rec;
  pb_t smp = {0}, ids = {0}, vals = {0}, lab = {0};
  int64_t k_pid = str_id(strs, "pid"), k_space = str_id(strs, "space"), k_rank = str_id(strs, "rank");
  for (size_t i = 0; i < rec->nstacks; i++) {
    const lgr_stackval_t *s = &rec->stacks[i];
    if (!s->stored) continue;
    int k = s->nframes, npy = 0; /* the Python prefix */
    while (npy < k && lgr_is_python_module(rec->locs[s->frames[npy]].module)) npy++;
    for (int j = npy; j < k; j++) pb_varint(&ids, (uint64_t)s->frames[j] + 1);
    for (int j = 0; j < npy; j++) pb_varint(&ids, (uint64_t)s->frames[j] + 1);
    pb_msg(&smp, 1, &ids);
    for (int v = 0; v < NV; v++) pb_varint(&vals, (uint64_t)s->v[TYPES[v].sv]);
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

int lgo_render_pprof(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o) {
  (void)o;
  pb_t prof = {0};
  strs_t strs = {0};
  loc_t *lv = NULL;
  str_id(&strs, ""); /* string_table[0] must be "" */
  for (int k = 0; k < NV; k++) value_type(&prof, 1, &strs, TYPES[k].type, TYPES[k].unit);
  int rc = put_locations(&r->rec, &prof, &strs, &lv);
  if (rc == 0) {
    put_samples(&prof, &strs, r);
    int64_t dur = 0;
    for (int i = 0; i < r->nruns; i++)
      if (isfinite(r->runs[i].duration_s) && r->runs[i].duration_s * 1e9 > (double)dur)
        dur = (int64_t)(r->runs[i].duration_s * 1e9);
    pb_uint(&prof, 10, (uint64_t)dur);
    value_type(&prof, 11, &strs, "space", "bytes");
    int grows = 0; /* the default: the growth, or the peak when nothing leaks */
    for (size_t i = 0; i < r->rec.nstacks; i++)
      if (r->rec.stacks[i].stored && r->rec.stacks[i].v[LGR_SV_GROWTH] > 0) grows = 1;
    pb_uint(&prof, 14, (uint64_t)str_id(&strs, TYPES[grows ? 0 : 1].type));
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
  free(lv);
  free(prof.b);
  free(strs.out.b);
  lgu_strmap_free(&strs.map);
  return rc;
}
