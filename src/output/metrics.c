/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - the Prometheus exporter: a registry of gauges and counters rendered in
 * the text exposition format (version 0.0.4), served at /metrics by libmicrohttpd.
 *
 * Format (https://prometheus.io/docs/instrumenting/exposition_formats/):
 *   # HELP name text        help escapes '\' and newline
 *   # TYPE name gauge|counter|histogram
 *   name{k="v",...} value   label values escape '\', '"' and newline
 *   a histogram's series:   name_bucket{...,le="B"} (cumulative, le="+Inf" last),
 *                           name_sum{...}, name_count{...}
 * Ordering is stable: families by name (byte order), series of a family in the order
 * they were first set since the last lgx_clear (callers publish top-K lists in rank
 * order). A declared family with no series still renders its HELP and TYPE lines.
 * Values: integers below 2^53 in full, others the shortest "%.*g" that reads back exactly; +Inf, -Inf and NaN as the
 * format spells them.
 *
 * Serving: the listening socket is created and bound here (so a port in use is
 * reported precisely, with errno) and handed to libmicrohttpd, which serves from its
 * own internal polling thread. On success `why` receives the URL actually served
 * (with the real port when ":0" was asked), e.g. "http://127.0.0.1:9464/metrics".
 */
#include "output/metrics.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <sys/resource.h>

#define LGX_MAX_CONNECTIONS 2048 /* open at once; idle ones are dropped after 10 s */
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/model.h"

#define LGX_MAX_FAMILIES 256
#define LGX_MAX_SERIES 4096 /* per family; callers bound cardinality, this is a backstop */
#define LGX_MAX_LABELS 16   /* label pairs per series */

struct lgx_series {
  char *labels; /* rendered "{k=\"v\",...}" or ""; a histogram's with its suffix first
                 * ("_bucket{le=\"1\"}", "_sum", "_count") */
  double value;
};

struct lgx_family {
  char *name;
  char *help; /* escaped */
  enum lgx_type type;
  struct lgx_series *series;
  size_t nseries, capseries;
};

struct lgx_registry {
  pthread_mutex_t mu;
  struct lgx_family *fam; /* sorted by name */
  size_t nfam, capfam;
};

struct lgx_server {
  struct MHD_Daemon *daemon;
  lgx_registry_t *reg;
};

/* ------------------------------------------------------------------ growable buffer */

struct buf {
  char *p;
  size_t len, cap;
  bool oom;
};

static void buf_put(struct buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s) { buf_put(b, s, strlen(s)); }

/* Appends s escaped: '\' -> "\\", '\n' -> "\n", and '"' -> "\"" when quotes. */
static void buf_escaped(struct buf *b, const char *s, bool quotes) {
  const char *run = s;
  for (; *s; s++) {
    const char *rep = NULL;
    if (*s == '\\') rep = "\\\\";
    else if (*s == '\n') rep = "\\n";
    else if (*s == '"' && quotes) rep = "\\\"";
    if (!rep) continue;
    buf_put(b, run, (size_t)(s - run));
    buf_str(b, rep);
    run = s + 1;
  }
  buf_put(b, run, (size_t)(s - run));
}

/* ------------------------------------------------------------------ names and values */

static bool valid_metric_name(const char *s) {
  if (!s || !*s) return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(p > s && c >= '0' && c <= '9')) return false;
  }
  return true;
}

static bool valid_label_name(const char *s) {
  if (!s || !*s) return false;
  if (s[0] == '_' && s[1] == '_') return false; /* reserved for Prometheus itself */
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(p > s && c >= '0' && c <= '9')) return false;
  }
  return true;
}

/* Shortest decimal that reads back as v; Prometheus' spellings of the specials. */
static void fmt_value(char *out, size_t n, double v) {
  if (isnan(v)) {
    snprintf(out, n, "NaN");
    return;
  }
  if (isinf(v)) {
    snprintf(out, n, v > 0 ? "+Inf" : "-Inf");
    return;
  }
  if (v == 0) v = 0;                                   /* -0 -> 0 */
  if (v == floor(v) && fabs(v) < 9007199254740992.0) { /* integers below 2^53 in full */
    snprintf(out, n, "%.0f", v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, n, "%.*g", prec, v);
    if (strtod(out, NULL) == v) return;
  }
}

