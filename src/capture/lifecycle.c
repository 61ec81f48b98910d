/* SPDX-License-Identifier: MIT */
/*
 * lifecycle.c - libleakguard.so: the recorder's lifecycle. Lazy init, the hello to the
 * collector, per-thread setup, fork, exec and exit.
 *
 * Apart from the hooks (preload.c, mmap_table.c) because it is about the process and
 * its threads, not about blocks: it runs once per process, around fork and at exit.
 * The hooks reach it only through lgi_thread_ready (thread.c, the countdown's slow
 * path), which calls the lazy init here through lgi_g.process_init: this file calls
 * the hooks' files (their fork locks, the real allocator), never the other way round.
 *
 * Lazy init on the first hook (before main, in whatever constructor allocates first);
 * fork (and _Fork): the child copies the region into its own memfd and registers as a
 * new process through the socket path; exec: the new image starts from scratch (the
 * socket and memfd are close-on-exec; procs.c marks the region); exit: hooks keep
 * working, the collector keeps the mapping. The program may close or reuse our
 * descriptors at any time: they are used only after an fstat identity check. Without
 * LEAKGUARD_SOCK, or when the collector cannot be reached, the library passes every
 * call through and the target runs on unrecorded.
 */
#include <errno.h>
#include <pthread.h>
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

#include "capture/recorder.h"
#include "core/hash.h"
#include "core/platform.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ init */

static _Atomic int init_state; /* 0 not yet, 1 in progress, 2 done */
static int try_init(void);

/* The recorder's state. Here, with the lazy init that lgi_thread_ready (thread.c) runs
 * through it; the attach agent defines its own (agent/start.c). */
static int lazy_begin(void);
static void lazy_fork_child(void);
lgi_global_t lgi_g = {.fd = -1, .conn = -1, .fork_fd = -1, .process_init = try_init, .process_begin = lazy_begin};

static unsigned long parse_ul(const char *s, unsigned long dflt) {
  if (!s || !*s) return dflt;
  unsigned long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return dflt;
    v = v * 10 + (unsigned long)(*s - '0');
  }
  return v;
}

static void drop_preload_env(void);

