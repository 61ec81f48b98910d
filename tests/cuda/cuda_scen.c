/* SPDX-License-Identifier: MIT */
/*
 * cuda_scen.c - GPU memory scenarios on the stand-in driver (tests only).
 *
 * Linked with -lcuda (the stand-in). Each mode exercises one part of the CUDA
 * capture and prints "cuda_scen: mode=M k=v ..." with what it knows it holds at exit;
 * sites carry markers (KEEP:x, LEAK:x) that the test
 * driver (cuda_test.py) finds in this file.
 *   async     stream-ordered allocation: a created pool and the device's pool
 *   vmm       cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease (expandable segments)
 *   managed   cuMemAllocManaged (the driver maps its pages inside the call)
 *   pinned    cuMemAllocHost_v2 and cuMemHostAlloc (pages mmap'ed, bookkeeping
 *             malloc'ed inside the call: counted once, as pinned), cuMemHostRegister
 *   ctx       contexts destroyed and recreated, primary context reset, 2 devices
 *   threads   8 threads allocating and freeing at once
 *   fork      a forked child allocates too
 *   arrays    cuArrayCreate_v2 / cuArray3DCreate_v2 / cuArrayDestroy
 *   kvcache   LEAK: a KV-cache whose block list never shrinks (cuMemAllocAsync)
 *   workspace LEAK: a custom operator's workspace never freed (cuMemAlloc_v2)
 *   pool      control: a pool of blocks filled at start, then reused
 *   ring      control: a ring of in-flight buffers (allocated, freed K steps later)
 *   hold      10 MiB of device memory held for argv[2] seconds (NVML timeline)
 *   um        managed buffers and Unified Memory records made by the stand-in CUPTI
 *   torchlike loads argv[2] (a library named libc10_cuda.so), allocates device memory
 *   pressure  contexts destroyed and recreated 3 times, 5 gc collections without CUDA
 *             cleanup (lg_cuda_gc_without_cleanup), at low use until the file argv[4]
 *             exists (the test saw the guard's normal level), then device memory
 *             grows to 80 % of the device's and is held until the file argv[3]
 *             exists (the test saw the level rise); argv[2] seconds at most
 *   entries   cuMemAllocPitch_v2, cuMemAllocFromPoolAsync_ptsz, cuMemFreeAsync_ptsz (a
 *             free counts when enqueued: the stand-in completes it at the stream's
 *             sync), cuMemPoolDestroy, cuMemHostUnregister, cuCtxCreate_v3
 * Leak and control modes run for argv[2] seconds (default 4) with step markers.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../include/leakguard.h"
#include "cuda_common.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static CUcontext setup(void) {
  CUcontext c;
  CHECK(cuInit(0));
  CHECK(cuCtxCreate_v2(&c, 0, 0));
  return c;
}

/* ------------------------------------------------------------------ async + pools */

static NOINLINE CUdeviceptr from_pool(CUmemoryPool pool) {
  CUdeviceptr d;
  CHECK(cuMemAllocFromPoolAsync(&d, 256 * KiB, pool, NULL)); /* KEEP:pool */
  return d;
}

static NOINLINE CUdeviceptr async_alloc(void) {
  CUdeviceptr d;
  CHECK(cuMemAllocAsync(&d, 128 * KiB, NULL)); /* KEEP:async */
  return d;
}

static int mode_async(void) {
  setup();
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool;
  CHECK(cuMemPoolCreate(&pool, &props));
  CUdeviceptr p[12], a[6];
  for (int i = 0; i < 12; i++) p[i] = from_pool(pool);
  for (int i = 0; i < 6; i++) a[i] = async_alloc();
  for (int i = 8; i < 12; i++) CHECK(cuMemFreeAsync(p[i], NULL));   /* 8 kept: 2 MiB */
  for (int i = 4; i < 6; i++) CHECK(cuMemFreeAsync_ptsz(a[i], NULL)); /* 4 kept: 512 KiB */
  CHECK(cuStreamSynchronize(NULL));
  /* The stand-in rounds a pool's reserve to 2 MiB and keeps it after frees: created
   * pool 3 MiB -> trimmed to 2 MiB; the device pool 2 MiB (768 KiB used at most). */
  CHECK(cuMemPoolTrimTo(pool, 0));
  CUmemoryPool dflt;
  CHECK(cuDeviceGetMemPool(&dflt, 0));
  CHECK(cuMemPoolTrimTo(dflt, 0));
  printf("cuda_scen: mode=async pool_bytes=%llu pool_blocks=8 async_bytes=%llu async_blocks=4 "
         "pool_used=%llu pool_reserved=%llu\n",
         8 * 256 * KiB, 4 * 128 * KiB, 8 * 256 * KiB + 4 * 128 * KiB, 4 * MiB);
  return 0;
}

