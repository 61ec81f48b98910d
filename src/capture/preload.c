/* SPDX-License-Identifier: MIT */
/*
 * preload.c - libleakguard.so: the interposed allocation functions and the
 * recorder's lifecycle.
 *
 * A block that is recorded carries a 16-byte header in front of it (lg_blk_t,
 * src/core/blockhdr.h): the stack id of its allocation site, its birth epoch, its
 * requested size and the offset back to the underlying allocator's pointer. free()
 * reads the header, so no global address table or lock is needed, and the recorder
 * memory per recorded block is those 16 bytes. Blocks that are not recorded (in
 * sampled mode almost all) go to glibc as they are, without a header; free() tells
 * them apart by a mark bit that glibc's own chunk header never has. This follows
 * glibc's documented malloc replacement contract: all of malloc, free, calloc, realloc,
 * memalign, posix_memalign, aligned_alloc, valloc, pvalloc, malloc_usable_size are
 * replaced.
 *
 * Hot path: one per-thread countdown decides (a) sampling and (b) "not ready yet":
 * while it stays positive an allocation is passed through untouched (a tail call). In
 * full mode it is always 0, so every allocation is headed and recorded.
 *
 * Lifecycle: lazy init on the first hook (before main, in whatever constructor
 * allocates first); fork (and _Fork): the child copies the region into its own memfd
 * and registers as a new process through the socket path; exec: the new image starts
 * from scratch (the socket and memfd are close-on-exec; procs.c marks the region);
 * exit: hooks keep working, the collector keeps the mapping. The program may close or
 * reuse our descriptors at any time: they are used only after an fstat identity check.
 * Also here: glibc's __libc_* allocator names and free_sized, which must not reach
 * glibc with our header (docs/design.md, "Mismatched allocator paths"). Without
 * LEAKGUARD_SOCK, or when the collector cannot be reached, the library passes every
 * call through and the target runs on unrecorded.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>

#include "capture/recorder.h"
#include "core/blockhdr.h"
#include "leakguard.h"


__thread lgi_tls_t lgi_tls __attribute__((tls_model("initial-exec")));
lgi_global_t lgi_g = {.fd = -1, .conn = -1};

/* ------------------------------------------------------------------ block header
 * Layout and the reason for the mark bit: src/core/blockhdr.h. */

#define HDR LG_BLK_HDR
static inline lg_blk_t *blk_of(void *p) { return (lg_blk_t *)((char *)p - HDR); }
static inline uint64_t word_of(const void *p) { return ((const uint64_t *)p)[-1]; }
static inline size_t blk_size(const lg_blk_t *b) { return lg_blk_word_size(b->word); }
static inline size_t blk_offset(const lg_blk_t *b) { return (size_t)1 << lg_blk_word_offlog2(b->word); }
static inline void *blk_base(void *p) { return (char *)p - blk_offset(blk_of(p)); }
static inline unsigned blk_tag(const lg_blk_t *b) { return lg_blk_word_tag(b->word); }

/* 1 when every block gets a header: the allocator underneath is not glibc's, so the
 * word in front of its blocks tells us nothing. Set by resolve_real() before the first
 * block is handed out, never changed after. */
static int head_all;

/* ------------------------------------------------------------------ real allocator */

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_memalign)(size_t, size_t);
static size_t (*real_usable)(void *);

/* dlsym() may itself call calloc/malloc before the real functions are known: a
 * small static pool serves those, and free() ignores pointers inside it. */
static _Alignas(16) char boot_pool[64 * 1024];
static size_t boot_used;
static int in_boot(const void *p) {
  return (const char *)p >= boot_pool && (const char *)p < boot_pool + sizeof boot_pool;
}
static void *boot_alloc(size_t n) {
  size_t need = (n + 15 + HDR) & ~(size_t)15;
  size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
  if (at + need > sizeof boot_pool) return NULL;
  lg_blk_t *b = (lg_blk_t *)(boot_pool + at);
  b->site = 0;
  b->epoch = 0;
  b->word = lg_blk_word(n, 4, 0); /* marked: free() sends it to free_slow(), which ignores it */
  return boot_pool + at + HDR; /* zeroed: static storage is never reused */
}

/* 1 when all the real functions are glibc's own (libc.so.6), whose blocks can go
 * without a header (src/core/blockhdr.h). Not a symbol comparison with __libc_malloc:
 * jemalloc and others define those names too. dladdr() does not allocate. */
static int next_is_glibc(void) {
#if defined(__x86_64__) || defined(__aarch64__)
  void *fn[] = {(void *)real_malloc, (void *)real_free, (void *)real_calloc,
                (void *)real_realloc, (void *)real_memalign, (void *)real_usable};
  void *base = NULL;
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
    Dl_info di;
    if (!dladdr(fn[i], &di) || !di.dli_fname) return 0;
    size_t n = strlen(di.dli_fname);
    if (n < 9 || strcmp(di.dli_fname + n - 9, "libc.so.6") != 0) return 0;
    if (n > 9 && di.dli_fname[n - 10] != '/') return 0;
    if (base && di.dli_fbase != base) return 0;
    base = di.dli_fbase;
  }
  return 1;
#else
  return 0; /* the mark bit argument needs 16-byte malloc alignment */
#endif
}

/* The code of the next allocator when it is not glibc's: [alloc_lo, alloc_hi). jemalloc,
 * tcmalloc and mimalloc map their arenas with mmap(), and the blocks inside an arena are
 * already recorded through malloc: an anonymous mapping made from this range is the
 * allocator's own bookkeeping and is not recorded again (it would count every byte
 * twice, and an arena that grows in 4-64 MiB steps looks like a step leak). */
static uintptr_t alloc_lo, alloc_hi;

static int alloc_range_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t fn = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  if (fn < lo || fn >= hi) return 0;
  alloc_lo = lo;
  alloc_hi = hi;
  return 1;
}

/* The dynamic loader's code: [rtld_lo, rtld_hi) (see record_alloc). */
static uintptr_t rtld_lo, rtld_hi;

