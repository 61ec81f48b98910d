/* SPDX-License-Identifier: MIT */
/*
 * test_pool.c - liblgpool (docs/pool.md) on host memory and on the stand-in CUDA
 * driver (tests/cuda/standin_cuda.c, with events): generations, release windows on an
 * injected clock (no sleeps), trimming per guard level and through the guard's level
 * subscription, stream-ordered reuse, fragmentation against a single-pool cache on a
 * fixed trace, and bad frees.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "leakguard.h"

typedef int CUresult;
typedef struct CUstream_st *CUstream;
CUresult cuInit(unsigned flags);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
void standin_events_hold(int hold);
void standin_events_complete(CUstream s);
long standin_calls(const char *impl);

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

static uint64_t fake_now;
static uint64_t fake_clock(void *arg) {
  (void)arg;
  return fake_now;
}

static lg_pool_t *make(lg_pool_backend_t be, int single) {
  lg_pool_config_t c;
  lg_pool_config_init(&c);
  c.backend = be;
  c.single = single;
  c.clock_ms = fake_clock;
  c.window_ms[LG_GEN_YOUNG] = 100;
  c.window_ms[LG_GEN_MIDDLE] = 5000;
  fake_now = 1000;
  lg_pool_t *p = lg_pool_create(&c);
  assert_non_null(p);
  return p;
}

static lg_pool_stats_t stats(lg_pool_t *p) {
  lg_pool_stats_t s;
  assert_int_equal(lg_pool_stats(p, &s), 0);
  return s;
}

/* Each generation has its own segments: three small blocks, three 2 MiB segments. */
static void generations(void **state) {
  lg_pool_t *p = make(LG_POOL_HOST, 0);
  char *b[3];
  for (int g = 0; g < 3; g++) {
    b[g] = lg_pool_alloc_gen(p, 1000, (lg_gen_t)g, NULL);
    assert_non_null(b[g]);
    memset(b[g], 0x5a, 1000);
  }
  lg_pool_stats_t s = stats(p);
  assert_int_equal(s.driver_allocs, 3);
  for (int g = 0; g < 3; g++) assert_int_equal(s.reserved_gen[g], 2 * MiB);
  assert_int_equal(s.allocated_bytes, 3 * 1024); /* 1000 rounds to 1024 */
  assert_int_equal(s.requested_bytes, 3000);
  /* A second young block comes from the young segment, right after the first. */
  char *y2 = lg_pool_alloc_gen(p, 512, LG_GEN_YOUNG, NULL);
  assert_ptr_equal(y2, b[0] + 1024);
  assert_int_equal(stats(p).driver_allocs, 3);
  /* A large request (3 MiB) takes a 20 MiB segment of its generation. */
  void *l = lg_pool_alloc_gen(p, 3 * MiB, LG_GEN_OLD, NULL);
  assert_int_equal(stats(p).reserved_gen[LG_GEN_OLD], 22 * MiB);
  assert_int_equal(lg_pool_free(p, l, NULL), 0);
  assert_string_equal(lg_gen_name(LG_GEN_MIDDLE), "middle");
  assert_null(lg_gen_name((lg_gen_t)3));
  lg_pool_destroy(p);
}

/* A wholly free segment goes back after its generation's window, not before; old
 * segments stay. The clock is injected. */
