/* SPDX-License-Identifier: MIT */
/*
 * region_writer.c - the recorder's side of the shared region (see core/region.h).
 *
 * Stack interning is lock-free for known stacks (the common case) and serialised by
 * the region spin lock for new ones. The module map is appended when a new stack has
 * an address no known module covers, so late dlopen()s are captured before the
 * collector ever sees an address from them. Counter shards give each thread its own
 * counters (one writer, no atomic read-modify-write on the hot path).
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "capture/recorder.h"
#include "core/platform.h"

void lgi_fd_identity(int fd, uint64_t *dev, uint64_t *ino) {
  struct stat st;
  *dev = *ino = 0;
  if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0) {
    *dev = (uint64_t)st.st_dev;
    *ino = (uint64_t)st.st_ino;
  }
}

int lgi_fd_is(int fd, uint64_t dev, uint64_t ino) {
  uint64_t d, i;
  if (fd < 0 || (!dev && !ino)) return 0;
  lgi_fd_identity(fd, &d, &i);
  return d == dev && i == ino;
}

static uint64_t align64(uint64_t x) { return (x + 63) & ~63ULL; }

/* Lays the sections out for the given capacities; returns the total size. */
static uint64_t layout(lg_region_hdr_t *h, uint32_t stacks_cap, uint32_t depth, uint64_t arena_cap) {
  uint64_t off = align64(sizeof(lg_region_hdr_t));
  h->stacks_cap = stacks_cap;
  h->index_cap = stacks_cap * 2;
  h->index_off = off; /* every generation of the index, one after the other (index_at) */
  off = align64(off + ((uint64_t)h->index_cap * 2 - (1u << LG_INDEX_MIN_LOG2)) * sizeof(lg_index_slot_t));
  h->stacks_off = off;
  off = align64(off + (uint64_t)stacks_cap * sizeof(lg_stack_rec_t));
  h->frames_off = off;
  h->frames_cap = (uint64_t)stacks_cap * (depth < 32 ? depth : 32);
  off = align64(off + h->frames_cap * sizeof(uint64_t));
  h->modules_off = off;
  h->modules_cap = 4096;
  off = align64(off + (uint64_t)h->modules_cap * sizeof(lg_module_rec_t));
  h->pyframes_off = off;
  h->pyframes_cap = 1u << 18;
  off = align64(off + (uint64_t)h->pyframes_cap * sizeof(lg_pyframe_rec_t));
  h->pystr_off = off;
  h->pystr_cap = 16u << 20;
  off = align64(off + h->pystr_cap);
  h->tags_off = off;
  h->tags_cap = LG_MAX_TAGS;
  off = align64(off + (uint64_t)h->tags_cap * sizeof(lg_tag_rec_t));
  h->reaped_off = off;
  off = align64(off + (uint64_t)LG_REAPED_RING * sizeof(lg_reaped_t));
  h->stepmap_off = off;
  off = align64(off + (uint64_t)LG_STEPMAP * sizeof(uint32_t));
  h->shards_off = off;
  h->shards_cap = 256;
  uint32_t nchunks = stacks_cap / LG_SITES_PER_CHUNK;
  off = align64(off + (uint64_t)h->shards_cap * sizeof(lg_shard_desc_t));
  uint64_t dirs = off;
  off = align64(off + (uint64_t)h->shards_cap * nchunks * sizeof(uint64_t));
  h->arena_off = off;
  h->arena_cap = arena_cap;
  off = align64(off + arena_cap);
  h->size = off;
  return dirs;
}

/* The stack records and the counter shards opened: the overflow site, each shard's
 * chunk directory, shard 0. Two pages of the region written: a lazy image does it when
 * its recording begins (a helper that never does touches only the header's page). */
void lgi_region_open(lg_region_hdr_t *h) {
  lg_shard_desc_t *sd = LG_PTR(h, h->shards_off, lg_shard_desc_t *);
  uint32_t nchunks = h->stacks_cap / LG_SITES_PER_CHUNK;
  for (uint32_t i = 0; i < h->shards_cap; i++) {
    sd[i].nchunks_cap = nchunks;
    sd[i].chunk_dir = lgi_g.region_dirs + (uint64_t)i * nchunks * sizeof(uint64_t);
  }
  atomic_store(&h->nstacks, 2); /* 0: none, 1: overflow site (its record: zeros, depth 0) */
  atomic_store(&h->nshards, 1); /* shard 0: shared, atomic */
}