/* ------------------------------------------------------------------ VMM */

static NOINLINE CUmemGenericAllocationHandle vmm_create(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0)); /* KEEP:vmm */
  return h;
}

static int mode_vmm(void) {
  setup();
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, 64 * MiB, 0, 0, 0));
  CUmemGenericAllocationHandle h[6];
  for (int i = 0; i < 6; i++) h[i] = vmm_create();
  /* Segment grows chunk by chunk, then shrinks: one unmap for four chunks. */
  for (int i = 0; i < 4; i++) CHECK(cuMemMap(va + (CUdeviceptr)i * 2 * MiB, 2 * MiB, 0, h[i], 0));
  CHECK(cuMemUnmap(va, 8 * MiB));
  for (int i = 0; i < 3; i++) CHECK(cuMemRelease(h[i]));
  /* Two chunks stay mapped, three handles stay alive. */
  CHECK(cuMemMap(va + 16 * MiB, 2 * MiB, 0, h[3], 0));
  CHECK(cuMemMap(va + 18 * MiB, 2 * MiB, 0, h[4], 0));
  uint32_t site = 0;
  int dev = -1;
  int (*site_of)(unsigned long long, uint32_t *, int *);
  *(void **)&site_of = dlsym(RTLD_DEFAULT, "lg_cuda_site_of");
  int found = site_of && site_of(va + 19 * MiB, &site, &dev) == 0;
  printf("cuda_scen: mode=vmm vmm_bytes=%llu vmm_blocks=3 mapped=%llu site_of_mapped=%u found=%d\n", 6 * MiB, 4 * MiB,
         site, found);
  return 0;
}

/* ------------------------------------------------------------------ managed, pinned */

static NOINLINE CUdeviceptr managed(void) {
  CUdeviceptr d;
  CHECK(cuMemAllocManaged(&d, 1 * MiB, CU_MEM_ATTACH_GLOBAL)); /* KEEP:managed */
  return d;
}

static int mode_managed(void) {
  setup();
  CUdeviceptr d[4];
  for (int i = 0; i < 4; i++) d[i] = managed();
  memset((void *)(uintptr_t)d[0], 1, 1 * MiB); /* host-accessible */
  CHECK(cuMemFree_v2(d[3]));
  printf("cuda_scen: mode=managed managed_bytes=%llu managed_blocks=3\n", 3 * MiB);
  return 0;
}

static NOINLINE void *pinned_host(void) {
  void *p;
  CHECK(cuMemAllocHost_v2(&p, 256 * KiB)); /* KEEP:pinned_host */
  return p;
}

static NOINLINE void *pinned_hostalloc(void) {
  void *p;
  CHECK(cuMemHostAlloc(&p, 512 * KiB, CU_MEMHOSTALLOC_PORTABLE)); /* KEEP:pinned_hostalloc */
  return p;
}

static int mode_pinned(void) {
  setup();
  void *a[4], *b[2];
  for (int i = 0; i < 4; i++) a[i] = pinned_host();
  for (int i = 0; i < 2; i++) b[i] = pinned_hostalloc();
  memset(a[0], 1, 256 * KiB);
  sleep_ms(300); /* every stack seen live by a snapshot */
  CHECK(cuMemFreeHost(a[3]));
  CHECK(cuMemFreeHost(b[1]));
  /* Registered host memory: already counted where it was allocated (here: the
   * malloc below, host space); registering it is a gauge of its own. */
  void *buf = malloc(1 * MiB);
  memset(buf, 0, 1 * MiB);
  CHECK(cuMemHostRegister_v2(buf, 1 * MiB, 0));
  printf("cuda_scen: mode=pinned host_bytes=%llu host_blocks=3 hostalloc_bytes=%llu hostalloc_blocks=1 "
         "registered=%llu\n",
         3 * 256 * KiB, 512 * KiB, 1 * MiB);
  return 0;
}

