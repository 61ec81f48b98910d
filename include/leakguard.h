/* SPDX-License-Identifier: MIT */
/*
 * leakguard.h - the one public header of leakguard.
 *
 * Programs that run under `leakguard run` (i.e. with libleakguard.so preloaded) may
 * call these functions to mark steps (training iterations, requests) and to query
 * the recorder. Programs that do not want a hard dependency can look the symbols up
 * with dlsym(RTLD_DEFAULT, "leakguard_step") and skip the call when it is absent.
 *
 * Conventions: functions are prefixed lg_ (leakguard_step is kept unprefixed-style
 * for the documented step marker), return 0 or a negative errno, and leave
 * out-parameters untouched on failure.
 */
#ifndef LEAKGUARD_H
#define LEAKGUARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LG_VERSION_MAJOR 0
#define LG_VERSION_MINOR 1

#if defined(__GNUC__)
#define LG_API __attribute__((visibility("default")))
#else
#define LG_API
#endif

/* ------------------------------------------------------------------ recorder */

/* Marks the end of one step (training iteration, served request...). The collector
 * takes a snapshot at every step marker (coalesced when steps come faster than it
 * polls, see docs/detection.md) and reports growth per step.
 * Async-signal-safe, lock-free, never allocates. Returns the new step count. */
LG_API uint64_t leakguard_step(void);

/* Same as leakguard_step(). */
LG_API uint64_t lg_step(void);

/* 1 when the recorder is active in this process (connected to a collector), else 0. */
LG_API int lg_recording(void);

/* The allocation site (stack id, as in the database's stacks table) of a live block.
 * block must be a pointer returned by the malloc family (the start of the block).
 * Returns 0 and sets *site, -ENOENT when the block is not recorded (allocated before
 * recording started, unsampled, or the recorder is off). Lock-free; reads the block's
 * header, so passing anything but a live block's start is undefined. */
LG_API int lg_site_of(const void *block, uint32_t *site);

/* For the leakguard Python module, under a sampled recording: has CPython's own
 * small-object allocator (pymalloc) count its requests towards the sampling, so that a
 * sampled object is recorded at its stack and every other object stays pymalloc's,
 * untouched. Call with the GIL held, early (the module does at its import). Returns 1
 * when pymalloc is wrapped, 0 when it is left as it is (full mode, not recording,
 * PYTHONMALLOC other than pymalloc). */
LG_API int lg_python_wrap(void);

/* The allocation site and size of a Python object (or buffer) at block that
 * lg_python_wrap's allocator recorded: 0, or -ENOENT for any other object. Safe to call
 * on any object's start (its memory block, GC header included). */
LG_API int lg_python_block(const void *block, uint32_t *site, uint64_t *size);

/* Pauses (pause != 0) or resumes (pause == 0) the recording of the calling thread's
 * allocations; pauses nest. For code that works inside the target on leakguard's
 * behalf (the Python module's holder explanation walks every object and allocates
 * tables for it: that memory is leakguard's, not the program's). Frees of recorded
 * blocks still count while paused. Returns the nesting depth after the call; 0 when
 * nothing is recorded. */
LG_API int lg_pause_recording(int pause);

/* Marks (held != 0) and unmarks that leakguard's own work holds the program: the
 * Python module's holder explanation keeps every Python thread waiting while it walks
 * the objects. The collector takes no snapshot while a process is held, so that the
 * observer's pause is not read as the program's memory standing still. Nests. */
LG_API void lg_program_held(int held);

/* Marks that the process has begun to exit: what it frees from now on is teardown,
 * left out of the analysis however long it takes. The recorder calls it from exit();
 * the Python module from its exit hook, before the interpreter's finalisation frees
 * every object. */
LG_API void lg_exiting(void);

/* Memory spaces: every allocation carries one. Device, managed and pinned memory are
 * recorded by the CUDA driver-API hooks (docs/cuda.md), with the GPU's ordinal. */