static int rtld_range_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t fn = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  if (fn < lo || fn >= hi) return 0;
  rtld_lo = lo;
  rtld_hi = hi;
  return 1;
}

static _Atomic int resolve_state; /* 0 no, 1 in progress, 2 done */
static void resolve_real(void) {
  int z = 0;
  if (!atomic_compare_exchange_strong(&resolve_state, &z, 1)) {
    while (atomic_load(&resolve_state) != 2) sched_yield();
    return;
  }
  real_malloc = dlsym(RTLD_NEXT, "malloc");
  real_free = dlsym(RTLD_NEXT, "free");
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_memalign = dlsym(RTLD_NEXT, "memalign");
  real_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
  if (!real_malloc || !real_free || !real_calloc || !real_realloc || !real_memalign || !real_usable) {
    static const char msg[] = "leakguard: cannot find the real allocator, aborting\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  head_all = !next_is_glibc();
  /* dladdr() above already took the loader's lock here: dl_iterate_phdr adds no new
   * lock, and this runs once, in the first allocation. */
  if (head_all) dl_iterate_phdr(alloc_range_cb, (void *)real_malloc);
  /* ld.so defines __tls_get_addr (libc's _dl_find_object is only a forwarder) */
  void *in_rtld = dlsym(RTLD_DEFAULT, "__tls_get_addr");
  if (in_rtld) dl_iterate_phdr(rtld_range_cb, in_rtld);
  atomic_store(&resolve_state, 2);
}

/* ------------------------------------------------------------------ init */

static _Atomic int init_state; /* 0 not yet, 1 in progress, 2 done */
static pthread_key_t thread_key;
static uint32_t era_now(void);

static unsigned long parse_ul(const char *s, unsigned long dflt) {
  if (!s || !*s) return dflt;
  unsigned long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return dflt;
    v = v * 10 + (unsigned long)(*s - '0');
  }
  return v;
}

static int send_hello(unsigned kind) {
  int s = (int)syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, lgi_g.sock_path, sizeof a.sun_path - 1);
  int rc;
  do rc = (int)syscall(SYS_connect, s, (struct sockaddr *)&a, sizeof a);
  while (rc < 0 && errno == EINTR);
  if (rc < 0) goto fail;
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
  do rc = (int)syscall(SYS_sendmsg, s, &m, MSG_NOSIGNAL);
  while (rc < 0 && errno == EINTR);
  if (rc != (int)sizeof h) goto fail;
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

static void thread_exit(void *arg) {
  (void)arg;
  lgi_tls_t *t = &lgi_tls;
  t->guard++;
  lgi_shard_release(t);
  lgi_unwind_thread_exit(t);
  t->state = 2;
  t->guard--;
}

static void mm_lock_take(void);
static void mm_lock_drop(void);
void lgi_atfork_prepare(void) {
  lgi_tls.guard++;
  if (lgi_g.enabled) {
    lgi_cuda_atfork(0); /* order: CUDA table, region, mmap table (never held the other way) */
    lgi_lock(); /* no stack insert is half done while we copy */
    mm_lock_take(); /* nor a change of the mmap table */
  }
}
void lgi_atfork_parent(void) {
  if (lgi_g.enabled) {
    lgi_cuda_atfork(1);
    mm_lock_drop();
    lgi_unlock();
  }
  lgi_tls.guard--;
}

/* An unrecorded child must stop writing into its parent's region. With the memfd
 * still ours, a private copy-on-write mapping of it keeps every counter readable;
 * when the program has closed or reused the descriptor, anonymous pages take the
 * region's place, with the header copied (the rest reads as zeros, and nothing is
 * recorded any more). */
static void region_make_private(void) {
  lg_region_hdr_t *h = lgi_g.hdr;
  size_t size = h->size;
  if (lgi_fd_is(lgi_g.fd, lgi_g.fd_dev, lgi_g.fd_ino)) {
    void *p = (void *)syscall(SYS_mmap, h, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, lgi_g.fd, 0);
    if (p == (void *)h) return;
  }
  lg_region_hdr_t copy;
  memcpy(&copy, h, sizeof copy);
  void *p = (void *)syscall(SYS_mmap, h, size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (p == (void *)h) memcpy(h, &copy, sizeof copy);
}

static double next_exp(lgi_tls_t *t, double mean);
void lgi_atfork_child(void) {
  if (lgi_g.enabled) {
    lgi_cuda_atfork(2);
    mm_lock_drop();
    lgi_unlock();
    /* The parent's connection is the parent's: closed here (if the descriptor is
     * still it) so that its EOF follows the parent alone. */
    if (lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino)) syscall(SYS_close, lgi_g.conn);
    lgi_g.conn = -1;
    if (!lgi_g.follow || lgi_region_fork_copy() != 0 || send_hello(LG_HELLO_FORK) < 0) {
      /* Unrecorded child: make it stop writing into the parent's region. */
      lgi_g.enabled = 0;
      region_make_private();
    }
  }
  if (!lgi_g.enabled) lgi_tls.countdown = INT64_MAX;
  else if (lgi_g.sample_bytes) { /* a sample stream of its own, not the parent's */
    lgi_tls.rng ^= (uint64_t)syscall(SYS_getpid) * 0x9E3779B97F4A7C15ULL;
    if (!lgi_tls.rng) lgi_tls.rng = 1;
    lgi_tls.countdown = (int64_t)next_exp(&lgi_tls, (double)lgi_g.sample_bytes);
  }
  else lgi_tls.countdown = 0;
  lgi_breaker_atfork_child();
  lgi_tls.guard--;
}

/* _Fork() (glibc 2.34) runs no pthread_atfork handlers: without this its child would
 * keep writing into the parent's region. */
LG_API pid_t _Fork(void) {
  static pid_t (*real)(void);
  if (!real) real = (pid_t(*)(void))dlsym(RTLD_NEXT, "_Fork");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  lgi_atfork_prepare();
  pid_t pid = real();
  if (pid == 0) lgi_atfork_child();
  else lgi_atfork_parent();
  return pid;
}

