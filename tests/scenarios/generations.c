/* SPDX-License-Identifier: MIT */
/*
 * generations - a training loop whose blocks have three lifetimes, the generations of
 * issue #16 (docs/lifetimes.md). No leak.
 *
 * Ground truth, at --rate steps/s (default 200) for --seconds (default 4):
 *   load_weights     64 blocks of 64 KiB at start, kept to the end          old
 *   make_activation  8 blocks of 32 KiB a step, freed within the step (us)   young
 *   cache_request    1 block of 16 KiB a step into a ring of --ring slots
 *                    (default 100): each lives --ring steps (0.5 s)          middle
 * Steps are marked (lg_step when the recorder is there).
 *
 * It prints steps= and seconds= (what it ran). Options: --seconds S, --rate R, --ring N
 */
#include "scen_common.h"

#define NWEIGHTS 64

static void *g_weights[NWEIGHTS];

static __attribute__((noinline)) void load_weights(void) {
  for (int i = 0; i < NWEIGHTS; i++) {
    g_weights[i] = malloc(64 * 1024);
    scen_touch(g_weights[i], 64 * 1024);
  }
}

static __attribute__((noinline)) unsigned char *make_activation(size_t len) {
  unsigned char *p = malloc(len);
  scen_touch(p, len);
  return p;
}

static __attribute__((noinline)) void *cache_request(void **ring, long nring, long step) {
  void *p = malloc(16 * 1024);
  scen_touch(p, 16 * 1024);
  void *old = ring[step % nring];
  ring[step % nring] = p;
  return old;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 4);
  double rate = scen_opt_double(argc, argv, "--rate", NULL, 200);
  long nring = scen_opt_long(argc, argv, "--ring", NULL, 100);
  if (nring < 1) nring = 1;
  scen_step_init();
  load_weights();
  void **ring = calloc((size_t)nring, sizeof *ring);
  struct scen_pacer pace;
  scen_pacer_init(&pace, rate);
  double t0 = scen_now();
  long step = 0;
  unsigned sum = 0;
  while (scen_now() - t0 < seconds) {
    unsigned char *act[8];
    for (int k = 0; k < 8; k++) act[k] = make_activation(32 * 1024);
    for (int k = 0; k < 8; k++) sum += act[k][k], free(act[k]);
    free(cache_request(ring, nring, step));
    step++;
    scen_step();
    scen_pace(&pace);
  }
  /* the weights and the ring stay to the end, as a trainer's do */
  printf("steps=%ld seconds=%.3f sum=%u\n", step, scen_now() - t0, sum);
  return 0;
}
