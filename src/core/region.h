/* SPDX-License-Identifier: MIT */
/*
 * region.h - the shared-memory region between a recorded process and the collector.
 *
 * Data flow: the preload library or the attach agent (capture) writes; the collector
 * reads the site counters and the device gauges through the core model (core/model.c;
 * the few header words it needs besides, such as steps, dropped and tags, directly),
 * the guard through guard/regions.c.
 * Each recorded process owns one region: a sparse memfd that it creates at start-up
 * (and again in a forked child) and hands to the collector over a Unix socket with
 * SCM_RIGHTS. Nothing in the allocation hot path talks to the collector: hooks update
 * per-thread counter shards in the region, so the target never blocks on the
 * collector and a killed target loses nothing (the collector keeps the mapping).
 *
 * Layout (offsets in lg_region_hdr, all sections 64-byte aligned):
 *   header | stack index (open addressing) | stack records | frame arena |
 *   module records | shard descriptors | chunk arena (site counters)
 *
 * Concurrency contract:
 *  - stack records and frames are written once, under the region's slow-path spin
 *    lock, then published by a release store of nstacks; readers use acquire loads.
 *  - a site's counters live in per-thread shards; a shard has one writer at a time
 *    (relaxed load+store), except the overflow shard 0 (atomic adds). The collector
 *    sums shards; sums of racy reads are eventually exact.
 *  - module records are appended under the slow-path lock and published by nmodules.
 * Both sides are C11; this header is the format contract ("version" changes when the
 * layout does).
 */
#ifndef LG_REGION_H
#define LG_REGION_H

#include <stdatomic.h>
#include <stdint.h>

#define LG_REGION_MAGIC 0x4e4f494745524c47ULL /* "GLREGION" little endian */
#define LG_REGION_VERSION                                                                                              \
  10 /* 2: CUDA (device byte of stack records, cuda_* at the end of the header);
                             3: reaped-children ring (its own section, reaped_off);
                             4: held (the program held by leakguard's own work);
                             5: torch.cuda's allocated/reserved bytes per device;
                             6: isolated calls (iso_*, lg_region_isolate_note);
                             7: freed blocks by age per site (lg_site_ctr.freed_age);
                             8: ... and by age in steps (freed_step_age, stepmap_off);
                             9: the device record and its gauges vendor-neutral (gpu_*,
                                lg_gpu_dev_t, gpu_vendor), CUDA the first vendor;
                            10: lazy start (lazy, lazy_began_ns, lazy_before_bytes) */

#define LG_MAX_DEPTH 256
#define LG_DEFAULT_DEPTH 64
#define LG_SITES_PER_CHUNK 64
#define LG_ERAS 24              /* birth-era histogram buckets, see lg_era() */
#define LG_AGES 16              /* freed-age histogram buckets, see lg_age_bucket() */
#define LG_TICK_NS 100000000ULL /* one epoch tick: 100 ms, advanced by the collector */
#define LG_STEPMAP 16384        /* step counts of the last ticks, see stepmap_off */
#define LG_MODULE_PATH 240
#define LG_ISO_CODES 8   /* isolated-call outcomes counted (LG_ISOLATE_NCODES <= this) */
#define LG_ISO_BUCKETS 8 /* = LG_ISOLATE_RSS_BUCKETS */

/* Special stack ids. Real stacks start at 2: id 1 is the overflow site, where
 * allocations go when the stack tables are full (counted in hdr.dropped). */
#define LG_STACK_NONE 0u /* block not recorded (untracked / unsampled) */

/* Region flags (hdr.flags). */
#define LG_RF_FOLLOW 0x1u /* children are followed */
#define LG_RF_MMAP 0x2u   /* anonymous mmap is recorded */

/* Process state (hdr.state), written by the recorder. LG_PS_EXECED is set by the exec
 * hooks just before the real exec (and undone if it fails). */
enum { LG_PS_RUNNING = 1, LG_PS_EXITING = 2, LG_PS_EXECED = 3 };

/* Lazy start (hdr.lazy, docs/design.md "Lazy start"): a process image other than the started
 * process's first one says hello with an empty region and records nothing, no stack,
 * no counter, until it has lived LEAKGUARD_LAZY's time or allocated its bytes; a
 * wrapper's helpers (a pyenv shim's bash and readlink, a `bash -c` launcher) mostly end
 * before. LG_LAZY_OFF: recorded from its start; LG_LAZY_WAITING: nothing recorded yet;
 * LG_LAZY_BEGAN: recording began at lazy_began_ns, after about lazy_before_bytes were
 * allocated unrecorded. */