void lgi_say(const char *a, const char *b, const char *c) {
  char buf[512];
  size_t n = 0;
  const char *parts[] = {"leakguard: ", a, b, c};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char *q = parts[i]; q && *q && n < sizeof buf - 1; q++) buf[n++] = *q;
  buf[n++] = '\n';
  for (size_t off = 0; off < n;) {
    ssize_t k = (ssize_t)syscall(SYS_write, 2, buf + off, n - off);
    if (k > 0) off += (size_t)k;
    else if (k < 0 && errno == EINTR) continue;
    else break;
  }
}

/* Removes our library from LD_PRELOAD so that exec'd children run unrecorded. */
static void drop_preload_env(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) continue;
    char *v = *e + 11, *w = v;
    /* Keep every entry that is not a libleakguard.so. The string is rewritten in
     * place (it only shrinks), so no allocation is needed. */
    char *r = v;
    while (*r) {
      while (*r == ' ' || *r == ':') r++;
      char *s = r;
      while (*r && *r != ' ' && *r != ':') r++;
      size_t len = (size_t)(r - s);
      if (len == 0) break;
      int ours = len >= 15 && memcmp(r - 15, "libleakguard.so", 15) == 0;
      if (!ours) {
        if (w != v) *w++ = ':';
        memmove(w, s, len);
        w += len;
      }
    }
    *w = 0;
  }
}

/* Says so (one line) when the program's malloc is not ours: another allocator comes
 * before libleakguard.so in the search order (e.g. LD_PRELOAD=libjemalloc.so:...),
 * so its blocks never pass through the hooks and nothing is recorded. Not a crash
 * risk: our hooks then never see those blocks. */
static void check_first_malloc(void) {
  void *first = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info di, me;
  const ElfW(Sym) *sym = NULL;
  if (!first || !dladdr((void *)check_first_malloc, &me)) return;
  if (!dladdr1(first, &di, (void **)&sym, RTLD_DL_SYMENT)) return;
  /* A non-PIE program that takes malloc's address gets a canonical PLT entry, an
   * undefined symbol with a value: not a definition, it leads to ours. */
  if (sym && sym->st_shndx == SHN_UNDEF) return;
  if (di.dli_fbase != me.dli_fbase) {
    const char *who = di.dli_fname ? di.dli_fname : "another library";
    lgi_say("the program's malloc is ", who, "'s, which comes before leakguard's: heap allocations are not recorded");
  }
}

/* Returns 0 when done, -EAGAIN when it is too early (before libc has set up the
 * environment, e.g. in a .preinit_array function): allocations pass through until a
 * later hook or our constructor retries. */
static int do_init(void) {
  extern char **environ;
  if (!environ) return -EAGAIN;
  lgi_tls.guard++;
  resolve_real();
  lgi_procs_init();
  const char *sock = secure_getenv(LG_ENV_SOCK);
  unsigned long depth = parse_ul(secure_getenv(LG_ENV_DEPTH), LG_DEFAULT_DEPTH);
  if (depth < 1) depth = 1;
  if (depth > LG_MAX_DEPTH) depth = LG_MAX_DEPTH;
  lgi_g.depth = (uint32_t)depth;
  lgi_g.sample_bytes = parse_ul(secure_getenv(LG_ENV_SAMPLE), 0);
  const char *fol = secure_getenv(LG_ENV_FOLLOW);
  lgi_g.follow = !(fol && fol[0] == '0');
  const char *mm = secure_getenv(LG_ENV_MMAP);
  uint32_t flags = (lgi_g.follow ? LG_RF_FOLLOW : 0) | ((mm && mm[0] == '0') ? 0 : LG_RF_MMAP);
  if (!lgi_g.follow) drop_preload_env();
  if (sock && *sock && strlen(sock) < sizeof lgi_g.sock_path) {
    memcpy(lgi_g.sock_path, sock, strlen(sock) + 1);
    lgi_unwind_init();
    lgi_python_detect();
    if (lgi_region_create(lgi_g.depth, lgi_g.sample_bytes, flags) == 0) {
      if (send_hello(LG_HELLO_START) >= 0) {
        pthread_key_create(&thread_key, thread_exit);
        pthread_atfork(lgi_atfork_prepare, lgi_atfork_parent, lgi_atfork_child);
        lgi_g.enabled = 1;
      } else {
        static const char msg[] = "leakguard: collector not reachable, running unrecorded\n";
        (void)!write(2, msg, sizeof msg - 1);
      }
    }
  }
  if (lgi_g.enabled) check_first_malloc();
  atomic_store(&init_state, 2);
  lgi_tls.guard--;
  return 0;
}

/* Runs do_init once; 1 when initialised, 0 when not (yet). */
static int try_init(void) {
  int s = atomic_load_explicit(&init_state, memory_order_acquire);
  if (s == 2) return 1;
  int z = 0;
  if (s != 0 || !atomic_compare_exchange_strong(&init_state, &z, 1)) return 0;
  if (do_init() != 0) {
    atomic_store(&init_state, 0);
    return 0;
  }
  return 1;
}

/* Slow path of the per-thread countdown: initialises the process and the thread.
 * Returns 1 when this allocation is to be recorded. */
static int thread_ready(lgi_tls_t *t) {
  if (!try_init()) return 0; /* too early, or another thread is initialising */
  if (!lgi_g.enabled) {
    t->countdown = INT64_MAX;
    return 0;
  }
  if (t->state == 0) {
    t->guard++;
    t->state = 1;
    t->rng = (uint64_t)syscall(SYS_gettid) * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    pthread_setspecific(thread_key, t);
    lgi_shard_acquire(t);
    t->guard--;
  }
  return 1;
}

/* ------------------------------------------------------------------ sampling */