/* Renders a flat {"k","v",...,NULL} label list; 0 or -EINVAL / -ENOMEM. */
static int render_labels(const char *const *labels, char **out) {
  struct buf b = {0};
  size_t npairs = 0;
  if (labels) {
    for (size_t i = 0; labels[i]; i += 2) {
      if (!labels[i + 1] || !valid_label_name(labels[i]) || ++npairs > LGX_MAX_LABELS) {
        free(b.p);
        return -EINVAL;
      }
      for (size_t j = 0; j < i; j += 2) /* duplicate key */
        if (strcmp(labels[j], labels[i]) == 0) {
          free(b.p);
          return -EINVAL;
        }
      buf_str(&b, i ? "," : "{");
      buf_str(&b, labels[i]);
      buf_str(&b, "=\"");
      buf_escaped(&b, labels[i + 1], true);
      buf_str(&b, "\"");
    }
  }
  buf_str(&b, npairs ? "}" : "");
  if (b.oom) {
    free(b.p);
    return -ENOMEM;
  }
  *out = b.p;
  return 0;
}

/* ------------------------------------------------------------------ registry */

lgx_registry_t *lgx_new(void) {
  lgx_registry_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  if (pthread_mutex_init(&r->mu, NULL) != 0) {
    free(r);
    return NULL;
  }
  return r;
}

static void family_clear(struct lgx_family *f) {
  for (size_t i = 0; i < f->nseries; i++) free(f->series[i].labels);
  f->nseries = 0;
}

void lgx_free(lgx_registry_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nfam; i++) {
    family_clear(&r->fam[i]);
    free(r->fam[i].series);
    free(r->fam[i].name);
    free(r->fam[i].help);
  }
  free(r->fam);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Binary search; returns the family or NULL, *pos the insertion point. */
static struct lgx_family *find_family(lgx_registry_t *r, const char *name, size_t *pos) {
  size_t lo = 0, hi = r->nfam;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(r->fam[mid].name, name);
    if (c == 0) {
      if (pos) *pos = mid;
      return &r->fam[mid];
    }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  if (pos) *pos = lo;
  return NULL;
}

int lgx_declare(lgx_registry_t *r, const char *name, enum lgx_type type, const char *help) {
  if (!r || !valid_metric_name(name) || (type != LGX_GAUGE && type != LGX_COUNTER && type != LGX_HISTOGRAM))
    return -EINVAL;
  struct buf hb = {0};
  buf_escaped(&hb, help ? help : "", false);
  if (hb.oom) return -ENOMEM;
  if (!hb.p) buf_str(&hb, "");
  if (hb.oom) return -ENOMEM;

  int rc = 0;
  pthread_mutex_lock(&r->mu);
  size_t pos;
  struct lgx_family *f = find_family(r, name, &pos);
  if (f) {
    if (f->type != type) {
      rc = -EEXIST; /* same name, different type: a programming error */
    } else {
      free(f->help); /* idempotent; the latest help wins */
      f->help = hb.p;
      hb.p = NULL;
    }
  } else if (r->nfam >= LGX_MAX_FAMILIES) {
    rc = -ENOSPC;
  } else {
    if (r->nfam == r->capfam) {
      size_t cap = r->capfam ? r->capfam * 2 : 16;
      struct lgx_family *nf = realloc(r->fam, cap * sizeof *nf);
      if (!nf) {
        rc = -ENOMEM;
        goto out;
      }
      r->fam = nf;
      r->capfam = cap;
    }
    char *nm = strdup(name);
    if (!nm) {
      rc = -ENOMEM;
      goto out;
    }
    memmove(&r->fam[pos + 1], &r->fam[pos], (r->nfam - pos) * sizeof *r->fam);
    r->fam[pos] = (struct lgx_family){.name = nm, .help = hb.p, .type = type};
    hb.p = NULL;
    r->nfam++;
  }
out:
  pthread_mutex_unlock(&r->mu);
  free(hb.p);
  return rc;
}

static int put_series(struct lgx_family *f, char **keyp, double v, bool add);

