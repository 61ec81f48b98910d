/* SPDX-License-Identifier: MIT */
/*
 * test_cuda_store.c - unit tests of the GPU part of the store and the report
 * (docs/cuda.md, docs/schema.md, docs/json.md). A fake process (lgm_proc_t over a
 * zeroed region header whose CUDA gauges the test sets) with a host site, a growing
 * device site on GPU 1, a flat managed site with Unified Memory counters and a pinned
 * site on GPU 0 is written for 20 snapshots with lgst_cuda_snapshot/lgst_snapshot,
 * with NVML samples on the same clock; the tables are read back with SQL, and the
 * report (lgr_build + lgo_render_json) is checked field by field: spaces and devices,
 * time to OOM against the GPU's memory, the gpus section, untracked bytes, notes,
 * unified_memory. A database without CUDA has none of the tables.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/model.h"
#include "core/region.h"
#include "leakguard.h"
#include "findings/report.h"
#include "output/render.h"
#include "output/store.h"

#define KiB 1024LL
#define MiB (1024LL * KiB)
#define GiB (1024LL * MiB)

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/lgcudastore-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static lgm_proc_t *fake_proc(uint32_t nsites) {
  lgm_proc_t *p = calloc(1, sizeof *p);
  assert_non_null(p);
  p->hdr = calloc(1, sizeof *p->hdr);
  p->sites = calloc(nsites, sizeof *p->sites);
  p->stored = calloc(nsites, sizeof *p->stored);
  assert_true(p->hdr && p->sites && p->stored);
  p->nsites = nsites;
  p->proc = 1;
  p->pid = 4242;
  p->conn = -1;
  snprintf(p->command, sizeof p->command, "./train");
  p->start_ns = 1000000000ULL;
  return p;
}

static void free_proc(lgm_proc_t *p) {
  free(p->hdr);
  free(p->sites);
  free(p->stored);
  free(p);
}

static int64_t q_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    print_error("prepare %s: %s\n", sql, sqlite3_errmsg(db));
    fail();
  }
  if (sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    print_error("no row: %s\n", sql);
    fail();
  }
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static void set_site(lgm_site_t *s, unsigned space, unsigned dev, int64_t bytes, int64_t blocks) {
  s->space = (uint8_t)space;
  s->device = (uint8_t)dev;
  s->live_bytes = bytes;
  s->live_blocks = blocks;
  if ((uint64_t)bytes > s->alloc_bytes) s->alloc_bytes = (uint64_t)bytes;
  if ((uint64_t)blocks > s->alloc_blocks) s->alloc_blocks = (uint64_t)blocks;
  s->oldest_epoch = 0;
}

/* 20 snapshots, 1 s apart: device site +1 MiB/s on GPU 1 (16 GiB), managed 4 MiB flat
 * on GPU 1, pinned 256 KiB on GPU 0, host 64 KiB flat; NVML sees 300 MiB more than the
 * device bytes for the process and 2 GiB used on the whole of GPU 1. */
