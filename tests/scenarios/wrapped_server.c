/* SPDX-License-Identifier: MIT */
/*
 * wrapped_server - a toy publish/subscribe broker that allocates through its own
 * wrappers, as mosquitto does (srv_mem.c: srv__alloc_mem, and srv__dup_str, which calls
 * it), from many call sites. Clients come and go (a fixed pool, one replaced now and
 * then), each with an id, a will topic and subscriptions; packets wait in a fixed ring;
 * the configuration is read once. All of that stays level.
 *
 * One call site leaks: a message on a topic never seen before is kept as the topic's
 * retained message (retain_store), and the topics are ever new (a sensor and a
 * sequence number), so the retained store grows without bound, two frames out from
 * malloc: retain_store -> srv__alloc_mem -> malloc.
 *
 * Ground truth: the report's site is retain_store's line (LEAK-SITE), not the wrapper;
 * one leak.
 *
 * Options: --seconds S (default 4), --rate MSG_PER_S (default 3000), --seed N,
 *          --pidfile PATH
 */
#include "scen_common.h"
#include "srv_mem.h"

#define NCLIENTS 96
#define NQUEUE 64
#define NBUCKETS 4096
#define NCONFIG 64

struct client {
  char *id, *will;
  char *sub[3];
  unsigned long msgs;
};

struct packet {
  size_t len;
  unsigned char data[];
};

struct retained {
  struct retained *hnext;
  size_t len;
  char topic[64];
  char payload[];
};

static const char letters[] = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz";
static struct client *clients[NCLIENTS];
static struct packet *queue[NQUEUE];
static struct retained **buckets;
static char *config[NCONFIG];
static size_t nretained;

static void config_load(uint64_t *rng) {
  for (int i = 0; i < NCONFIG; i++) {
    char v[96];
    snprintf(v, sizeof v, "option_%d=%.*s", i, (int)scen_range(rng, 8, 48), letters);
    config[i] = srv__dup_str(v);
  }
}

static struct client *client_new(uint64_t *rng, unsigned serial) {
  struct client *c = srv__alloc_mem(sizeof *c);
  memset(c, 0, sizeof *c);
  char s[96];
  snprintf(s, sizeof s, "client-%u-%.*s", serial, (int)scen_range(rng, 4, 40), letters);
  c->id = srv__dup_str(s);
  snprintf(s, sizeof s, "clients/%u/status/%.*s", serial, (int)scen_range(rng, 2, 24), letters);
  c->will = srv__dup_str(s);
  return c;
}

static void client_subscribe(struct client *c, uint64_t *rng) {
  for (int i = 0; i < 3; i++) {
    char t[96];
    snprintf(t, sizeof t, "site/%u/sensor/+/%.*s", (unsigned)scen_range(rng, 1, 99), (int)scen_range(rng, 1, 30),
             letters);
    c->sub[i] = srv__dup_str(t);
  }
}

static void client_free(struct client *c) {
  if (!c) return;
  srv__free_mem(c->id);
  srv__free_mem(c->will);
  for (int i = 0; i < 3; i++) srv__free_mem(c->sub[i]);
  srv__free_mem(c);
}

static struct packet *packet_alloc(size_t len) {
  struct packet *p = srv__alloc_mem(sizeof *p + len);
  p->len = len;
  return p;
}

static uint64_t topic_hash(const char *t) {
  uint64_t h = 1469598103934665603ull;
  for (; *t; t++) h = (h ^ (unsigned char)*t) * 1099511628211ull;
  return h;
}

/* Keeps the last message of a topic for the subscribers to come. */
static void retain_store(const char *topic, const unsigned char *payload, size_t len) {
  struct retained **b = &buckets[topic_hash(topic) & (NBUCKETS - 1)];
  for (struct retained *m = *b; m; m = m->hnext)
    if (!strcmp(m->topic, topic)) return;
  struct retained *m = srv__alloc_mem(sizeof *m + len); /* LEAK-SITE */
  snprintf(m->topic, sizeof m->topic, "%s", topic);
  m->len = len;
  memcpy(m->payload, payload, len);
  m->hnext = *b;
  *b = m;
  nretained++;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 4.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 3000);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 4242);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  buckets = srv__alloc_mem(NBUCKETS * sizeof *buckets);
  memset(buckets, 0, NBUCKETS * sizeof *buckets);
  config_load(&rng);
  unsigned serial = 0;
  for (int i = 0; i < NCLIENTS; i++) {
    clients[i] = client_new(&rng, ++serial);
    client_subscribe(clients[i], &rng);
  }
  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;
  unsigned long msgs = 0, seq = 0;
  unsigned char payload[2048];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)i;
  while (scen_now() < end) {
    /* a client goes, another comes */
    if (scen_range(&rng, 0, 49) == 0) {
      unsigned k = (unsigned)scen_range(&rng, 0, NCLIENTS - 1);
      client_free(clients[k]);
      clients[k] = client_new(&rng, ++serial);
      client_subscribe(clients[k], &rng);
    }
    /* a message arrives, waits in the ring, is sent when its slot comes round again */
    size_t len = scen_logsize(&rng, 32, 1500);
    unsigned q = (unsigned)(msgs % NQUEUE);
    srv__free_mem(queue[q]);
    queue[q] = packet_alloc(len);
    memcpy(queue[q]->data, payload, len);
    clients[msgs % NCLIENTS]->msgs++;
    /* every fourth one is retained, on a topic never seen before */
    if (msgs % 4 == 0) {
      char topic[64];
      snprintf(topic, sizeof topic, "sensors/%u/reading/%lu", (unsigned)scen_range(&rng, 1, 500), ++seq);
      retain_store(topic, payload, scen_logsize(&rng, 64, 512));
    }
    msgs++;
    scen_step();
    scen_pace(&pacer);
  }
  printf("wrapped_server: messages=%lu retained=%zu clients_served=%u in_use=%zu\n", msgs, nretained, serial,
         srv__mem_in_use());
  for (int i = 0; i < NCLIENTS; i++) client_free(clients[i]);
  for (int i = 0; i < NQUEUE; i++) srv__free_mem(queue[i]);
  for (int i = 0; i < NCONFIG; i++) srv__free_mem(config[i]);
  return 0;
}