static double next_exp(lgi_tls_t *t, double mean) {
  t->rng ^= t->rng << 13;
  t->rng ^= t->rng >> 7;
  t->rng ^= t->rng << 17;
  double u = ((double)(t->rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return -log(u) * mean;
}

/* Estimated bytes represented by one sampled block of `size` bytes: each byte is
 * sampled with probability 1/B, so the block is with p = 1 - exp(-size/B). */
static inline int64_t weight_bytes(size_t size) {
  uint64_t B = lgi_g.sample_bytes;
  if (!B || !size) return (int64_t)size; /* size 0: p = 0, size / p would be NaN */
  double p = -expm1(-(double)size / (double)B);
  return (int64_t)((double)size / p + 0.5);
}
static inline int64_t weight_blocks(size_t size) {
  uint64_t B = lgi_g.sample_bytes;
  if (!B || !size) return 1;
  double p = -expm1(-(double)size / (double)B);
  int64_t w = (int64_t)(1.0 / p + 0.5);
  return w < 1 ? 1 : w;
}

static uint32_t era_now(void) {
  return atomic_load_explicit(&lgi_g.hdr->epoch, memory_order_relaxed);
}

/* ------------------------------------------------------------------ accounting */

static inline void ctr_update(lgi_tls_t *t, uint32_t site, int64_t bytes, int64_t blocks,
                              uint32_t epoch, int alloc) {
  int shared = t->shard_atomic || t->guard > 1 || !t->chunk_dir;
  lgi_tls_t tmp;
  if (t->guard > 1) { /* nested (signal handler inside a hook): shared shard only */
    memset(&tmp, 0, sizeof tmp);
    tmp.state = 2;
    tmp.guard = t->guard;
    lgi_shard_acquire(&tmp);
    t = &tmp;
  }
  lg_site_ctr_t *c = lgi_site_ctr(t, site);
  if (!c) return;
  unsigned era = lg_era(epoch);
  if (shared) {
    __atomic_fetch_add(&c->live_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->live_blocks, blocks, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->era_blocks[era], (int32_t)blocks, __ATOMIC_RELAXED);
    if (alloc) {
      __atomic_fetch_add(&c->alloc_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
      __atomic_fetch_add(&c->alloc_blocks, (uint64_t)blocks, __ATOMIC_RELAXED);
    }
  } else {
    /* Single writer: plain stores, 8-byte aligned so the collector never sees a torn value. */
    __atomic_store_n(&c->live_bytes, c->live_bytes + bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&c->live_blocks, c->live_blocks + blocks, __ATOMIC_RELAXED);
    __atomic_store_n(&c->era_blocks[era], c->era_blocks[era] + (int32_t)blocks, __ATOMIC_RELAXED);
    if (alloc) {
      __atomic_store_n(&c->alloc_bytes, c->alloc_bytes + (uint64_t)bytes, __ATOMIC_RELAXED);
      __atomic_store_n(&c->alloc_blocks, c->alloc_blocks + (uint64_t)blocks, __ATOMIC_RELAXED);
    }
  }
}

/* For the other hooks (cuda.c): recorder.h. */
int lgi_thread_ready(lgi_tls_t *t) { return thread_ready(t); }
void lgi_count(lgi_tls_t *t, uint32_t site, int64_t bytes, int64_t blocks, uint32_t epoch, int alloc) {
  ctr_update(t, site, bytes, blocks, epoch, alloc);
}
uint32_t lgi_epoch(void) { return era_now(); }

/* Records the block at user pointer p (its header already holds size and offset):
 * the countdown ran out and thread_ready() said yes. */
static __attribute__((noinline)) void record_alloc(lgi_tls_t *t, void *p, size_t size,
                                                   uintptr_t ra0, uintptr_t cfa0) {
  t->guard++;
  if (lgi_g.sample_bytes) t->countdown = (int64_t)next_exp(t, (double)lgi_g.sample_bytes);
  else t->countdown = 0;
  /* The dynamic loader's own blocks (a thread's TLS vector, link maps) are not
   * recorded: ld.so reallocates a thread's DTV from inside __tls_get_addr, and
   * unwinding from there needs libunwind's TLS, whose __tls_get_addr would resize the
   * same DTV again, freeing the block the outer call is moving (glibc aborts in
   * mremap_chunk: seen with torch, a thread started before its libraries were loaded). */
  if (ra0 - rtld_lo < rtld_hi - rtld_lo) {
    t->guard--;
    return;
  }
  uint32_t site = lgi_capture_all(t, ra0, cfa0, LG_SPACE_HOST);
  uint32_t ep = era_now();
  ctr_update(t, site, weight_bytes(size), weight_blocks(size), ep, 1);
  lg_blk_t *b = blk_of(p);
  b->epoch = ep;
  b->site = site;
  t->guard--;
}

/* Out of line and cold: in sampled mode almost no freed block was recorded. */
static __attribute__((noinline, cold)) void record_free(lg_blk_t *b) {
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_g.enabled) return;
  if (LGI_UNLIKELY(t->state == 0) && !thread_ready(t)) return;
  t->guard++;
  size_t sz = blk_size(b);
  ctr_update(t, b->site, -weight_bytes(sz), -weight_blocks(sz), b->epoch, 0);
  t->guard--;
}

/* Heads a fresh block from the real allocator; base is the underlying pointer,
 * offset (a power of two >= 16) the distance to the user pointer. */
static inline void *head(void *base, size_t size, unsigned offset_log2) {
  char *p = (char *)base + ((size_t)1 << offset_log2);
  lg_blk_t *b = blk_of(p);
  b->site = 0;
  b->epoch = 0;
  b->word = lg_blk_word(size, offset_log2, 0);
  return p;
}

#define CALLER_RA ((uintptr_t)__builtin_return_address(0))
#define CALLER_CFA ((uintptr_t)__builtin_frame_address(0) + 16)

/* The block was allocated inside lg_tag_push(): count it, enforce the quota. */
static __attribute__((noinline)) void *tag_finish(lgi_tls_t *t, void *p, size_t size) {
  lg_blk_t *b = blk_of(p);
  b->word |= (uint64_t)t->tag << LG_BLK_TAG_SHIFT;
  t->guard++;
  int fail = lgi_tag_alloc(t, t->tag, size, 1);
  t->guard--;
  if (fail) {
    free(p);
    errno = ENOMEM;
    return NULL;
  }
  if (t->quota_tag) lgi_tag_fire(t);
  return p;
}

/* ------------------------------------------------------------------ the hot paths
 * The per-thread countdown decides: while it stays positive a block goes to the real
 * allocator as it is, without a header (sampled mode: almost every block; and every
 * block when nothing is recorded). A block gets a header when it is recorded (the
 * countdown ran out: sampling, full mode, or the thread's first allocation), when it
 * is tagged (lg_tag_push), or always when head_all is set. free() tells the two kinds
 * apart by the mark bit in the word in front of the block (src/core/blockhdr.h). */

/* Fast-path test: 1 when a block of size bytes goes without a header (and then
 * counts it down). */
static inline int unheaded(lgi_tls_t *t, size_t size) {
  int64_t c = t->countdown - (int64_t)size;
  if (LGI_LIKELY(c > 0) && LGI_LIKELY(!t->tag) && LGI_LIKELY(!head_all)) {
    t->countdown = c;
    return 1;
  }
  return 0;
}

/* Slow path of the countdown: 1 when this block is to be recorded. Inside the
 * recorder (guard) nothing is. */
static int decide(lgi_tls_t *t, size_t size) {
  if (t->guard) return 0;
  t->countdown -= (int64_t)size;
  if (t->countdown > 0) return 0;
  int first = t->state == 0;
  if (!thread_ready(t)) return 0;
  if (!lgi_g.sample_bytes) return 1;
  /* The thread's first allocation starts its Poisson process (the first sampled byte
   * lies Exp(B) bytes ahead): it is not recorded just for being first. */
  if (LGI_UNLIKELY(first)) {
    t->countdown = (int64_t)next_exp(t, (double)lgi_g.sample_bytes) - (int64_t)size;
    if (t->countdown > 0) return 0;
  }
  /* Byte sampling never picks a block without bytes: the sampled byte still lies
   * ahead, in the next allocation that has some. */
  return size != 0;
}

static inline int need_head(const lgi_tls_t *t) { return head_all || (t->tag && !t->guard); }

static inline void *finish(lgi_tls_t *t, void *p, size_t size, int rec, uintptr_t ra0,
                           uintptr_t cfa0) {
  if (rec) record_alloc(t, p, size, ra0, cfa0);
  if (LGI_UNLIKELY(t->tag) && !t->guard) return tag_finish(t, p, size);
  return p;
}

/* ------------------------------------------------------------------ malloc family */

static inline int too_big(size_t size, size_t extra) {
  return size > SIZE_MAX - extra || size > LG_BLK_MAX_SIZE;
}

static __attribute__((noinline)) void *malloc_slow(size_t size, uintptr_t ra0, uintptr_t cfa0) {
  if (LGI_UNLIKELY(!real_malloc)) {
    if (atomic_load(&resolve_state) == 1) return boot_alloc(size);
    resolve_real();
  }
  lgi_tls_t *t = &lgi_tls;
  int rec = decide(t, size);
  if (!rec && !need_head(t)) return real_malloc(size);
  if (too_big(size, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  void *base = real_malloc(size + HDR);
  if (!base) return NULL;
  return finish(t, head(base, size, 4), size, rec, ra0, cfa0);
}

/* malloc(size) on behalf of the caller at (ra0, cfa0). */
static inline void *do_malloc(size_t size, uintptr_t ra0, uintptr_t cfa0) {
  if (LGI_LIKELY(unheaded(&lgi_tls, size))) return real_malloc(size);
  return malloc_slow(size, ra0, cfa0);
}

static void *do_memalign(size_t align, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  if (align <= HDR) return do_malloc(size, ra0, cfa0);
  lgi_tls_t *t = &lgi_tls;
  if (align & (align - 1)) align = (size_t)1 << (64 - __builtin_clzl(align)); /* as glibc */
  if (LGI_LIKELY(unheaded(t, size))) return real_memalign(align, size);
  if (LGI_UNLIKELY(!real_memalign)) {
    if (atomic_load(&resolve_state) == 1) return NULL;
    resolve_real();
  }
  int rec = decide(t, size);
  if (!rec && !need_head(t)) return real_memalign(align, size);
  if (too_big(size, align) || align > ((size_t)1 << 40)) {
    errno = ENOMEM;
    return NULL;
  }
  void *base = real_memalign(align, size + align);
  if (!base) return NULL;
  return finish(t, head(base, size, (unsigned)__builtin_ctzl(align)), size, rec, ra0, cfa0);
}

LG_API void *malloc(size_t size) {
  if (LGI_LIKELY(unheaded(&lgi_tls, size))) return real_malloc(size);
  return malloc_slow(size, CALLER_RA, CALLER_CFA); /* RA/CFA only on the slow path */
}

static __attribute__((noinline)) void free_slow(void *p) {
  if (in_boot(p)) return;
  lg_blk_t *b = blk_of(p);
  if (b->site) record_free(b);
  if (LGI_UNLIKELY(b->word & LG_BLK_TAG_MASK)) lgi_tag_free(blk_tag(b), blk_size(b));
  real_free(blk_base(p));
}

LG_API void free(void *p) {
  if (LGI_UNLIKELY(!p)) return;
  if (LGI_LIKELY(!lg_blk_marked(word_of(p)))) {
    real_free(p);
    return;
  }
  free_slow(p);
}

static __attribute__((noinline)) void *calloc_slow(size_t n, size_t size, uintptr_t ra0,
                                                   uintptr_t cfa0) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total) || too_big(total, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  if (LGI_UNLIKELY(!real_calloc)) {
    if (atomic_load(&resolve_state) == 1) return boot_alloc(total);
    resolve_real();
  }
  lgi_tls_t *t = &lgi_tls;
  int rec = decide(t, total);
  if (!rec && !need_head(t)) return real_calloc(n, size);
  void *base = real_calloc(1, total + HDR);
  if (!base) return NULL;
  return finish(t, head(base, total, 4), total, rec, ra0, cfa0);
}

LG_API void *calloc(size_t n, size_t size) {
  size_t total;
  if (LGI_LIKELY(!__builtin_mul_overflow(n, size, &total)) && LGI_LIKELY(unheaded(&lgi_tls, total)))
    return real_calloc(n, size);
  return calloc_slow(n, size, CALLER_RA, CALLER_CFA);
}

/* realloc of a block with a header (recorded, tagged, bootstrap or over-aligned). */
static __attribute__((noinline)) void *realloc_headed(void *p, size_t size, uintptr_t ra0,
                                                      uintptr_t cfa0) {
  lg_blk_t *b = blk_of(p);
  size_t old = blk_size(b);
  if (in_boot(p) || blk_offset(b) != HDR) {
    /* Bootstrap or over-aligned block: move it by hand. */
    void *q = do_malloc(size, ra0, cfa0);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    free(p);
    return q;
  }
  if (too_big(size, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  /* Account the free before the real realloc: once it returns, another thread may
   * get the old address from malloc. The block keeps a header (perhaps with site 0). */
  lg_blk_t saved = *b;
  if (saved.site) record_free(b);
  if (saved.word & LG_BLK_TAG_MASK) lgi_tag_free(blk_tag(&saved), old);
  void *base = real_realloc(blk_base(p), size + HDR);
  lgi_tls_t *t = &lgi_tls;
  if (!base) { /* the old block lives on: count it again */
    t->guard++;
    if (saved.site) ctr_update(t, saved.site, weight_bytes(old), weight_blocks(old), saved.epoch, 0);
    if (saved.word & LG_BLK_TAG_MASK) lgi_tag_alloc(t, blk_tag(&saved), old, 0);
    t->guard--;
    return NULL;
  }
  int rec = decide(t, size);
  return finish(t, head(base, size, 4), size, rec, ra0, cfa0);
}

/* realloc of a block without a header whose new size needs one (recorded or tagged):
 * it moves into a fresh headed block. */
static __attribute__((noinline)) void *realloc_plain_slow(void *p, size_t size, uintptr_t ra0,
                                                          uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  int rec = decide(t, size);
  if (!rec && !need_head(t)) return real_realloc(p, size);
  if (too_big(size, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  void *base = real_malloc(size + HDR);
  if (!base) return NULL; /* p lives on, unchanged */
  size_t old = real_usable(p);
  memcpy((char *)base + HDR, p, old < size ? old : size);
  real_free(p);
  return finish(t, head(base, size, 4), size, rec, ra0, cfa0);
}

static inline void *do_realloc(void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  if (!p) return do_malloc(size, ra0, cfa0);
  if (size == 0) {
    free(p);
    return NULL;
  }
  if (LGI_UNLIKELY(lg_blk_marked(word_of(p)))) return realloc_headed(p, size, ra0, cfa0);
  if (LGI_LIKELY(unheaded(t, size))) return real_realloc(p, size);
  return realloc_plain_slow(p, size, ra0, cfa0);
}

LG_API void *realloc(void *p, size_t size) { return do_realloc(p, size, CALLER_RA, CALLER_CFA); }

LG_API void *reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return do_realloc(p, total, CALLER_RA, CALLER_CFA);
}

LG_API int posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  int e = errno;
  void *p = do_memalign(align, size, CALLER_RA, CALLER_CFA);
  if (!p) return ENOMEM;
  errno = e;
  *out = p;
  return 0;
}

LG_API void *memalign(size_t align, size_t size) { return do_memalign(align, size, CALLER_RA, CALLER_CFA); }

LG_API void *aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1))) {
    errno = EINVAL;
    return NULL;
  }
  return do_memalign(align, size, CALLER_RA, CALLER_CFA);
}

LG_API void *valloc(size_t size) {
  return do_memalign((size_t)sysconf(_SC_PAGESIZE), size, CALLER_RA, CALLER_CFA);
}

LG_API void *pvalloc(size_t size) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (too_big(size, pg)) {
    errno = ENOMEM;
    return NULL;
  }
  return do_memalign(pg, (size + pg - 1) & ~(pg - 1), CALLER_RA, CALLER_CFA);
}