static void write_db(const char *path) {
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc(6);
  lg_region_hdr_t *h = p->hdr;
  atomic_store(&h->gpu_flags, LG_GPU_SEEN | LG_GPU_ALLOCATED | LG_CUDA_UM);
  atomic_store(&h->gpu_ndev, 2);
  atomic_store(&h->gpu[1].total_bytes, 16 * GiB);
  atomic_store(&h->gpu[1].contexts, 1);
  atomic_store(&h->gpu[1].contexts_created, 3);
  atomic_store(&h->gpu[1].contexts_destroyed, 2);
  atomic_store(&h->gpu[1].contexts_recreated, 2);
  atomic_store(&h->gpu[1].pool_reserved_bytes, 32 * MiB);
  atomic_store(&h->gpu[1].pool_used_bytes, 20 * MiB);
  atomic_store(&h->gpu[0].registered_bytes, 1 * MiB);
  atomic_store(&h->gpu[0].total_bytes, 16 * GiB);
  snprintf(h->gpu_notes[0], LG_GPU_NOTE_LEN, "cuMemImportFromShareableHandle: unknown memory entry point; untracked");
  atomic_store(&h->gpu_nnotes, 1);
  atomic_store(&h->cuda_um[0].site, 4);
  atomic_store(&h->cuda_um[0].gpu_page_faults, 120);
  atomic_store(&h->cuda_um[0].bytes_htod, 64 * MiB);
  atomic_store(&h->cuda_um[1].site, LG_CUDA_UM_UNKNOWN);
  atomic_store(&h->cuda_um[1].cpu_page_faults, 2);
  lgs_frame_t host[2] = {{0x7f00001000, "libc.so.6", "malloc", "", 0, 0},
                         {0x401000, "train", "load", "/src/t.c", 5, 0}};
  lgs_frame_t dev[2] = {{0x402000, "train", "kv_grow", "/src/kv.c", 30, 0},
                        {0x403000, "train", "main", "/src/t.c", 9, 0}};
  lgs_frame_t man[1] = {{0x404000, "train", "um_buffer", "/src/um.c", 12, 0}};
  lgs_frame_t pin[1] = {{0x405000, "train", "staging", "/src/io.c", 77, 0}};
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(lgst_stack(s, 1, 2, LG_SPACE_HOST, host, 2), 0);
  assert_int_equal(lgst_stack(s, 1, 3, LG_SPACE_DEVICE, dev, 2), 0);
  assert_int_equal(lgst_stack(s, 1, 4, LG_SPACE_MANAGED, man, 1), 0);
  assert_int_equal(lgst_stack(s, 1, 5, LG_SPACE_PINNED, pin, 1), 0);
  for (int k = 0; k < 20; k++) {
    uint64_t t = p->start_ns + (uint64_t)(k + 1) * 1000000000ULL;
    set_site(&p->sites[2], LG_SPACE_HOST, 0, 64 * KiB, 1);
    set_site(&p->sites[3], LG_SPACE_DEVICE, 1, (k + 1) * MiB, k + 1);
    set_site(&p->sites[4], LG_SPACE_MANAGED, 1, 4 * MiB, 1);
    set_site(&p->sites[5], LG_SPACE_PINNED, 0, 256 * KiB, 1);
    memset(p->gpu_space_bytes, 0, sizeof p->gpu_space_bytes);
    p->gpu_space_bytes[1][0] = (k + 1) * MiB;
    p->gpu_space_bytes[1][1] = 4 * MiB;
    p->gpu_space_bytes[0][2] = 256 * KiB;
    p->live_bytes = 64 * KiB + (k + 1) * MiB + 4 * MiB + 256 * KiB;
    p->host_bytes = 64 * KiB;
    if (p->live_bytes > p->peak_live_bytes) p->peak_live_bytes = p->live_bytes;
    assert_int_equal(lgst_begin(s), 0);
    assert_int_equal(lgst_cuda_snapshot(s, p), 0);
    assert_int_equal(lgst_snapshot(s, p, t, 1 * GiB, 8 * GiB, k == 19), 0);
    assert_int_equal(lgst_nvml_device(s, t + 1000, 1, 2 * GiB, 16 * GiB), 0);
    assert_int_equal(lgst_nvml_process(s, t + 1000, 1, p->pid, p->proc, (uint64_t)((k + 1) * MiB + 300 * MiB)), 0);
    assert_int_equal(lgst_commit(s), 0);
  }
  p->ended = 1;
  p->end_ns = p->start_ns + 21000000000ULL;
  snprintf(p->end_reason, sizeof p->end_reason, "exit");
  assert_int_equal(lgst_proc(s, p), 0);
  lgst_close(s);
  free_proc(p);
}

static void test_tables(void **state) {
  (void)state;
  char path[128];
  snprintf(path, sizeof path, "%s/gpu.db", dir);
  write_db(path);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(q_int(db, "SELECT count(*) FROM cuda_stacks"), 3); /* device, managed, pinned: not host */
  assert_int_equal(q_int(db, "SELECT device FROM cuda_stacks WHERE stack=3"), 1);
  assert_int_equal(q_int(db, "SELECT device FROM cuda_stacks WHERE stack=5"), 0);
  assert_int_equal(q_int(db, "SELECT count(*) FROM cuda_devices"), 40); /* 20 snapshots x 2 GPUs */
  assert_int_equal(q_int(db, "SELECT device_bytes FROM cuda_devices WHERE device=1 AND seq=19"), 20 * MiB);
  assert_int_equal(q_int(db, "SELECT pinned_bytes FROM cuda_devices WHERE device=0 AND seq=4"), 256 * KiB);
  assert_int_equal(q_int(db, "SELECT contexts_recreated FROM cuda_devices WHERE device=1 AND seq=0"), 2);
  assert_int_equal(q_int(db, "SELECT registered_bytes FROM cuda_devices WHERE device=0 AND seq=0"), 1 * MiB);
  assert_int_equal(q_int(db, "SELECT count(*) FROM cuda_notes"), 1); /* written each snapshot, stored once */
  assert_int_equal(q_int(db, "SELECT gpu_page_faults FROM cuda_um WHERE stack=4"), 120);
  assert_int_equal(q_int(db, "SELECT cpu_page_faults FROM cuda_um WHERE stack=1"), 2);
  assert_int_equal(q_int(db, "SELECT count(*) FROM nvml"), 20);
  assert_int_equal(q_int(db, "SELECT max(used_bytes) FROM nvml_processes WHERE proc=1"), 320 * MiB);
  /* host_bytes is the host space only */
  assert_int_equal(q_int(db, "SELECT host_bytes FROM snapshots WHERE seq=19"), 64 * KiB);
  sqlite3_close(db);
}

