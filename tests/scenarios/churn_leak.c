/* SPDX-License-Identifier: MIT */
/*
 * churn_leak - a message broker front-end: a slow leak hidden in heavy churn.
 *
 * Every request allocates a message buffer, parses it into a header record and a
 * token array, normalises the header, builds a reply with a growing (realloc'd)
 * buffer and keeps the message in a "recent messages" window whose size drifts up
 * and down. A per-topic statistics table fills up and then stops growing.
 *
 * Ground truth: validate_header() returns early on a malformed header (about 1
 * request in 70) without freeing the normalised copy: the LEAK-SITE line leaks
 * 100..900 bytes each time. Everything else is freed. The program prints the
 * exact number of bytes and blocks leaked there.
 *
 * Options: --seconds S (default 5), --rate REQ_PER_S (default 20000), --seed N,
 *          --pidfile PATH
 */
#include "scen_common.h"

#include <ctype.h>
#include <math.h>

struct message {
  size_t len;
  unsigned topic;
  int malformed;
  char *body;
};

struct header {
  char verb[16];
  unsigned topic;
  unsigned flags;
  size_t body_len;
  char *normalized;
};

struct topic_stats {
  unsigned topic;
  unsigned long count;
  unsigned long bytes;
  struct topic_stats *next;
};

#define STATS_BUCKETS 256
static struct topic_stats *g_stats[STATS_BUCKETS];
static unsigned long g_rejected;
static size_t g_leaked_bytes; /* ground truth, printed at exit */

static struct message *receive_message(uint64_t *rng) {
  struct message *m = malloc(sizeof *m);
  m->len = scen_logsize(rng, 48, 16384);
  m->topic = (unsigned)scen_range(rng, 0, 3999);
  m->malformed = scen_range(rng, 0, 69) == 0;
  m->body = malloc(m->len + 1);
  memset(m->body, 'a' + (int)(m->topic % 26), m->len);
  for (size_t i = 0; i < m->len; i += 64) m->body[i] = (char)('a' + (i % 26));
  m->body[m->len] = 0;
  return m;
}

static void free_message(struct message *m) {
  free(m->body);
  free(m);
}

/* Normalises the header line; on a malformed header the request is rejected. */
static int validate_header(const struct message *m, struct header *h, uint64_t *rng) {
  size_t hlen = 100 + (size_t)scen_range(rng, 0, 800);
  char *norm = malloc(hlen); /* LEAK-SITE */
  for (size_t i = 0; i + 1 < hlen; i++) norm[i] = (char)toupper('a' + (int)(i % 26));
  norm[hlen - 1] = 0;
  if (m->malformed) {
    g_rejected++;
    g_leaked_bytes += hlen;
    return -1; /* bug: norm is not freed on this path */
  }
  h->normalized = norm;
  return 0;
}

static char **tokenize(const struct message *m, size_t *ntok) {
  size_t n = 2 + m->len / 97;
  char **tok = calloc(n, sizeof *tok);
  for (size_t i = 0; i < n; i++) tok[i] = m->body + (i * 97) % (m->len + 1);
  *ntok = n;
  return tok;
}

static void account(unsigned topic, size_t bytes) {
  unsigned b = topic % STATS_BUCKETS;
  struct topic_stats *s = g_stats[b];
  while (s && s->topic != topic) s = s->next;
  if (!s) {
    s = calloc(1, sizeof *s);
    s->topic = topic;
    s->next = g_stats[b];
    g_stats[b] = s;
  }
  s->count++;
  s->bytes += bytes;
}

static size_t build_reply(const struct header *h, char **tokens, size_t ntok) {
  size_t cap = 64, len = 0;
  char *out = malloc(cap);
  for (size_t i = 0; i < ntok; i++) {
    size_t add = 8 + (size_t)(tokens[i][0] & 15);
    if (len + add + 1 > cap) {
      while (len + add + 1 > cap) cap *= 2;
      out = realloc(out, cap);
    }
    memset(out + len, 'x', add);
    len += add;
  }
  out[len] = 0;
  size_t r = len + strlen(h->verb);
  scen_escape(out);
  free(out);
  return r;
}

static size_t handle_request(struct message *m, uint64_t *rng) {
  struct header h;
  memset(&h, 0, sizeof h);
  snprintf(h.verb, sizeof h.verb, "PUB");
  h.topic = m->topic;
  h.body_len = m->len;
  if (validate_header(m, &h, rng) != 0) return 0;
  size_t ntok = 0;
  char **tokens = tokenize(m, &ntok);
  size_t r = build_reply(&h, tokens, ntok);
  account(m->topic, m->len);
  free(tokens);
  free(h.normalized);
  return r;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 20000);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 12345);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  /* Window of recent messages; its target size drifts (random walk + load wave). */
  enum { WINDOW_MAX = 6000 };
  struct message **window = calloc(WINDOW_MAX, sizeof *window);
  size_t head = 0, count = 0;
  double target = 1500;

  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double t0 = scen_now(), end = t0 + seconds;
  unsigned long requests = 0;
  size_t reply_bytes = 0;
  while (scen_now() < end) {
    /* Bursty load: a slow wave plus noise on the window size. */
    double t = scen_now() - t0;
    target += (scen_unit(&rng) - 0.5) * 40.0;
    double want = target + 1200.0 * sin(t * 2.1);
    if (want < 200) want = 200;
    if (want > WINDOW_MAX - 1) want = WINDOW_MAX - 1;

    struct message *m = receive_message(&rng);
    reply_bytes += handle_request(m, &rng);
    window[(head + count) % WINDOW_MAX] = m;
    count++;
    while (count > (size_t)want) {
      free_message(window[head]);
      head = (head + 1) % WINDOW_MAX;
      count--;
    }
    requests++;
    scen_step();
    scen_pace(&pacer);
  }
  while (count) {
    free_message(window[head]);
    head = (head + 1) % WINDOW_MAX;
    count--;
  }
  free(window);
  for (unsigned b = 0; b < STATS_BUCKETS; b++) {
    while (g_stats[b]) {
      struct topic_stats *n = g_stats[b]->next;
      free(g_stats[b]);
      g_stats[b] = n;
    }
  }
  printf("churn_leak: requests=%lu reply_bytes=%zu leaked_bytes=%zu leaked_blocks=%lu\n",
         requests, reply_bytes, g_leaked_bytes, g_rejected);
  return 0;
}
