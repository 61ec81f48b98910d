/* SPDX-License-Identifier: MIT */
/*
 * lru_leak - an HTTP response cache (hash table + LRU list) whose key hash never
 * matches, so it grows without bound while its own accounting says it is full.
 *
 * The key is {tenant, flags, path}; the key struct also carries the request id
 * for logging. key_hash() hashes the whole struct, request id included, while
 * key_eq() ignores it. Consequences:
 *  - lookups essentially never hit: every request inserts a new entry;
 *  - entries store their key with the request id cleared, so evict_lru() computes
 *    a different hash for the victim and never finds it in its bucket; it unlinks
 *    the victim from the LRU list and fixes the counters, then "leaves it for
 *    compaction", which never runs. The entries stay reachable from the buckets.
 *
 * Ground truth: the entry allocation in cache_insert() (LEAK-SITE) grows forever.
 * Request temporaries (path string, response body) are freed.
 *
 * Options: --seconds S (default 5), --rate REQ_PER_S (default 3000), --capacity N
 *          (default 1500), --seed N, --pidfile PATH
 */
#include "scen_common.h"

struct key {
  uint32_t tenant;
  uint32_t flags;
  uint64_t request_id; /* for logging only, not part of the identity */
  char path[48];
};

struct entry {
  struct key key;
  struct entry *hnext;             /* bucket chain */
  struct entry *lru_prev, *lru_next;
  size_t vlen;
  unsigned hits;
  char data[];                     /* value bytes */
};

struct cache {
  struct entry **buckets;
  size_t mask;
  struct entry *lru_head, *lru_tail; /* head = most recent */
  size_t count, capacity, bytes;
  unsigned long hits, misses, stale_unlinks;
};

static uint64_t key_hash(const struct key *k) {
  /* FNV-1a over the key struct. */
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int key_eq(const struct key *a, const struct key *b) {
  return a->tenant == b->tenant && a->flags == b->flags && strcmp(a->path, b->path) == 0;
}

static void cache_init(struct cache *c, size_t capacity) {
  memset(c, 0, sizeof *c);
  size_t nb = 1;
  while (nb < capacity * 2) nb <<= 1;
  c->buckets = calloc(nb, sizeof *c->buckets);
  c->mask = nb - 1;
  c->capacity = capacity;
}

static void lru_unlink(struct cache *c, struct entry *e) {
  if (e->lru_prev) e->lru_prev->lru_next = e->lru_next; else c->lru_head = e->lru_next;
  if (e->lru_next) e->lru_next->lru_prev = e->lru_prev; else c->lru_tail = e->lru_prev;
  e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(struct cache *c, struct entry *e) {
  e->lru_prev = NULL;
  e->lru_next = c->lru_head;
  if (c->lru_head) c->lru_head->lru_prev = e; else c->lru_tail = e;
  c->lru_head = e;
}

static struct entry *cache_lookup(struct cache *c, const struct key *k) {
  for (struct entry *e = c->buckets[key_hash(k) & c->mask]; e; e = e->hnext) {
    if (key_eq(&e->key, k)) {
      lru_unlink(c, e);
      lru_push_front(c, e);
      e->hits++;
      c->hits++;
      return e;
    }
  }
  c->misses++;
  return NULL;
}

static int table_unlink(struct cache *c, struct entry *victim) {
  struct entry **pp = &c->buckets[key_hash(&victim->key) & c->mask];
  for (; *pp; pp = &(*pp)->hnext) {
    if (*pp == victim) {
      *pp = victim->hnext;
      return 0;
    }
  }
  return -1;
}

static void evict_lru(struct cache *c) {
  struct entry *victim = c->lru_tail;
  if (!victim) return;
  lru_unlink(c, victim);
  c->count--;
  c->bytes -= victim->vlen;
  if (table_unlink(c, victim) != 0) {
    /* Not in its bucket any more (a concurrent rehash?): cache_compact() will
     * reclaim it. Nothing ever calls cache_compact(). */
    c->stale_unlinks++;
    return;
  }
  free(victim);
}

static struct entry *cache_insert(struct cache *c, const struct key *k, const void *val,
                                  size_t vlen) {
  while (c->count >= c->capacity) evict_lru(c);
  struct entry *e = malloc(sizeof *e + vlen); /* LEAK-SITE */
  memcpy(e->data, val, vlen);
  e->key = *k;
  e->key.request_id = 0;
  e->vlen = vlen;
  e->hits = 0;
  uint64_t h = key_hash(k);
  e->hnext = c->buckets[h & c->mask];
  c->buckets[h & c->mask] = e;
  lru_push_front(c, e);
  c->count++;
  c->bytes += vlen;
  return e;
}

static size_t cache_total_entries(const struct cache *c) {
  size_t n = 0;
  for (size_t b = 0; b <= c->mask; b++)
    for (struct entry *e = c->buckets[b]; e; e = e->hnext) n++;
  return n;
}

static void cache_destroy(struct cache *c) {
  for (size_t b = 0; b <= c->mask; b++) {
    struct entry *e = c->buckets[b];
    while (e) {
      struct entry *n = e->hnext;
      free(e);
      e = n;
    }
  }
  free(c->buckets);
}

/* Renders a response body for a cache miss. */
static char *render(const char *path, uint64_t *rng, size_t *len) {
  size_t n = scen_logsize(rng, 200, 6000);
  char *body = malloc(n);
  size_t pl = strlen(path);
  for (size_t i = 0; i < n; i++) body[i] = path[i % pl];
  *len = n;
  return body;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 3000);
  size_t capacity = (size_t)scen_opt_long(argc, argv, "--capacity", NULL, 1500);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 777);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  struct cache cache;
  cache_init(&cache, capacity);
  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;
  size_t served = 0;
  uint64_t request_id = 0;
  while (scen_now() < end) {
    /* Skewed popularity: most requests go to a few thousand hot paths. */
    unsigned tenant = (unsigned)scen_range(&rng, 1, 12);
    unsigned id = (unsigned)(scen_unit(&rng) * scen_unit(&rng) * 20000);
    char *path = malloc(64);
    snprintf(path, 64, "/api/v2/tenant/%u/object/%u", tenant, id);
    struct key k;
    memset(&k, 0, sizeof k);
    k.tenant = tenant;
    k.flags = id % 3 == 0 ? 1u : 0u;
    k.request_id = ++request_id;
    snprintf(k.path, sizeof k.path, "%s", path);
    struct entry *e = cache_lookup(&cache, &k);
    if (e) {
      served += e->vlen;
    } else {
      size_t len = 0;
      char *body = render(path, &rng, &len);
      cache_insert(&cache, &k, body, len);
      served += len;
      free(body);
    }
    free(path);
    scen_step();
    scen_pace(&pacer);
  }
  printf("lru_leak: hits=%lu misses=%lu count=%zu (capacity %zu) stale=%lu real_entries=%zu "
         "served=%zu\n",
         cache.hits, cache.misses, cache.count, cache.capacity, cache.stale_unlinks,
         cache_total_entries(&cache), served);
  cache_destroy(&cache);
  return 0;
}
