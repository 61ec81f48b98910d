/* SPDX-License-Identifier: MIT */
/*
 * model.h - the collector's model of recorded processes (core model layer).
 *
 * A lgm_proc_t maps one process image's shared region (see region.h) and turns it
 * into per-site totals (lgm_site_t), new stacks and new modules. It does not know
 * where the region came from: any source that fills a region (the preload library, with
 * its CUDA hooks; the attach agent) feeds the same snapshots.
 */
#ifndef LG_CORE_MODEL_H
#define LG_CORE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/region.h"

typedef struct lgm_site {
  int64_t live_bytes, live_blocks;
  uint64_t alloc_bytes, alloc_blocks;
  uint32_t oldest_epoch; /* lower bound of the birth epoch of the oldest live block */
  uint8_t space;
  uint8_t device; /* GPU ordinal (spaces device, managed, pinned) */
  uint8_t known;  /* its stack is stored (the collector queued it); see lgm_proc_t.known_only */
} lgm_site_t;

/* How a recorded process image came to be. */
enum lgm_kind { LGM_START = 0, LGM_FORK, LGM_EXEC, LGM_SPAWN };
const char *lgm_kind_name(int kind); /* "start", "fork", "exec", "spawn" */

typedef struct lgm_proc {
  int proc; /* key in the store: 1, 2, ... in order of appearance */
  int pid, ppid, parent_proc;
  int kind; /* how it started: enum lgm_kind */
  char command[1024];
  char exe[256];
  int conn;             /* socket to the process image, -1 once closed */
  lg_region_hdr_t *hdr; /* the region; the collector writes only hdr->epoch */
  size_t map_size;
  uint64_t start_ns; /* collector clock when seen */
  uint64_t end_ns;
  int ended;           /* 1 once the image is gone (EOF) */
  char end_reason[32]; /* "exit", "signal", "exec", "unknown" */
  int exit_status, signal;
  uint32_t nsites; /* sites summed so far (== hdr->nstacks at last read) */
  /* 1: snapshots store only the samples of known sites (and of GPU spaces). The
   * collector stores the stacks that ever held 1 KiB; the other 10^5 stacks of a
   * Python start-up have no frames in the database, and their samples would be most
   * of it. 0 (the default): every site. */
  int known_only;
  lgm_site_t *sites;  /* [nsites] current totals */
  lgm_site_t *stored; /* [nsites] values last written to the store */
  uint32_t stacks_stored, modules_stored;
  uint64_t steps_seen;
  uint64_t seq; /* snapshots taken */
  int64_t live_bytes, live_blocks, peak_live_bytes;
  int64_t host_bytes, mmap_bytes;
  uint64_t rss_bytes;
  /* GPU memory recorded by the CUDA hooks, per device: [d][0] device, [1] managed,
   * [2] pinned bytes (docs/cuda.md); gpu_bytes: their sum over every device. */
  int64_t gpu_bytes;
  int64_t gpu_space_bytes[LG_GPU_MAX_DEVICES][3];
  uint32_t gpu_stacks_stored; /* stacks whose device ordinal is in the store */
  uint32_t cuda_notes_seen;   /* hdr->gpu_notes already reported */
} lgm_proc_t;

/* Maps the region behind fd and fills hdr/map_size. 0 or -errno. The mapping is
 * shared and writable: the collector writes hdr.epoch and the step map (and a guard the
 * guard_* fields);
 * everything else in the region is the recorder's and only read here. */
int lgm_attach(lgm_proc_t *p, int fd, uint64_t size);
/* Unmaps the region and frees the site arrays. */
void lgm_release(lgm_proc_t *p);
/* Sums every shard into p->sites (growing it to the published stack count) and the
 * process totals. 0 or -ENOMEM. */
int lgm_collect(lgm_proc_t *p);
/* Opens the tick of now_ns (CLOCK_MONOTONIC) when a new one began: ticks of
 * LG_TICK_NS since the region's start_ns; the step map's slot for it, then hdr.epoch. */