LG_API size_t malloc_usable_size(void *p) {
  if (!p) return 0;
  uint64_t w = word_of(p);
  if (!lg_blk_marked(w)) return real_usable(p);
  if (in_boot(p)) return lg_blk_word_size(w);
  return real_usable(blk_base(p)) - blk_offset(blk_of(p));
}

/* glibc exports its allocator under these names too, and some libraries call them
 * directly. Each is the same function as its public name here, so that a block with
 * our header never reaches glibc's free or realloc, and a block allocated through
 * them is recorded like any other. (__libc_reallocarray is GLIBC_PRIVATE.) */
void *__libc_malloc(size_t size);
void __libc_free(void *p);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
void free_sized(void *p, size_t size);
void cfree(void *p);
void free_aligned_sized(void *p, size_t align, size_t size);

LG_API void *__libc_malloc(size_t size) {
  if (LGI_LIKELY(unheaded(&lgi_tls, size))) return real_malloc(size);
  return malloc_slow(size, CALLER_RA, CALLER_CFA);
}
LG_API void __libc_free(void *p) { free(p); }
LG_API void *__libc_calloc(size_t n, size_t size) {
  size_t total;
  if (LGI_LIKELY(!__builtin_mul_overflow(n, size, &total)) && LGI_LIKELY(unheaded(&lgi_tls, total)))
    return real_calloc(n, size);
  return calloc_slow(n, size, CALLER_RA, CALLER_CFA);
}
LG_API void *__libc_realloc(void *p, size_t size) { return do_realloc(p, size, CALLER_RA, CALLER_CFA); }
LG_API void *__libc_memalign(size_t align, size_t size) {
  return do_memalign(align, size, CALLER_RA, CALLER_CFA);
}
LG_API void *__libc_valloc(size_t size) {
  return do_memalign((size_t)sysconf(_SC_PAGESIZE), size, CALLER_RA, CALLER_CFA);
}
LG_API void *__libc_pvalloc(size_t size) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (too_big(size, pg)) {
    errno = ENOMEM;
    return NULL;
  }
  return do_memalign(pg, (size + pg - 1) & ~(pg - 1), CALLER_RA, CALLER_CFA);
}

