/* SPDX-License-Identifier: MIT */
/*
 * api.c - what the module reads from the recorder and the collector: the recorder's
 * entry points (lgpy, lgpy.h), the module's step count and the suspects file. Its own file so that the module (leakguardmodule.c) and the
 * explanation (explain.c, blocks.c, cuda.c) both depend on it, not on each other.
 *
 * The module never links libleakguard: the functions are looked up with
 * dlsym(RTLD_DEFAULT, ...) at import; a missing recorder leaves them NULL. After
 * `leakguard attach`, leakguard._attach() looks them up again in the agent.
 */
#include "python/lgpy.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

lgpy_api_t lgpy;
uint64_t lgpy_steps;

void lgpy_resolve_api_in(void *h) {
  memset(&lgpy, 0, sizeof lgpy);
  lgpy.step = (uint64_t(*)(void))dlsym(h, "leakguard_step");
  lgpy.recording = (int (*)(void))dlsym(h, "lg_recording");
  lgpy.site_of = (int (*)(const void *, uint32_t *))dlsym(h, "lg_site_of");
  lgpy.tag_push = (int (*)(const char *))dlsym(h, "lg_tag_push");
  lgpy.tag_pop = (void (*)(void))dlsym(h, "lg_tag_pop");
  lgpy.tag_stats = (int (*)(int, lg_tag_stats_t *))dlsym(h, "lg_tag_stats");
  lgpy.pause = (int (*)(int))dlsym(h, "lg_pause_recording");
  lgpy.exiting = (void (*)(void))dlsym(h, "lg_exiting");
  lgpy.held = (void (*)(int))dlsym(h, "lg_program_held");
  lgpy.block = (int (*)(const void *, uint32_t *, uint64_t *))dlsym(h, "lg_agent_block");
  lgpy.startup_largest = (int (*)(int))dlsym(h, "lg_python_startup_largest");
  lgpy.active = lgpy.step && lgpy.recording && lgpy.recording();
  const char *pm = getenv("PYTHONMALLOC");
  lgpy.pymalloc_is_malloc = pm && strcmp(pm, "malloc") == 0;
  /* Under `leakguard run`, pymalloc stays and the recorder wraps it: first thing at
   * the import, under the GIL (capture/pymalloc.c). Not the agent's:
   * it wraps pymalloc itself at attach. */
  int (*wrap)(void) = (int (*)(void))dlsym(h, "lg_python_wrap");
  lgpy.pyobj = (int (*)(const void *, uint32_t *, uint64_t *))dlsym(h, "lg_python_block");
  lgpy.pymalloc_wrapped = lgpy.active && !lgpy.block && wrap && lgpy.pyobj && wrap() == 1;
}

void lgpy_resolve_api(void) { lgpy_resolve_api_in(RTLD_DEFAULT); }

static char dir_given[4096];

const char *lgpy_dir(void) {
  if (dir_given[0]) return dir_given;
  const char *d = getenv(LG_ENV_DIR);
  return d && *d ? d : NULL;
}

void lgpy_set_dir(const char *dir) { snprintf(dir_given, sizeof dir_given, "%s", dir ? dir : ""); }

/* ------------------------------------------------------------------ suspects
 * The growing sites the collector wrote for this process (core/region.h's
 * LG_FILE_SUSPECTS), read by leakguard.suspects() and by explain(). */
PyObject *lgpy_read_suspects(void) { return lgpy_read_suspects_at(NULL); }

PyObject *lgpy_read_suspects_at(double *t) {
  if (t) *t = -1;
  const char *dir = lgpy_dir();
  if (!dir) return PyList_New(0);
  char path[4096];
  snprintf(path, sizeof path, "%s/" LG_FILE_SUSPECTS, dir, (int)getpid());
  FILE *f = fopen(path, "rb");
  if (!f) return PyList_New(0);
  size_t cap = 1 << 16, len = 0;
  char *buf = PyMem_RawMalloc(cap);
  if (!buf) {
    fclose(f);
    return PyErr_NoMemory();
  }
  for (;;) {
    if (len == cap) {
      char *nb = PyMem_RawRealloc(buf, cap * 2);
      if (!nb) {
        PyMem_RawFree(buf);
        fclose(f);
        return PyErr_NoMemory();
      }
      buf = nb;
      cap *= 2;
    }
    size_t k = fread(buf + len, 1, cap - len, f);
    if (k == 0) break;
    len += k;
  }
  fclose(f);
  PyObject *text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace");
  PyMem_RawFree(buf);
  if (!text) return NULL;
  PyObject *json = PyImport_ImportModule("json");
  PyObject *doc = json ? PyObject_CallMethod(json, "loads", "O", text) : NULL;
  Py_XDECREF(json);
  Py_DECREF(text);
  if (!doc) {
    /* a half-written file cannot happen (tmp + rename); a malformed one is not ours */
    PyErr_Clear();
    return PyList_New(0);
  }
  PyObject *list = PyDict_Check(doc) ? PyDict_GetItemString(doc, "suspects") : NULL;
  PyObject *when = PyDict_Check(doc) ? PyDict_GetItemString(doc, "t") : NULL;
  if (t && when && PyFloat_Check(when)) *t = PyFloat_AsDouble(when);
  else if (t && when && PyLong_Check(when)) *t = (double)PyLong_AsLong(when);
  PyObject *r = (list && PyList_Check(list)) ? Py_NewRef(list) : PyList_New(0);
  Py_DECREF(doc);
  return r;
}