enum { LG_LAZY_OFF = 0, LG_LAZY_WAITING = 1, LG_LAZY_BEGAN = 2 };

/* Per-site counters of one shard; 256 bytes, four cache lines. Signed: a block freed
 * by another thread than the one that allocated it makes a shard go negative. */
typedef struct lg_site_ctr {
  int64_t live_bytes;
  int64_t live_blocks;
  uint64_t alloc_bytes;
  uint64_t alloc_blocks;
  int32_t era_blocks[LG_ERAS]; /* live blocks by birth era */
  /* blocks freed, by their age when freed (ticks since their birth epoch, in
   * lg_age_bucket()'s log2 buckets); wraps: readers sum the shards as int32 */
  int32_t freed_age[LG_AGES];
  /* the same blocks by their age in steps (leakguard_step calls since their birth
   * tick's step count, stepmap_off) in the same buckets; only counted once the
   * program marked a step */
  int32_t freed_step_age[LG_AGES];
} lg_site_ctr_t;

typedef struct lg_stack_rec {
  uint64_t hash;
  uint32_t frames; /* index of the first frame in the frame arena */
  uint16_t depth;
  uint8_t space;  /* lg_space_t */
  uint8_t device; /* GPU ordinal for the device, managed and pinned spaces; 0 otherwise */
} lg_stack_rec_t;

typedef struct lg_module_rec {
  uint64_t start; /* lowest mapped address of the module (load bias + min vaddr) */
  uint64_t end;
  uint64_t bias; /* dlpi_addr */
  char path[LG_MODULE_PATH];
} lg_module_rec_t;

/* Per-request tags (lg_tag_push): live bytes and peak of the allocations made inside
 * a tag, wherever they are freed. Tag ids are 1..tags_cap-1 (10 bits in a block header). */
#define LG_TAG_NAME 48
#define LG_MAX_TAGS 1024
typedef struct lg_tag_rec {
  char name[LG_TAG_NAME];
  _Atomic int64_t live_bytes;
  _Atomic int64_t peak_bytes;
  _Atomic uint64_t allocations;
  int64_t quota_bytes;   /* 0: none */
  _Atomic uint32_t over; /* 1 while above the quota */
  uint32_t fail;         /* 1: allocations over the quota fail (no callback) */
} lg_tag_rec_t;

/* Python frames (CPython 3.9-3.13): a stack's frame word with LG_PYFRAME_BIT set is not a
 * native address but LG_PYFRAME_BIT | index into the pyframe table. Python frames come
 * first in a stack (innermost first), then the native frames. */
#define LG_PYFRAME_BIT (1ULL << 63)
typedef struct lg_pyframe_rec {
  uint64_t code; /* PyCodeObject address (identity only) */
  int32_t line;
  uint32_t file; /* offset of the NUL-terminated file name in the string arena */
  uint32_t func; /* offset of the function name (qualified from 3.11) */
  uint32_t pad;
} lg_pyframe_rec_t;

typedef struct lg_shard_desc {
  _Atomic uint32_t owner; /* 0 free, else a thread id (gettid) holding it */
  uint32_t nchunks_cap;
  uint64_t chunk_dir; /* offset of uint64_t[nchunks_cap]: chunk offsets (0 = none) */
} lg_shard_desc_t;

/* GPU memory, any vendor: per-device gauges (bytes are exact: GPU allocations are never
 * sampled), flags and notes. The device ordinals are those of gpu_vendor's API. */
#define LG_GPU_MAX_DEVICES 16
#define LG_GPU_NOTES 12
#define LG_GPU_NOTE_LEN 96
enum { LG_GPU_VENDOR_NONE = 0, LG_GPU_VENDOR_CUDA = 1, LG_GPU_VENDOR_HIP = 2 /* reserved: no hooks yet */ };
#define LG_GPU_SEEN 0x1u      /* a driver entry point was bound to a wrapper */
#define LG_GPU_ALLOCATED 0x2u /* a GPU allocation was recorded */
#define LG_CUDA_UM 0x4u       /* CUDA: CUPTI Unified Memory counters are on (--cuda-um) */
#define LG_CUDA_TORCH 0x8u    /* CUDA: PyTorch's CUDA libraries are loaded (libc10_cuda.so) */
#define LG_CUDA_UM_SITES 16
/* Unified Memory counters of one managed allocation site (CUPTI, --cuda-um). site 0:
 * free entry; LG_CUDA_UM_UNKNOWN: addresses no recorded managed block contains. */