static void windows(void **state) {
  lg_pool_t *p = make(LG_POOL_HOST, 0);
  void *b[3];
  for (int g = 0; g < 3; g++) b[g] = lg_pool_alloc_gen(p, 64 * KiB, (lg_gen_t)g, NULL);
  for (int g = 0; g < 3; g++) assert_int_equal(lg_pool_free(p, b[g], NULL), 0);
  assert_int_equal(stats(p).reserved_bytes, 6 * MiB);
  fake_now = 1099;
  assert_int_equal(lg_pool_tick(p), 0);
  fake_now = 1100; /* young: 100 ms */
  assert_int_equal(lg_pool_tick(p), 2 * MiB);
  lg_pool_stats_t s = stats(p);
  assert_int_equal(s.reserved_gen[LG_GEN_YOUNG], 0);
  assert_int_equal(s.reserved_gen[LG_GEN_MIDDLE], 2 * MiB);
  assert_int_equal(s.driver_frees, 1);
  fake_now = 5999;
  assert_int_equal(lg_pool_tick(p), 0);
  fake_now = 6000; /* middle: 5 s */
  assert_int_equal(lg_pool_tick(p), 2 * MiB);
  fake_now = 1000000000;
  assert_int_equal(lg_pool_tick(p), 0);
  assert_int_equal(stats(p).reserved_gen[LG_GEN_OLD], 2 * MiB);
  /* Young has nothing cached, old has an idle segment: young takes it over instead of
   * asking the driver (and it now follows young's window). */
  void *y = lg_pool_alloc_gen(p, 64 * KiB, LG_GEN_YOUNG, NULL);
  s = stats(p);
  assert_int_equal(s.driver_allocs, 3);
  assert_int_equal(s.adopted_segments, 1);
  assert_int_equal(s.reserved_gen[LG_GEN_OLD], 0);
  assert_int_equal(s.reserved_gen[LG_GEN_YOUNG], 2 * MiB);
  /* A cached block reused within its window does not go back. */
  lg_pool_free(p, y, NULL);
  fake_now += 50;
  y = lg_pool_alloc_gen(p, 64 * KiB, LG_GEN_YOUNG, NULL);
  fake_now += 100;
  assert_int_equal(lg_pool_tick(p), 0); /* in use */
  assert_int_equal(stats(p).driver_allocs, 3);
  lg_pool_free(p, y, NULL); /* the free runs the window check too */
  fake_now += 100;
  void *m = lg_pool_alloc_gen(p, 64 * KiB, LG_GEN_MIDDLE, NULL); /* so does an alloc */
  assert_int_equal(stats(p).reserved_gen[LG_GEN_YOUNG], 0);
  lg_pool_free(p, m, NULL);
  lg_pool_destroy(p);
}

/* One idle segment per generation, one busy young segment: each level trims its own. */
static void trim_levels(void **state) {
  lg_pool_t *p = make(LG_POOL_HOST, 0);
  void *busy = lg_pool_alloc_gen(p, 1 * MiB, LG_GEN_YOUNG, NULL);
  void *b[3];
  /* 1.5 MiB requests are large: 20 MiB segments, a separate one per generation. */
  for (int g = 0; g < 3; g++) b[g] = lg_pool_alloc_gen(p, 3 * MiB / 2, (lg_gen_t)g, NULL);
  for (int g = 0; g < 3; g++) lg_pool_free(p, b[g], NULL);
  assert_int_equal(stats(p).reserved_bytes, 62 * MiB);
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_NORMAL), 0);
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_WARN), 20 * MiB); /* young, not the busy one */
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_WARN), 0);
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_BREAKER), 20 * MiB); /* middle */
  lg_pool_stats_t s = stats(p);
  assert_int_equal(s.reserved_gen[LG_GEN_YOUNG], 2 * MiB);
  assert_int_equal(s.reserved_gen[LG_GEN_OLD], 20 * MiB);
  assert_int_equal(s.cached_gen[LG_GEN_YOUNG], 1 * MiB);
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_EMERGENCY), 20 * MiB); /* old */
  lg_pool_free(p, busy, NULL);
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_EMERGENCY), 2 * MiB);
  s = stats(p);
  assert_int_equal(s.reserved_bytes, 0);
  assert_int_equal(s.trims[LG_LEVEL_WARN], 2);
  assert_int_equal(s.trims[LG_LEVEL_EMERGENCY], 2);
  lg_pool_destroy(p);
}

/* The guard's level subscription (lg_subscribe, found with dlsym as liblgpool does
 * when libleakguard.so is loaded): here the test program exports its own. */
static lg_level_cb sub_cb;
static void *sub_arg;
static int sub_unsubscribed = -1;
LG_API int lg_subscribe(lg_level_cb cb, void *arg);
LG_API int lg_unsubscribe(int id);
LG_API int lg_subscribe(lg_level_cb cb, void *arg) {
  sub_cb = cb;
  sub_arg = arg;
  return 7;
}
LG_API int lg_unsubscribe(int id) {
  sub_unsubscribed = id;
  return 0;
}