void lgi_atfork_prepare(void) {
  lgi_tls.guard++;
  if (lgi_g.enabled) {
    lgi_unwind_fork_prepare(&lgi_tls); /* first: an unwinding thread holds none of ours */
    lgi_gpu_atfork(0);                 /* order: CUDA table, region, mmap table (never held the other way) */
    lgi_lock();                        /* no stack insert is half done while we copy */
    lgi_mm_lock_take();                /* nor a change of the mmap table */
    /* the child's copy, made now: after the fork the parent writes on (region_writer.c) */
    lgi_g.fork_fd = -1;
    if (lgi_g.follow) (void)lgi_region_fork_prepare();
  }
}
void lgi_atfork_parent(void) {
  if (lgi_g.enabled) {
    lgi_region_fork_discard();
    lgi_gpu_atfork(1);
    lgi_mm_lock_drop();
    lgi_unlock();
    lgi_unwind_fork_parent();
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

void lgi_atfork_child(void) {
  if (lgi_g.lazy) {
    lazy_fork_child();
    lgi_breaker_atfork_child();
    lgi_tls.guard--;
    return;
  }
  if (lgi_g.enabled) {
    int safe = lgi_unwind_fork_child(&lgi_tls);
    lgi_gpu_atfork(2);
    lgi_mm_lock_drop();
    /* The parent's connection is the parent's: closed here (if the descriptor is
     * still it) so that its EOF follows the parent alone. */
    if (lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino)) syscall(SYS_close, lgi_g.conn);
    lgi_g.conn = -1;
    /* The region lock stays the parent's to release: the child's own region is the
     * copy (its lock free), or a private one unlocked here. */
    if (!safe || !lgi_g.follow || lgi_region_fork_adopt() != 0 || lgi_send_hello(LG_HELLO_FORK) < 0) {
      /* Unrecorded child: make it stop writing into the parent's region (and, not
       * following, what it execs does not load the library) */
      if (!lgi_g.follow) drop_preload_env();
      lgi_g.enabled = lgi_g.live = 0;
      lgi_region_fork_discard();
      region_make_private();
      lgi_unlock();
    }
  }
  if (!lgi_g.enabled) lgi_tls.countdown = INT64_MAX;
  else if (lgi_g.sample_bytes) { /* a sample stream of its own, not the parent's */
    lgi_tls.rng ^= (uint64_t)lg_sys_getpid() * LG_HASH_GOLDEN64;
    if (!lgi_tls.rng) lgi_tls.rng = 1;
    lgi_tls.countdown = (int64_t)lgi_next_exp(&lgi_tls, (double)lgi_g.sample_bytes);
  } else lgi_tls.countdown = 0;
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
  struct link_map *in = first ? lgi_map_of(first) : NULL;
  if (!in || in == lgi_map_of((void *)check_first_malloc)) return; /* ours: no symbol lookup */
  Dl_info di;
  const ElfW(Sym) *sym = NULL;
  if (!dladdr1(first, &di, (void **)&sym, RTLD_DL_SYMENT)) return;
  /* A non-PIE program that takes malloc's address gets a canonical PLT entry, an
   * undefined symbol with a value: not a definition, it leads to ours. */
  if (sym && sym->st_shndx == SHN_UNDEF) return;
  const char *who = di.dli_fname && *di.dli_fname ? di.dli_fname : "another library";
  lgi_say("the program's malloc is ", who, "'s, which comes before leakguard's: heap allocations are not recorded");
}

/* ------------------------------------------------------------------ lazy start
 * (core/region.h LG_LAZY_*, docs/design.md "Lazy start"). A wrapper's images (env, a
 * pyenv shim's bash and the readlink, sed and env it runs, a `bash -c` launcher) each
 * cost a recorded process's start-up: stack captures of the loader's and bash's first
 * allocations, the region's pages, the collector's rows. Every image but the started
 * process's first one says hello with an empty region and records nothing until it has
 * lived LEAKGUARD_LAZY's milliseconds or allocated its bytes (thread.c lazy_due); what
 * it allocated before is not attributed (the report says how much). A waiting image's
 * fork child says nothing until it begins, execs or exits (lazy_fork_child). */

/* 1 for the started process's first image (LEAKGUARD_FIRST=1 from `leakguard run`):
 * every exec passes the image it starts the mark turned to 0 (procs.c), so the images
 * it execs, and those its children exec, start lazily. Its forked children share its
 * recording (a copy of its region) and keep the mark for their own execs to turn. */
static int first_image(void) {
  const char *v = secure_getenv(LG_ENV_FIRST);
  return v && v[0] == '1' && !v[1];
}

/* LEAKGUARD_LAZY: "BYTES,MS" (either 0, or "0": no lazy start); absent: none. 1 when
 * images start lazily. */
static int lazy_settings(void) {
  const char *s = secure_getenv(LG_ENV_LAZY);
  if (!s || !*s) return 0;
  unsigned long b = 0, ms = 0;
  for (; *s >= '0' && *s <= '9'; s++) b = b * 10 + (unsigned long)(*s - '0');
  if (*s++ != ',') return 0;
  for (; *s >= '0' && *s <= '9'; s++) ms = ms * 10 + (unsigned long)(*s - '0');
  if (*s || !b || !ms) return 0;
  lgi_g.lazy_bytes = b;
  lgi_g.lazy_ns = (uint64_t)ms * 1000000u;
  return 1;
}

static void setup_capture(void) {
  lgi_unwind_init();
  lgi_python_detect();
}

/* This image (or fork child) waits from now on; every thread's next allocation looks. */
static void lazy_wait(void) {
  atomic_store(&lgi_g.lazy_count, 0);
  lgi_g.lazy_t0 = lgi_now_ns();
  lgi_g.lazy = 1;
  lgi_tls.lazy_chunk = lgi_tls.countdown = 0;
}

/* The lazy start's end (lgi_g.process_begin, from a hook's slow path through thread.c):
 * stack capture set up, the region opened and told when and after how many bytes,
 * then the recording on. One thread does it; another that asks meanwhile goes on
 * unrecorded until its next look. */
static _Atomic int begin_state; /* 0 waiting, 1 beginning, 2 begun */

/* A silent fork child (lazy_fork_child) says hello now, as a fork, with an empty
 * region of its own that says when it was forked: when it begins, or when it exits
 * without having begun or exec'd (a forkserver's short-lived worker is still seen, and
 * its parent's reaped ring gives its status; exiting: it waits no more, its teardown
 * does not begin a recording). 0 when it is now live. The private stand-in stays
 * mapped (address space only): another thread may still be reading the pointer it
 * loaded. No collector to reach: it runs on unrecorded (lazy turned off). */
static int silent_hello(int exiting) {
  if (!lgi_g.silent || lgi_g.silent_pid != (int32_t)lg_sys_getpid()) return -1;
  lgi_tls.guard++;
  lgi_g.silent = 0;
  int made = lgi_region_create(lgi_g.depth, lgi_g.sample_bytes, lgi_g.rflags, 1) == 0;
  if (made) lgi_g.hdr->start_ns = lgi_g.lazy_t0; /* its fork (lazy_wait): the process's start */
  int ok = made && lgi_send_hello(LG_HELLO_FORK) >= 0;
  if (ok) lgi_g.live = 1;
  if (!ok || exiting) lgi_g.lazy = 0;
  lgi_tls.guard--;
  return ok ? 0 : -1;
}

static int lazy_begin(void) {
  int z = 0;
  if (!atomic_compare_exchange_strong(&begin_state, &z, 1)) return atomic_load(&begin_state) == 2;
  lgi_tls.guard++;
  if (lgi_g.silent && silent_hello(0) != 0) {
    lgi_tls.guard--;
    return 0;
  }
  setup_capture();
  lg_region_hdr_t *h = lgi_g.hdr;
  lgi_region_open(h);
  h->lazy_began_ns = lgi_now_ns();
  h->lazy_before_bytes = atomic_load_explicit(&lgi_g.lazy_count, memory_order_relaxed);
  atomic_store_explicit(&h->lazy, LG_LAZY_BEGAN, memory_order_release);
  lgi_g.lazy = 0;
  __atomic_store_n(&lgi_g.enabled, 1, __ATOMIC_RELEASE);
  atomic_store(&begin_state, 2);
  lgi_tls.guard--;
  return 1;
}

/* The child of a waiting image waits again from the fork, silent: no region of its
 * own and no hello until it begins or exits (silent_hello), and an image it execs says
 * its own. The children that exec a wrapper's helpers cost no memfd, socket or
 * collector row each (half of a pyenv shim's images; BENCHMARKS.md). One killed by a
 * signal before it begins or execs is not seen. The parent's region becomes a private
 * stand-in (the same shape: what the hooks read and write there stays in this
 * process), its descriptor and connection are let go (each only while still ours: the
 * program may have reused the number). Not following children: it runs on unrecorded. */
static void lazy_fork_child(void) {
  int silent = lgi_g.live || lgi_g.silent;
  region_make_private();
  if (lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino)) syscall(SYS_close, lgi_g.conn);
  if (lgi_fd_is(lgi_g.fd, lgi_g.fd_dev, lgi_g.fd_ino)) syscall(SYS_close, lgi_g.fd);
  lgi_g.conn = lgi_g.fd = -1;
  atomic_store(&begin_state, 0);
  lgi_g.live = lgi_g.lazy = lgi_g.silent = 0;
  if (!lgi_g.follow) {
    drop_preload_env();
    return;
  }
  if (!silent) return; /* the parent was not recorded (its hello failed): nor is this one */
  lgi_g.silent = 1;
  lgi_g.silent_pid = (int32_t)lg_sys_getpid();
  lazy_wait();
}