/* ------------------------------------------------------------------ contexts */

static NOINLINE void ctx_a(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:ctx_a */
}
static NOINLINE void ctx_b(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:ctx_b */
}
static NOINLINE void prim1(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:prim1 */
}
static NOINLINE void prim2(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:prim2 */
}
static NOINLINE void dev1(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 96 * KiB)); /* KEEP:dev1 */
}

static int mode_ctx(void) {
  CHECK(cuInit(0));
  CUcontext a, b, p, q, c1;
  CUdeviceptr d;
  CHECK(cuCtxCreate_v2(&a, 0, 0));
  for (int i = 0; i < 5; i++) ctx_a(&d);
  sleep_ms(300); /* seen live by a snapshot (sites are symbolized once they hold memory) */
  CHECK(cuCtxDestroy_v2(a)); /* its 5 blocks go with it */
  CHECK(cuCtxCreate_v2(&b, 0, 0)); /* recreated */
  for (int i = 0; i < 3; i++) ctx_b(&d);
  CHECK(cuDevicePrimaryCtxRetain(&p, 0)); /* created again: recreated */
  CHECK(cuCtxSetCurrent(p));
  for (int i = 0; i < 2; i++) prim1(&d);
  sleep_ms(300);
  CHECK(cuDevicePrimaryCtxReset_v2(0)); /* its blocks go */
  CHECK(cuDevicePrimaryCtxRetain(&q, 0)); /* recreated */
  CHECK(cuCtxSetCurrent(q));
  prim2(&d);
  sleep_ms(300);
  CHECK(cuDevicePrimaryCtxRetain(&q, 0)); /* a second reference: not a new context */
  CHECK(cuDevicePrimaryCtxRelease_v2(0));
  CHECK(cuDevicePrimaryCtxRelease_v2(0)); /* the last reference: destroyed, prim2's block goes */
  CHECK(cuCtxCreate_v2(&c1, 0, 1)); /* device 1 */
  for (int i = 0; i < 4; i++) dev1(&d);
  printf("cuda_scen: mode=ctx b_bytes=%llu b_blocks=3 dev1_bytes=%llu dev1_blocks=4 "
         "created0=4 destroyed0=3 recreated0=3 created1=1\n",
         3 * 64 * KiB, 4 * 96 * KiB);
  return 0;
}

/* ------------------------------------------------------------------ threads */

static CUcontext shared_ctx;
static NOINLINE void thread_keep(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:thread */
}
static void *worker(void *arg) {
  (void)arg;
  CHECK(cuCtxSetCurrent(shared_ctx));
  CUdeviceptr keep[10], d;
  for (int i = 0; i < 2000; i++) {
    CHECK(cuMemAlloc_v2(&d, 4 * KiB + (size_t)(i % 7) * 512));
    CHECK(cuMemFree_v2(d));
    if (i % 200 == 0) thread_keep(&keep[i / 200]);
  }
  return NULL;
}

static int mode_threads(void) {
  shared_ctx = setup();
  pthread_t th[8];
  for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, worker, NULL);
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
  printf("cuda_scen: mode=threads thread_bytes=%llu thread_blocks=80 churn_blocks=16000\n", 80 * 64 * KiB);
  return 0;
}

/* ------------------------------------------------------------------ fork */

static NOINLINE void parent_keep(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:parent */
}
static NOINLINE void child_keep(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 128 * KiB)); /* KEEP:child */
}

static int mode_fork(void) {
  setup();
  CUdeviceptr d;
  for (int i = 0; i < 4; i++) parent_keep(&d);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 6; i++) child_keep(&d);
    printf("cuda_scen: mode=fork-child child_bytes=%llu child_blocks=6\n", 6 * 128 * KiB);
    fflush(stdout);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  printf("cuda_scen: mode=fork parent_bytes=%llu parent_blocks=4 child_status=%d\n", 4 * 64 * KiB, st);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* ------------------------------------------------------------------ arrays */

static NOINLINE CUarray array2d(void) {
  CUDA_ARRAY_DESCRIPTOR d = {512, 256, CU_AD_FORMAT_FLOAT, 4};
  CUarray a;
  CHECK(cuArrayCreate_v2(&a, &d)); /* KEEP:array2d */
  return a;
}
static NOINLINE CUarray array3d(void) {
  CUDA_ARRAY3D_DESCRIPTOR d = {64, 64, 16, CU_AD_FORMAT_FLOAT, 1, 0};
  CUarray a;
  CHECK(cuArray3DCreate_v2(&a, &d)); /* KEEP:array3d */
  return a;
}