/* C23's sized frees (glibc 2.39 and later): defined here so that a program built
 * against a newer glibc never hands one of our blocks to them. */
LG_API void free_sized(void *p, size_t size) {
  (void)size;
  free(p);
}
LG_API void free_aligned_sized(void *p, size_t align, size_t size) {
  (void)align;
  (void)size;
  free(p);
}

/* cfree: removed from glibc 2.26 but still exported for old binaries, as glibc's own
 * free (which would abort on our header). */
LG_API void cfree(void *p) { free(p); }

/* ------------------------------------------------------------------ anonymous mmap
 * Regions have no header. Recorded regions live in a sorted array of disjoint
 * [addr, addr+len) ranges (private pages; a spin lock that only mmap, munmap and
 * mremap take, around system calls that cost more than the search). That answers the
 * question munmap asks: which recorded regions does [a, a+len) overlap? It may take a
 * whole region, its head, its tail, a hole in the middle (the region splits in two and
 * counts as two blocks from then on) or several regions at once. A new mapping drops
 * whatever stale ranges it overlaps (MAP_FIXED over a recorded region replaces it; a
 * region unmapped behind our back, by a raw system call, is replaced when the kernel
 * hands the range out again). Lengths are counted in whole pages, as the kernel maps. */

typedef struct mm_ent {
  uint64_t addr, len;
  uint32_t site, epoch;
} mm_ent_t;
#define MM_CAP (1u << 16)
static mm_ent_t *mm_tab; /* sorted by addr, disjoint */
static uint32_t mm_n;
static atomic_flag mm_lock = ATOMIC_FLAG_INIT;

