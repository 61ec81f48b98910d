/* SPDX-License-Identifier: MIT */
/*
 * test_pylayout.c - src/capture/pylayout.h against the CPython headers it was written
 * from. Compiled once per interpreter found at configure time (tests/python.cmake),
 * with that interpreter's headers and Py_BUILD_CORE (the frame structs are internal):
 * every offset, field size and bit of the entry for this minor version must equal what
 * the compiler computes from the real declarations.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif

#include "capture/pylayout.h"

static int fails, checks;

#define CHECK(what, got, want)                                                            \
  do {                                                                                    \
    long long g_ = (long long)(got), w_ = (long long)(want);                              \
    checks++;                                                                             \
    if (g_ != w_) {                                                                       \
      fails++;                                                                            \
      printf("  FAIL %-44s pylayout.h %lld, headers %lld\n", what, g_, w_);               \
    }                                                                                     \
  } while (0)
#define FSIZE(type, field) sizeof(((type *)0)->field)

/* The state word of a PyASCIIObject with one bit field set. */
static unsigned state_with(int which) {
  PyASCIIObject a;
  memset(&a, 0, sizeof a);
  if (which == 0) a.state.kind = 7;
  if (which == 1) a.state.compact = 1;
  if (which == 2) a.state.ascii = 1;
#if PY_VERSION_HEX < 0x030C0000
  if (which == 3) a.state.ready = 1;
#endif
  unsigned st;
  memcpy(&st, (char *)&a + offsetof(PyASCIIObject, state), sizeof st);
  return st;
}

int main(void) {
  const lgi_pylayout_t *l = lgi_pylayout_find(PY_MAJOR_VERSION, PY_MINOR_VERSION);
  printf("CPython %s headers against pylayout.h\n", PY_VERSION);
  if (!l) {
    printf("  FAIL no pylayout.h entry for %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    return 1;
  }
  CHECK("PyObject.ob_type", LGI_PY_OB_TYPE, offsetof(PyObject, ob_type));
  CHECK("PyVarObject.ob_size", LGI_PY_OB_SIZE, offsetof(PyVarObject, ob_size));
  CHECK("PyBytesObject.ob_sval", LGI_PY_BYTES_SVAL, offsetof(PyBytesObject, ob_sval));
  CHECK("PyCodeObject.co_filename", l->co_filename, offsetof(PyCodeObject, co_filename));
  CHECK("PyCodeObject.co_name", l->co_name, offsetof(PyCodeObject, co_name));
  CHECK("PyCodeObject.co_firstlineno", l->co_firstlineno, offsetof(PyCodeObject, co_firstlineno));
  CHECK("sizeof co_firstlineno", sizeof(int), FSIZE(PyCodeObject, co_firstlineno));
  CHECK("PyASCIIObject.length", LGI_PY_STR_LENGTH, offsetof(PyASCIIObject, length));
  CHECK("PyASCIIObject.state", l->str_state, offsetof(PyASCIIObject, state));
  CHECK("sizeof(PyASCIIObject)", l->str_ascii_data, sizeof(PyASCIIObject));
  CHECK("sizeof(PyCompactUnicodeObject)", l->str_compact_data, sizeof(PyCompactUnicodeObject));
  CHECK("state.kind bits", LGI_PY_STR_KIND(state_with(0)), 7);
  CHECK("state.kind bits only", state_with(0) & ~(7u << 2), 0);
  CHECK("state.compact bit", LGI_PY_STR_COMPACT, state_with(1));
  CHECK("state.ascii bit", LGI_PY_STR_ASCII, state_with(2));
  CHECK("state.ready bit", l->str_ready, PY_VERSION_HEX < 0x030C0000 ? state_with(3) : 0);
#if PY_VERSION_HEX < 0x030B0000
  CHECK("model", l->model, LGI_PYF_OBJECT);
  CHECK("PyThreadState.frame", l->ts_frame, offsetof(PyThreadState, frame));
  CHECK("no cframe", l->ts_cframe, -1);
  CHECK("PyFrameObject.f_back", l->f_back, offsetof(PyFrameObject, f_back));
  CHECK("PyFrameObject.f_code", l->f_code, offsetof(PyFrameObject, f_code));
  CHECK("PyFrameObject.f_lasti", l->f_instr, offsetof(PyFrameObject, f_lasti));
  CHECK("sizeof f_lasti", sizeof(int), FSIZE(PyFrameObject, f_lasti));
  CHECK("PyCodeObject.co_code", l->co_code, offsetof(PyCodeObject, co_code));
  /* f_lasti units: PyFrame_GetLineNumber passes f_lasti (3.9) / f_lasti * 2 (3.10) */
  CHECK("bytes per f_lasti", l->lasti_bytes, PY_VERSION_HEX < 0x030A0000 ? 1 : sizeof(_Py_CODEUNIT));
  CHECK("no qualname", l->co_qualname, -1);
#else
  CHECK("model", l->model, LGI_PYF_INTERP);
  CHECK("_PyInterpreterFrame.previous", l->f_back, offsetof(_PyInterpreterFrame, previous));
  CHECK("_PyInterpreterFrame.owner", l->f_owner, offsetof(_PyInterpreterFrame, owner));
  CHECK("sizeof owner", 1, FSIZE(_PyInterpreterFrame, owner));
  CHECK("FRAME_OWNED_BY_GENERATOR", l->owner_generator, FRAME_OWNED_BY_GENERATOR);
  CHECK("PyCodeObject.co_qualname", l->co_qualname, offsetof(PyCodeObject, co_qualname));
  CHECK("PyCodeObject._co_firsttraceable", l->co_firsttraceable,
        offsetof(PyCodeObject, _co_firsttraceable));
  CHECK("sizeof _co_firsttraceable", sizeof(int), FSIZE(PyCodeObject, _co_firsttraceable));
  CHECK("PyCodeObject.co_code_adaptive", l->co_code, offsetof(PyCodeObject, co_code_adaptive));
  CHECK("sizeof(_Py_CODEUNIT)", 2, sizeof(_Py_CODEUNIT));
#if PY_VERSION_HEX < 0x030D0000
  CHECK("PyThreadState.cframe", l->ts_cframe, offsetof(PyThreadState, cframe));
  CHECK("_PyCFrame.current_frame", l->ts_frame, offsetof(_PyCFrame, current_frame));
  CHECK("_PyInterpreterFrame.f_code", l->f_code, offsetof(_PyInterpreterFrame, f_code));
  CHECK("_PyInterpreterFrame.prev_instr", l->f_instr, offsetof(_PyInterpreterFrame, prev_instr));
#else
  CHECK("no cframe", l->ts_cframe, -1);
  CHECK("PyThreadState.current_frame", l->ts_frame, offsetof(PyThreadState, current_frame));
  CHECK("_PyInterpreterFrame.f_executable", l->f_code, offsetof(_PyInterpreterFrame, f_executable));
  CHECK("_PyInterpreterFrame.instr_ptr", l->f_instr, offsetof(_PyInterpreterFrame, instr_ptr));
#endif
#if PY_VERSION_HEX >= 0x030C0000
  CHECK("FRAME_OWNED_BY_CSTACK", l->owner_cstack, FRAME_OWNED_BY_CSTACK);
#else
  CHECK("no FRAME_OWNED_BY_CSTACK", l->owner_cstack, -1);
#endif
#endif
  printf("%s: %d checks, %d failed\n", fails ? "FAILED" : "PASSED", checks, fails);
  return fails ? 1 : 0;
}