#define LG_CUDA_UM_UNKNOWN 1u
typedef struct lg_cuda_um {
  _Atomic uint32_t site;
  uint32_t pad;
  _Atomic uint64_t cpu_page_faults, gpu_page_faults; /* fault counts */
  _Atomic uint64_t bytes_htod, bytes_dtoh;           /* bytes migrated to / from the device */
  _Atomic uint64_t thrashing;                        /* thrashing events */
} lg_cuda_um_t;
typedef struct lg_gpu_dev {
  _Atomic uint64_t total_bytes;        /* the device's memory (cuDeviceTotalMem_v2), 0 = unknown */
  _Atomic int64_t device_bytes;        /* live device-space bytes (also per site) */
  _Atomic int64_t managed_bytes;       /* live managed-space bytes (also per site) */
  _Atomic int64_t pinned_bytes;        /* live pinned-space bytes (also per site) */
  _Atomic int64_t registered_bytes;    /* host memory page-locked by cuMemHostRegister */
  _Atomic int64_t pool_reserved_bytes; /* stream-ordered pools: RESERVED_MEM_CURRENT (last read) */
  _Atomic int64_t pool_used_bytes;     /* USED_MEM_CURRENT (last read) */
  _Atomic int64_t vmm_mapped_bytes;    /* cuMemMap'ed and not yet unmapped */
  _Atomic uint32_t contexts;           /* live contexts (a retained primary context counts once) */
  _Atomic uint32_t contexts_created;
  _Atomic uint32_t contexts_destroyed;
  _Atomic uint32_t contexts_recreated; /* created after a context of the device was destroyed */
  _Atomic uint32_t pools;              /* live pools known to the recorder */
  /* v5: torch.cuda.memory_allocated / memory_reserved of this device, as the Python
   * module last read them (lg_cuda_torch_memory; docs/cuda.md). torch_seen: 1 once
   * written (0: no torch figures), set after the two values (release). */
  _Atomic uint32_t torch_seen;
  _Atomic int64_t torch_allocated_bytes;
  _Atomic int64_t torch_reserved_bytes;
} lg_gpu_dev_t;

/* One child reaped by the recorded process (wait, waitpid, wait3, wait4, waitid).
 * Writer: claims entry n with a fetch-add on reaped_head, stores seq = 0, pid and
 * status, then seq = n + 1 (release). Reader: entry n is valid when seq == n + 1 both
 * before and after reading pid and status (acquire); seq > n + 1 means the ring
 * wrapped and entry n was lost. status is a wait(2) status word. */
#define LG_REAPED_RING 1024 /* 16 KiB; the collector reads it every 10 ms or so */
typedef struct lg_reaped {
  _Atomic uint64_t seq;
  int32_t pid;
  int32_t status;
} lg_reaped_t;