typedef enum lg_space {
  LG_SPACE_HOST = 0,
  LG_SPACE_MMAP = 1, /* anonymous mmap(2) regions, recorded as their own kind */
  LG_SPACE_DEVICE = 2,
  LG_SPACE_MANAGED = 3,
  LG_SPACE_PINNED = 4,
  LG_SPACE_COUNT
} lg_space_t;

/* Stable name of a space: "host", "mmap", "device", "managed", "pinned". */
LG_API const char *lg_space_name(lg_space_t space);

/* GPU memory (docs/cuda.md). The allocation site of memory recorded by the CUDA
 * driver-API hooks: addr is a device, managed or pinned address the driver returned,
 * a cuMemMap'ed address, or an address inside such a block (found by a scan: meant
 * for explain-time lookups, not hot paths). Returns 0 and sets *site (and *device
 * when not NULL), or -ENOENT when addr is not recorded or the recorder is off. */
LG_API int lg_cuda_site_of(uint64_t addr, uint32_t *site, int *device);

/* Counts one Python garbage collection that freed objects holding CUDA memory while
 * the CUDA caching allocator returned none of it to the driver (the metric
 * gc_triggered_without_cuda_cleanup_count, docs/cuda.md); the leakguard Python module
 * calls it from its gc callback. Returns the new count (0 when not recording). */
LG_API uint64_t lg_cuda_gc_without_cleanup(void);
/* The count so far (0 when not recording). */
LG_API uint64_t lg_cuda_gc_without_cleanup_count(void);

/* GPU memory the recorder saw in this process on one device (bytes are exact: GPU
 * allocations are never sampled). */
typedef struct lg_cuda_stats {
  int64_t device_bytes, managed_bytes, pinned_bytes; /* live, recorded at the driver API */
  int64_t registered_bytes;                          /* host memory cuMemHostRegister'ed */
  int64_t pool_reserved_bytes, pool_used_bytes;      /* stream-ordered pools (last read) */
  uint64_t total_bytes;                              /* the device's memory, 0 unknown */
  uint32_t contexts, contexts_recreated;
  uint64_t gc_without_cuda_cleanup; /* process-wide, see above */
} lg_cuda_stats_t;

/* torch.cuda.memory_allocated(dev) and memory_reserved(dev) as read now (the leakguard
 * Python module calls it at its watcher's ticks and at exit; another framework's
 * allocator may too): stored per device in the recorder's region, into the database at
 * every snapshot, shown by the report next to what the driver saw (docs/cuda.md).
 * 0, -ENODEV (dev outside 0..15), -ENOENT (not recording). */
LG_API int lg_cuda_torch_memory(int dev, int64_t allocated_bytes, int64_t reserved_bytes);

/* Devices used in this process (highest ordinal + 1); 0 when none or not recording. */
LG_API int lg_cuda_devices(void);
/* Fills *out for device dev: 0, -ENODEV (dev not used), -ENOENT (not recording). */
LG_API int lg_cuda_stats(int dev, lg_cuda_stats_t *out);

/* ------------------------------------------------------------------ guard / breaker
 * A guard (`leakguard guard`, or `leakguard run --guard`) grades memory pressure
 * into levels and publishes the level to every process running with the recorder.
 * Programs read it to degrade gracefully before the OOM killer acts. Without a guard
 * the level stays LG_LEVEL_NORMAL and these calls are cheap no-ops. */
typedef enum lg_level {
  LG_LEVEL_NORMAL = 0,
  LG_LEVEL_WARN = 1,
  LG_LEVEL_BREAKER = 2,
  LG_LEVEL_EMERGENCY = 3
} lg_level_t;

/* "normal", "warn", "breaker", "emergency". */
LG_API const char *lg_level_name(lg_level_t level);

/* The current level (a relaxed load from shared memory; async-signal-safe). */
LG_API lg_level_t lg_level(void);

/* Called on a helper thread (all signals blocked) when the level changes.
 * Returns a subscription id >= 0, or -ENOMEM / -EINVAL. At most 32 subscribers. */