int lgi_region_create(uint32_t depth, uint64_t sample_bytes, uint32_t flags, int lazy) {
  int fd = (int)syscall(SYS_memfd_create, LG_REGION_MEMFD, MFD_CLOEXEC);
  if (fd < 0) return -errno;
  /* Sparse: only touched pages use memory. Shrink if the address space is limited. */
  lg_region_hdr_t tmp;
  for (uint32_t stacks_cap = 1u << 20; stacks_cap >= (1u << 14); stacks_cap >>= 2) {
    memset(&tmp, 0, sizeof tmp);
    uint64_t arena = (uint64_t)stacks_cap * 1536; /* room for every site in 6 shards */
    uint64_t dirs = layout(&tmp, stacks_cap, depth, arena);
    if (syscall(SYS_ftruncate, fd, (long)tmp.size) != 0) continue;
    void *p = (void *)syscall(SYS_mmap, NULL, tmp.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) continue;
    lg_region_hdr_t *h = p;
    memcpy(h, &tmp, sizeof tmp);
    h->magic = LG_REGION_MAGIC;
    h->version = LG_REGION_VERSION;
    h->hdr_size = sizeof(lg_region_hdr_t);
    h->pid = (int32_t)lg_sys_getpid();
    h->ppid = (int32_t)syscall(SYS_getppid);
    h->flags = flags;
    h->max_depth = depth;
    h->sample_bytes = sample_bytes;
    h->start_ns = lgi_now_ns();
    atomic_store(&h->state, LG_PS_RUNNING);
    lgi_g.region_dirs = dirs;
    if (!lazy) lgi_region_open(h);
    else atomic_store(&h->lazy, LG_LAZY_WAITING);
    lgi_g.hdr = h;
    lgi_g.fd = fd;
    lgi_fd_identity(fd, &lgi_g.fd_dev, &lgi_g.fd_ino);
    return 0;
  }
  int e = errno;
  syscall(SYS_close, fd);
  return -(e ? e : ENOMEM);
}

/* ---- the stack index
 *
 * Open addressing over the stack records' hashes, probed without the lock. A slot's
 * page is chosen by the hash, so the first stacks of a process touch a new page each:
 * a page fault, 11-15 us in a virtual machine, and a 2-million-slot index (32 MiB) was
 * 6 000 faults of `python3 -c pass`'s start-up alone (BENCHMARKS.md). The index starts
 * at 2^10 slots (4 pages: a short-lived helper makes a few hundred stacks, and 2^14
 * slots were 64 pages, nearly all faulted in by them) and, under the lock, is rebuilt
 * twice as large from the stack records when half full; the generation (hdr.index_gen)
 * is published after the rebuild. A lookup that read an older generation finds what
 * was there, or misses and goes to the locked path, which probes the current one. Old
 * generations stay where they are (readers may still be in them): the section is twice
 * the largest. */
typedef struct {
  lg_index_slot_t *ix;
  uint32_t mask;
} index_t;

static index_t index_at(const lg_region_hdr_t *h, uint32_t gen) {
  uint64_t before = ((uint64_t)1 << LG_INDEX_MIN_LOG2) * (((uint64_t)1 << gen) - 1); /* slots of gens < gen */
  uint64_t cap = (uint64_t)1 << (LG_INDEX_MIN_LOG2 + gen);
  if (cap > h->index_cap) cap = h->index_cap;
  return (index_t){LG_PTR(h, h->index_off, lg_index_slot_t *) + before, (uint32_t)cap - 1};
}

static index_t index_cur(const lg_region_hdr_t *h) {
  return index_at(h, atomic_load_explicit(&h->index_gen, memory_order_acquire));
}