static cJSON *report_json(const char *path) {
  char why[512] = "";
  lgr_db_t *rd = NULL;
  assert_int_equal(lgr_open(path, &rd, why, sizeof why), 0);
  lgr_options_t o = {.top = 10};
  lgr_report_t r;
  assert_int_equal(lgr_build(rd, &o, &r, why, sizeof why), 0);
  char *buf = NULL, *text = NULL;
  size_t len = 0, tlen = 0;
  FILE *mem = open_memstream(&buf, &len), *tm = open_memstream(&text, &tlen);
  lgo_render_opts_t wo = {.top = o.top};
  assert_int_equal(lgo_render_json(mem, &r, &wo), 0);
  assert_int_equal(lgo_render_text(tm, &r, &wo), 0);
  fclose(mem);
  fclose(tm);
  /* the text report names the GPU and the bytes NVML sees that nothing explains */
  if (!strstr(text, "device memory on GPU 1") || !strstr(text, "untracked 300 MiB") ||
      !strstr(text, "um_buffer (/src/um.c:12): 120 GPU page faults"))
    print_error("text report:\n%s\n", text);
  assert_non_null(strstr(text, "device memory on GPU 1"));
  assert_non_null(strstr(text, "untracked 300 MiB"));
  assert_non_null(strstr(text, "um_buffer (/src/um.c:12): 120 GPU page faults"));
  free(text);
  lgr_free(&r);
  lgr_close(rd);
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  assert_non_null(j);
  return j;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(v)) print_error("no number \"%s\"\n", k);
  assert_true(cJSON_IsNumber(v));
  return v->valuedouble;
}