typedef struct lg_region_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t hdr_size;
  uint64_t size; /* bytes mapped */
  int32_t pid, ppid;
  uint32_t flags;
  uint32_t max_depth;
  uint64_t sample_bytes; /* 0: every allocation recorded */
  uint64_t start_ns;     /* CLOCK_MONOTONIC when the region was created */

  /* written by the collector, or by a guard that maps the region */
  _Atomic uint32_t epoch;         /* ticks of LG_TICK_NS since start, for block ages */
  _Atomic uint32_t guard_level;   /* lg_level_t published by a guard */
  _Atomic uint64_t guard_seq;     /* bumped on every level change */
  _Atomic uint64_t evict_request; /* bytes a guard asks the process to evict */

  /* written by the recorder */
  _Atomic uint64_t steps;
  _Atomic uint64_t dropped; /* allocations that could not be attributed (tables full) */
  _Atomic uint32_t nstacks; /* published stack records: ids 1..nstacks-1 valid */
  _Atomic uint32_t nmodules;
  _Atomic uint32_t nshards;
  _Atomic uint32_t state;
  _Atomic uint32_t lock;       /* slow-path spin lock (stack inserts, modules, chunks) */
  _Atomic uint32_t module_gen; /* bumped by dlopen/dlclose hooks: rescan modules */
  _Atomic uint64_t frames_used;
  _Atomic uint64_t arena_used;

  /* layout */
  uint64_t index_off;
  uint32_t index_cap;  /* the largest generation's slots (index_gen) */
  uint32_t stacks_cap; /* index_cap = 2*stacks_cap, power of 2 */
  uint64_t stacks_off;
  uint64_t frames_off;
  uint64_t frames_cap;
  uint64_t modules_off;
  uint32_t modules_cap;
  uint32_t shards_cap;
  uint64_t tags_off;
  _Atomic uint32_t ntags;
  uint32_t tags_cap;
  uint64_t pyframes_off;
  _Atomic uint32_t npyframes;
  uint32_t pyframes_cap;
  uint64_t pystr_off;
  _Atomic uint32_t pystr_used;
  uint32_t pystr_cap;
  uint64_t shards_off;
  uint64_t arena_off;
  uint64_t arena_cap;

  /* v2: GPU memory (written by src/capture/gpu/; docs/cuda.md; vendor-neutral names
   * since v9). GPU allocations are ordinary sites (space device/managed/pinned, device
   * ordinal in the stack record); what is not an allocation with a stack lives here. */
  _Atomic uint32_t gpu_flags;                    /* LG_GPU_*, and the vendor's (LG_CUDA_*) */
  _Atomic uint32_t gpu_ndev;                     /* highest device ordinal seen + 1 (gauges: < LG_GPU_MAX_DEVICES) */
  _Atomic uint64_t gpu_calls;                    /* tracked driver calls that succeeded */
  _Atomic uint64_t gpu_unknown_frees;            /* frees of GPU memory that was not recorded */
  _Atomic uint64_t gc_without_cuda_cleanup;      /* Python gc runs that freed no CUDA memory (docs/cuda.md) */
  _Atomic uint32_t gpu_nnotes;                   /* published notes (written under the slow-path lock) */
  _Atomic uint32_t gpu_vendor;                   /* LG_GPU_VENDOR_*: whose API the device ordinals are */
  char gpu_notes[LG_GPU_NOTES][LG_GPU_NOTE_LEN]; /* "cuMemFoo: passed through untracked"... */
  lg_gpu_dev_t gpu[LG_GPU_MAX_DEVICES];
  lg_cuda_um_t cuda_um[LG_CUDA_UM_SITES];
  /* version 3: written by the recorder's wait-family hooks: children this process
   * reaped itself, so that the collector learns the exit status of processes it is not
   * the parent of. The ring (LG_REAPED_RING lg_reaped_t) is its own section, at
   * reaped_off, so that the header stays within its first page. */
  _Atomic uint64_t reaped_head; /* entries ever written; entry n is in slot n % LG_REAPED_RING */
  uint64_t reaped_off;          /* the ring; 0: none */
  /* version 4: > 0 while leakguard's own work holds the program (lg_program_held: the
   * Python module's holder explanation keeps every Python thread waiting for up to its
   * budget). Its memory does not move meanwhile, and a flat stretch of the curve that
   * the observer made is not the program's: the collector takes no snapshot or live
   * tick of a held process. */
  _Atomic uint32_t held;
  /* The stack index's generation (the recorder's alone; region_writer.c index_at):
   * generation g holds 2^(LG_INDEX_MIN_LOG2 + g) slots, at most index_cap, after the
   * generations before it in the index section. Was padding: 0 is the first one. */
  _Atomic uint32_t index_gen;
  /* version 6: the isolated calls this process made (lg_isolate_call, docs/isolate.md),
   * for the collector's Prometheus endpoint: calls by outcome (the LG_ISOLATE_* codes),
   * and the children's peak memory growth in buckets (<= 1, 4, 16, 64, 256 MiB, 1, 4
   * GiB, more) with its sum. Written by the isolate code through
   * lg_region_isolate_note (below), which libleakguard.so exports. */
  _Atomic uint64_t iso_requests[LG_ISO_CODES];
  _Atomic uint64_t iso_rss_bucket[LG_ISO_BUCKETS];
  _Atomic uint64_t iso_rss_sum;
  /* version 8: the step count when each of the last LG_STEPMAP ticks opened (uint32,
   * slot epoch % LG_STEPMAP), written by the collector before it publishes the epoch.
   * A block born at epoch e and freed now is at most (steps - slot e) steps old; the
   * block header's birth step modulo 4096 makes it exact (recorder.h lgi_step_age,
   * docs/lifetimes.md). Its own section. */
  uint64_t stepmap_off;
  /* version 10: lazy start (LG_LAZY_*, above), written by the recorder: lazy_began_ns
   * and lazy_before_bytes before lazy turns LG_LAZY_BEGAN (release). */
  _Atomic uint32_t lazy;
  uint32_t lazy_pad;
  uint64_t lazy_began_ns;     /* CLOCK_MONOTONIC when recording began */
  uint64_t lazy_before_bytes; /* bytes requested before it (counted in chunks of LGI_LAZY_CHUNK) */
} lg_region_hdr_t;