/* Enters stack records 2..n-1 into the empty index x. */
static void index_fill(const lg_region_hdr_t *h, index_t x, uint32_t n) {
  const lg_stack_rec_t *r = LG_PTR(h, h->stacks_off, const lg_stack_rec_t *);
  for (uint32_t id = 2; id < n; id++) {
    uint32_t i = (uint32_t)r[id].hash & x.mask;
    while (atomic_load_explicit(&x.ix[i].hash, memory_order_relaxed)) i = (i + 1) & x.mask;
    atomic_store_explicit(&x.ix[i].id, id, memory_order_relaxed);
    atomic_store_explicit(&x.ix[i].hash, r[id].hash, memory_order_relaxed);
  }
}

/* Copies the used part of the region old into the empty mapping dst, section by
 * section, from the published counts: for when the memfd is no longer ours to read
 * (the program closed the descriptor, or reused its number), so SEEK_DATA cannot find
 * the data. Reading a hole of a shared memfd mapping would allocate it, so only used
 * ranges are read; the stack index is rebuilt from the stack records (each keeps its
 * hash) rather than copied, as it is spread over the whole index section. */
static void copy_used(lg_region_hdr_t *dst, const lg_region_hdr_t *old) {
  char *d = (char *)dst;
  const char *o = (const char *)old;
#define CP(off, bytes) memcpy(d + (off), o + (off), (size_t)(bytes))
  CP(0, sizeof *old);
  uint32_t n = atomic_load(&old->nstacks);
  CP(old->stacks_off, (uint64_t)n * sizeof(lg_stack_rec_t));
  CP(old->frames_off, atomic_load(&old->frames_used) * sizeof(uint64_t));
  CP(old->modules_off, (uint64_t)atomic_load(&old->nmodules) * sizeof(lg_module_rec_t));
  uint32_t nt = atomic_load(&old->ntags); /* ids 1..ntags-1 */
  CP(old->tags_off, (uint64_t)(nt < old->tags_cap ? nt : old->tags_cap) * sizeof(lg_tag_rec_t));
  CP(old->pyframes_off, (uint64_t)atomic_load(&old->npyframes) * sizeof(lg_pyframe_rec_t));
  CP(old->pystr_off, atomic_load(&old->pystr_used));
  CP(old->stepmap_off, (uint64_t)LG_STEPMAP * sizeof(uint32_t));
  uint32_t ns = atomic_load(&old->nshards);
  CP(old->shards_off, (uint64_t)old->shards_cap * sizeof(lg_shard_desc_t));
  const lg_shard_desc_t *sd = LG_PTR(old, old->shards_off, const lg_shard_desc_t *);
  for (uint32_t i = 0; i < ns && i < old->shards_cap; i++)
    CP(sd[i].chunk_dir, (uint64_t)sd[i].nchunks_cap * sizeof(uint64_t));
  uint64_t used = atomic_load(&old->arena_used);
  CP(old->arena_off, used < old->arena_cap ? used : old->arena_cap);
#undef CP
  index_fill(dst, index_cur(dst), n);
}

/* The child's copy of the region is made by the parent, before the fork, while it
 * holds the region lock (lgi_atfork_prepare): a copy made by the child after the fork
 * would race with the parent, which goes on writing into the same shared pages. A stack
 * the parent interned after the child had copied the stack table, but before it copied
 * the counters, became the child's next stack with the parent's counts in it (the
 * scenario_fork_underscore_exit test caught one: a parent's three blocks counted at the
 * child's site). */