/* Sets or adds under the lock. */
static int update(lgx_registry_t *r, const char *name, const char *const *labels, double v, bool add) {
  if (!r || !name) return -EINVAL;
  char *key = NULL;
  int rc = render_labels(labels, &key);
  if (rc) return rc;
  pthread_mutex_lock(&r->mu);
  struct lgx_family *f = find_family(r, name, NULL);
  if (!f) {
    rc = -ENOENT;
    goto out;
  }
  if ((f->type == LGX_COUNTER && v < 0) || f->type == LGX_HISTOGRAM) {
    rc = -EINVAL; /* counters never go down; histograms: lgx_set_histogram */
    goto out;
  }
  rc = put_series(f, &key, v, add);
out:
  pthread_mutex_unlock(&r->mu);
  free(key);
  return rc;
}

/* Sets (or adds to) the series *key of f, taking *key when it makes a new one. Under
 * the lock. */
static int put_series(struct lgx_family *f, char **keyp, double v, bool add) {
  const char *key = *keyp;
  for (size_t i = 0; i < f->nseries; i++) {
    if (strcmp(f->series[i].labels, key) == 0) {
      f->series[i].value = add ? f->series[i].value + v : v;
      return 0;
    }
  }
  if (f->nseries >= LGX_MAX_SERIES) return -ENOSPC;
  if (f->nseries == f->capseries) {
    size_t cap = f->capseries ? f->capseries * 2 : 8;
    struct lgx_series *ns = realloc(f->series, cap * sizeof *ns);
    if (!ns) return -ENOMEM;
    f->series = ns;
    f->capseries = cap;
  }
  f->series[f->nseries++] = (struct lgx_series){.labels = *keyp, .value = v};
  *keyp = NULL;
  return 0;
}

int lgx_set_histogram(lgx_registry_t *r, const char *name, const char *const *labels, const double *upper,
                      const uint64_t *counts, int n, double sum) {
  if (!r || !name || !counts || n < 1 || (n > 1 && !upper)) return -EINVAL;
  const char *lab[2 * LGX_MAX_LABELS + 3];
  int nl = 0;
  while (labels && labels[nl] && nl < 2 * LGX_MAX_LABELS - 2) nl++;
  for (int i = 0; i < nl; i++) lab[i] = labels[i];
  lab[nl] = "le";
  lab[nl + 2] = NULL;
  char *keys[64 + 2] = {0};
  double vals[64 + 2];
  if (n > 64) return -EINVAL;
  int rc = 0;
  double cum = 0;
  for (int b = 0; b < n && rc == 0; b++) {
    char le[64], *l = NULL;
    if (b < n - 1) fmt_value(le, sizeof le, upper[b]);
    else snprintf(le, sizeof le, "+Inf");
    lab[nl + 1] = le;
    cum += (double)counts[b];
    rc = render_labels(lab, &l);
    if (rc == 0 && !(keys[b] = malloc(strlen(l) + 8))) rc = -ENOMEM;
    if (rc == 0) sprintf(keys[b], "_bucket%s", l);
    free(l);
    vals[b] = cum;
  }
  lab[nl] = NULL;
  for (int k = 0; k < 2 && rc == 0; k++) {
    char *l = NULL;
    rc = render_labels(lab, &l);
    if (rc == 0 && !(keys[n + k] = malloc(strlen(l) + 8))) rc = -ENOMEM;
    if (rc == 0) sprintf(keys[n + k], "%s%s", k ? "_count" : "_sum", l);
    free(l);
    vals[n + k] = k ? cum : sum;
  }
  if (rc == 0) {
    pthread_mutex_lock(&r->mu);
    struct lgx_family *f = find_family(r, name, NULL);
    if (!f) rc = -ENOENT;
    else if (f->type != LGX_HISTOGRAM) rc = -EINVAL;
    for (int i = 0; rc == 0 && i < n + 2; i++) rc = put_series(f, &keys[i], vals[i], false);
    pthread_mutex_unlock(&r->mu);
  }
  for (int i = 0; i < n + 2; i++) free(keys[i]);
  return rc;
}

int lgx_set(lgx_registry_t *r, const char *name, const char *const *labels, double value) {
  return update(r, name, labels, value, false);
}

int lgx_add(lgx_registry_t *r, const char *name, const char *const *labels, double delta) {
  return update(r, name, labels, delta, true);
}

