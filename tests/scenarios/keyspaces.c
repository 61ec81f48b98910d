/* SPDX-License-Identifier: MIT */
/*
 * keyspaces - a key-value server under a benchmark that runs its commands one after the
 * other, as `redis-benchmark -t set,get,lpush,lpop,hset -r 20000` does to redis-server
 * (issue #34): every phase is bounded, and the program is healthy.
 *
 *  SET   0    - 15 %  random keys of a keyspace of --keys (default 6000): fills it,
 *                     then replaces values (a fill that decelerates and stops)
 *  GET   15 % - 35 %  lookups only
 *  LPUSH 35 % - 50 %  pushes onto one list: it grows all along the phase
 *  LPOP  50 % - 65 %  pops it until it is empty, then idles
 *  HSET  65 % - 100 % random fields of one hash of --keys: a second fill, late in the
 *                     run, which stops a while before the end
 *
 * Keys, fields and values are made by one function (str_new, as redis' _sdsnewlen) and
 * the entries by another (entry_new, as dictAddRaw): each is one allocation site whose
 * stacks fill at different times, a staircase of two fills. Commands are paced at
 * --rate per second (default 20000); the phases are fractions of --seconds, so a loaded
 * machine gives the same shape.
 *
 * Ground truth: no leak (control). The list's nodes grew and were released; each
 * keyspace filled and then stayed at its size.
 *
 * Options: --seconds S (default 8), --rate OPS_PER_S, --keys N, --seed N, --pidfile PATH
 */
#include "scen_common.h"

struct entry {
  struct entry *next;
  char *key;
  char *value;
};

struct dict {
  struct entry **buckets;
  size_t nbuckets, count;
};

struct node {
  struct node *next;
  char *value;
};

static char *str_new(const char *text, size_t len) {
  char *s = malloc(len + 1);
  size_t tl = strlen(text);
  for (size_t i = 0; i < len; i++) s[i] = text[i % tl];
  s[len] = 0;
  return s;
}

static struct entry *entry_new(char *key, char *value) {
  struct entry *e = malloc(sizeof *e);
  e->key = key;
  e->value = value;
  e->next = NULL;
  return e;
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

static struct entry *dict_find(struct dict *d, const char *key) {
  for (struct entry *e = d->buckets[hash_str(key) % d->nbuckets]; e; e = e->next)
    if (strcmp(e->key, key) == 0) return e;
  return NULL;
}

/* A new key takes a key string and an entry; an existing one gets a new value. */
static void set_key(struct dict *d, const char *key, size_t vlen) {
  char *value = str_new("value-of-a-key ", vlen);
  struct entry *e = dict_find(d, key);
  if (e) {
    free(e->value);
    e->value = value;
    return;
  }
  e = entry_new(str_new(key, strlen(key)), value);
  size_t b = hash_str(key) % d->nbuckets;
  e->next = d->buckets[b];
  d->buckets[b] = e;
  d->count++;
}

static void hset_field(struct dict *h, const char *field, size_t vlen) {
  char *value = str_new("value-of-a-field ", vlen);
  struct entry *e = dict_find(h, field);
  if (e) {
    free(e->value);
    e->value = value;
    return;
  }
  e = entry_new(str_new(field, strlen(field)), value);
  size_t b = hash_str(field) % h->nbuckets;
  e->next = h->buckets[b];
  h->buckets[b] = e;
  h->count++;
}

static struct node *list_push(struct node *head, size_t vlen) {
  struct node *n = malloc(sizeof *n);
  n->value = malloc(vlen);
  memset(n->value, 'l', vlen);
  n->next = head;
  return n;
}

static struct node *list_pop(struct node *head) {
  struct node *n = head->next;
  free(head->value);
  free(head);
  return n;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 8.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 20000);
  long keys = scen_opt_long(argc, argv, "--keys", NULL, 6000);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 34);
  scen_write_pidfile(argc, argv);
  scen_step_init();
  if (keys < 1) keys = 1;

  struct dict db = {calloc(16384, sizeof(struct entry *)), 16384, 0};
  struct dict hash = {calloc(16384, sizeof(struct entry *)), 16384, 0};
  struct node *list = NULL;
  size_t listlen = 0, maxlist = 0;
  unsigned long ops[5] = {0, 0, 0, 0, 0}, found = 0;
  const double until[5] = {0.15, 0.35, 0.50, 0.65, 1.0};
  char key[64];

  struct scen_pacer pace;
  scen_pacer_init(&pace, rate);
  double t0 = scen_now();
  for (;;) {
    double f = (scen_now() - t0) / seconds;
    if (f >= 1) break;
    int phase = 0;
    while (phase < 4 && f >= until[phase]) phase++;
    long k = (long)scen_range(&rng, 0, (uint64_t)keys - 1);
    switch (phase) {
    case 0:
      snprintf(key, sizeof key, "key:%06ld", k);
      set_key(&db, key, 200);
      break;
    case 1:
      snprintf(key, sizeof key, "key:%06ld", k);
      found += dict_find(&db, key) != NULL;
      break;
    case 2:
      list = list_push(list, 200);
      if (++listlen > maxlist) maxlist = listlen;
      break;
    case 3: /* pops twice as fast as it was pushed: empty before the phase ends */
      for (int i = 0; i < 2 && list; i++) list = list_pop(list), listlen--;
      break;
    default:
      snprintf(key, sizeof key, "field:%06ld", k);
      hset_field(&hash, key, 200);
      break;
    }
    ops[phase]++;
    scen_pace(&pace);
  }
  printf("keyspaces: set=%lu get=%lu lpush=%lu lpop=%lu hset=%lu keys=%zu fields=%zu found=%lu maxlist=%zu list_at_end=%zu\n",
         ops[0], ops[1], ops[2], ops[3], ops[4], db.count, hash.count, found, maxlist, listlen);
  return 0;
}