typedef void (*lg_level_cb)(lg_level_t old_level, lg_level_t new_level, void *arg);
LG_API int lg_subscribe(lg_level_cb cb, void *arg);
LG_API int lg_unsubscribe(int id);

/* Degraded batch size for the current level: base at normal, 0.7x at warn, 0.5x at
 * breaker, 0.25x at emergency; never below 1 (for base >= 1). */
LG_API size_t lg_batch_size(size_t base);

/* Admission control: 1 to accept new work, 0 at breaker and above (answer 503 with
 * Retry-After, or redirect). */
LG_API int lg_admit(void);

/* Emergency eviction: a registered cache frees what it can when asked and returns
 * the bytes it freed. At emergency (or on lg_evict(bytes)) caches are asked least
 * recently used first (lg_evict_touch marks a cache as used). */
typedef size_t (*lg_evict_cb)(size_t want_bytes, void *arg);
LG_API int lg_evict_register(const char *name, lg_evict_cb cb, void *arg);
LG_API void lg_evict_touch(int id);
/* Asks caches to free want_bytes in LRU order; returns the bytes freed. */
LG_API size_t lg_evict(size_t want_bytes);

/* Per-request memory accounting: allocations made by this thread between
 * lg_tag_push(name) and lg_tag_pop() are attributed to the tag (live bytes and peak,
 * frees included wherever they happen). Tags nest (innermost wins, depth 8). Names
 * are interned (at most 1024 distinct tags). Returns the tag id >= 1, or -errno. */
LG_API int lg_tag_push(const char *name);
LG_API void lg_tag_pop(void);

typedef struct lg_tag_stats {
  const char *name;
  int64_t live_bytes;
  int64_t peak_bytes;
  uint64_t allocations;
} lg_tag_stats_t;
/* Statistics of tag id; 0 or -ENOENT. */
LG_API int lg_tag_stats(int id, lg_tag_stats_t *out);

/* Quota: when a tag's live bytes exceed limit, cb(tag, live, arg) runs once per
 * crossing, on the allocating thread, inside the malloc call that crossed it, after the
 * block is recorded and with the recorder's own state released (the callback may
 * allocate; its allocations are counted). With cb == NULL, allocations
 * over the quota fail with ENOMEM instead. 0 or -errno. */
typedef void (*lg_quota_cb)(int tag, int64_t live_bytes, void *arg);
LG_API int lg_tag_quota(const char *name, int64_t limit_bytes, lg_quota_cb cb, void *arg);

/* ------------------------------------------------------------------ classifier */

/* Shapes of a memory curve. Names (lg_pattern_name) are a stable interface. */
typedef enum lg_pattern {
  LG_PATTERN_STABLE = 0,
  LG_PATTERN_LINEAR_LEAK,
  LG_PATTERN_ACCELERATING_LEAK,
  LG_PATTERN_STEP_LEAK,
  LG_PATTERN_PLATEAU,
  LG_PATTERN_SAWTOOTH,
  LG_PATTERN_FRAGMENTATION,
  LG_PATTERN_COUNT
} lg_pattern_t;

/* "stable", "linear-leak", "accelerating-leak", "step-leak", "plateau", "sawtooth",
 * "fragmentation"; NULL for an out-of-range value. */
LG_API const char *lg_pattern_name(lg_pattern_t p);

/* 1 for the three leak classes, else 0. */
LG_API int lg_pattern_is_leak(lg_pattern_t p);

/* Classifies a memory curve.
 *  t[n]     sample times (any unit), strictly increasing
 *  v[n]     values (live bytes or any scale), finite
 *  rss[n]   optional second series (resident memory), or NULL; needed to ever
 *           predict LG_PATTERN_FRAGMENTATION
 *  n        number of samples, >= 8
 *  out      receives the most probable class
 *  probs    optional, receives LG_PATTERN_COUNT probabilities summing to 1
 * Returns 0, -EINVAL for n < 8 or NULL t/v/out, -EDOM for NaN/Inf or time that is not
 * strictly increasing. Thread-safe, no allocation, O(n). */