/* Returns 0 when done, -EAGAIN when it is too early (before libc has set up the
 * environment, e.g. in a .preinit_array function): allocations pass through until a
 * later hook or our constructor retries. */
static int do_init(void) {
  extern char **environ;
  if (!environ) return -EAGAIN;
  lgi_tls.guard++;
  lgi_resolve_real();
  lgi_procs_init();
  const char *sock = secure_getenv(LG_ENV_SOCK);
  unsigned long depth = parse_ul(secure_getenv(LG_ENV_DEPTH), LG_DEFAULT_DEPTH);
  if (depth < 1) depth = 1;
  if (depth > LG_MAX_DEPTH) depth = LG_MAX_DEPTH;
  lgi_g.depth = (uint32_t)depth;
  lgi_g.sample_bytes = parse_ul(secure_getenv(LG_ENV_SAMPLE), 0);
  lgi_g.import_sample = parse_ul(secure_getenv(LG_ENV_IMPORT_SAMPLE), 0);
  const char *fol = secure_getenv(LG_ENV_FOLLOW);
  lgi_g.follow = !(fol && fol[0] == '0');
  const char *mm = secure_getenv(LG_ENV_MMAP);
  uint32_t flags = (lgi_g.follow ? LG_RF_FOLLOW : 0) | ((mm && mm[0] == '0') ? 0 : LG_RF_MMAP);
  lgi_g.rflags = flags;
  int lazy = !first_image() && lazy_settings();
  /* Not following: the started process is recorded through the images it execs (its
   * parent stays `leakguard run`), anything it forks or spawns is not, nor what that
   * execs (the library leaves their environment). A fork's child is also let go at the
   * fork (lgi_atfork_child). */
  int record = lgi_g.follow || (unsigned long)getppid() == parse_ul(secure_getenv(LG_ENV_CLI_PID), 0);
  if (!record) drop_preload_env();
  if (record && sock && *sock && strlen(sock) < sizeof lgi_g.sock_path) {
    memcpy(lgi_g.sock_path, sock, strlen(sock) + 1);
    /* A lazy image sets up stack capture when its recording begins (lazy_begin) */
    if (!lazy) setup_capture();
    if (lgi_region_create(lgi_g.depth, lgi_g.sample_bytes, flags, lazy) == 0) {
      if (lgi_send_hello(LG_HELLO_START) >= 0) {
        lgi_thread_key_create();
        pthread_atfork(lgi_atfork_prepare, lgi_atfork_parent, lgi_atfork_child);
        lgi_g.live = 1;
        if (lazy) lazy_wait();
        else lgi_g.enabled = 1;
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

/* Runs do_init once; 1 when initialised, 0 when not (yet). The process's half of
 * lgi_thread_ready (lgi_g.process_init). */
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

/* ------------------------------------------------------------------ constructor, exit */

/* Make sure the recorder is set up before main even if nothing allocates. */
__attribute__((constructor)) static void lg_ctor(void) { try_init(); }

/* The process has begun to exit: what it frees from now on is teardown (the report
 * leaves it out, however long it takes). */
LG_API void lg_exiting(void) {
  (void)silent_hello(1); /* a silent fork child is seen as it exits */
  /* a vfork child shares its parent's memory: only the region's own process marks */
  if (!lgi_g.live || (int32_t)lg_sys_getpid() != lgi_g.hdr->pid) return;
  uint32_t running = LG_PS_RUNNING;
  atomic_compare_exchange_strong(&lgi_g.hdr->state, &running, LG_PS_EXITING);
}

/* One isolated call of this process (core/region.h, docs/isolate.md): counted in the
 * region for the collector's Prometheus endpoint. Atomics only. */
LG_API void lg_region_isolate_note(int code, int bucket, uint64_t peak) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (!lgi_g.enabled || !h || (int32_t)lg_sys_getpid() != h->pid || code < 0 || code >= LG_ISO_CODES) return;
  atomic_fetch_add_explicit(&h->iso_requests[code], 1, memory_order_relaxed);
  if (bucket < 0 || bucket >= LG_ISO_BUCKETS) return;
  atomic_fetch_add_explicit(&h->iso_rss_bucket[bucket], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->iso_rss_sum, peak, memory_order_relaxed);
}
/* the type the isolate code calls it through */
_Static_assert(__builtin_types_compatible_p(__typeof__(&lg_region_isolate_note), lg_region_isolate_note_fn),
               "lg_region_isolate_note: the type of core/region.h");

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

__attribute__((destructor)) static void lg_dtor(void) { lg_exiting(); }

/* _exit (Python's os._exit, a multiprocessing worker's end) runs neither: a silent fork
 * child says hello here, nothing else (no teardown follows). exit_group is what glibc's
 * _exit does. */
LG_API __attribute__((noreturn)) void _exit(int status) {
  (void)silent_hello(1);
  for (;;) syscall(SYS_exit_group, status);
}
LG_API __attribute__((noreturn)) void _Exit(int status) { _exit(status); }
