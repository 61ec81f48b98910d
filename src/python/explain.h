/* SPDX-License-Identifier: MIT */
/*
 * explain.h - internals of leakguard.explain(), shared by its files:
 *
 *   blocks.c   block attribution: Python object / heap block -> allocation site
 *   graph.c    the object table, the roots (modules, frame locals) and the BFS
 *   naming.c   chain items: edge labels, object descriptions, chains
 *   torch.c    tensors: storages, descriptions, retained autograd graphs
 *   holders.c  holders grouped by site, their bounds and details
 *   explain.c  the explain's steps, target choice, output (lgpy_explain)
 *
 * Names keep explain.c's original ones (ex_*, edge_label, ...): the extension is built
 * with hidden visibility, so they cannot clash with the interpreter's.
 */
#ifndef LGPY_EXPLAIN_H
#define LGPY_EXPLAIN_H

#include "python/lgpy.h"

#include <string.h>
#include <time.h>

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The walking thread's CPU time: explain's budget is counted in it, so that what a
 * walk finds does not depend on how busy the machine is (beside two CPU hogs a 2-s
 * wall budget was ~0.7 s of walking, and a holder near the end of the walk was
 * missed). The pause it costs the program in wall time grows with the load, as
 * everything else the program does. */
static inline double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ blocks.c */

/* Re-reads the loaded ELF images (static objects are never heap blocks). */
void images_refresh(void);

/* ------------------------------------------------------------------ graph.c */

enum { R_MODULE = 1, R_FRAME = 2, R_UNROOTED = 3 };
/* F_TENSOR: the object holds a storage (a tensor, or a storage itself: F_STORAGE too). */
enum { F_TENSOR = 1, F_OWNER_DONE = 2, F_STORAGE = 4 };

typedef struct {
  PyObject **obj;
  int32_t *parent; /* >= 0: BFS parent; < 0: root number -parent-1 */
  uint32_t *site;
  uint64_t *bytes;
  uint32_t *site2; /* a second block the object owns: list items, bytearray data */
  uint64_t *bytes2;
  uint8_t *flags;
  Py_ssize_t n, cap, max;
  int32_t *ht; /* node index + 1, open addressing */
  size_t ht_size;
  PyObject **rname;
  uint8_t *rkind;
  int nroots, rcap;
  int32_t cur;
  int full;
  int truncated;
  double deadline; /* in cpu_s() time */
  PyTypeObject *tensor;
  PyTypeObject *storage[2]; /* torch.UntypedStorage, torch.TypedStorage (NULL: none) */
  PyObject *memo;           /* node index -> list (chain prefix) */
} ex_t;

/* Index of o in the table, -1 when absent. */
int32_t ex_find(ex_t *E, PyObject *o);
/* Grows the table (first call: allocates it); -1 when out of memory. */
int ex_grow(ex_t *E);
/* Adds o (strong reference) unless present; returns its index, -1 when full. */
int32_t ex_add(ex_t *E, PyObject *o, int32_t parent);
/* Adds o as root number nroots of `kind` named `name` (stolen); -1 on error. */
int ex_add_root(ex_t *E, PyObject *o, int kind, PyObject *name);
/* BFS from node *q on; returns 1 when stopped by the budget. */
int ex_bfs(ex_t *E, Py_ssize_t *q);
void ex_free(ex_t *E);
/* Kind (R_*) of the root node i descends from. */
int root_kind_of(ex_t *E, int32_t i);
/* Roots: every module's __dict__ (__main__ first), every thread's frame locals. */
void add_module_roots(ex_t *E);
void add_frame_roots(ex_t *E);

/* ------------------------------------------------------------------ naming.c */

/* torch.Tensor while an explain runs (keys that are tensors are shown by shape). */
extern PyTypeObject *g_tensor;
/* Reverse maps of big dicts (id(dict) -> {id(value): key}), built once per explain. */
extern PyObject *rev_cache;

/* The type name of o without its module ("Tensor", "OrderedDict"). */
static inline const char *short_tname(PyObject *o) {
  const char *n = Py_TYPE(o)->tp_name;
  const char *dot = strrchr(n, '.');
  return dot ? dot + 1 : n;
}
int is_collapsed_dict(ex_t *E, int32_t i);
/* Full chain naming owner i: prefix(parent) + [edge label, description]. real=0 gives
 * the grouping key (indices and keys wildcarded). New list, NULL with an exception. */