static void level_subscription(void **state) {
  lg_pool_config_t c;
  lg_pool_config_init(&c);
  c.subscribe = 1;
  c.clock_ms = fake_clock;
  lg_pool_t *p = lg_pool_create(&c);
  assert_non_null(sub_cb);
  assert_ptr_equal(sub_arg, p);
  void *b[3];
  for (int g = 0; g < 3; g++) b[g] = lg_pool_alloc_gen(p, 4096, (lg_gen_t)g, NULL);
  for (int g = 0; g < 3; g++) lg_pool_free(p, b[g], NULL);
  sub_cb(LG_LEVEL_NORMAL, LG_LEVEL_WARN, sub_arg);
  lg_pool_stats_t s = stats(p);
  assert_int_equal(s.reserved_gen[LG_GEN_YOUNG], 0);
  assert_int_equal(s.reserved_gen[LG_GEN_MIDDLE], 2 * MiB);
  sub_cb(LG_LEVEL_BREAKER, LG_LEVEL_WARN, sub_arg); /* going down trims nothing */
  assert_int_equal(stats(p).reserved_gen[LG_GEN_MIDDLE], 2 * MiB);
  sub_cb(LG_LEVEL_WARN, LG_LEVEL_EMERGENCY, sub_arg);
  assert_int_equal(stats(p).reserved_bytes, 0);
  lg_pool_destroy(p);
  assert_int_equal(sub_unsubscribed, 7);
}

/* Stream order on the stand-in driver: a block freed on stream A goes to stream B only
 * once the event recorded at the free is done; stream A reuses it at once. */
static void stream_order(void **state) {
  assert_int_equal(cuInit(0), 0);
  lg_pool_t *p = make(LG_POOL_CUDA, 0);
  CUstream a, b;
  assert_int_equal(cuStreamCreate(&a, 0), 0);
  assert_int_equal(cuStreamCreate(&b, 0), 0);
  long allocs0 = standin_calls("cuMemAlloc_v2"), frees0 = standin_calls("cuMemFree_v2");
  standin_events_hold(1); /* the GPU is busy: recorded events stay not ready */
  char *x = lg_pool_alloc_gen(p, 1 * MiB, LG_GEN_YOUNG, a);
  assert_non_null(x);
  assert_int_equal(lg_pool_free(p, x, a), 0);
  void *z = lg_pool_alloc_gen(p, 1 * MiB, LG_GEN_YOUNG, a); /* same stream: at once */
  assert_ptr_equal(z, x);
  assert_int_equal(lg_pool_free(p, z, a), 0);
  char *y = lg_pool_alloc_gen(p, 1 * MiB, LG_GEN_YOUNG, b); /* another stream: not x's segment */
  assert_non_null(y);
  assert_true(y < x || y >= x + 2 * MiB);
  assert_int_equal(standin_calls("cuMemAlloc_v2") - allocs0, 2);
  /* Nor may the driver get x's segment back while its free is pending. */
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_EMERGENCY), 0);
  assert_int_equal(stats(p).reserved_gen[LG_GEN_YOUNG], 4 * MiB);
  standin_events_complete(a);
  void *w1 = lg_pool_alloc_gen(p, 1 * MiB, LG_GEN_YOUNG, b); /* the rest of y's segment */
  void *w2 = lg_pool_alloc_gen(p, 1 * MiB, LG_GEN_YOUNG, b); /* now x's */
  assert_ptr_equal(w1, y + 1 * MiB);
  assert_ptr_equal(w2, x);
  lg_pool_stats_t s = stats(p);
  assert_int_equal(s.driver_allocs, 2);
  assert_int_equal(s.event_records, 2);
  assert_true(s.event_queries >= 2);
  assert_int_equal(lg_pool_free(p, w1, b), 0);
  assert_int_equal(lg_pool_free(p, w2, b), 0);
  assert_int_equal(lg_pool_free(p, y, b), 0);
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_WARN), 0); /* b's frees pending */
  assert_int_equal(cuStreamSynchronize(b), 0);         /* completes b's events */
  assert_int_equal(lg_pool_trim(p, LG_LEVEL_WARN), 4 * MiB);
  assert_int_equal(standin_calls("cuMemFree_v2") - frees0, 2);
  standin_events_hold(0);
  lg_pool_destroy(p);
  cuStreamDestroy_v2(a);
  cuStreamDestroy_v2(b);
}

/* A fixed trace: every step allocates seven 256 KiB activations, then one 256 KiB
 * block that lives to the end (a KV cache growing), then frees the activations. In one
 * pool the long-lived blocks land between activations and pin their segments; in the
 * generational pool they share an old segment. Exact reserved bytes. */