static void mm_lock_take(void) {
  while (atomic_flag_test_and_set_explicit(&mm_lock, memory_order_acquire)) sched_yield();
}
static void mm_lock_drop(void) { atomic_flag_clear_explicit(&mm_lock, memory_order_release); }

static inline uint64_t mm_pages(uint64_t len) {
  uint64_t pg = (uint64_t)getpagesize();
  return (len + pg - 1) & ~(pg - 1);
}

/* First index whose region ends after a. Caller holds mm_lock. */
static uint32_t mm_first_after(uint64_t a) {
  uint32_t lo = 0, hi = mm_n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (mm_tab[mid].addr + mm_tab[mid].len <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Inserts m at index i (the caller knows it keeps the order). 0 when full. */
static int mm_put(uint32_t i, mm_ent_t m) {
  if (mm_n >= MM_CAP) return 0;
  memmove(&mm_tab[i + 1], &mm_tab[i], (mm_n - i) * sizeof *mm_tab);
  mm_tab[i] = m;
  mm_n++;
  return 1;
}

static void mm_del(uint32_t i) {
  memmove(&mm_tab[i], &mm_tab[i + 1], (mm_n - i - 1) * sizeof *mm_tab);
  mm_n--;
}

/* Forgets [a, a+len) (len in whole pages): counts the bytes (and whole regions, or a
 * split) of every recorded region it overlaps off their sites. Caller holds mm_lock
 * and the recursion guard. If first is not NULL it receives the first overlapped
 * region as it was (site 0: none). */
static void mm_forget_range(lgi_tls_t *t, uint64_t a, uint64_t len, mm_ent_t *first) {
  uint64_t end = a + len;
  if (first) first->site = 0;
  uint32_t i = mm_first_after(a);
  while (i < mm_n && mm_tab[i].addr < end) {
    mm_ent_t e = mm_tab[i];
    uint64_t e_end = e.addr + e.len;
    if (first && !first->site) *first = e;
    uint64_t lo = e.addr > a ? e.addr : a, hi = e_end < end ? e_end : end;
    int64_t blocks = 0;
    if (lo == e.addr && hi == e_end) { /* the whole region */
      mm_del(i);
      blocks = -1;
    } else if (lo == e.addr) { /* its head: the rest starts later */
      mm_tab[i].addr = hi;
      mm_tab[i].len = e_end - hi;
      i++;
    } else if (hi == e_end) { /* its tail */
      mm_tab[i].len = lo - e.addr;
      i++;
    } else { /* a hole: two regions from now on */
      mm_tab[i].len = lo - e.addr;
      mm_ent_t rest = e;
      rest.addr = hi;
      rest.len = e_end - hi;
      if (mm_put(i + 1, rest)) blocks = 1;
      else ctr_update(t, e.site, -(int64_t)rest.len, 0, e.epoch, 0); /* table full: drop it */
      i += 2;
    }
    ctr_update(t, e.site, -(int64_t)(hi - lo), blocks, e.epoch, 0);
  }
}

/* Records the new region m (its stale overlaps forgotten first). Caller holds both. */
static void mm_add(lgi_tls_t *t, mm_ent_t m) {
  mm_forget_range(t, m.addr, m.len, NULL);
  if (mm_put(mm_first_after(m.addr), m)) ctr_update(t, m.site, (int64_t)m.len, 1, m.epoch, 1);
  else atomic_fetch_add(&lgi_g.hdr->dropped, 1);
}

static int mm_ready(lgi_tls_t *t) {
  if (t->guard || !lgi_g.enabled || !(lgi_g.hdr->flags & LG_RF_MMAP)) return 0;
  if (!thread_ready(t)) return 0;
  if (!mm_tab) {
    t->guard++;
    mm_lock_take();
    if (!mm_tab) mm_tab = lgi_pages_alloc(sizeof(mm_ent_t) * MM_CAP);
    mm_lock_drop();
    t->guard--;
  }
  return mm_tab != NULL;
}

/* A new mapping at [addr, addr+len): recorded when anonymous, and in every case the
 * recorded ranges it replaces are forgotten. */
static void mm_mapped(void *addr, size_t len, int anon, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_ready(t)) return;
  if (ra0 - alloc_lo < alloc_hi - alloc_lo) anon = 0; /* the allocator's own arena */
  t->guard++;
  uint32_t site = anon ? lgi_capture_all(t, ra0, cfa0, LG_SPACE_MMAP) : 0;
  uint32_t ep = era_now();
  mm_lock_take();
  if (anon) mm_add(t, (mm_ent_t){(uint64_t)addr, mm_pages(len), site, ep});
  else mm_forget_range(t, (uint64_t)addr, mm_pages(len), NULL);
  mm_lock_drop();
  t->guard--;
}

static void mm_unmapped(void *addr, size_t len) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_tab || t->guard || !lgi_g.enabled) return;
  t->guard++;
  mm_lock_take();
  mm_forget_range(t, (uint64_t)addr, mm_pages(len), NULL);
  mm_lock_drop();
  t->guard--;
}