int lgi_region_fork_prepare(void) {
  lg_region_hdr_t *old = lgi_g.hdr;
  uint64_t size = old->size;
  lgi_g.fork_fd = -1;
  /* The descriptor is used only if it is still the region's memfd. */
  int own = lgi_fd_is(lgi_g.fd, lgi_g.fd_dev, lgi_g.fd_ino);
  int fd = (int)syscall(SYS_memfd_create, LG_REGION_MEMFD, MFD_CLOEXEC);
  if (fd < 0) return -errno;
  if (syscall(SYS_ftruncate, fd, (long)size) != 0) goto fail;
  void *tmp = (void *)syscall(SYS_mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (tmp == MAP_FAILED) goto fail;
  if (own) {
    /* Copy only the parts of the sparse file that hold data, in the kernel: memcpy into
     * the new mapping took a page fault per page (52 faults of a recorded bash's fork,
     * BENCHMARKS.md "Fork of a recorded image"); memcpy where copy_file_range is
     * refused. */
    off_t pos = 0;
    for (;;) {
      off_t d = lseek(lgi_g.fd, pos, SEEK_DATA);
      if (d < 0 || (uint64_t)d >= size) break;
      off_t e = lseek(lgi_g.fd, d, SEEK_HOLE);
      if (e < 0 || (uint64_t)e > size) e = (off_t)size;
      loff_t in = d, out = d;
      while (in < e) {
        long r = syscall(SYS_copy_file_range, lgi_g.fd, &in, fd, &out, (size_t)(e - in), 0);
        if (r <= 0) break;
      }
      if (in < e) memcpy((char *)tmp + in, (char *)old + in, (size_t)(e - in));
      pos = e;
      if ((uint64_t)pos >= size) break;
    }
  } else {
    copy_used(tmp, old);
  }
  /* the parent's isolated calls are not the child's: the collector sums every region */
  lg_region_hdr_t *th = tmp;
  memset((void *)th->iso_requests, 0, sizeof th->iso_requests);
  memset((void *)th->iso_rss_bucket, 0, sizeof th->iso_rss_bucket);
  atomic_store_explicit(&th->iso_rss_sum, 0, memory_order_relaxed);
  syscall(SYS_munmap, tmp, size);
  lgi_g.fork_fd = fd;
  return 0;
fail:;
  int err = errno;
  syscall(SYS_close, fd);
  return -(err ? err : EIO);
}

void lgi_region_fork_discard(void) {
  if (lgi_g.fork_fd >= 0) syscall(SYS_close, lgi_g.fork_fd);
  lgi_g.fork_fd = -1;
}

int lgi_region_fork_adopt(void) {
  lg_region_hdr_t *old = lgi_g.hdr;
  int fd = lgi_g.fork_fd;
  lgi_g.fork_fd = -1;
  if (fd < 0) return -ENOMEM;
  int own = lgi_fd_is(lgi_g.fd, lgi_g.fd_dev, lgi_g.fd_ino);
  /* Same address: every pointer into the region stays valid. */
  void *p = (void *)syscall(SYS_mmap, old, old->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p != (void *)old) {
    syscall(SYS_close, fd);
    return -ENOMEM;
  }
  if (own) syscall(SYS_close, lgi_g.fd); /* never a descriptor the program owns now */
  lgi_g.fd = fd;
  lgi_fd_identity(fd, &lgi_g.fd_dev, &lgi_g.fd_ino);
  lg_region_hdr_t *h = old;
  h->ppid = h->pid;
  h->pid = (int32_t)lg_sys_getpid();
  h->start_ns = lgi_now_ns();
  /* recorded from its fork on: a parent's lazy start is the parent's (said of the
   * child, it began "before its start") */
  if (atomic_load(&h->lazy) == LG_LAZY_BEGAN) atomic_store(&h->lazy, LG_LAZY_OFF);
  atomic_store(&h->epoch, 0);
  atomic_store(&h->lock, 0); /* the copy was made under the parent's lock */
  atomic_store(&h->reaped_head, 0);
  atomic_store(&h->held, 0); /* a hold is the parent's (its explaining thread is not here) */
  memset(LG_PTR(h, h->reaped_off, lg_reaped_t *), 0, LG_REAPED_RING * sizeof(lg_reaped_t));
  /* Only the forking thread survives: free every shard but its own. */
  lg_shard_desc_t *sd = LG_PTR(h, h->shards_off, lg_shard_desc_t *);
  uint32_t n = atomic_load(&h->nshards);
  for (uint32_t i = 1; i < n; i++)
    if (&sd[i] != lgi_tls.shard) atomic_store(&sd[i].owner, 0);
  if (lgi_tls.shard) atomic_store(&lgi_tls.shard->owner, (uint32_t)lg_sys_gettid());
  return 0;
}

/* ------------------------------------------------------------------ modules */

/* Caller holds the lock (it guards last_module too). The frames of one stack mostly lie
 * in a few objects, and a torch process maps hundreds: the last object that matched is
 * tried first. */
static uint32_t last_module;
static int module_known(lg_region_hdr_t *h, uint64_t ip) {
  lg_module_rec_t *m = LG_PTR(h, h->modules_off, lg_module_rec_t *);
  uint32_t n = atomic_load_explicit(&h->nmodules, memory_order_acquire);
  if (last_module < n && ip >= m[last_module].start && ip < m[last_module].end) return 1;
  for (uint32_t i = n; i-- > 0;)
    if (ip >= m[i].start && ip < m[i].end) {
      last_module = i;
      return 1;
    }
  return 0;
}

static int add_module_cb(struct dl_phdr_info *info, size_t sz, void *arg) {
  lg_region_hdr_t *h = arg;
  (void)sz;
  uintptr_t lo, hi;
  if (!lg_image_span(info, &lo, &hi)) return 0;
  lg_module_rec_t *m = LG_PTR(h, h->modules_off, lg_module_rec_t *);
  uint32_t n = atomic_load_explicit(&h->nmodules, memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++)
    if (m[i].start == lo && m[i].end == hi && m[i].bias == info->dlpi_addr) return 0;
  if (n >= h->modules_cap) return 1;
  lg_module_rec_t *r = &m[n];
  r->start = lo;
  r->end = hi;
  r->bias = info->dlpi_addr;
  const char *name = info->dlpi_name;
  if (!name || !name[0]) {
    /* The main program: its path from /proc (no allocation). */
    ssize_t k = (ssize_t)syscall(SYS_readlink, "/proc/self/exe", r->path, sizeof r->path - 1);
    r->path[k > 0 ? k : 0] = 0;
  } else {
    size_t k = strnlen(name, sizeof r->path - 1);
    memcpy(r->path, name, k);
    r->path[k] = 0;
  }
  atomic_store_explicit(&h->nmodules, n + 1, memory_order_release);
  return 0;
}

/* Caller holds the lock. */
static void modules_cover(lg_region_hdr_t *h, const uint64_t *ips, unsigned depth) {
  for (unsigned i = 0; i < depth; i++) {
    if (ips[i] & LG_PYFRAME_BIT) continue;
    if (!module_known(h, ips[i])) {
      dl_iterate_phdr(add_module_cb, h);
      lgi_python_detect(); /* an embedded interpreter may have been dlopen()ed */
      return;
    }
  }
}

/* ------------------------------------------------------------------ stacks */

/* space: lg_space_t in bits 0-7, the GPU ordinal in bits 8-15 (LGI_SITE_SPACE). */
uint64_t lgi_stack_hash(const uint64_t *ips, unsigned depth, unsigned space) {
  /* FNV-1a over 64-bit words, finished with a murmur mix. */
  uint64_t x =
      0xcbf29ce484222325ULL ^ ((uint64_t)(space & 0xff) << 56) ^ ((uint64_t)((space >> 8) & 0xff) << 48) ^ depth;
  for (unsigned i = 0; i < depth; i++) x = (x ^ ips[i]) * 0x100000001b3ULL;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x | 1; /* never 0: 0 marks an empty slot */
}

static int same_stack(lg_region_hdr_t *h, uint32_t id, const uint64_t *ips, unsigned depth, unsigned space) {
  lg_stack_rec_t *r = LG_PTR(h, h->stacks_off, lg_stack_rec_t *) + id;
  if (r->depth != depth || r->space != (space & 0xff) || r->device != ((space >> 8) & 0xff)) return 0;
  uint64_t *f = LG_PTR(h, h->frames_off, uint64_t *) + r->frames;
  return memcmp(f, ips, depth * sizeof *ips) == 0;
}

/* Probes the index; returns the id, or 0 if absent (then *slot_out is the empty slot). */
static uint32_t probe(lg_region_hdr_t *h, uint64_t hash, const uint64_t *ips, unsigned depth, unsigned space,
                      lg_index_slot_t **slot_out) {
  index_t x = index_cur(h);
  lg_index_slot_t *ix = x.ix;
  uint32_t mask = x.mask;
  for (uint32_t i = (uint32_t)hash & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
    uint64_t sh = atomic_load_explicit(&ix[i].hash, memory_order_acquire);
    if (sh == 0) {
      *slot_out = &ix[i];
      return 0;
    }
    if (sh == hash) {
      uint32_t id = atomic_load_explicit(&ix[i].id, memory_order_acquire);
      if (same_stack(h, id, ips, depth, space)) return id;
    }
  }
  *slot_out = NULL;
  return 0;
}

/* The region is sparse: a page is memory once touched. Its bump-allocated sections
 * (the counter chunks, 16 KiB each, and the frame arena) take new pages in order, each
 * a page fault on a shared mapping, which costs 11-15 us in a virtual machine
 * (BENCHMARKS.md, "Python start-up": `import torch` makes 4 600 chunks, 18 000 pages).
 * An allocation that enters a new 256-KiB window of its section populates the next one
 * in one system call (MADV_POPULATE_WRITE, Linux 5.14; older kernels refuse it and the
 * pages fault in one by one as before). At most one window ahead is touched unused.
 * The first window ahead is populated once the section has used half of its first one,
 * not at its first use: a short-lived helper (a `bash -c :`, a pyenv shim's `readlink`)
 * uses a few pages of each section, and populating 2 x 256 KiB it never touches was
 * 128 of its 430 extra page faults (BENCHMARKS.md, issue #35). */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define LGI_POPULATE_WINDOW ((uint64_t)256 << 10)
static void populate_ahead(lg_region_hdr_t *h, uint64_t section, uint64_t before, uint64_t after, uint64_t cap) {
  int cross = before / LGI_POPULATE_WINDOW != after / LGI_POPULATE_WINDOW;
  int half = before < LGI_POPULATE_WINDOW / 2 && after >= LGI_POPULATE_WINDOW / 2;
  if (!cross && !half) return;
  uint64_t from = (after / LGI_POPULATE_WINDOW + 1) * LGI_POPULATE_WINDOW, len = LGI_POPULATE_WINDOW;
  if (from >= cap) return;
  if (from + len > cap) len = cap - from;
  uintptr_t lo = ((uintptr_t)h + section + from) & ~(uintptr_t)4095; /* madvise wants a page */
  int e = errno;
  syscall(SYS_madvise, (void *)lo, (size_t)len, MADV_POPULATE_WRITE);
  errno = e;
}

uint32_t lgi_stack_intern(const uint64_t *ips, unsigned depth, unsigned space) {
  return lgi_stack_intern_hashed(ips, depth, space, lgi_stack_hash(ips, depth, space));
}

uint32_t lgi_stack_intern_hashed(const uint64_t *ips, unsigned depth, unsigned space, uint64_t hash) {
  lg_region_hdr_t *h = lgi_g.hdr;
  /* Reserve: with the table 90 % full, new stacks keep their two innermost frames
   * only, so later sites are still told apart by their allocating line instead of all
   * falling into the overflow site. */
  if (depth > 2 && atomic_load_explicit(&h->nstacks, memory_order_relaxed) > h->stacks_cap / 10 * 9) {
    lg_index_slot_t *slot2;
    uint32_t known = probe(h, hash, ips, depth, space, &slot2);
    if (known) return known;
    depth = 2;
    hash = lgi_stack_hash(ips, depth, space);
  }
  lg_index_slot_t *slot;
  uint32_t id = probe(h, hash, ips, depth, space, &slot);
  if (id) return id;
  uint64_t grew = 0; /* frames_used after this stack's frames, when it was stored */
  lgi_lock();
  id = probe(h, hash, ips, depth, space, &slot); /* someone may have inserted it */
  if (id) goto out;
  uint32_t n = atomic_load_explicit(&h->nstacks, memory_order_relaxed);
  uint64_t fu = atomic_load_explicit(&h->frames_used, memory_order_relaxed);
  uint32_t gen = atomic_load_explicit(&h->index_gen, memory_order_relaxed);
  index_t x = index_at(h, gen);
  if (slot && (uint64_t)n * 2 > x.mask && x.mask + 1 < h->index_cap) {
    /* half full: the next generation, twice as large, then this stack's slot there */
    index_fill(h, index_at(h, gen + 1), n);
    atomic_store_explicit(&h->index_gen, gen + 1, memory_order_release);
    probe(h, hash, ips, depth, space, &slot);
  }
  if (!slot || n >= h->stacks_cap || fu + depth > h->frames_cap || n * 2 > h->index_cap - 1) {
    id = LGI_STACK_OVERFLOW; /* attributed to the overflow site, and counted */
    atomic_fetch_add_explicit(&h->dropped, 1, memory_order_relaxed);
    goto out;
  }
  modules_cover(h, ips, depth);
  lg_stack_rec_t *r = LG_PTR(h, h->stacks_off, lg_stack_rec_t *) + n;
  memcpy(LG_PTR(h, h->frames_off, uint64_t *) + fu, ips, depth * sizeof *ips);
  r->hash = hash;
  r->frames = (uint32_t)fu;
  r->depth = (uint16_t)depth;
  r->space = (uint8_t)space;
  r->device = (uint8_t)(space >> 8);
  atomic_store_explicit(&h->frames_used, fu + depth, memory_order_relaxed);
  grew = fu + depth;
  atomic_store_explicit(&slot->id, n, memory_order_relaxed);
  atomic_store_explicit(&slot->hash, hash, memory_order_release);
  atomic_store_explicit(&h->nstacks, n + 1, memory_order_release);
  id = n;
out:
  lgi_unlock();
  if (grew) /* not under the lock: the system call takes ~0.4 ms */
    populate_ahead(h, h->frames_off, (grew - depth) * sizeof *ips, grew * sizeof *ips, h->frames_cap * sizeof *ips);
  return id;
}

/* ------------------------------------------------------------------ shards */

void lgi_shard_acquire(lgi_tls_t *t) {
  lg_region_hdr_t *h = lgi_g.hdr;
  lg_shard_desc_t *sd = LG_PTR(h, h->shards_off, lg_shard_desc_t *);
  uint32_t tid = (uint32_t)lg_sys_gettid();
  t->shard = NULL;
  t->shard_atomic = 1;
  if (t->state == 2) goto shared; /* thread destructor already ran */
  /* Reuse a released shard first (its counters keep adding up), else take a new one. */
  uint32_t n = atomic_load(&h->nshards);
  for (uint32_t i = 1; i < n; i++) {
    uint32_t z = 0;
    if (atomic_compare_exchange_strong(&sd[i].owner, &z, tid)) {
      t->shard = &sd[i];
      goto done;
    }
  }
  for (;;) {
    n = atomic_load(&h->nshards);
    if (n >= h->shards_cap) goto shared;
    if (atomic_compare_exchange_strong(&h->nshards, &n, n + 1)) {
      atomic_store(&sd[n].owner, tid);
      t->shard = &sd[n];
      goto done;
    }
  }
done:
  t->shard_atomic = 0;
  t->chunk_dir = LG_PTR(h, t->shard->chunk_dir, uint64_t *);
  return;
shared:
  t->chunk_dir = LG_PTR(h, sd[0].chunk_dir, uint64_t *);
}

void lgi_shard_release(lgi_tls_t *t) {
  if (t->shard) atomic_store(&t->shard->owner, 0);
  t->shard = NULL;
  t->chunk_dir = NULL;
}

lg_site_ctr_t *lgi_site_ctr(lgi_tls_t *t, uint32_t site) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (LGI_UNLIKELY(!t->chunk_dir)) lgi_shard_acquire(t);
  uint64_t *dir = t->chunk_dir;
  uint32_t c = site / LG_SITES_PER_CHUNK;
  uint64_t off = __atomic_load_n(&dir[c], __ATOMIC_ACQUIRE);
  if (LGI_UNLIKELY(!off)) {
    uint64_t bytes = LG_SITES_PER_CHUNK * sizeof(lg_site_ctr_t);
    uint64_t a = atomic_fetch_add(&h->arena_used, bytes);
    if (a + bytes > h->arena_cap) {
      atomic_fetch_add(&h->dropped, 1);
      return NULL;
    }
    uint64_t want = h->arena_off + a, z = 0;
    populate_ahead(h, h->arena_off, a, a + bytes, h->arena_cap);
    /* Shard 0 is shared: another thread may have installed a chunk meanwhile. */
    if (__atomic_compare_exchange_n(&dir[c], &z, want, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) off = want;
    else off = z;
  }
  return LG_PTR(h, off, lg_site_ctr_t *) + (site % LG_SITES_PER_CHUNK);
}

/* Writes the decimal v at p; returns the end. */
static char *put_dec(char *p, long v) {
  char d[24];
  int n = 0;
  if (v < 0) *p++ = '-', v = -v;
  do d[n++] = (char)('0' + v % 10), v /= 10;
  while (v);
  while (n) *p++ = d[--n];
  return p;
}

/* The collector did not take this process's hello in time: it says so with an empty
 * file beside its socket (LG_FILE_UNRECORDED), which the collector counts when it runs
 * again. Raw system calls, no allocation; O_EXCL|O_NOFOLLOW, in the collector's private
 * directory. */
static void note_unrecorded(void) {
  char path[sizeof lgi_g.sock_path + 48];
  size_t n = strlen(lgi_g.sock_path);
  while (n && lgi_g.sock_path[n - 1] != '/') n--;
  if (!n) return;
  memcpy(path, lgi_g.sock_path, n);
  char *p = path + n;
  static const char pre[] = "unrecorded-";
  memcpy(p, pre, sizeof pre - 1);
  p = put_dec(p + sizeof pre - 1, (long)lg_sys_getpid());
  *p++ = '-';
  p = put_dec(p, (long)syscall(SYS_getppid));
  *p = 0;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) syscall(SYS_close, fd);
}