void lgm_tick(lgm_proc_t *p, uint64_t now_ns);
/* The blocks of stack id freed so far, by age when freed (lg_age_bucket(): ticks of
 * LG_TICK_NS, or with steps != 0 steps), summed over the shards, into ages[LG_AGES].
 * 0; -ERANGE when they do not add up to what was freed (alloc_blocks - live_blocks of
 * the last lgm_collect, within 1 %): a bucket wrapped (2^32 frees), the site frees
 * nothing, or (steps) frees were counted before the first step was marked. */
int lgm_freed_ages(const lgm_proc_t *p, uint32_t id, int steps, uint64_t ages[LG_AGES]);
/* Published stack ids are [2, lgm_nstacks). */
uint32_t lgm_nstacks(const lgm_proc_t *p);
/* Frames of stack id (innermost first); returns depth, 0 if invalid. */
unsigned lgm_stack(const lgm_proc_t *p, uint32_t id, const uint64_t **ips, unsigned *space);
/* The GPU ordinal of stack id (0 for host spaces and invalid ids). */
unsigned lgm_stack_device(const lgm_proc_t *p, uint32_t id);

/* One GPU's gauges as a recorded process's region holds them (the device seam, issue
 * #33: the store, the metrics, the live findings and the guard read GPUs through these
 * readers, never the region's GPU fields themselves). */
typedef struct lgm_gpu {
  int vendor;           /* LG_GPU_VENDOR_* (core/region.h) */
  uint64_t total_bytes; /* the device's memory, 0: unknown */
  int64_t device_bytes, managed_bytes, pinned_bytes, registered_bytes;
  int64_t pool_reserved_bytes, pool_used_bytes; /* stream-ordered pools, as last read */
  int64_t vmm_mapped_bytes;
  uint32_t contexts, contexts_created, contexts_destroyed, contexts_recreated;
  int torch_seen; /* the two torch figures below are set (the Python module's reading) */
  int64_t torch_allocated_bytes, torch_reserved_bytes;
} lgm_gpu_t;
/* The GPUs region h records, at most max of them into out: their number (0: none). */
int lgm_gpus(const lg_region_hdr_t *h, lgm_gpu_t *out, int max);
/* The region's GPU state besides the devices' gauges. */
typedef struct lgm_gpu_state {
  uint32_t flags;  /* LG_GPU_* and the vendor's (LG_CUDA_*); 0: no GPU API was used */
  int vendor;      /* LG_GPU_VENDOR_* */
  uint32_t nnotes; /* published notes, at most LG_GPU_NOTES */
  uint64_t calls;  /* tracked driver calls that succeeded */
  uint64_t unknown_frees, gc_without_cleanup;
} lgm_gpu_state_t;
void lgm_gpu_state(const lg_region_hdr_t *h, lgm_gpu_state_t *out);
/* Note i (< nnotes) into buf, NUL-terminated (LG_GPU_NOTE_LEN + 1 bytes). */
void lgm_gpu_note(const lg_region_hdr_t *h, uint32_t i, char buf[LG_GPU_NOTE_LEN + 1]);
/* Unified Memory counters of managed-memory slot i (0..LG_CUDA_UM_SITES-1): the site
 * they belong to, 0 for a free slot. */
typedef struct lgm_gpu_um {
  uint64_t cpu_page_faults, gpu_page_faults, bytes_htod, bytes_dtoh, thrashing;
} lgm_gpu_um_t;
uint32_t lgm_gpu_um(const lg_region_hdr_t *h, int i, lgm_gpu_um_t *out);
/* Python frame LG_PYFRAME_BIT|id of the region: 0 and its file, function and line,
 * or -ENOENT. Strings point into the region. */
int lgm_pyframe(const lgm_proc_t *p, uint64_t ip, const char **file, const char **func, int *line);
uint32_t lgm_nmodules(const lgm_proc_t *p);
const lg_module_rec_t *lgm_module(const lgm_proc_t *p, uint32_t i);

#endif