/* mremap moved or resized [old, old+old_len) to [p, p+new_len). A recorded region
 * keeps its allocation site and birth epoch (as the block it is), and counts the new
 * length. */
static void mm_remapped(void *old, size_t old_len, void *p, size_t new_len, int flags) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_tab || t->guard || !lgi_g.enabled) return;
  t->guard++;
  mm_lock_take();
  mm_ent_t was = {0, 0, 0, 0};
  int keep_old = old_len == 0; /* a shared mapping duplicated: the old one stays */
#ifdef MREMAP_DONTUNMAP
  if (flags & MREMAP_DONTUNMAP) keep_old = 1; /* the old range stays mapped (empty) */
#endif
  (void)flags;
  if (keep_old) {
    uint32_t i = mm_first_after((uint64_t)old);
    if (i < mm_n && mm_tab[i].addr <= (uint64_t)old) was = mm_tab[i];
  } else {
    mm_forget_range(t, (uint64_t)old, mm_pages(old_len), &was);
  }
  if (was.site) mm_add(t, (mm_ent_t){(uint64_t)p, mm_pages(new_len), was.site, was.epoch});
  else mm_forget_range(t, (uint64_t)p, mm_pages(new_len), NULL);
  mm_lock_drop();
  t->guard--;
}

static void *do_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off,
                     uintptr_t ra0, uintptr_t cfa0) {
  void *p = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && lgi_g.enabled && (flags & (MAP_ANONYMOUS | MAP_FIXED)))
    mm_mapped(p, len, (flags & MAP_ANONYMOUS) != 0, ra0, cfa0);
  return p;
}

LG_API void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return do_mmap(addr, len, prot, flags, fd, off, CALLER_RA, CALLER_CFA);
}
LG_API void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return do_mmap(addr, len, prot, flags, fd, off, CALLER_RA, CALLER_CFA);
}
LG_API int munmap(void *addr, size_t len) {
  int rc = (int)syscall(SYS_munmap, addr, len);
  if (rc == 0) mm_unmapped(addr, len);
  return rc;
}
LG_API void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *want = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    want = va_arg(ap, void *);
    va_end(ap);
  }
  void *p = (void *)syscall(SYS_mremap, old, old_len, new_len, flags, want);
  if (p != MAP_FAILED) mm_remapped(old, old_len, p, new_len, flags);
  return p;
}

/* ------------------------------------------------------------------ public API */

LG_API uint64_t leakguard_step(void) {
  if (!lgi_g.enabled) return 0;
  return atomic_fetch_add_explicit(&lgi_g.hdr->steps, 1, memory_order_release) + 1;
}

LG_API uint64_t lg_step(void) { return leakguard_step(); }

LG_API int lg_site_of(const void *block, uint32_t *site) {
  if (!block || !site || in_boot(block) || !lgi_g.enabled) return -ENOENT;
  if (!lg_blk_marked(word_of(block))) return -ENOENT;
  uint32_t s = blk_of((void *)block)->site;
  if (!s) return -ENOENT;
  *site = s;
  return 0;
}

LG_API int lg_recording(void) { return lgi_g.enabled; }

/* The recursion guard is what makes the hooks pass a call through: a paused thread
 * is, for the recorder, a thread inside it. */
LG_API int lg_pause_recording(int pause) {
  if (!lgi_g.enabled) return 0;
  lgi_tls_t *t = &lgi_tls;
  if (pause) t->guard++;
  else if (t->guard > 0) t->guard--;
  return t->guard;
}

/* Make sure the recorder is set up before main even if nothing allocates. */
__attribute__((constructor)) static void lg_ctor(void) {
  try_init();
}

/* The process has begun to exit: what it frees from now on is teardown (the report
 * leaves it out, however long it takes). */
LG_API void lg_exiting(void) {
  /* a vfork child shares its parent's memory: only the region's own process marks */
  if (!lgi_g.enabled || (int32_t)syscall(SYS_getpid) != lgi_g.hdr->pid) return;
  uint32_t running = LG_PS_RUNNING;
  atomic_compare_exchange_strong(&lgi_g.hdr->state, &running, LG_PS_EXITING);
}

/* exit() runs atexit handlers and destructors (C++ statics, libraries) before the
 * process ends: the start of the teardown. */
LG_API __attribute__((noreturn)) void exit(int status) {
  static void (*real_exit)(int);
  lg_exiting();
  if (!real_exit) real_exit = (void (*)(int))dlsym(RTLD_NEXT, "exit");
  if (real_exit) real_exit(status);
  syscall(SYS_exit_group, status); /* not reached: glibc's exit does not return */
  __builtin_unreachable();
}

__attribute__((destructor)) static void lg_dtor(void) {
  lg_exiting();
}
