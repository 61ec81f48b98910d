/* SPDX-License-Identifier: MIT */
/*
 * fix.c - the fix, in one line: each leak gets a hint keyed by what keeps its memory
 * (the holder's kind and chain, docs/fixes.md) and, without a holder, by where it was
 * allocated (Python, native code, GPU memory). A hint names the user's own object
 * where the holder gives it ("bound `history`"). Rules, first match wins:
 *   autograd graph rooted at a scalar     accumulate loss.item()
 *   autograd graph rooted elsewhere       keep t.detach()
 *   a functools.lru_cache                 give it a maxsize
 *   tensors in a container                store t.detach() (.cpu()), or bound it
 *   other objects in a container          bound it
 *   no holder: GPU memory, native code    free on every path, or bound the owner
 * A leak in one rank of several that run the same code (RANK set) says so first.
 */
#include <stdio.h>
#include <string.h>

#include "findings/impl.h"

/* The user's name for the container in a holder chain: its root without the module
 * ("__main__.history (list)" -> "history") and the attributes after it
 * ("__main__.model (Net)", ".seen (list)" -> "model.seen"), up to the first element
 * that is a container. 1 with out set for a sequence, 2 for a mapping, 0 when the
 * chain names none. */
static int container_name(const lgr_holder_t *h, char *out, size_t n) {
  static const char *const KINDS[] = {"(list)", "(deque)", "(set)", "(dict)", "(OrderedDict)", "(defaultdict)"};
  size_t w = 0;
  out[0] = 0;
  int first = 1;
  for (int i = 0; i < h->nchain; i++) {
    const char *s = h->chain[i] ? h->chain[i] : "";
    if (!first && s[0] != '.') return 0; /* an index or a reference: no name reaches it */
    if (first && !strncmp(s, "frame ", 6) && strchr(s, ':')) s = strchr(s, ':') + 1; /* a function's local */
    const char *name = s, *sp = strchr(s, ' ');
    const char *dot = first ? memrchr(s, '.', sp ? (size_t)(sp - s) : strlen(s)) : NULL;
    if (dot) name = dot + 1;
    size_t len = sp ? (size_t)(sp - name) : strlen(name);
    if (w + len + 1 >= n || len == 0) return 0;
    memcpy(out + w, name, len);
    w += len;
    out[w] = 0;
    first = 0;
    for (size_t k = 0; sp && k < sizeof KINDS / sizeof *KINDS; k++)
      if (!strcmp(sp + 1, KINDS[k])) return k < 3 ? 1 : 2;
  }
  return 0;
}

static int chain_has(const lgr_holder_t *h, const char *what) {
  for (int i = 0; i < h->nchain; i++)
    if (h->chain[i] && strstr(h->chain[i], what)) return 1;
  return 0;
}

/* The hint of a leak whose holder is known, in buf; 0 when no rule fits. */
static int holder_hint(const lgr_holder_t *h, char *buf, size_t n) {
  const char *k = h->kind ? h->kind : "";
  char name[96];
  int named = container_name(h, name, sizeof name);
  int done = 1;
  if (!strcmp(k, "autograd-graph") && chain_has(h, "Tensor(scalar"))
    snprintf(buf, n,
             "accumulate `loss.item()` (a Python number) or `loss.detach()`, not the tensor: a sum of losses "
             "keeps every step's autograd graph");
  else if (!strcmp(k, "autograd-graph"))
    snprintf(buf, n,
             "keep `t.detach()` of the tensors you keep after their step: a tensor with a grad_fn keeps its "
             "step's autograd graph");
  else if (chain_has(h, "_lru_cache_wrapper"))
    snprintf(buf, n,
             "give the cache a bound: `functools.lru_cache(maxsize=N)` (maxsize=None never evicts), or key it "
             "by something that repeats");
  else if (named == 2)
    snprintf(buf, n,
             "bound `%s`: evict old keys (a dict keyed by something that never repeats, such as a new object each "
             "call, only grows), or a cache with a maximum size",
             name);
  else if ((!strcmp(k, "tensor") || !strcmp(k, "storage")) && named)
    snprintf(buf, n,
             "store `t.detach()` (and `.cpu()`, or `.item()` for a number) in `%s`, and bound it: drop old "
             "entries, or a `collections.deque(maxlen=N)`",
             name);
  else if (!strcmp(k, "tensor") || !strcmp(k, "storage"))
    snprintf(buf, n, "keep `t.detach()` (and `.cpu()`) of the tensors you keep, and drop the ones you no longer need");
  else if (named)
    snprintf(buf, n,
             "bound `%s`: it gains entries and never loses them (drop old ones, a `collections.deque(maxlen=N)`, "
             "or a cache with eviction)",
             name);
  else done = 0;
  return done;
}

/* The hint of a leak without a holder, from its main suspect's site; 0: none. */
static int site_hint(const lgr_site_t *m, char *buf, size_t n) {
  if (!strcmp(m->space, "device") || !strcmp(m->space, "managed")) {
    snprintf(buf, n,
             "free what this line allocates on every path (cudaFree / cuMemFree), or drop the objects that own "
             "these buffers");
    return 1;
  }
  for (int k = 0; k < m->nframes; k++)
    if (lgr_is_python_module(m->frames[k].module)) return 0; /* Python without a holder: nothing sure to say */
  if (m->spread_sites) return 0;
  snprintf(buf, n,
           "nothing frees these blocks while the program runs: free them on every path (an early return, an "
           "error path), or bound the structure that keeps them");
  return 1;
}

/* The rank of the leak's process when the run has several ranks and this is the only
 * one that leaks, else -1. */
static int lone_rank(const lgr_report_t *r, const lgr_leak_t *L) {
  if (L->rank < 0) return -1;
  int ranked = 0;
  for (int i = 0; i < r->nruns; i++) {
    if (r->runs[i].rank < 0) continue;
    ranked++;
    if (r->runs[i].leaking && r->runs[i].proc != L->proc) return -1;
  }
  return ranked > 1 ? L->rank : -1;
}

void lgr_fix_hints(lgr_report_t *r) {
  for (int j = 0; j < r->nleaks; j++) {
    lgr_leak_t *L = &r->leaks[j];
    if (!L->nsuspects) continue;
    char hint[400];
    int have = L->holder ? holder_hint(L->holder, hint, sizeof hint) : 0;
    if (!have && !L->holder) have = site_hint(&r->suspects[L->suspects[0]], hint, sizeof hint);
    if (!have) continue;
    int rk = lone_rank(r, L);
    if (rk >= 0) {
      char all[480];
      snprintf(all, sizeof all, "only rank %d grows: in the code that runs on rank %d alone, %s", rk, rk, hint);
      L->fix = lgr_strdup(all);
    } else {
      L->fix = lgr_strdup(hint);
    }
  }
}
