/* SPDX-License-Identifier: MIT */
/*
 * mt_shlib - a multi-threaded video transcoder: the main thread reads packets
 * (malloc'd) into a bounded queue; worker threads, each with its own decoder
 * from libscencodec.so, decode them, "encode" the frame into an output buffer
 * and release everything. Packets are allocated on one thread and freed on
 * another.
 *
 * Ground truth: the leak is inside the shared library (see codec.c): the side
 * data that codec_decode() attaches to about one frame in six is never freed.
 *
 * Options: --seconds S (default 5), --threads N (default 4),
 *          --rate PACKETS_PER_S (default 2500), --seed N, --pidfile PATH
 */
#include "codec.h"
#include "scen_common.h"

#include <pthread.h>

struct packet {
  size_t len;
  unsigned char *data;
  struct packet *next;
};

struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  struct packet *head, *tail;
  size_t len, max;
  int closed;
};

static struct queue g_q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                           PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 256, 0};

static void queue_push(struct queue *q, struct packet *p) {
  pthread_mutex_lock(&q->mu);
  while (q->len >= q->max) pthread_cond_wait(&q->not_full, &q->mu);
  p->next = NULL;
  if (q->tail) q->tail->next = p; else q->head = p;
  q->tail = p;
  q->len++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static struct packet *queue_pop(struct queue *q) {
  pthread_mutex_lock(&q->mu);
  while (!q->head && !q->closed) pthread_cond_wait(&q->not_empty, &q->mu);
  struct packet *p = q->head;
  if (p) {
    q->head = p->next;
    if (!q->head) q->tail = NULL;
    q->len--;
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return p;
}

static void queue_close(struct queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

struct worker {
  pthread_t tid;
  unsigned long frames, corrupt, side;
  size_t out_bytes;
};

static size_t encode(const struct codec_frame *f) {
  size_t cap = f->len / 4 + 256;
  unsigned char *out = malloc(cap);
  size_t n = 0;
  for (size_t i = 0; i < f->len && n + 2 < cap; i += 16) out[n++] = f->pixels[i];
  if (f->side) out[n++] = (unsigned char)f->side->len;
  scen_escape(out);
  free(out);
  return n;
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  struct codec_ctx *ctx = codec_open(320, 180);
  struct packet *p;
  while ((p = queue_pop(&g_q)) != NULL) {
    struct codec_frame f;
    if (codec_decode(ctx, p->data, p->len, &f) == 0) {
      w->frames++;
      if (f.side) w->side++;
      w->out_bytes += encode(&f);
      codec_frame_release(&f);
    } else {
      w->corrupt++;
    }
    free(p->data);
    free(p);
    scen_step();
  }
  codec_close(ctx);
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  long nthreads = scen_opt_long(argc, argv, "--threads", NULL, 4);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 2500);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 31337);
  if (nthreads < 1 || nthreads > 64) nthreads = 4;
  scen_write_pidfile(argc, argv);
  scen_step_init();

  struct worker *workers = calloc((size_t)nthreads, sizeof *workers);
  for (long i = 0; i < nthreads; i++) pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]);

  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;
  unsigned long sent = 0;
  while (scen_now() < end) {
    struct packet *p = malloc(sizeof *p);
    p->len = scen_logsize(&rng, 188, 32768);
    p->data = malloc(p->len);
    memset(p->data, (int)(sent & 0xff), p->len);
    for (size_t i = 0; i < p->len; i += 8) p->data[i] = (unsigned char)scen_rand(&rng);
    p->data[0] = scen_range(&rng, 0, 199) ? 0x47 : 0x00; /* 0.5% corrupt */
    p->data[1] = (unsigned char)scen_rand(&rng);
    p->data[2] = (unsigned char)((scen_range(&rng, 0, 5) == 0 ? 0x80 : 0) | (sent & 0x7f));
    p->data[3] = (unsigned char)scen_rand(&rng);
    p->data[4] = (unsigned char)scen_rand(&rng);
    queue_push(&g_q, p);
    sent++;
    scen_pace(&pacer);
  }
  queue_close(&g_q);
  unsigned long frames = 0, side = 0, corrupt = 0;
  for (long i = 0; i < nthreads; i++) {
    pthread_join(workers[i].tid, NULL);
    frames += workers[i].frames;
    side += workers[i].side;
    corrupt += workers[i].corrupt;
  }
  free(workers);
  printf("mt_shlib: sent=%lu frames=%lu with_side_data=%lu corrupt=%lu\n", sent, frames, side,
         corrupt);
  return 0;
}
