/* SPDX-License-Identifier: MIT */
/*
 * serve - a small inference-style HTTP server that uses leakguard's breaker API.
 *
 *   serve [--port P] [--addr A] [--threads N] [--batch B] [--block KIB] [--kv-block KIB]
 *         [--kv-max N] [--quota BYTES] [--work-us US] [--leak] [--no-breaker] [--isolate]
 *         [--isolate-pool N]   (N children forked ahead: lg_isolate_pool; implies --isolate)
 *         [--isolate-reuse K]  (with --isolate-pool: a child serves K requests, reuse_k)
 *
 * GET /infer?prompt=TEXT (or POST /infer with the prompt as body) runs one "inference":
 * a per-request working buffer of batch x --block KiB (default 16 x 64 KiB), touched
 * page by page and checksummed, then looks the prompt's prefix up in a KV-cache-like
 * store (hash map prefix -> blocks of batch x --kv-block KiB) and inserts it on a miss.
 * GET /stats answers the counters as JSON. Loopback only unless --addr says otherwise.
 *
 * The bug (--leak): the cache key includes the request counter, so every request
 * misses and inserts, and the bound (--kv-max entries, LRU) is not applied: the store
 * grows without end, like a KV cache that forgets to release finished sequences.
 *
 * The breaker API (include/leakguard.h), active when a guard publishes a level
 * (`leakguard run --guard`, `leakguard guard`); at level normal each call is a no-op:
 *   lg_admit()            false at breaker and above: answer 503 + Retry-After: 1
 *   lg_batch_size(B)      the working batch shrinks with the level (0.7x, 0.5x, 0.25x)
 *   lg_evict_register()   the KV store frees its least recently used entries when the
 *                         guard asks (emergency, or lg_evict())
 *   lg_subscribe()        logs level changes; entering breaker halves the store
 *   lg_tag_push/pop       the working buffer is accounted to tag "request", the store's
 *                         blocks to tag "kvcache" (per-tag live/peak bytes)
 *   lg_tag_quota()        "request" may hold at most --quota bytes (default 256 MiB);
 *                         an allocation over it fails and the request gets 503
 *   SIGUSR1               halves the store (the guard's signal policy)
 * --no-breaker ignores all of it, SIGUSR1 included (for comparison). SIGTERM/SIGINT: stop and print the
 * counters on stderr as one line "serve: served=... shed=... ...".
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "leakguard.h"

#define KiB 1024UL
#define MiB (1024UL * KiB)
#define PROMPT_MAX 4096
#define PREFIX_LEN 24

/* ------------------------------------------------------------------ options */

static struct {
  const char *addr;
  unsigned port, threads;
  size_t batch, block, kv_block, kv_max;
  int64_t quota;
  unsigned work_us;
  bool leak, breaker, isolate;
  unsigned pool;  /* --isolate-pool N */
  unsigned reuse; /* --isolate-reuse K: requests a pooled child serves */
} opt = {"127.0.0.1", 8080, 4, 16, 64 * KiB, 16 * KiB, 256, 256 * (int64_t)MiB, 0, false, true, false, 0, 0};

/* ------------------------------------------------------------------ counters */

static _Atomic uint64_t n_requests, n_served, n_shed, n_quota, n_hits, n_misses, n_evicted_bytes, n_evictions;
static _Atomic int max_level;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
static double t_start;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "serve: [%7.2fs] %s\n", now_s() - t_start, line);
}

/* ------------------------------------------------------------------ the KV store
 * Hash map prefix -> entry, with an LRU list (head = most recent). One mutex. */

struct entry {
  char key[PREFIX_LEN + 24];
  size_t bytes;
  unsigned char *blocks;
  struct entry *hnext;       /* hash chain */
  struct entry *prev, *next; /* LRU list */
};