static void run_trace(lg_pool_t *p, int single, void **kv) {
  for (int step = 0; step < 16; step++) {
    void *act[7];
    for (int i = 0; i < 7; i++) act[i] = lg_pool_alloc_gen(p, 256 * KiB, single ? LG_GEN_MIDDLE : LG_GEN_YOUNG, NULL);
    kv[step] = lg_pool_alloc_gen(p, 256 * KiB, LG_GEN_OLD, NULL);
    for (int i = 0; i < 7; i++) assert_int_equal(lg_pool_free(p, act[i], NULL), 0);
  }
}

static void fragmentation(void **state) {
  lg_pool_t *one = make(LG_POOL_HOST, 1), *gen = make(LG_POOL_HOST, 0);
  void *kv1[16], *kv2[16];
  run_trace(one, 1, kv1);
  run_trace(gen, 0, kv2);
  lg_pool_stats_t s1 = stats(one), s2 = stats(gen);
  assert_int_equal(s1.allocated_bytes, 4 * MiB);
  assert_int_equal(s2.allocated_bytes, 4 * MiB);
  /* At warn, the generational pool gives its activations' segment back; one pool has
   * no young generation to trim. */
  assert_int_equal(lg_pool_trim(one, LG_LEVEL_WARN), 0);
  assert_int_equal(lg_pool_trim(gen, LG_LEVEL_WARN), 2 * MiB);
  /* Under pressure: emptying every cache. */
  lg_pool_trim(one, LG_LEVEL_EMERGENCY);
  lg_pool_trim(gen, LG_LEVEL_EMERGENCY);
  s1 = stats(one);
  s2 = stats(gen);
  print_message("single pool: peak %llu reserved %llu after trim; generational: peak %llu reserved %llu\n",
                (unsigned long long)s1.peak_reserved_bytes, (unsigned long long)s1.reserved_bytes,
                (unsigned long long)s2.peak_reserved_bytes, (unsigned long long)s2.reserved_bytes);
  assert_int_equal(s2.reserved_bytes, 4 * MiB); /* two old segments, full */
  assert_int_equal(s2.peak_reserved_bytes, 6 * MiB);
  /* One pool: the sixteen long-lived blocks are spread over three segments that no
   * trim can give back (2 MiB more than needed, a third of what it holds). */
  assert_int_equal(s1.reserved_bytes, 6 * MiB);
  assert_int_equal(s1.peak_reserved_bytes, 6 * MiB);
  for (int i = 0; i < 16; i++) {
    lg_pool_free(one, kv1[i], NULL);
    lg_pool_free(gen, kv2[i], NULL);
  }
  lg_pool_destroy(one);
  lg_pool_destroy(gen);
}

/* Bad frees: counted, reported once each on stderr, no crash. */
static void bad_frees(void **state) {
  lg_pool_t *p = make(LG_POOL_HOST, 0);
  char *a = lg_pool_alloc_gen(p, 100, LG_GEN_YOUNG, NULL);
  char *b = lg_pool_alloc_gen(p, 100, LG_GEN_YOUNG, NULL);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  assert_int_equal(lg_pool_free(p, a, NULL), 0);
  assert_int_equal(lg_pool_free(p, a, NULL), -EALREADY);
  assert_int_equal(lg_pool_free(p, a, NULL), -EALREADY);
  int local;
  assert_int_equal(lg_pool_free(p, &local, NULL), -EINVAL);
  assert_int_equal(lg_pool_free(p, b + 8, NULL), -EINVAL); /* inside a block: not its start */
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char out[1024] = {0};
  rewind(tmp);
  size_t n = fread(out, 1, sizeof out - 1, tmp);
  fclose(tmp);
  out[n] = 0;
  lg_pool_stats_t s = stats(p);
  assert_int_equal(s.double_frees, 2);
  assert_int_equal(s.unknown_frees, 2);
  int lines = 0;
  for (char *c = out; *c; c++) lines += *c == '\n';
  assert_int_equal(lines, 2);
  assert_non_null(strstr(out, "double free of"));
  assert_non_null(strstr(out, "free of an unknown pointer"));
  /* The pool still works, and b is intact. */
  assert_int_equal(lg_pool_free(p, b, NULL), 0);
  assert_int_equal(stats(p).allocated_bytes, 0);
  lg_pool_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(generations),        cmocka_unit_test(windows),      cmocka_unit_test(trim_levels),
      cmocka_unit_test(level_subscription), cmocka_unit_test(stream_order), cmocka_unit_test(fragmentation),
      cmocka_unit_test(bad_frees),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