/* The one symbol libleakguard.so exports for leakguard's other libraries (the isolate
 * code, in libleakguard_isolate.so or the Python module): it counts one isolated call
 * of outcome code, whose child grew by peak bytes (bucket: its histogram bucket, -1:
 * none) in this process's region. Looked up with dlsym(RTLD_DEFAULT): absent when the
 * process is not recorded. Async-signal-safe, lock-free. */
#define LG_REGION_ISOLATE_NOTE "lg_region_isolate_note"
typedef void (*lg_region_isolate_note_fn)(int code, int bucket, uint64_t peak);
void lg_region_isolate_note(int code, int bucket, uint64_t peak); /* in libleakguard.so only */

/* Stack index slot: hash (0 = empty) and the stack id once published (0 = pending). */
#define LG_INDEX_MIN_LOG2 10 /* the first generation of the stack index: 1 024 slots (4 pages) */
typedef struct lg_index_slot {
  _Atomic uint64_t hash;
  _Atomic uint32_t id;
  uint32_t pad;
} lg_index_slot_t;

/* Birth era of a block born at epoch e: 0 for e == 0, else 1 + floor(log2 e), capped. */
static inline unsigned lg_era(uint32_t e) {
  unsigned b = e ? 32u - (unsigned)__builtin_clz(e) : 0u;
  return b < LG_ERAS ? b : LG_ERAS - 1;
}

/* Bucket of a block freed at an age of a ticks: 0 for a == 0 (born and freed within
 * one tick), else 1 + floor(log2 a), capped at LG_AGES - 1 (2^14 ticks, 27 min, and
 * more). Bucket b >= 1 holds ages [2^(b-1), 2^b) ticks. */
static inline unsigned lg_age_bucket(uint32_t a) {
  unsigned b = a ? 32u - (unsigned)__builtin_clz(a) : 0u;
  return b < LG_AGES ? b : LG_AGES - 1;
}

/* Oldest epoch of era b (inverse of lg_era, the lower bound). */
static inline uint32_t lg_era_start(unsigned b) { return b == 0 ? 0u : (1u << (b - 1)); }

#define LG_PTR(hdr, off, type) ((type)((char *)(hdr) + (off)))

/* The counters of chunk c (sites c * LG_SITES_PER_CHUNK onwards) in the shard sd of h,
 * for a reader (the collector, the recorder's own lg_python_startup_largest); NULL when
 * that shard never touched the chunk, or when its offset lies outside h's size. */
static inline const lg_site_ctr_t *lg_shard_chunk(const lg_region_hdr_t *h, const lg_shard_desc_t *sd, uint32_t c) {
  if (c >= sd->nchunks_cap) return NULL;
  const uint64_t *dir = LG_PTR(h, sd->chunk_dir, const uint64_t *);
  uint64_t off = __atomic_load_n(&dir[c], __ATOMIC_ACQUIRE);
  if (!off || off < h->arena_off || off + LG_SITES_PER_CHUNK * sizeof(lg_site_ctr_t) > h->size) return NULL;
  return LG_PTR(h, off, const lg_site_ctr_t *);
}

/* The layout is shared by separately built binaries (a recorder of one build may talk
 * to a collector or guard of another): any change below must bump LG_REGION_VERSION.
 * These asserts make a change visible at build time; update them with the version
 * (the first fails until they are). */