static int mode_arrays(void) {
  setup();
  CUarray a[3], b[2];
  for (int i = 0; i < 3; i++) a[i] = array2d();
  for (int i = 0; i < 2; i++) b[i] = array3d();
  sleep_ms(300); /* every stack seen live by a snapshot */
  CHECK(cuArrayDestroy(a[2]));
  printf("cuda_scen: mode=arrays array2d_bytes=%llu array2d_blocks=2 array3d_bytes=%llu array3d_blocks=2\n",
         2ull * 512 * 256 * 16, 2ull * 64 * 64 * 16 * 4);
  (void)b;
  return 0;
}

/* ------------------------------------------------------------------ leaks and controls */

/* A paged KV-cache: each request takes blocks for its tokens; a finished request
 * should give its blocks back, but the block list only ever grows. */
typedef struct kv {
  CUdeviceptr *blocks;
  size_t n, cap;
} kv_t;

static NOINLINE void kv_grow(kv_t *kv, int blocks) {
  for (int i = 0; i < blocks; i++) {
    if (kv->n == kv->cap) {
      kv->cap = kv->cap ? kv->cap * 2 : 64;
      kv->blocks = realloc(kv->blocks, kv->cap * sizeof *kv->blocks);
    }
    CHECK(cuMemAllocAsync(&kv->blocks[kv->n++], 256 * KiB, NULL)); /* LEAK:kvcache */
  }
}

static int run_leak_kvcache(double secs) {
  setup();
  kv_t kv = {0};
  CUdeviceptr scratch;
  double end = now_s() + secs;
  for (int steps = 0; now_s() < end; steps++) {
    kv_grow(&kv, 2); /* a new request's prompt */
    CHECK(cuMemAllocAsync(&scratch, 1 * MiB, NULL)); /* attention scratch, freed */
    CHECK(cuMemFreeAsync(scratch, NULL));
    step();
    sleep_ms(10);
  }
  printf("cuda_scen: mode=kvcache blocks=%zu\n", kv.n);
  return 0;
}

/* A custom operator allocates its workspace per call and never frees it. */
static NOINLINE void custom_op(CUdeviceptr in, size_t n) {
  CUdeviceptr ws;
  CHECK(cuMemAlloc_v2(&ws, n / 2)); /* LEAK:workspace */
  (void)in;
  (void)ws; /* ... the kernel would use ws; the free is missing */
}

static int run_leak_workspace(double secs) {
  setup();
  CUdeviceptr act;
  CHECK(cuMemAlloc_v2(&act, 8 * MiB)); /* activations, kept for the whole run */
  double end = now_s() + secs;
  for (int steps = 0; now_s() < end; steps++) {
    custom_op(act, 1 * MiB);
    CUdeviceptr tmp;
    CHECK(cuMemAlloc_v2(&tmp, 2 * MiB));
    CHECK(cuMemFree_v2(tmp));
    step();
    sleep_ms(10);
  }
  return 0;
}

/* A pool filled at start, then reused: the program's own free list. */
static int run_pool_control(double secs) {
  setup();
  enum { N = 64 };
  CUdeviceptr pool[N];
  int free_top = N;
  for (int i = 0; i < N; i++) CHECK(cuMemAlloc_v2(&pool[i], 1 * MiB));
  CUdeviceptr in_use[N];
  int used = 0;
  unsigned rng = 12345;
  double end = now_s() + secs;
  for (int steps = 0; now_s() < end; steps++) {
    rng = rng * 1103515245u + 12345u;
    int take = (int)(rng >> 16) % 8;
    for (int k = 0; k < take && free_top > 0; k++) in_use[used++] = pool[--free_top];
    rng = rng * 1103515245u + 12345u;
    int give = (int)(rng >> 16) % 8;
    for (int k = 0; k < give && used > 0; k++) pool[free_top++] = in_use[--used];
    CUdeviceptr tmp;
    CHECK(cuMemAlloc_v2(&tmp, 512 * KiB));
    CHECK(cuMemFree_v2(tmp));
    step();
    sleep_ms(10);
  }
  return 0;
}