LG_API int lg_classify(const double *t, const double *v, const double *rss, size_t n, lg_pattern_t *out,
                       double probs[LG_PATTERN_COUNT]);

/* ------------------------------------------------------------------ isolated calls
 * Runs fn in a copy-on-write fork of the caller under a seccomp filter, a memory
 * budget and a timeout; the copy is discarded afterwards (docs/isolate.md, issue #15).
 * Defined in libleakguard_isolate.so (link -lleakguard_isolate) and in the Python
 * module; not in the preload library. Linux x86-64. */
#define LG_ISOLATE_OK 0
#define LG_ISOLATE_BUDGET 1    /* the child grew past max_rss and was killed */
#define LG_ISOLATE_FORBIDDEN 2 /* a denied system call: lg_isolate_result.syscall */
#define LG_ISOLATE_TIMEOUT 3   /* ran past timeout_s and was killed */
#define LG_ISOLATE_CRASH 4     /* died of a signal (lg_isolate_result.signal) or exited */
#define LG_ISOLATE_ERROR 5     /* bad arguments or the isolation could not be set up */
#define LG_ISOLATE_NCODES 6

/* Capabilities a child may keep (default 0: none). */
#define LG_ALLOW_NET 0x1u   /* socket, connect, bind, listen, accept; inherited sockets kept */
#define LG_ALLOW_WRITE 0x2u /* open for writing, creat, unlink, rename, mkdir, truncate... */
#define LG_ALLOW_EXEC 0x4u  /* execve, execveat */
#define LG_ALLOW_PROC 0x8u  /* fork, vfork, clone of processes, unshare, setns */

/* How a budget is enforced (lg_isolate_opts.budget_by, lg_isolate_result.budget_by). */
#define LG_BUDGET_AUTO 0   /* a cgroup of the child's own where the hierarchy allows, else RSS */
#define LG_BUDGET_RSS 1    /* the parent polls the child's RSS every 2 ms and kills it */
#define LG_BUDGET_CGROUP 2 /* the kernel: memory.max (v2) or memory.limit_in_bytes (v1) */

/* The handler, run in the child: reads in[inlen], returns its output in a buffer from
 * malloc() (*out, *outlen; NULL/0 for none). Its return value is passed back as
 * lg_isolate_result.status. arg is lg_isolate_opts.arg (as mapped in the child). */
typedef int (*lg_isolate_fn)(const void *in, size_t inlen, void **out, size_t *outlen, void *arg);

typedef struct lg_isolate_opts {
  size_t max_rss;   /* budget: bytes the child may add to the memory it shares; 0 none */
  double timeout_s; /* wall-clock limit; <= 0 none */
  unsigned allow;   /* LG_ALLOW_* */
  int pool_size;    /* reserved for the pre-forked pool (0: fork per call) */
  int reuse_k;      /* pool only: requests one pooled child serves (0, 1: one); its memory is
                     * checked between them (docs/isolate.md) */
  size_t max_out;   /* largest accepted output; 0: 256 MiB */
  void *arg;        /* passed to fn */
  /* Optional fork hooks (an interpreter's: CPython's PyOS_BeforeFork...), called with
   * hook_arg: before_fork and after_fork_parent in the caller around fork(), the latter
   * also when fork fails; after_fork_child in the child before its filter. */
  void (*before_fork)(void *hook_arg);
  void (*after_fork_parent)(void *hook_arg);
  void (*after_fork_child)(void *hook_arg);
  void *hook_arg;
  int budget_by;             /* LG_BUDGET_*: AUTO (0), RSS, or CGROUP (an error where none can be made) */
  const char *cgroup_parent; /* where the children's cgroups go; NULL: LEAKGUARD_ISOLATE_CGROUP, else
                              * the caller's own memory cgroup (docs/isolate.md) */
} lg_isolate_opts_t;