_Static_assert(LG_REGION_VERSION == 10, "the layout asserts below are version 10's: check them for the new version");
_Static_assert(sizeof(lg_site_ctr_t) == 256, "lg_site_ctr_t: four cache lines");
_Static_assert(sizeof(lg_stack_rec_t) == 16, "lg_stack_rec_t layout");
_Static_assert(sizeof(lg_module_rec_t) == 264, "lg_module_rec_t layout");
_Static_assert(sizeof(lg_tag_rec_t) == 88, "lg_tag_rec_t layout");
_Static_assert(sizeof(lg_pyframe_rec_t) == 24, "lg_pyframe_rec_t layout");
_Static_assert(sizeof(lg_shard_desc_t) == 16, "lg_shard_desc_t layout");
_Static_assert(sizeof(lg_cuda_um_t) == 48, "lg_cuda_um_t layout");
_Static_assert(sizeof(lg_gpu_dev_t) == 104, "lg_gpu_dev_t layout");
_Static_assert(sizeof(lg_reaped_t) == 16, "lg_reaped_t layout");
_Static_assert(sizeof(lg_index_slot_t) == 16, "lg_index_slot_t layout");
_Static_assert(sizeof(lg_region_hdr_t) == 4080 && sizeof(lg_region_hdr_t) <= 4096,
               "lg_region_hdr_t: v10 layout (v9's and the lazy start), within the first page");
_Static_assert(__builtin_offsetof(lg_region_hdr_t, epoch) == 56 &&
                   __builtin_offsetof(lg_region_hdr_t, index_off) == 136 &&
                   __builtin_offsetof(lg_region_hdr_t, gpu_flags) == 264 &&
                   __builtin_offsetof(lg_region_hdr_t, gpu_vendor) == 300 &&
                   __builtin_offsetof(lg_region_hdr_t, reaped_head) == 3888 &&
                   __builtin_offsetof(lg_region_hdr_t, iso_requests) == 3912,
               "lg_region_hdr_t: v6-9 field offsets");

/* ------------------------------------------------------------------ socket protocol
 * The collector listens on a Unix SOCK_SEQPACKET socket whose path is in the
 * LEAKGUARD_SOCK environment variable. Each recorded process image connects once and
 * sends one lg_hello_t with the region's memfd attached (SCM_RIGHTS). The connection
 * then stays open, idle. Its end (EOF) tells the collector the image is gone when the
 * region's state is LG_PS_EXECED or the process has exited; otherwise the program
 * closed the descriptor (close_range, dup2) and the collector goes on recording,
 * watching the process with a pidfd. The region stays mapped in the collector for the
 * final snapshot. */
#define LG_HELLO_MAGIC 0x4f4c4c4548474cULL
enum { LG_HELLO_START = 0, LG_HELLO_FORK = 1 };
typedef struct lg_hello {
  uint64_t magic;
  uint32_t version;
  uint32_t kind; /* LG_HELLO_START (new image, after exec too) or LG_HELLO_FORK */
  int32_t pid, ppid;
  uint64_t region_size;
  char exe[256];
} lg_hello_t;
_Static_assert(sizeof(lg_hello_t) == 288, "lg_hello_t layout");

/* Settings passed by the collector to the recorder (read with secure_getenv). */
/* The name of the memfd that holds a process's region (/proc/PID/fd shows
 * "/memfd:leakguard-region (deleted)"; the guard finds regions by it). */
#define LG_REGION_MEMFD "leakguard-region"

#define LG_ENV_SOCK "LEAKGUARD_SOCK"
#define LG_ENV_SAMPLE "LEAKGUARD_SAMPLE"               /* bytes, 0 = record everything */
#define LG_ENV_IMPORT_SAMPLE "LEAKGUARD_IMPORT_SAMPLE" /* bytes per sample under a Python import, 0 = all */
#define LG_IMPORT_SAMPLE_DEFAULT 65536   /* `leakguard run`'s default (docs/python.md, "Imports sampled") */
#define LG_ENV_DEPTH "LEAKGUARD_DEPTH"   /* 1..LG_MAX_DEPTH */
#define LG_ENV_FOLLOW "LEAKGUARD_FOLLOW" /* "0": do not record children */
/* `leakguard run`'s pid: with LEAKGUARD_FOLLOW=0 only its own child is recorded, through
 * every image it execs (a wrapper chain: env, a pyenv shim, bash -c), not what that
 * child forks or spawns */