void lgx_clear(lgx_registry_t *r, const char *name) {
  if (!r || !name) return;
  pthread_mutex_lock(&r->mu);
  struct lgx_family *f = find_family(r, name, NULL);
  if (f) family_clear(f);
  pthread_mutex_unlock(&r->mu);
}

int lgx_render(lgx_registry_t *r, char **out, size_t *len) {
  if (!r || !out || !len) return -EINVAL;
  struct buf b = {0};
  buf_str(&b, "");
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->nfam; i++) {
    const struct lgx_family *f = &r->fam[i];
    buf_str(&b, "# HELP ");
    buf_str(&b, f->name);
    buf_str(&b, " ");
    buf_str(&b, f->help);
    buf_str(&b, "\n# TYPE ");
    buf_str(&b, f->name);
    buf_str(&b, f->type == LGX_COUNTER ? " counter\n" : f->type == LGX_HISTOGRAM ? " histogram\n" : " gauge\n");
    for (size_t j = 0; j < f->nseries; j++) {
      char v[64];
      fmt_value(v, sizeof v, f->series[j].value);
      buf_str(&b, f->name);
      buf_str(&b, f->series[j].labels);
      buf_str(&b, " ");
      buf_str(&b, v);
      buf_str(&b, "\n");
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (b.oom) {
    free(b.p);
    return -ENOMEM;
  }
  *out = b.p;
  *len = b.len;
  return 0;
}

/* ------------------------------------------------------------------ HTTP
 * libmicrohttpd is opened when a server starts, not linked: linked, it and the ten
 * libraries it needs (GnuTLS, nettle, gmp, p11-kit...) were loaded by every leakguard
 * command, ~1.5 ms and ~165 page faults at each start (BENCHMARKS.md, "Lazy start"),
 * for the one run in many that serves metrics. Its functions through this table; its
 * header gives their types. */
static struct {
  pthread_once_t once;
  char why[256];
  __typeof__(MHD_start_daemon) *start_daemon;
  __typeof__(MHD_stop_daemon) *stop_daemon;
  __typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
  __typeof__(MHD_add_response_header) *add_response_header;
  __typeof__(MHD_queue_response) *queue_response;
  __typeof__(MHD_destroy_response) *destroy_response;
} mhd = {.once = PTHREAD_ONCE_INIT};

static void mhd_load(void) {
  void *h = dlopen(LG_MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(mhd.why, sizeof mhd.why, "%s", dlerror());
    return;
  }
#define MHD_SYM(name)                                                                                                  \
  if (!(*(void **)&mhd.name = dlsym(h, "MHD_" #name))) {                                                               \
    snprintf(mhd.why, sizeof mhd.why, "%s: no MHD_%s", LG_MHD_SONAME, #name);                                          \
    mhd.start_daemon = NULL;                                                                                           \
    return;                                                                                                            \
  }
  MHD_SYM(stop_daemon)
  MHD_SYM(create_response_from_buffer)
  MHD_SYM(add_response_header)
  MHD_SYM(queue_response)
  MHD_SYM(destroy_response)
  MHD_SYM(start_daemon)
#undef MHD_SYM
}
#define MHD_start_daemon mhd.start_daemon
#define MHD_stop_daemon mhd.stop_daemon
#define MHD_create_response_from_buffer mhd.create_response_from_buffer
#define MHD_add_response_header mhd.add_response_header
#define MHD_queue_response mhd.queue_response
#define MHD_destroy_response mhd.destroy_response

static enum MHD_Result queue_text(struct MHD_Connection *c, unsigned status, const char *text) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
  lgx_registry_t *r = cls;
  (void)version;
  (void)upload_data;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    *upload_data_size = 0; /* discard any body */
    return queue_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
  }
  if (strcmp(url, "/") == 0) return queue_text(c, MHD_HTTP_OK, "leakguard exporter: metrics at /metrics\n");
  if (strcmp(url, "/metrics") != 0) return queue_text(c, MHD_HTTP_NOT_FOUND, "not found; metrics at /metrics\n");

  char *body = NULL;
  size_t len = 0;
  if (lgx_render(r, &body, &len) != 0) return queue_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  (void)con_cls;
  return ret;
}

static void set_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_why(char *why, size_t whylen, const char *fmt, ...) {
  if (!why || !whylen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
}

/* Parses "HOST:PORT", "[V6]:PORT", ":PORT" or "PORT" (the last two: 127.0.0.1). HOST is
 * a numeric IPv4/IPv6 address or "localhost". 0 or -EINVAL with why. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sl, char *why, size_t whylen) {
  if (!addr || !*addr) {
    set_why(why, whylen, "empty metrics address (expected ADDR:PORT, e.g. 127.0.0.1:9464)");
    return -EINVAL;
  }
  char host[128] = "";
  const char *port;
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (!end || end[1] != ':' || (size_t)(end - addr - 1) >= sizeof host) {
      set_why(why, whylen, "bad metrics address '%s' (expected [IPv6]:PORT)", addr);
      return -EINVAL;
    }
    memcpy(host, addr + 1, (size_t)(end - addr - 1));
    host[end - addr - 1] = '\0';
    port = end + 2;
  } else {
    const char *colon = strrchr(addr, ':');
    if (!colon) {
      port = addr;
    } else {
      if (strchr(addr, ':') != colon) {
        set_why(why, whylen, "bad metrics address '%s' (write an IPv6 address as [ADDR]:PORT)", addr);
        return -EINVAL;
      }
      if ((size_t)(colon - addr) >= sizeof host) {
        set_why(why, whylen, "bad metrics address '%s'", addr);
        return -EINVAL;
      }
      memcpy(host, addr, (size_t)(colon - addr));
      host[colon - addr] = '\0';
      port = colon + 1;
    }
  }
  char *end;
  errno = 0;
  long p = *port ? strtol(port, &end, 10) : -1;
  if (p < 0 || p > 65535 || errno || *end || port[0] == '+' || port[0] == '-' || port[0] == ' ') {
    set_why(why, whylen, "bad port in metrics address '%s' (expected 0..65535)", addr);
    return -EINVAL;
  }
  memset(ss, 0, sizeof *ss);
  if (!*host || strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)p);
    *sl = sizeof *in4;
  } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)p);
    *sl = sizeof *in6;
  } else {
    set_why(why, whylen, "bad host in metrics address '%s' (a numeric IPv4/IPv6 address or localhost)", addr);
    return -EINVAL;
  }
  return 0;
}

static void fmt_sockaddr(const struct sockaddr_storage *ss, char *out, size_t n) {
  char h[INET6_ADDRSTRLEN] = "?";
  if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &in6->sin6_addr, h, sizeof h);
    snprintf(out, n, "[%s]:%u", h, ntohs(in6->sin6_port));
  } else {
    const struct sockaddr_in *in4 = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &in4->sin_addr, h, sizeof h);
    snprintf(out, n, "%s:%u", h, ntohs(in4->sin_port));
  }
}

int lgx_serve(lgx_registry_t *r, const char *addr, lgx_server_t **out, char *why, size_t whylen) {
  if (why && whylen) why[0] = '\0';
  if (!r || !out) {
    set_why(why, whylen, "internal error: no registry");
    return -EINVAL;
  }
  struct sockaddr_storage ss;
  socklen_t sl = 0;
  int rc = parse_addr(addr, &ss, &sl, why, whylen);
  if (rc) return rc;
  pthread_once(&mhd.once, mhd_load);
  if (!mhd.start_daemon) {
    set_why(why, whylen, "cannot serve metrics: libmicrohttpd cannot be loaded (%s)", mhd.why);
    return -ENOENT;
  }
  /* descriptors for the connections: the soft limit (1024 by default) raised toward the
   * hard one, for this process (`leakguard run` gives its target the limit it had) */
  struct rlimit nl;
  if (getrlimit(RLIMIT_NOFILE, &nl) == 0 && nl.rlim_cur < LGX_MAX_CONNECTIONS + 256 && nl.rlim_cur < nl.rlim_max) {
    nl.rlim_cur = nl.rlim_max < LGX_MAX_CONNECTIONS + 256 ? nl.rlim_max : LGX_MAX_CONNECTIONS + 256;
    setrlimit(RLIMIT_NOFILE, &nl);
  }

  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    rc = -errno;
    set_why(why, whylen, "cannot create a socket for %s: %s", addr, strerror(errno));
    return rc;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* TIME_WAIT only, not a live listener */
  if (ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    char a[80];
    fmt_sockaddr(&ss, a, sizeof a);
    if (e == EADDRINUSE)
      set_why(why, whylen,
              "cannot serve metrics on %s: the port is already in use (choose another with --metrics ADDR:PORT)", a);
    else if (e == EADDRNOTAVAIL)
      set_why(why, whylen, "cannot serve metrics on %s: no local interface has that address", a);
    else set_why(why, whylen, "cannot serve metrics on %s: %s", a, strerror(e));
    close(fd);
    return -e;
  }
  struct sockaddr_storage bound;
  socklen_t bl = sizeof bound;
  if (getsockname(fd, (struct sockaddr *)&bound, &bl) != 0) bound = ss;

  lgx_server_t *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    set_why(why, whylen, "out of memory");
    return -ENOMEM;
  }
  s->reg = r;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  /* Idle connections must not starve a scrape (issue #31: with a limit of 64, 100 idle
   * ones delayed it 9 s, until their timeout): room for LGX_MAX_CONNECTIONS, served by
   * epoll (MHD_USE_AUTO), each with a small memory pool (a scrape is one short GET), and
   * idle ones dropped after 10 s, with the descriptor limit raised to match (above). */
  s->daemon =
      MHD_start_daemon(flags, 0, NULL, NULL, handle, r, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                       MHD_OPTION_CONNECTION_LIMIT, (unsigned)LGX_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                       (size_t)8192, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
  if (!s->daemon) {
    int e = errno ? errno : EIO;
    close(fd);
    free(s);
    set_why(why, whylen, "cannot start the metrics HTTP server on %s (libmicrohttpd: %s)", addr, strerror(e));
    return -e;
  }
  char a[80];
  fmt_sockaddr(&bound, a, sizeof a);
  set_why(why, whylen, "http://%s/metrics", a);
  *out = s;
  return 0;
}

void lgx_stop(lgx_server_t *s) {
  if (!s) return;
  if (s->daemon) MHD_stop_daemon(s->daemon); /* closes the listening socket too */
  free(s);
}

/* ------------------------------------------------------------------ the catalog */
static const lgx_metric_def_t catalog[LGX_NMETRICS] = {
#define LGX_CATALOG_ROW(id, nm, ty, lb, hp) [LGX_##id] = {.name = nm, .type = LGX_##ty, .labels = lb, .help = hp},
    LGX_CATALOG(LGX_CATALOG_ROW)
#undef LGX_CATALOG_ROW
};

const lgx_metric_def_t *lgx_metric(enum lgx_metric m) { return (unsigned)m < LGX_NMETRICS ? &catalog[m] : NULL; }

int lgx_declare_m(lgx_registry_t *r, enum lgx_metric m) {
  const lgx_metric_def_t *d = lgx_metric(m);
  return d ? lgx_declare(r, d->name, d->type, d->help) : -EINVAL;
}

/* 1 when every key of labels ({"key", "value", ..., NULL}) is one of the catalog's keys
 * in list ("a,b,c"), in that order, each at most once. */
static int keys_in_catalog(const char *list, const char *const *labels) {
  const char *at = list;
  for (size_t i = 0; labels && labels[i]; i += 2) {
    size_t n = strlen(labels[i]);
    const char *p = at;
    for (;;) {
      size_t k = strcspn(p, ",");
      if (!k) return 0;
      if (k == n && !memcmp(p, labels[i], n)) break;
      if (!p[k]) return 0;
      p += k + 1;
    }
    at = p + n + (p[n] == ',');
    if (!labels[i + 1]) return 0;
  }
  return 1;
}

static const lgx_metric_def_t *checked(enum lgx_metric m, const char *const *labels) {
  const lgx_metric_def_t *d = lgx_metric(m);
  return d && keys_in_catalog(d->labels, labels) ? d : NULL;
}

int lgx_set_m(lgx_registry_t *r, enum lgx_metric m, const char *const *labels, double value) {
  const lgx_metric_def_t *d = checked(m, labels);
  return d ? lgx_set(r, d->name, labels, value) : -EINVAL;
}

int lgx_add_m(lgx_registry_t *r, enum lgx_metric m, const char *const *labels, double delta) {
  const lgx_metric_def_t *d = checked(m, labels);
  return d ? lgx_add(r, d->name, labels, delta) : -EINVAL;
}

void lgx_clear_m(lgx_registry_t *r, enum lgx_metric m) {
  const lgx_metric_def_t *d = lgx_metric(m);
  if (d) lgx_clear(r, d->name);
}

int lgx_set_histogram_m(lgx_registry_t *r, enum lgx_metric m, const char *const *labels, const double *upper,
                        const uint64_t *counts, int n, double sum) {
  const lgx_metric_def_t *d = checked(m, labels);
  return d ? lgx_set_histogram(r, d->name, labels, upper, counts, n, sum) : -EINVAL;
}

/* ------------------------------------------------------------------ memory by space, GPU
 * leakguard_live_bytes{space,device} and the field guide's CUDA metrics, verbatim
 * (docs/metrics.md, docs/cuda.md). Live bytes come from the processes still running;
 * counters from every recorded process (a counter must not go down when one ends). */
void lgx_publish_memory(lgx_registry_t *r, const lgm_proc_t *const *procs, int n) {
  lgx_declare_m(r, LGX_LIVE_BYTES);
  int64_t host = 0, mm = 0, gpu[LG_GPU_MAX_DEVICES][3];
  double recreated[LG_GPU_MAX_DEVICES], gc = 0;
  memset(gpu, 0, sizeof gpu);
  memset(recreated, 0, sizeof recreated);
  int ndev = 0, cuda = 0;
  for (int i = 0; i < n; i++) {
    const lgm_proc_t *p = procs[i];
    const lg_region_hdr_t *h = p->hdr;
    if (!h) continue;
    lgm_gpu_t g[LG_GPU_MAX_DEVICES];
    int nd = lgm_gpus(h, g, LG_GPU_MAX_DEVICES);
    if (nd > ndev) ndev = nd;
    lgm_gpu_state_t gs;
    lgm_gpu_state(h, &gs);
    cuda |= gs.flags != 0;
    for (int d = 0; d < nd; d++) recreated[d] += (double)g[d].contexts_recreated;
    gc += (double)gs.gc_without_cleanup;
    if (p->ended) continue;
    host += p->host_bytes;
    mm += p->mmap_bytes;
    for (int d = 0; d < LG_GPU_MAX_DEVICES; d++)
      for (int k = 0; k < 3; k++) gpu[d][k] += p->gpu_space_bytes[d][k];
  }
  /* Spaces without memory are left out (host always), so sum() is the total. */
  lgx_clear_m(r, LGX_LIVE_BYTES);
  const char *lh[] = {"space", "host", NULL};
  lgx_set_m(r, LGX_LIVE_BYTES, lh, (double)host);
  if (mm) {
    const char *l[] = {"space", "mmap", NULL};
    lgx_set_m(r, LGX_LIVE_BYTES, l, (double)mm);
  }
  static const char *const spaces[3] = {"device", "managed", "pinned"};
  for (int d = 0; d < ndev; d++)
    for (int k = 0; k < 3; k++) {
      if (!gpu[d][k]) continue;
      char dev[16];
      snprintf(dev, sizeof dev, "%d", d);
      const char *l[] = {"space", spaces[k], "device", dev, NULL};
      lgx_set_m(r, LGX_LIVE_BYTES, l, (double)gpu[d][k]);
    }
  if (!cuda) return;
  lgx_declare_m(r, LGX_CUDA_ALLOCATED);
  lgx_declare_m(r, LGX_CUDA_CONTEXT_RECREATED);
  lgx_declare_m(r, LGX_GC_WITHOUT_CUDA_CLEANUP);
  for (int d = 0; d < ndev; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "%d", d);
    const char *l[] = {"device", dev, NULL};
    lgx_set_m(r, LGX_CUDA_ALLOCATED, l, (double)gpu[d][0]);
    lgx_set_m(r, LGX_CUDA_CONTEXT_RECREATED, l, recreated[d]);
  }
  lgx_set_m(r, LGX_GC_WITHOUT_CUDA_CLEANUP, NULL, gc);
}