#define NBUCKETS 65536
static struct {
  pthread_mutex_t mu;
  struct entry *bucket[NBUCKETS];
  struct entry *head, *tail;
  size_t n, bytes;
  int evict_id;
} kv = {.mu = PTHREAD_MUTEX_INITIALIZER, .evict_id = -1};

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static void lru_unlink(struct entry *e) {
  if (e->prev) e->prev->next = e->next;
  else kv.head = e->next;
  if (e->next) e->next->prev = e->prev;
  else kv.tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_front(struct entry *e) {
  e->next = kv.head;
  e->prev = NULL;
  if (kv.head) kv.head->prev = e;
  kv.head = e;
  if (!kv.tail) kv.tail = e;
}

/* Removes the least recently used entry; caller holds kv.mu. Returns its bytes. */
static size_t evict_one_locked(void) {
  struct entry *e = kv.tail;
  if (!e) return 0;
  lru_unlink(e);
  struct entry **pp = &kv.bucket[hash(e->key) % NBUCKETS];
  while (*pp && *pp != e) pp = &(*pp)->hnext;
  if (*pp) *pp = e->hnext;
  size_t b = e->bytes + sizeof *e;
  kv.n--;
  kv.bytes -= e->bytes;
  free(e->blocks);
  free(e);
  return b;
}

/* Frees LRU entries until want bytes are freed or the store is empty. */
static size_t kv_shrink(size_t want, const char *why) {
  size_t freed = 0, n = 0;
  pthread_mutex_lock(&kv.mu);
  while (freed < want && kv.tail) {
    freed += evict_one_locked();
    n++;
  }
  size_t left = kv.n;
  pthread_mutex_unlock(&kv.mu);
  if (n) malloc_trim(0); /* give the freed pages back to the kernel (the cgroup sees them) */
  if (n) {
    atomic_fetch_add(&n_evicted_bytes, freed);
    atomic_fetch_add(&n_evictions, n);
    logf_("evicted %zu entries (%.1f MiB) from the KV store (%s), %zu left", n, (double)freed / MiB, why, left);
  }
  return freed;
}

static size_t kv_half(const char *why) {
  pthread_mutex_lock(&kv.mu);
  size_t half = kv.bytes / 2 + 1;
  pthread_mutex_unlock(&kv.mu);
  return kv_shrink(half, why);
}

/* Looks key up; on a miss inserts an entry of nbytes. Returns 1 on a hit, 0 on an
 * insert, -1 when the blocks could not be allocated. */
static int kv_lookup_insert(const char *key, size_t nbytes, uint64_t *sum) {
  uint64_t h = hash(key) % NBUCKETS;
  pthread_mutex_lock(&kv.mu);
  for (struct entry *e = kv.bucket[h]; e; e = e->hnext) {
    if (strcmp(e->key, key) == 0) {
      lru_unlink(e);
      lru_front(e);
      *sum += e->blocks[e->bytes / 2];
      pthread_mutex_unlock(&kv.mu);
      return 1;
    }
  }
  pthread_mutex_unlock(&kv.mu);

  /* compute the new entry outside the lock, accounted to tag "kvcache" */
  if (opt.breaker) lg_tag_push("kvcache");
  struct entry *e = malloc(sizeof *e);
  unsigned char *blk = e ? malloc(nbytes) : NULL;
  if (opt.breaker) lg_tag_pop();
  if (!blk) {
    free(e);
    return -1;
  }
  for (size_t i = 0; i < nbytes; i += 4096) blk[i] = (unsigned char)(i ^ h); /* resident */
  memset(e, 0, sizeof *e);
  snprintf(e->key, sizeof e->key, "%s", key);
  e->bytes = nbytes;
  e->blocks = blk;

  pthread_mutex_lock(&kv.mu);
  e->hnext = kv.bucket[h];
  kv.bucket[h] = e;
  lru_front(e);
  kv.n++;
  kv.bytes += nbytes;
  /* the bound: LRU eviction past kv_max entries. The --leak bug skips it. */
  if (!opt.leak)
    while (kv.n > opt.kv_max) evict_one_locked();
  pthread_mutex_unlock(&kv.mu);
  if (kv.evict_id >= 0) lg_evict_touch(kv.evict_id);
  return 0;
}

/* lg_evict_register callback: the guard asks for want bytes. */
static size_t on_evict(size_t want, void *arg) {
  (void)arg;
  return kv_shrink(want, "guard eviction");
}

/* ------------------------------------------------------------------ breaker hooks */

static volatile sig_atomic_t sig_shrink, sig_stop;
static void on_sigusr1(int s) {
  (void)s;
  sig_shrink = 1;
}
static void on_stop(int s) {
  (void)s;
  sig_stop = 1;
}

static void on_level(lg_level_t old_level, lg_level_t new_level, void *arg) {
  (void)arg;
  logf_("guard level %s -> %s (batch %zu of %zu, admit %d)", lg_level_name(old_level), lg_level_name(new_level),
        lg_batch_size(opt.batch), opt.batch, lg_admit());
  int m = atomic_load(&max_level);
  while ((int)new_level > m && !atomic_compare_exchange_weak(&max_level, &m, (int)new_level))
    ;
  if (new_level >= LG_LEVEL_BREAKER && old_level < LG_LEVEL_BREAKER) kv_half("breaker");
}

/* ------------------------------------------------------------------ HTTP */

struct req {
  char body[PROMPT_MAX + 1];
  size_t len;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text, bool retry) {
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (retry) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result shed(struct MHD_Connection *c, const char *why) {
  char t[160];
  snprintf(t, sizeof t, "{\"error\":\"%s\",\"level\":\"%s\"}\n", why, lg_level_name(lg_level()));
  return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, t, true);
}

static void busy_wait_us(unsigned us) {
  if (!us) return;
  double end = now_s() + us / 1e6;
  while (now_s() < end)
    ;
}

/* --isolate (issue #15, docs/isolate.md): the request's work runs in a copy-on-write fork
 * of the server under seccomp, with --quota as its memory budget. What the request
 * inserts into the KV store dies with the copy: the --leak bug cannot grow the server
 * (the cache stays as it was warmed up). */
typedef struct iso_req {
  size_t batch;
  uint64_t id;
  char prompt[256];
} iso_req_t;
typedef struct iso_ans {
  uint64_t sum;
  int hit;
} iso_ans_t;

static int iso_work(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  const iso_req_t *q = in;
  size_t nbytes = q->batch * opt.block;
  unsigned char *work = malloc(nbytes);
  iso_ans_t *a = calloc(1, sizeof *a);
  if (!work || !a) return 1;
  size_t plen = strlen(q->prompt);
  for (size_t i = 0; i < nbytes; i += 512) {
    work[i] = (unsigned char)(q->prompt[plen ? i % plen : 0] + i);
    a->sum = a->sum * 31 + work[i];
  }
  busy_wait_us(opt.work_us);
  free(work);
  char key[PREFIX_LEN + 24];
  if (opt.leak) snprintf(key, sizeof key, "%.*s#%" PRIu64, PREFIX_LEN, q->prompt, q->id);
  else snprintf(key, sizeof key, "%.*s", PREFIX_LEN, q->prompt);
  a->hit = kv_lookup_insert(key, q->batch * opt.kv_block, &a->sum);
  *out = a;
  *outlen = sizeof *a;
  return 0;
}

/* --isolate-pool N: children forked ahead (lg_isolate_pool), NULL: one fork per request */
static lg_isolate_pool_t *iso_pool;

static enum MHD_Result infer_isolated(struct MHD_Connection *c, const char *prompt, uint64_t id, size_t batch) {
  iso_req_t q = {.batch = batch, .id = id};
  snprintf(q.prompt, sizeof q.prompt, "%s", prompt);
  lg_isolate_opts_t o = {.max_rss = opt.quota > 0 ? (size_t)opt.quota : 0, .timeout_s = 10};
  lg_isolate_result_t r;
  void *out = NULL;
  size_t outlen = 0;
  int rc = iso_pool ? lg_isolate_pool_call(iso_pool, &q, sizeof q, &out, &outlen, &r)
                    : lg_isolate_call(iso_work, &q, sizeof q, &out, &outlen, &o, &r);
  if (rc != LG_ISOLATE_OK || r.status || outlen != sizeof(iso_ans_t)) {
    free(out);
    atomic_fetch_add(&n_quota, 1);
    char why[200];
    snprintf(why, sizeof why, "isolated request failed: %s", r.message);
    return shed(c, why);
  }
  iso_ans_t a;
  memcpy(&a, out, sizeof a);
  free(out);
  if (a.hit < 0) {
    atomic_fetch_add(&n_quota, 1);
    return shed(c, "out of memory for the KV cache");
  }
  atomic_fetch_add(a.hit ? &n_hits : &n_misses, 1);
  atomic_fetch_add(&n_served, 1);
  char t[256];
  snprintf(t, sizeof t,
           "{\"id\":%" PRIu64 ",\"batch\":%zu,\"cache\":\"%s\",\"level\":\"%s\",\"checksum\":%" PRIu64
           ",\"isolated\":true}\n",
           id, batch, a.hit ? "hit" : "miss", lg_level_name(lg_level()), a.sum);
  return reply(c, MHD_HTTP_OK, t, false);
}

static enum MHD_Result infer(struct MHD_Connection *c, const char *prompt) {
  uint64_t id = atomic_fetch_add(&n_requests, 1);
  if (opt.breaker && !lg_admit()) {
    atomic_fetch_add(&n_shed, 1);
    return shed(c, "overloaded: memory breaker open");
  }
  size_t batch = opt.breaker ? lg_batch_size(opt.batch) : opt.batch;
  if (opt.isolate) return infer_isolated(c, prompt, id, batch);

  /* the per-request working buffer, accounted to tag "request" (quota: fail) */
  if (opt.breaker) lg_tag_push("request");
  size_t nbytes = batch * opt.block;
  unsigned char *work = malloc(nbytes);
  if (opt.breaker) lg_tag_pop();
  if (!work) {
    atomic_fetch_add(&n_quota, 1);
    return shed(c, "request over its memory quota");
  }
  uint64_t sum = 0;
  size_t plen = strlen(prompt);
  for (size_t i = 0; i < nbytes; i += 512) {
    work[i] = (unsigned char)(prompt[plen ? i % plen : 0] + i);
    sum = sum * 31 + work[i];
  }
  busy_wait_us(opt.work_us);
  free(work);

  /* the KV store, keyed by the prompt's prefix (the bug: plus the request id) */
  char key[PREFIX_LEN + 24];
  if (opt.leak) snprintf(key, sizeof key, "%.*s#%" PRIu64, PREFIX_LEN, prompt, id);
  else snprintf(key, sizeof key, "%.*s", PREFIX_LEN, prompt);
  int hit = kv_lookup_insert(key, batch * opt.kv_block, &sum);
  if (hit < 0) {
    atomic_fetch_add(&n_quota, 1);
    return shed(c, "out of memory for the KV cache");
  }
  atomic_fetch_add(hit ? &n_hits : &n_misses, 1);
  atomic_fetch_add(&n_served, 1);
  char t[256];
  snprintf(t, sizeof t, "{\"id\":%" PRIu64 ",\"batch\":%zu,\"cache\":\"%s\",\"level\":\"%s\",\"checksum\":%" PRIu64 "}\n",
           id, batch, hit ? "hit" : "miss", lg_level_name(lg_level()), sum);
  return reply(c, MHD_HTTP_OK, t, false);
}

static enum MHD_Result stats(struct MHD_Connection *c) {
  char t[512];
  pthread_mutex_lock(&kv.mu);
  size_t n = kv.n, b = kv.bytes;
  pthread_mutex_unlock(&kv.mu);
  snprintf(t, sizeof t,
           "{\"requests\":%" PRIu64 ",\"served\":%" PRIu64 ",\"shed\":%" PRIu64 ",\"quota_failed\":%" PRIu64
           ",\"cache_entries\":%zu,\"cache_bytes\":%zu,\"evicted_bytes\":%" PRIu64 ",\"level\":\"%s\"}\n",
           atomic_load(&n_requests), atomic_load(&n_served), atomic_load(&n_shed), atomic_load(&n_quota), n, b,
           atomic_load(&n_evicted_bytes), lg_level_name(lg_level()));
  return reply(c, MHD_HTTP_OK, t, false);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)cls;
  (void)version;
  bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
  if (post) {
    struct req *r = *con_cls;
    if (!r) { /* first call: headers only */
      r = calloc(1, sizeof *r);
      if (!r) return MHD_NO;
      *con_cls = r;
      return MHD_YES;
    }
    if (*upload_size) {
      size_t k = *upload_size;
      if (k > PROMPT_MAX - r->len) k = PROMPT_MAX - r->len; /* longer prompts are cut */
      memcpy(r->body + r->len, upload, k);
      r->len += k;
      r->body[r->len] = '\0';
      *upload_size = 0;
      return MHD_YES;
    }
  } else if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "{\"error\":\"GET or POST\"}\n", false);
  }
  if (strcmp(url, "/infer") == 0) {
    const char *prompt = post ? ((struct req *)*con_cls)->body : MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "prompt");
    return infer(c, prompt ? prompt : "");
  }
  if (strcmp(url, "/stats") == 0) return stats(c);
  if (strcmp(url, "/healthz") == 0) return reply(c, MHD_HTTP_OK, "{\"ok\":true}\n", false);
  return reply(c, MHD_HTTP_NOT_FOUND, "{\"error\":\"not found: /infer, /stats, /healthz\"}\n", false);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  free(*con_cls);
  *con_cls = NULL;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f) {
  fprintf(f, "usage: serve [--port P] [--addr A] [--threads N] [--batch B] [--block KIB] [--kv-block KIB]\n"
             "             [--kv-max N] [--quota BYTES] [--work-us US] [--leak] [--no-breaker]\n"
             "             [--isolate] [--isolate-pool N] [--isolate-reuse K]\n");
}