#define LG_ENV_CLI_PID "LEAKGUARD_CLI_PID"
#define LG_ENV_MMAP "LEAKGUARD_MMAP" /* "0": do not record anonymous mmap */
/* Lazy start (LG_LAZY_*): "BYTES,MS", or "0" to record every image from its start */
#define LG_ENV_LAZY "LEAKGUARD_LAZY"
#define LG_LAZY_DEFAULT_BYTES (32ull << 20)
#define LG_LAZY_DEFAULT_MS 100
/* "1" for the started process's first image, recorded from its start whatever
 * LEAKGUARD_LAZY says: that image turns it to "0" in its environment, so the images it
 * execs and the children it makes start lazily */
#define LG_ENV_FIRST "LEAKGUARD_FIRST"
#define LG_ENV_CUDA_UM "LEAKGUARD_CUDA_UM" /* "1": CUPTI Unified Memory counters */
#define LG_ENV_CUPTI "LEAKGUARD_CUPTI"     /* path of libcupti (default: the toolkit's) */
/* Settings read by the Python module (src/python) and python/sitecustomize.py (which
 * takes them from the module: leakguard.ENV_DIR, ...). */
#define LG_ENV_DIR "LEAKGUARD_DIR"                         /* the run's private directory (files below) */
#define LG_ENV_EXPLAIN_AT_STEP "LEAKGUARD_EXPLAIN_AT_STEP" /* explain at this step */
#define LG_ENV_STEPS "LEAKGUARD_STEPS" /* "off": no step at torch's optimizer.step() (sitecustomize) */
#define LG_ENV_EXPLAIN_BUDGET_S "LEAKGUARD_EXPLAIN_BUDGET_S" /* explain()'s time budget, seconds (2) */
#define LG_ENV_EXPLAIN_DEBUG "LEAKGUARD_EXPLAIN_DEBUG"       /* set: explain() prints its phases */
/* Settings read by the collector's side. */
#define LG_ENV_LIBRARY "LEAKGUARD_LIBRARY" /* `leakguard run`: the preload library to use */
#define LG_ENV_NVML "LEAKGUARD_NVML"       /* the NVML library to open (tests: a stand-in) */
/* Set by the guard for the commands of its exec actions (docs/guard.md), which get none
 * of the guard's own LG_ENV_PREFIX variables. */
#define LG_ENV_PREFIX "LEAKGUARD_"
#define LG_ENV_LEVEL "LEAKGUARD_LEVEL"   /* the level entered (lg_level_name: normal, ..., emergency) */
#define LG_ENV_SOURCE "LEAKGUARD_SOURCE" /* the watermark's source that set it */
#define LG_ENV_USAGE "LEAKGUARD_USAGE"   /* its usage, bytes */
#define LG_ENV_LIMIT "LEAKGUARD_LIMIT"   /* its limit, bytes */

/* Files in LG_ENV_DIR exchanged by the Python module and the collector. Each is written
 * under its temporary name (a leading dot, *_TMP) and renamed: a reader sees whole
 * files, and matches the names exactly (a temporary name never matches). */
#define LG_FILE_SUSPECTS "suspects-%d.json"  /* collector -> module: growing sites */
#define LG_FILE_EXPLAIN "explain-%d.json"    /* collector -> module: explain now */
#define LG_FILE_HOLDERS "holders-%d-%d.json" /* module -> collector: pid, sequence */
#define LG_FILE_LABELS "labels-%d.json"      /* module -> collector: rank, world */
#define LG_FILE_SUSPECTS_TMP ".suspects-%d.tmp"
#define LG_FILE_EXPLAIN_TMP ".explain-%d.tmp"
#define LG_FILE_HOLDERS_TMP ".holders-%d-%d.tmp"
#define LG_FILE_LABELS_TMP ".labels-%d.tmp"
/* module -> CLI (attach): why the leakguard module could not be set up in pid %d */
#define LG_FILE_PYBOOT "pyboot-%d.err"
/* The collector's socket in LG_ENV_DIR (its path goes to the recorder in LG_ENV_SOCK). */
#define LG_FILE_SOCK "sock"
/* recorder -> collector: a process that could not hand its hello to the collector
 * within LG_HELLO_WAIT_MS (the collector stopped, or swamped) and runs unrecorded; an
 * empty file named by its pid and its parent's, made with O_EXCL beside the socket. */
#define LG_FILE_UNRECORDED "unrecorded-%d-%d"
#define LG_HELLO_WAIT_MS 50
#endif /* LG_REGION_H */
