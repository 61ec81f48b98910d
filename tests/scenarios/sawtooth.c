/* SPDX-License-Identifier: MIT */
/*
 * sawtooth - a batch ETL loop: ingest records into a batch until it is "full"
 * (batch size varies from batch to batch), then aggregate the batch into a
 * temporary hash table, emit, and free everything. Memory is a saw-tooth with
 * irregular period and amplitude. A small fixed-size summary lives for the whole
 * run.
 *
 * Ground truth: no leak (control).
 *
 * Options: --seconds S (default 5), --rate RECORDS_PER_S (default 60000),
 *          --seed N, --pidfile PATH
 */
#include "scen_common.h"

struct record {
  uint32_t customer;
  uint32_t sku;
  double amount;
  size_t note_len;
  char *note;
};

struct agg {
  uint32_t customer;
  double total;
  unsigned n;
  struct agg *next;
};

struct summary {
  double grand_total;
  unsigned long records, batches;
  double per_region[64];
};

static struct record *ingest(uint64_t *rng) {
  struct record *r = malloc(sizeof *r);
  r->customer = (uint32_t)scen_range(rng, 1, 50000);
  r->sku = (uint32_t)scen_rand(rng);
  r->amount = scen_unit(rng) * 300.0;
  r->note_len = scen_range(rng, 0, 3) == 0 ? scen_logsize(rng, 16, 1500) : 0;
  r->note = NULL;
  if (r->note_len) {
    r->note = malloc(r->note_len);
    memset(r->note, 'n', r->note_len);
  }
  return r;
}

static void flush_batch(struct record **batch, size_t n, struct summary *sum) {
  size_t nb = 4096;
  struct agg **table = calloc(nb, sizeof *table);
  for (size_t i = 0; i < n; i++) {
    struct record *r = batch[i];
    struct agg **pp = &table[r->customer % nb];
    while (*pp && (*pp)->customer != r->customer) pp = &(*pp)->next;
    if (!*pp) {
      *pp = calloc(1, sizeof **pp);
      (*pp)->customer = r->customer;
    }
    (*pp)->total += r->amount;
    (*pp)->n++;
    sum->per_region[r->customer % 64] += r->amount;
    sum->grand_total += r->amount;
  }
  /* "emit": serialise into an output buffer that grows as needed */
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  for (size_t b = 0; b < nb; b++) {
    for (struct agg *a = table[b]; a; a = a->next) {
      if (len + 64 > cap) {
        cap *= 2;
        out = realloc(out, cap);
      }
      len += (size_t)snprintf(out + len, 64, "%u,%u,%.2f\n", a->customer, a->n, a->total);
    }
  }
  scen_escape(out);
  free(out);
  for (size_t b = 0; b < nb; b++) {
    while (table[b]) {
      struct agg *next = table[b]->next;
      free(table[b]);
      table[b] = next;
    }
  }
  free(table);
  for (size_t i = 0; i < n; i++) {
    free(batch[i]->note);
    free(batch[i]);
  }
  sum->records += n;
  sum->batches++;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 60000);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 4242);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  struct summary *sum = calloc(1, sizeof *sum);
  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  double end = scen_now() + seconds;

  size_t cap = 0, n = 0;
  struct record **batch = NULL;
  size_t batch_target = scen_range(&rng, 5000, 40000);
  while (scen_now() < end) {
    if (n == cap) {
      cap = cap ? cap * 2 : 1024;
      batch = realloc(batch, cap * sizeof *batch);
    }
    batch[n++] = ingest(&rng);
    if (n >= batch_target) {
      flush_batch(batch, n, sum);
      n = 0;
      if (scen_range(&rng, 0, 2) == 0) { /* sometimes give the batch array back */
        free(batch);
        batch = NULL;
        cap = 0;
      }
      batch_target = scen_range(&rng, 5000, 40000);
      scen_step();
    }
    scen_pace(&pacer);
  }
  flush_batch(batch, n, sum);
  free(batch);
  printf("sawtooth: records=%lu batches=%lu total=%.2f\n", sum->records, sum->batches,
         sum->grand_total);
  free(sum);
  return 0;
}