static unsigned long num(const char *name, const char *v, unsigned long lo, unsigned long hi) {
  char *end;
  errno = 0;
  unsigned long x = v ? strtoul(v, &end, 10) : 0;
  if (!v || errno || *end || x < lo || x > hi || v[0] == '-') {
    fprintf(stderr, "serve: bad value for %s: '%s' (%lu..%lu)\n", name, v ? v : "", lo, hi);
    exit(2);
  }
  return x;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--leak")) opt.leak = true;
    else if (!strcmp(a, "--no-breaker")) opt.breaker = false;
    else if (!strcmp(a, "--isolate")) opt.isolate = true;
    else if (!strcmp(a, "--isolate-pool")) opt.pool = (unsigned)num(a, v, 1, 1024), opt.isolate = true, i++;
    else if (!strcmp(a, "--isolate-reuse")) opt.reuse = (unsigned)num(a, v, 1, 1000000), i++;
    else if (!strcmp(a, "--addr") && v) opt.addr = argv[++i];
    else if (!strcmp(a, "--port")) opt.port = (unsigned)num(a, v, 0, 65535), i++;
    else if (!strcmp(a, "--threads")) opt.threads = (unsigned)num(a, v, 1, 256), i++;
    else if (!strcmp(a, "--batch")) opt.batch = num(a, v, 1, 4096), i++;
    else if (!strcmp(a, "--block")) opt.block = num(a, v, 1, 65536) * KiB, i++;
    else if (!strcmp(a, "--kv-block")) opt.kv_block = num(a, v, 1, 65536) * KiB, i++;
    else if (!strcmp(a, "--kv-max")) opt.kv_max = num(a, v, 1, 100000000), i++;
    else if (!strcmp(a, "--quota")) opt.quota = (int64_t)num(a, v, 0, 1UL << 50), i++;
    else if (!strcmp(a, "--work-us")) opt.work_us = (unsigned)num(a, v, 0, 10000000), i++;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "serve: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  t_start = now_s();

  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
  if (inet_pton(AF_INET, opt.addr, &sa.sin_addr) != 1) {
    fprintf(stderr, "serve: --addr must be a numeric IPv4 address, not '%s'\n", opt.addr);
    return 2;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0) {
    fprintf(stderr, "serve: cannot listen on %s:%u: %s\n", opt.addr, opt.port,
            errno == EADDRINUSE ? "the port is already in use" : strerror(errno));
    return 2;
  }
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);

  if (opt.breaker) {
    int rc = lg_subscribe(on_level, NULL);
    if (rc < 0) logf_("lg_subscribe: %s", strerror(-rc));
    kv.evict_id = lg_evict_register("kvcache", on_evict, NULL);
    if (kv.evict_id < 0) logf_("lg_evict_register: %s", strerror(-kv.evict_id));
    rc = lg_tag_quota("request", opt.quota, NULL, NULL); /* NULL: over quota -> allocation fails */
    if (rc < 0) logf_("lg_tag_quota: %s", strerror(-rc));
  }
  struct sigaction s1 = {.sa_handler = on_sigusr1}, s2 = {.sa_handler = on_stop}, s3 = {.sa_handler = SIG_IGN};
  if (!opt.breaker) s1.sa_handler = SIG_IGN; /* --no-breaker: no reaction to the guard at all */
  sigaction(SIGUSR1, &s1, NULL);
  sigaction(SIGTERM, &s2, NULL);
  sigaction(SIGINT, &s2, NULL);
  sigaction(SIGPIPE, &s3, NULL);

  if (opt.pool) { /* forked from the server as it is now: warmed up, no request in flight */
    lg_isolate_opts_t o = {.max_rss = opt.quota > 0 ? (size_t)opt.quota : 0, .timeout_s = 10,
                           .pool_size = (int)opt.pool, .reuse_k = (int)opt.reuse};
    iso_pool = lg_isolate_pool_new(iso_work, &o);
    if (!iso_pool) {
      fprintf(stderr, "serve: --isolate-pool: %s\n", strerror(errno));
      return 1;
    }
  }
  struct MHD_Daemon *d =
      MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL, NULL, handle, NULL,
                       MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_THREAD_POOL_SIZE, opt.threads,
                       MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                       MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "serve: cannot start the HTTP server\n");
    return 1;
  }
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
  logf_("listening on http://%s:%u/infer (pid %d, %u threads, batch %zu x %zu KiB, kv %zu KiB/entry, %s%s)", ip,
        ntohs(sa.sin_port), (int)getpid(), opt.threads, opt.batch, opt.block / KiB, opt.kv_block / KiB,
        opt.leak ? "LEAK BUG ON" : "bounded cache", opt.breaker ? ", breaker on" : ", breaker off");

  while (!sig_stop) {
    struct timespec t = {0, 50 * 1000 * 1000};
    nanosleep(&t, NULL);
    if (sig_shrink) {
      sig_shrink = 0;
      kv_half("SIGUSR1");
    }
  }
  MHD_stop_daemon(d);
  if (iso_pool) lg_isolate_pool_free(iso_pool);
  pthread_mutex_lock(&kv.mu);
  size_t n = kv.n, b = kv.bytes;
  pthread_mutex_unlock(&kv.mu);
  fprintf(stderr,
          "serve: requests=%" PRIu64 " served=%" PRIu64 " shed=%" PRIu64 " quota_failed=%" PRIu64 " hits=%" PRIu64
          " misses=%" PRIu64 " cache_entries=%zu cache_mib=%.1f evicted_mib=%.1f evictions=%" PRIu64
          " max_level=%s\n",
          atomic_load(&n_requests), atomic_load(&n_served), atomic_load(&n_shed), atomic_load(&n_quota),
          atomic_load(&n_hits), atomic_load(&n_misses), n, (double)b / MiB,
          (double)atomic_load(&n_evicted_bytes) / MiB, atomic_load(&n_evictions),
          lg_level_name((lg_level_t)atomic_load(&max_level)));
  while (kv.tail) evict_one_locked();
  return 0;
}