PyObject *owner_chain(ex_t *E, int32_t i, int real, PyObject *extra_desc);

/* ------------------------------------------------------------------ explain.c */

typedef struct {
  PyObject *groups;    /* key -> holder dict */
  PyObject *order;     /* list of holder dicts, in creation order */
  PyObject *storages;  /* storage ptr -> holder dict (views add to it); True: a graph's */
  PyObject *sto_first; /* storage ptr -> first (shallowest) tensor node using it */
  PyObject *targets;   /* set of site ids */
  uint8_t *tgt;        /* the same as a bitmap over site ids, for the hot loops */
  uint32_t ntgt_bits;
  /* the last group of an element of a container: siblings come one after the other in
   * BFS order and share the wildcarded chain */
  uint32_t last_site;
  int32_t last_parent;
  PyTypeObject *last_type;
  const char *last_kind;
  PyObject *last_h;
} hold_t;

static inline int is_target(hold_t *H, uint32_t site) {
  return site && site < H->ntgt_bits && (H->tgt[site >> 3] >> (site & 7) & 1);
}

/* ------------------------------------------------------------------ holders.c */

/* d[k] += add (an int; absent: 0). 0, -1 with an exception. */
int dict_add_int(PyObject *d, const char *k, long long add);
/* The holder dict of site's objects of `kind` owned as node i (its group's, created on
 * first sight, with its chain and bounded container); borrowed, NULL with an
 * exception. extra_desc: a description for the owner instead of its own. */
PyObject *holder_for(ex_t *E, hold_t *H, uint32_t site, const char *kind, int32_t i, PyObject *extra_desc);
/* Gives a dict holder seen before at the same length with other values (a table with a
 * fixed set of keys whose values change: not a leak) detail "bound" (full); remembered
 * across explanations. */
void dict_bounds(PyObject *holders);
/* h["detail"][k] = v (stolen); h["detail"][k] += add. 0, -1. */
int set_detail(PyObject *h, const char *k, PyObject *v);
int add_detail(PyObject *h, const char *k, long long add);
/* A chain's items but the last, joined with arrows (new reference). */
PyObject *chain_root_text(PyObject *chain);

/* ------------------------------------------------------------------ torch.c */

typedef struct {
  long nodes, depth, saved, saved_bytes;
  /* the accumulation chain: from the root, the nodes of the root's own type, each the
   * first input of the one before (`total_loss += loss`: one AddBackward0 per step) */
  long chain;
  PyObject *per_site; /* site -> [count, bytes] */
} graph_t;

/* The length to report as the graph's "grad_fn chain": the accumulation chain when the
 * root accumulates (one node per step, whatever each step's own graph), else the depth. */
static inline long graph_chain_length(const graph_t *G) { return G->chain > 1 ? G->chain : G->depth; }

/* "Tensor(64×512, float32[, grad_fn=X])" (new reference, never NULL unless out of memory). */
PyObject *tensor_desc(PyObject *t);
/* "UntypedStorage(1048576 bytes, cuda)" */
PyObject *storage_desc(PyObject *s);
/* A storage object held directly: its data pointer, size and allocation site (a CUDA
 * storage's recorded GPU allocation, a CPU one's heap block); 0 when unknown. */
uint32_t storage_site(PyObject *s, uintptr_t *ptr, uint64_t *nbytes);
/* 1 when o is an instance of one of E's storage types. */
int is_storage(const ex_t *E, PyObject *o);
/* Site of a CPU tensor's storage block (0: unknown); *ptr, *nbytes its storage. */
uint32_t tensor_site(PyObject *t, uintptr_t *ptr, uint64_t *nbytes);
/* Walks the autograd graph of grad_fn gf (nodes shared with earlier roots are not
 * walked again), attributing the tensors its nodes saved to G. */
void graph_walk(ex_t *E, hold_t *H, PyObject *seen, PyObject *keep, PyObject *cache, PyObject *gf, graph_t *G,
                long cap);

#endif
