/* SPDX-License-Identifier: MIT */
/*
 * late_leak - a job that is healthy for a while, then starts leaking: an image
 * pipeline whose per-request scratch buffers are freed, until a code path that
 * switches on after --start seconds (a cache of decoded thumbnails "for later" that
 * nothing ever reads) keeps one buffer per request.
 *
 * Ground truth: from --start seconds on (default 10), the LEAK-SITE line keeps every
 * thumbnail: --rate requests/s (default 200) x --size bytes (default 28 KiB, about
 * 5.5 MiB/s). The run lasts --seconds (default 13): a 3-second leak at the end of a
 * 13-second run. It prints leak_start_s= (seconds after the program started) and the
 * bytes and blocks it kept.
 *
 * Options: --seconds S, --start S, --rate R, --size BYTES, --seed N
 */
#include "scen_common.h"

struct thumb {
  struct thumb *next;
  size_t len;
  unsigned char *pixels;
};

static struct thumb *g_kept;

static unsigned char *decode(uint64_t *rng, size_t len) {
  unsigned char *p = malloc(len);
  scen_touch(p, len);
  p[0] = (unsigned char)scen_range(rng, 0, 255);
  return p;
}

static unsigned char *make_thumbnail(const unsigned char *img, size_t size) {
  unsigned char *t = malloc(size); /* LEAK-SITE */
  memset(t, img[0], size);
  return t;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 13);
  double start = scen_opt_double(argc, argv, "--start", NULL, 10);
  double rate = scen_opt_double(argc, argv, "--rate", NULL, 200);
  size_t size = (size_t)scen_opt_long(argc, argv, "--size", NULL, 28 * 1024);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", NULL, 7);
  scen_step_init();
  /* a working set that is there from the start: lookup tables of a few MiB */
  size_t table_len = 4u << 20;
  unsigned char *table = malloc(table_len);
  scen_touch(table, table_len);
  double t0 = scen_now();
  size_t kept_bytes = 0, kept_blocks = 0;
  struct scen_pacer pace;
  scen_pacer_init(&pace, rate);
  while (scen_now() - t0 < seconds) {
    size_t len = scen_logsize(&rng, 4096, 256 * 1024);
    unsigned char *img = decode(&rng, len);
    unsigned char *thumb = make_thumbnail(img, size);
    if (scen_now() - t0 >= start) {
      struct thumb *k = malloc(sizeof *k);
      k->pixels = thumb;
      k->len = size;
      k->next = g_kept;
      g_kept = k;
      kept_bytes += size;
      kept_blocks++;
    } else {
      free(thumb);
    }
    free(img);
    scen_step();
    scen_pace(&pace);
  }
  printf("late_leak: leak_start_s=%.3f leaked_bytes=%zu leaked_blocks=%zu\n", start, kept_bytes, kept_blocks);
  free(table);
  return 0;
}