static void test_report(void **state) {
  (void)state;
  char path[128];
  snprintf(path, sizeof path, "%s/gpu2.db", dir);
  write_db(path);
  cJSON *j = report_json(path);
  const cJSON *sus = cJSON_GetObjectItem(j, "suspects");
  assert_int_equal(cJSON_GetArraySize(sus), 1);
  const cJSON *s0 = cJSON_GetArrayItem(sus, 0);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(s0, "space")), "device");
  assert_int_equal((int)num(s0, "device"), 1);
  assert_int_equal((int64_t)num(s0, "live_bytes"), 20 * MiB);
  /* time to OOM against GPU 1: (16 GiB - NVML's 2 GiB used) / 1 MiB/s */
  double g = num(s0, "growth_bytes_per_s"), tto = num(s0, "time_to_oom_s");
  assert_true(fabs(g - MiB) < 0.01 * MiB);
  assert_true(fabs(tto - (double)(14 * GiB) / g) < 1.0);
  /* host sites carry no device */
  const cJSON *o, *oth = cJSON_GetObjectItem(j, "largest_non_leaking");
  int seen_managed = 0;
  cJSON_ArrayForEach(o, oth) {
    const char *sp = cJSON_GetStringValue(cJSON_GetObjectItem(o, "space"));
    if (!strcmp(sp, "host")) assert_null(cJSON_GetObjectItem(o, "device"));
    if (!strcmp(sp, "managed")) {
      seen_managed = 1;
      assert_int_equal((int)num(o, "device"), 1);
      const cJSON *um = cJSON_GetObjectItem(o, "unified_memory");
      assert_non_null(um);
      assert_int_equal((int)num(um, "gpu_page_faults"), 120);
      assert_int_equal((int64_t)num(um, "bytes_to_device"), 64 * MiB);
    }
  }
  assert_true(seen_managed);
  const cJSON *gpus = cJSON_GetObjectItem(j, "gpus");
  assert_int_equal(cJSON_GetArraySize(gpus), 2);
  const cJSON *g0 = cJSON_GetArrayItem(gpus, 0), *g1 = cJSON_GetArrayItem(gpus, 1);
  assert_int_equal((int)num(g0, "device"), 0);
  assert_int_equal((int64_t)num(g0, "pinned_bytes"), 256 * KiB);
  assert_int_equal((int64_t)num(g0, "registered_bytes"), 1 * MiB);
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(g0, "nvml")));
  assert_int_equal((int)num(g1, "device"), 1);
  assert_int_equal((int)num(g1, "pid"), 4242);
  assert_int_equal((int64_t)num(g1, "device_bytes"), 20 * MiB);
  assert_int_equal((int64_t)num(g1, "managed_bytes"), 4 * MiB);
  assert_int_equal((int64_t)num(g1, "peak_device_bytes"), 24 * MiB);
  assert_int_equal((int64_t)num(g1, "pool_reserved_bytes"), 32 * MiB);
  assert_int_equal((int)num(g1, "contexts_created"), 3);
  assert_int_equal((int)num(g1, "contexts_recreated"), 2);
  assert_int_equal((int64_t)num(g1, "total_bytes"), 16 * GiB);
  const cJSON *n = cJSON_GetObjectItem(g1, "nvml");
  assert_non_null(n);
  assert_int_equal((int64_t)num(n, "process_bytes"), 320 * MiB);
  assert_int_equal((int64_t)num(n, "untracked_bytes"), 300 * MiB);
  assert_int_equal((int64_t)num(n, "device_used_bytes"), 2 * GiB);
  const cJSON *notes = cJSON_GetObjectItem(j, "cuda_notes");
  assert_int_equal(cJSON_GetArraySize(notes), 1);
  const cJSON *um = cJSON_GetObjectItem(j, "unified_memory");
  assert_int_equal(cJSON_GetArraySize(um), 2);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(um, 0), "site")),
                      "um_buffer (/src/um.c:12)");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(um, 1), "site")),
                      "(not in a recorded managed block)");
  cJSON_Delete(j);
}

/* A process that never used CUDA: no CUDA table, and the report has empty GPU parts. */
static void test_no_cuda(void **state) {
  (void)state;
  char path[128];
  snprintf(path, sizeof path, "%s/host.db", dir);
  lgst_t *s = NULL;
  const char *err = NULL;
  assert_int_equal(lgst_create(path, &s, &err), 0);
  lgm_proc_t *p = fake_proc(3);
  lgs_frame_t host[1] = {{0x401000, "app", "load", "/src/a.c", 5, 0}};
  assert_int_equal(lgst_proc(s, p), 0);
  assert_int_equal(lgst_stack(s, 1, 2, LG_SPACE_HOST, host, 1), 0);
  for (int k = 0; k < 10; k++) {
    set_site(&p->sites[2], LG_SPACE_HOST, 0, 64 * KiB, 1);
    p->live_bytes = p->host_bytes = 64 * KiB;
    assert_int_equal(lgst_begin(s), 0);
    assert_int_equal(lgst_cuda_snapshot(s, p), 0);
    assert_int_equal(lgst_snapshot(s, p, p->start_ns + (uint64_t)(k + 1) * 1000000000ULL, 1 * GiB, 8 * GiB, k == 9), 0);
    assert_int_equal(lgst_commit(s), 0);
  }
  assert_int_equal(q_int(lgst_db(s), "SELECT count(*) FROM sqlite_master WHERE name LIKE 'cuda%' OR name LIKE 'nvml%'"),
                   0);
  lgst_close(s);
  free_proc(p);
  lgr_db_t *r = NULL;
  char why[256];
  assert_int_equal(lgr_open(path, &r, why, sizeof why), 0);
  lgr_options_t o = {.top = 10};
  lgr_report_t rep;
  assert_int_equal(lgr_build(r, &o, &rep, why, sizeof why), 0);
  assert_int_equal(rep.ngpus, 0);
  assert_int_equal(rep.ncuda_notes, 0);
  assert_int_equal(rep.num, 0);
  assert_int_equal(rep.others[0].device, -1);
  lgr_free(&rep);
  lgr_close(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tables),
      cmocka_unit_test(test_report),
      cmocka_unit_test(test_no_cuda),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