/* Sleeps 1 ms (raw nanosleep: no allocation, async-signal-safe). */
static void nap_1ms(void) {
  struct timespec ts = {0, 1000000};
  syscall(SYS_nanosleep, &ts, NULL);
}

/* Connects to the collector (lgi_g.sock_path) and sends the hello of `kind` with the
 * region's memfd. Raw system calls, no allocation. Never waits for the collector more
 * than LG_HELLO_WAIT_MS: the socket is non-blocking, and a connect refused for a full
 * backlog (EAGAIN: the collector stopped, a paused container, swapped out) or a send
 * that would block is tried again each millisecond until then; past it the process
 * runs unrecorded and leaves a note for the collector (note_unrecorded). The target
 * never waits for leakguard longer than that, whatever the collector does. */
int lgi_send_hello(unsigned kind) {
  int s = (int)syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, lgi_g.sock_path, sizeof a.sun_path - 1);
  int rc, waited = 0;
  for (;;) {
    rc = (int)syscall(SYS_connect, s, (struct sockaddr *)&a, sizeof a);
    if (rc == 0 || (errno != EINTR && errno != EAGAIN)) break;
    if (errno == EAGAIN) {
      if (waited++ >= LG_HELLO_WAIT_MS) break;
      nap_1ms();
    }
  }
  if (rc < 0) {
    if (errno == EAGAIN) note_unrecorded();
    goto fail;
  }
  lg_hello_t h;
  memset(&h, 0, sizeof h);
  h.magic = LG_HELLO_MAGIC;
  h.version = LG_REGION_VERSION;
  h.kind = kind;
  h.pid = lgi_g.hdr->pid;
  h.ppid = lgi_g.hdr->ppid;
  h.region_size = lgi_g.hdr->size;
  ssize_t k = (ssize_t)syscall(SYS_readlink, "/proc/self/exe", h.exe, sizeof h.exe - 1);
  h.exe[k > 0 ? k : 0] = 0;
  struct iovec iov = {&h, sizeof h};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = u.buf;
  m.msg_controllen = sizeof u.buf;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &lgi_g.fd, sizeof(int));
  for (;;) {
    rc = (int)syscall(SYS_sendmsg, s, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc >= 0 || (errno != EINTR && errno != EAGAIN)) break;
    if (errno == EAGAIN) {
      if (waited++ >= LG_HELLO_WAIT_MS) break;
      nap_1ms();
    }
  }
  if (rc != (int)sizeof h) {
    if (rc < 0 && errno == EAGAIN) note_unrecorded();
    goto fail;
  }
  /* Kept open until exit/exec (close-on-exec). Its EOF is a hint for the collector,
   * not the proof that we are gone: the program may close it (close_range, dup2),
   * and the collector then watches the process itself (pidfd). */
  lgi_g.conn = s;
  lgi_fd_identity(s, &lgi_g.conn_dev, &lgi_g.conn_ino);
  return s;
fail:
  syscall(SYS_close, s);
  return -1;
}