/* A ring of in-flight buffers: each step's buffer is freed K steps later. */
static int run_ring_control(double secs) {
  setup();
  enum { K = 16 };
  CUdeviceptr ring[K] = {0};
  double end = now_s() + secs;
  for (int steps = 0; now_s() < end; steps++) {
    int slot = steps % K;
    if (ring[slot]) CHECK(cuMemFreeAsync(ring[slot], NULL));
    CHECK(cuMemAllocAsync(&ring[slot], 512 * KiB, NULL));
    step();
    sleep_ms(10);
  }
  return 0;
}

/* ------------------------------------------------------------------ Unified Memory (--cuda-um) */

static NOINLINE CUdeviceptr um_a(void) {
  CUdeviceptr d;
  CHECK(cuMemAllocManaged(&d, 4 * MiB, CU_MEM_ATTACH_GLOBAL)); /* KEEP:um_a */
  return d;
}
static NOINLINE CUdeviceptr um_b(void) {
  CUdeviceptr d;
  CHECK(cuMemAllocManaged(&d, 1 * MiB, CU_MEM_ATTACH_GLOBAL)); /* KEEP:um_b */
  return d;
}

/* The stand-in CUPTI (LEAKGUARD_CUPTI) turns these calls into the activity records a
 * GPU would make: faults and migrations at addresses inside each managed buffer. */
static int mode_um(void) {
  setup();
  CUdeviceptr a[2] = {um_a(), um_a()}, b = um_b();
  const char *lib = getenv("LEAKGUARD_CUPTI");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int (*rec)(uint64_t, uint32_t, uint64_t) = NULL;
  if (h) *(void **)&rec = dlsym(h, "standin_cupti_record");
  int made = 0;
  if (rec) {
    for (int i = 0; i < 2; i++) {
      made += rec(a[i] + 4096, 4 /* GPU page faults */, 10) == 0;
      made += rec(a[i] + 2 * MiB, 1 /* bytes to the device */, 4 * MiB) == 0;
    }
    made += rec(b + 100, 3 /* CPU page faults */, 3) == 0;
    made += rec(b, 2 /* bytes to the host */, 1 * MiB) == 0;
    made += rec(b + 8192, 5 /* thrashing */, 2) == 0;
    made += rec(0x42, 4, 1) == 0; /* not in a managed block */
  }
  printf("cuda_scen: mode=um records=%d a_gpu_faults=20 a_bytes_htod=%llu b_cpu_faults=3 b_bytes_dtoh=%llu "
         "b_thrashing=2 unknown_gpu_faults=1\n", made, 8 * MiB, 1 * MiB);
  return 0;
}

/* A process that loaded a library named like PyTorch's CUDA allocator (argv[2]). */
static NOINLINE void torch_like_alloc(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 2 * MiB)); /* KEEP:torchlike */
}

static int mode_torchlike(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 3;
  }
  setup();
  CUdeviceptr d;
  for (int i = 0; i < 3; i++) torch_like_alloc(&d);
  printf("cuda_scen: mode=torchlike bytes=%llu\n", 6 * MiB);
  return 0;
}

/* Holds 10 MiB of device memory still for a while (the NVML timeline test). */
static NOINLINE void hold_alloc(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 1 * MiB)); /* KEEP:hold */
}

static int run_hold(double secs) {
  setup();
  CUdeviceptr d[10];
  for (int i = 0; i < 10; i++) hold_alloc(&d[i]);
  sleep_ms((long)(secs * 1000));
  printf("cuda_scen: mode=hold hold_bytes=%llu\n", 10 * MiB);
  return 0;
}

/* ------------------------------------------------------------------ pressure (metrics, guard) */

static NOINLINE void pressure_grow(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 2 * MiB)); /* LEAK:pressure */
}