typedef struct lg_isolate_result {
  int code;          /* LG_ISOLATE_* (also the return value) */
  int status;        /* fn's return value (LG_ISOLATE_OK only) */
  int signal;        /* LG_ISOLATE_CRASH: the signal, 0 when the child exited */
  int exit_code;     /* LG_ISOLATE_CRASH without a signal: the exit code */
  int syscall_nr;    /* LG_ISOLATE_FORBIDDEN: the call's number, else -1 */
  char syscall[32];  /* LG_ISOLATE_FORBIDDEN: its name ("socket", "openat"...); "unknown"
                      * when made with SIGSYS blocked (posix_spawn) */
  char message[128]; /* one line saying what happened */
  size_t peak_rss;   /* the child's peak growth over what it shared, bytes */
  double seconds;    /* wall time of the call */
  int budget_by;     /* how max_rss was enforced: LG_BUDGET_RSS or _CGROUP; 0 without a budget */
} lg_isolate_result_t;

/* Runs fn(in, inlen, ...) isolated. opts may be NULL (no budget, no timeout, nothing
 * allowed); res may be NULL. On LG_ISOLATE_OK, *out (free() it) and *outlen hold fn's
 * output (NULL, 0 when it gave none); otherwise *out is NULL. Returns LG_ISOLATE_*. Thread-safe; the caller is
 * never signalled or killed by what the child does. */
LG_API int lg_isolate_call(lg_isolate_fn fn, const void *in, size_t inlen, void **out, size_t *outlen,
                           const lg_isolate_opts_t *opts, lg_isolate_result_t *res);

/* The pre-forked pool: opts->pool_size children of fn forked ahead from the caller as
 * it is now (warm it up first), refilled by a background thread. A pooled call gives
 * the same results as lg_isolate_call. The fork hooks run in the thread that forks:
 * the refill thread, or a call that found the pool empty (an interpreter's hooks take
 * its lock there: CPython's, see src/python/isolate.c). NULL with errno EINVAL (no fn,
 * pool_size <= 0 or > 1024) or ENOMEM. Calls are thread-safe; free it once, after them. */
typedef struct lg_isolate_pool lg_isolate_pool_t;
LG_API lg_isolate_pool_t *lg_isolate_pool_new(lg_isolate_fn fn, const lg_isolate_opts_t *opts);
LG_API int lg_isolate_pool_call(lg_isolate_pool_t *pool, const void *in, size_t inlen, void **out, size_t *outlen,
                                lg_isolate_result_t *res);
/* Children ready now (for tests and metrics). */
LG_API int lg_isolate_pool_ready(lg_isolate_pool_t *pool);
/* Kills the ready children, stops the refill thread, frees. */
LG_API void lg_isolate_pool_free(lg_isolate_pool_t *pool);

/* How a budget would be enforced now with LG_BUDGET_AUTO: LG_BUDGET_CGROUP (detail:
 * the directory the children's cgroups go in) or LG_BUDGET_RSS (detail: why no cgroup). */
LG_API int lg_isolate_budget_method(char *detail, size_t size);

/* "ok", "budget", "forbidden", "timeout", "crash", "error"; NULL out of range. */
LG_API const char *lg_isolate_code_name(int code);

/* Counters of this process's isolated calls (in-process; see docs/isolate.md). */
#define LG_ISOLATE_RSS_BUCKETS 8 /* peak growth <= 1, 4, 16, 64, 256 MiB, 1, 4 GiB, +Inf */
typedef struct lg_isolate_stats {
  uint64_t requests[LG_ISOLATE_NCODES]; /* by code */
  uint64_t peak_rss_bucket[LG_ISOLATE_RSS_BUCKETS];
  uint64_t peak_rss_sum; /* bytes */
} lg_isolate_stats_t;
LG_API void lg_isolate_stats(lg_isolate_stats_t *out);
/* ------------------------------------------------------------------ liblgpool
 * A generational caching allocator for device memory (the CUDA driver, dlopen'ed) or
 * host memory (mmap), in its own library: liblgpool.so (docs/pool.md). Three
 * generations, each with its own pools and release window; the guard's levels trim
 * them (warn: young, breaker: young and middle, emergency: every cache). */
