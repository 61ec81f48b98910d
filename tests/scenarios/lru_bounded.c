/* SPDX-License-Identifier: MIT */
/*
 * lru_bounded - the same kind of response cache as lru_leak, written correctly:
 * the key hash covers the key text only, entries remember their hash, eviction
 * frees. The cache is bounded by bytes, so after a warm-up its memory plateaus
 * (with noise: values have very different sizes) while entries keep being
 * replaced.
 *
 * Ground truth: no leak (control).
 *
 * Options: --seconds S (default 5), --rate REQ_PER_S (default 4000),
 *          --max-bytes N (default 4 MiB), --seed N, --pidfile PATH
 */
#include "scen_common.h"

struct entry {
  uint64_t hash;
  struct entry *hnext;
  struct entry *prev, *next; /* LRU list, head = most recently used */
  size_t vlen;
  char *key;
  unsigned char *value;
};

struct cache {
  struct entry **buckets;
  size_t nbuckets;
  struct entry *head, *tail;
  size_t bytes, max_bytes, count;
  unsigned long hits, misses, evictions;
};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

static void list_remove(struct cache *c, struct entry *e) {
  if (e->prev) e->prev->next = e->next; else c->head = e->next;
  if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
}

static void list_front(struct cache *c, struct entry *e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head) c->head->prev = e; else c->tail = e;
  c->head = e;
}

static void entry_free(struct entry *e) {
  free(e->key);
  free(e->value);
  free(e);
}

static void evict_one(struct cache *c) {
  struct entry *v = c->tail;
  list_remove(c, v);
  struct entry **pp = &c->buckets[v->hash % c->nbuckets];
  while (*pp != v) pp = &(*pp)->hnext;
  *pp = v->hnext;
  c->bytes -= v->vlen;
  c->count--;
  c->evictions++;
  entry_free(v);
}

static const struct entry *cache_get(struct cache *c, const char *key) {
  uint64_t h = hash_str(key);
  for (struct entry *e = c->buckets[h % c->nbuckets]; e; e = e->hnext) {
    if (e->hash == h && strcmp(e->key, key) == 0) {
      list_remove(c, e);
      list_front(c, e);
      c->hits++;
      return e;
    }
  }
  c->misses++;
  return NULL;
}

static void cache_put(struct cache *c, const char *key, unsigned char *value, size_t vlen) {
  while (c->head && c->bytes + vlen > c->max_bytes) evict_one(c);
  struct entry *e = malloc(sizeof *e);
  e->hash = hash_str(key);
  e->key = strdup(key);
  e->value = value; /* takes ownership */
  e->vlen = vlen;
  size_t b = e->hash % c->nbuckets;
  e->hnext = c->buckets[b];
  c->buckets[b] = e;
  list_front(c, e);
  c->bytes += vlen;
  c->count++;
}

static unsigned char *fetch_from_backend(const char *key, uint64_t *rng, size_t *len) {
  /* Most objects are small, some are large. */
  size_t n = scen_range(rng, 0, 9) == 0 ? scen_logsize(rng, 8192, 65536)
                                        : scen_logsize(rng, 128, 4096);
  unsigned char *buf = malloc(n);
  size_t kl = strlen(key);
  memset(buf, 0, n);
  for (size_t i = 0; i < n; i += 32) buf[i] = (unsigned char)key[i % kl];
  *len = n;
  return buf;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 4000);
  size_t max_bytes = (size_t)scen_opt_long(argc, argv, "--max-bytes", NULL, 4 << 20);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 99);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  struct cache c;
  memset(&c, 0, sizeof c);
  c.nbuckets = 8191;
  c.buckets = calloc(c.nbuckets, sizeof *c.buckets);
  c.max_bytes = max_bytes;

  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;
  size_t served = 0;
  char key[96];
  while (scen_now() < end) {
    unsigned tenant = (unsigned)scen_range(&rng, 1, 6);
    double u = scen_unit(&rng);
    unsigned id = (unsigned)(u * u * u * 8000);
    snprintf(key, sizeof key, "/api/v2/tenant/%u/object/%u", tenant, id);
    const struct entry *e = cache_get(&c, key);
    if (e) {
      served += e->vlen;
    } else {
      size_t len = 0;
      unsigned char *v = fetch_from_backend(key, &rng, &len);
      served += len;
      cache_put(&c, key, v, len);
    }
    /* Per-request scratch: a response header block. */
    char *hdr = malloc(256 + (served & 255));
    snprintf(hdr, 256, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n", served & 0xffff);
    scen_escape(hdr);
    free(hdr);
    scen_step();
    scen_pace(&pacer);
  }
  printf("lru_bounded: hits=%lu misses=%lu evictions=%lu entries=%zu bytes=%zu served=%zu\n",
         c.hits, c.misses, c.evictions, c.count, c.bytes, served);
  while (c.head) evict_one(&c);
  free(c.buckets);
  return 0;
}
