/* SPDX-License-Identifier: MIT */
/*
 * db.c - the collector's writes to the store (output/store.h): one transaction per pass
 * of its loop that writes anything, and the rule for a write that fails (said once,
 * storing stops, the recording goes on). Every file of the collector that writes goes
 * through here; this file calls none of them.
 */
#include <errno.h>
#include <string.h>

#include "collector/collector_impl.h"

/* One transaction per loop iteration that writes anything: opened on the first
 * write, committed by db_commit (per-statement transactions would each take the
 * file locks). */
void lgc_db_begin(lgc_collector_t *c) {
  if (c->db && !c->db_failed && !c->in_txn) c->in_txn = lgst_begin(c->db) == 0;
}

int lgc_db_write(lgc_collector_t *c, int rc) {
  if (rc != 0 && !c->db_failed) {
    int e = c->db ? lgst_errno(c->db) : EIO;
    if (rc == -ENOMEM) e = ENOMEM;
    c->db_failed = 1;
    c->db_full = e == ENOSPC;
    c->db_failed_ns = lgu_now_ns();
    lgu_err("cannot write the database %s: %s; storing stopped %.1f s after the start, the program goes on%s",
            c->db_path, e == ENOSPC ? "disk full" : strerror(e), (double)(c->db_failed_ns - c->t0) / 1e9,
            e == ENOSPC && lgst_has_reserve(c->db) ? " (how each process ends will still be stored)" : "");
    if (c->in_txn) lgst_rollback(c->db); /* the pass that failed, not half of it */
    c->in_txn = 0;
  }
  return rc;
}

void lgc_db_commit(lgc_collector_t *c) {
  if (!c->in_txn) return;
  c->in_txn = 0;
  lgc_db_write(c, lgst_commit(c->db));
}