/* The modules whose frames a site profile skips when LEAKGUARD_POOL_SKIP is not set:
 * they call the allocator on everyone's behalf (comma-separated file-name prefixes).
 * `leakguard report --format pool-profile` skips the same ones. */
#define LG_POOL_SKIP_DEFAULT "libc10_cuda.so,libc10.so,libtorch_cuda.so,libtorch_cpu.so,libtorch.so,libcudart.so"

typedef struct lg_pool lg_pool_t;

typedef enum lg_gen {
  LG_GEN_AUTO = -1, /* from the site profile (LEAKGUARD_POOL_PROFILE), else the default */
  LG_GEN_YOUNG = 0,
  LG_GEN_MIDDLE = 1,
  LG_GEN_OLD = 2,
  LG_GEN_COUNT = 3
} lg_gen_t;

/* "young", "middle", "old"; NULL out of range. */
LG_API const char *lg_gen_name(lg_gen_t gen);

typedef enum lg_pool_backend { LG_POOL_HOST = 0, LG_POOL_CUDA = 1 } lg_pool_backend_t;

typedef struct lg_pool_config {
  lg_pool_backend_t backend;
  int device;                       /* CUDA ordinal */
  int single;                       /* 1: one pool for everything (a PyTorch-like cache) */
  uint64_t window_ms[LG_GEN_COUNT]; /* release windows; UINT64_MAX: kept until pressure */
  lg_gen_t default_gen;             /* for LG_GEN_AUTO without a profile entry */
  uint64_t (*clock_ms)(void *arg);  /* NULL: CLOCK_MONOTONIC */
  void *clock_arg;
  int subscribe;       /* 1: trim on the guard's level changes */
  const char *profile; /* site profile file, or NULL (docs/pool.md) */
} lg_pool_config_t;

/* Defaults: host backend, windows young 100 ms, middle 10 s, old UINT64_MAX. */
LG_API void lg_pool_config_init(lg_pool_config_t *cfg);
/* NULL with errno set on failure (ENOSYS: no CUDA driver). */
LG_API lg_pool_t *lg_pool_create(const lg_pool_config_t *cfg);
/* Releases every cached block and the pool (blocks still in use are released too). */
LG_API void lg_pool_destroy(lg_pool_t *pool);
/* A block of size bytes for stream (NULL: the default stream) in generation gen. */
LG_API void *lg_pool_alloc_gen(lg_pool_t *pool, size_t size, lg_gen_t gen, void *stream);
/* Frees p on stream: another stream gets it only after an event recorded now says
 * the stream got there. 0, -EINVAL (unknown pointer), -EALREADY (double free); bad
 * frees are counted and the first of each kind reported on stderr. */
LG_API int lg_pool_free(lg_pool_t *pool, void *p, void *stream);
/* Releases cached memory for a guard level: warn young, breaker young and middle,
 * emergency every generation (windows ignored). Returns the bytes given back. */
LG_API size_t lg_pool_trim(lg_pool_t *pool, lg_level_t level);
/* Releases what outlived its generation's window (also done inside alloc/free). */
LG_API size_t lg_pool_tick(lg_pool_t *pool);

typedef struct lg_pool_stats {
  uint64_t reserved_bytes, peak_reserved_bytes;   /* held from the driver */
  uint64_t allocated_bytes, peak_allocated_bytes; /* handed out (rounded sizes) */
  uint64_t requested_bytes;                       /* handed out (asked sizes) */
  uint64_t reserved_gen[LG_GEN_COUNT], cached_gen[LG_GEN_COUNT];
  uint64_t driver_allocs, driver_frees, event_records, event_queries;
  uint64_t double_frees, unknown_frees, alloc_failures;
  uint64_t trims[4];         /* trims per level */
  uint64_t adopted_segments; /* idle segments taken over by another generation */
} lg_pool_stats_t;
LG_API int lg_pool_stats(lg_pool_t *pool, lg_pool_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif /* LEAKGUARD_H */