static int run_pressure(double secs, const char *stop, const char *go) {
  double end = now_s() + secs;
  CHECK(cuInit(0));
  CUcontext c;
  CUdeviceptr d;
  for (int i = 0; i < 4; i++) { /* made, used, destroyed: the last 3 are recreations */
    CHECK(cuCtxCreate_v2(&c, 0, 0));
    CHECK(cuMemAlloc_v2(&d, 64 * KiB));
    if (i < 3) CHECK(cuCtxDestroy_v2(c));
  }
  uint64_t (*gc)(void);
  *(void **)&gc = dlsym(RTLD_DEFAULT, "lg_cuda_gc_without_cleanup");
  for (int i = 0; gc && i < 5; i++) gc();
  while (go && access(go, F_OK) != 0 && now_s() < end) sleep_ms(20); /* the guard sees low use first */
  size_t total = 0;
  CHECK(cuDeviceTotalMem_v2(&total, 0));
  size_t held = 64 * KiB;
  long steps = 0;
  for (; now_s() < end && !(stop && access(stop, F_OK) == 0); steps++) {
    if (held + 2 * MiB <= total / 10 * 8) {
      pressure_grow(&d);
      held += 2 * MiB;
    }
    step();
    sleep_ms(10);
  }
  printf("cuda_scen: mode=pressure recreated=3 gc=5 held=%zu total=%zu steps=%ld\n", held, total, steps);
  return 0;
}

/* ------------------------------------------------------------------ the other entry points */

static NOINLINE CUdeviceptr pitch_alloc(void) {
  CUdeviceptr d;
  size_t pitch = 0;
  CHECK(cuMemAllocPitch_v2(&d, &pitch, 1000, 64, 4)); /* KEEP:pitch */
  EXPECT(pitch == 1024, "the stand-in's pitch is 1024, got %zu", pitch);
  return d;
}
static NOINLINE CUdeviceptr pool_ptsz(CUmemoryPool pool, CUstream s) {
  CUdeviceptr d;
  CHECK(cuMemAllocFromPoolAsync_ptsz(&d, 128 * KiB, pool, s)); /* KEEP:pool_ptsz */
  return d;
}
static NOINLINE CUdeviceptr pool_gone(CUmemoryPool pool) {
  CUdeviceptr d;
  CHECK(cuMemAllocFromPoolAsync(&d, 256 * KiB, pool, NULL)); /* KEEP:pool_gone */
  return d;
}
static NOINLINE void v3_alloc(CUdeviceptr *d) {
  CHECK(cuMemAlloc_v2(d, 64 * KiB)); /* KEEP:ctx_v3 */
}

/* What the recorder counts on GPU 0 now (lg_cuda_stats, when recording). */
static lg_cuda_stats_t stats0(void) {
  lg_cuda_stats_t st;
  memset(&st, 0, sizeof st);
  int (*fn)(int, lg_cuda_stats_t *);
  *(void **)&fn = dlsym(RTLD_DEFAULT, "lg_cuda_stats");
  if (fn) fn(0, &st);
  return st;
}

static long long pool_used(CUmemoryPool pool) {
  cuuint64_t v = 0;
  CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
  return (long long)v;
}

static int mode_entries(void) {
  CHECK(cuInit(0));
  CUcontext c, c2, c3;
  CHECK(cuCtxCreate_v3(&c, NULL, 0, 0, 0));
  /* pitched: 1000 bytes wide -> pitch 1024, 64 rows: 64 KiB each */
  CUdeviceptr pd[4];
  for (int i = 0; i < 4; i++) pd[i] = pitch_alloc();
  CHECK(cuMemFree_v2(pd[3]));
  /* a pool on a stream, per-thread-default-stream variants */
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemoryPool p2, p3;
  CHECK(cuMemPoolCreate(&p2, &props));
  CUstream s;
  CHECK(cuStreamCreate(&s, 0));
  CUdeviceptr a[5];
  for (int i = 0; i < 5; i++) a[i] = pool_ptsz(p2, s);
  for (int i = 3; i < 5; i++) CHECK(cuMemFreeAsync_ptsz(a[i], s));
  /* enqueued, not done: the driver still holds them, the recorder no longer counts them */
  long long enq_recorded = stats0().device_bytes, enq_driver_used = pool_used(p2);
  int enq_pending = standin_pending_frees();
  CHECK(cuStreamSynchronize(s));
  long long sync_driver_used = pool_used(p2);
  int sync_pending = standin_pending_frees();
  /* a second pool, emptied, then destroyed: its reserve leaves the device's figure */
  CHECK(cuMemPoolCreate(&p3, &props));
  CUdeviceptr b[3];
  for (int i = 0; i < 3; i++) b[i] = pool_gone(p3);
  sleep_ms(300); /* seen live by a snapshot */
  for (int i = 0; i < 3; i++) CHECK(cuMemFreeAsync(b[i], NULL));
  CHECK(cuStreamSynchronize(NULL));
  CHECK(cuMemPoolTrimTo(p3, 64 * MiB)); /* trims nothing; the pools' figures are read now */
  long long reserved_before = stats0().pool_reserved_bytes;
  CHECK(cuMemPoolDestroy(p3));
  long long reserved_after = stats0().pool_reserved_bytes;
  /* registered host memory: two buffers, one unregistered, one unknown pointer refused */
  char *r1 = malloc(1 * MiB), *r2 = malloc(2 * MiB);
  memset(r1, 0, 1 * MiB);
  memset(r2, 0, 2 * MiB);
  CHECK(cuMemHostRegister_v2(r1, 1 * MiB, 0));
  CHECK(cuMemHostRegister_v2(r2, 2 * MiB, 0));
  CHECK(cuMemHostUnregister(r1));
  EXPECT(cuMemHostUnregister(r1 + 8) != CUDA_SUCCESS, "an unknown pointer is refused");
  long long registered = stats0().registered_bytes;
  /* cuCtxCreate_v3: a context made, destroyed (its records go), made again */
  CUdeviceptr d;
  CHECK(cuCtxCreate_v3(&c2, NULL, 0, 0, 0));
  for (int i = 0; i < 2; i++) v3_alloc(&d);
  sleep_ms(300);
  CHECK(cuCtxDestroy_v2(c2));
  CHECK(cuCtxCreate_v3(&c3, NULL, 0, 0, 0)); /* recreated */
  v3_alloc(&d);
  sleep_ms(300);
  printf("cuda_scen: mode=entries pitch_bytes=%llu pitch_blocks=3 ptsz_bytes=%llu ptsz_blocks=3 enq_recorded=%lld "
         "enq_driver_used=%lld enq_pending=%d sync_driver_used=%lld sync_pending=%d reserved_before=%lld "
         "reserved_after=%lld registered=%lld v3_bytes=%llu v3_blocks=1 calls_pitch=%ld calls_ptsz=%ld "
         "calls_free_ptsz=%ld calls_destroy=%ld calls_unreg=%ld calls_v3=%ld\n",
         3 * 64 * KiB, 3 * 128 * KiB, enq_recorded, enq_driver_used, enq_pending, sync_driver_used, sync_pending,
         reserved_before, reserved_after, registered, 64 * KiB, standin_calls("cuMemAllocPitch_v2"),
         standin_calls("cuMemAllocFromPoolAsync_ptsz"), standin_calls("cuMemFreeAsync_ptsz"),
         standin_calls("cuMemPoolDestroy"), standin_calls("cuMemHostUnregister"), standin_calls("cuCtxCreate_v3"));
  (void)c, (void)c3;
  return 0;
}

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  double secs = argc > 2 ? atof(argv[2]) : 4.0;
  int rc;
  if (!strcmp(m, "async")) rc = mode_async();
  else if (!strcmp(m, "vmm")) rc = mode_vmm();
  else if (!strcmp(m, "managed")) rc = mode_managed();
  else if (!strcmp(m, "pinned")) rc = mode_pinned();
  else if (!strcmp(m, "ctx")) rc = mode_ctx();
  else if (!strcmp(m, "threads")) rc = mode_threads();
  else if (!strcmp(m, "fork")) rc = mode_fork();
  else if (!strcmp(m, "arrays")) rc = mode_arrays();
  else if (!strcmp(m, "kvcache")) rc = run_leak_kvcache(secs);
  else if (!strcmp(m, "workspace")) rc = run_leak_workspace(secs);
  else if (!strcmp(m, "pool")) rc = run_pool_control(secs);
  else if (!strcmp(m, "ring")) rc = run_ring_control(secs);
  else if (!strcmp(m, "hold")) rc = run_hold(secs);
  else if (!strcmp(m, "um")) rc = mode_um();
  else if (!strcmp(m, "torchlike") && argc > 2) rc = mode_torchlike(argv[2]);
  else if (!strcmp(m, "entries")) rc = mode_entries();
  else if (!strcmp(m, "pressure")) rc = run_pressure(secs, argc > 3 ? argv[3] : NULL, argc > 4 ? argv[4] : NULL);
  else {
    fprintf(stderr, "usage: %s MODE [SECONDS]\n", argv[0]);
    return 2;
  }
  fflush(stdout);
  return rc || fails;
}
