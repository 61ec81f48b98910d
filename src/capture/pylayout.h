/* SPDX-License-Identifier: MIT */
/*
 * pylayout.h - where CPython 3.9 to 3.13 keep what python.c reads (x86-64 / any LP64,
 * default build, not free-threaded): one entry per minor version, chosen at run time
 * from the loaded interpreter's version, so one libleakguard.so serves all of them.
 *
 * Each number is an offsetof() in that version's own headers (Include/cpython/...,
 * Include/internal/... with Py_BUILD_CORE); the header and field are named beside it.
 * tests/python/test_pylayout.c compiles against each interpreter's headers found at
 * configure time and checks every entry with offsetof/sizeof (ctest python_3.X_layout).
 *
 * Frames:
 *  - 3.9, 3.10 (LGI_PYF_OBJECT): PyThreadState.frame -> PyFrameObject, linked by
 *    f_back; the instruction is f_lasti (an int: a byte offset in 3.9, an index of
 *    2-byte code units in 3.10; -1 before the first instruction).
 *  - 3.11, 3.12 (LGI_PYF_INTERP): PyThreadState.cframe -> _PyCFrame.current_frame ->
 *    _PyInterpreterFrame, linked by `previous`; the instruction is prev_instr (a
 *    _Py_CODEUNIT pointer into the code object's co_code_adaptive).
 *  - 3.13 (LGI_PYF_INTERP): no _PyCFrame: PyThreadState.current_frame; f_code became
 *    f_executable, prev_instr became instr_ptr (the instruction being executed).
 *  In both INTERP versions the code-unit index is ptr - co_code_adaptive, exactly as
 *  _PyInterpreterFrame_LASTI() computes it; a frame whose index is below
 *  co->_co_firsttraceable and that is not a generator's is "incomplete" (not started:
 *  _PyFrame_IsIncomplete) and skipped, and so are 3.12+'s C-stack entry frames
 *  (owner FRAME_OWNED_BY_CSTACK, the interpreter_trampoline shim).
 * Lines: PyCode_Addr2Line(code, byte offset), exported by every version and pure (it
 *  only decodes the code object's immutable table: co_lnotab in 3.9, the 3.10
 *  co_linetable format, the 3.11+ location table), so python.c does not re-implement
 *  three decoders. Byte offset = f_lasti (3.9), f_lasti * 2 (3.10), index * 2 (3.11+).
 * Names: co_filename; co_qualname from 3.11, co_name before (3.9/3.10 code objects have
 *  no qualified name: "get", not "Cache.get").
 * Strings (PyASCIIObject, Include/cpython/unicodeobject.h): state bit field at 32
 *  (kind bits 2-4, compact bit 5, ascii bit 6, ready bit 7 up to 3.11); the text of
 *  a compact ASCII string follows the PyASCIIObject, that of another compact string
 *  the PyCompactUnicodeObject (3.12 dropped wstr: both shrank by 8 / 16 bytes).
 */
#ifndef LG_CAPTURE_PYLAYOUT_H
#define LG_CAPTURE_PYLAYOUT_H

#include <stdint.h>

enum { LGI_PYF_OBJECT = 1, LGI_PYF_INTERP = 2 };

typedef struct lgi_pylayout {
  uint8_t minor;          /* 3.minor */
  uint8_t model;          /* LGI_PYF_OBJECT or LGI_PYF_INTERP */
  uint8_t lasti_bytes;    /* OBJECT: bytes per f_lasti unit */
  int8_t owner_cstack;    /* INTERP: FRAME_OWNED_BY_CSTACK, -1 when none */
  int8_t owner_generator; /* INTERP: FRAME_OWNED_BY_GENERATOR */
  int16_t ts_cframe;      /* PyThreadState.cframe, -1 when none */
  uint16_t ts_frame;      /* the innermost frame: in the thread state (or in the _PyCFrame) */
  uint16_t f_back;        /* the caller's frame */
  uint16_t f_code;        /* the code object */
  uint16_t f_instr;       /* OBJECT: int f_lasti; INTERP: _Py_CODEUNIT * */
  int16_t f_owner;        /* INTERP: char owner; -1 when none */
  uint16_t co_filename, co_name;
  int16_t co_qualname; /* -1 when none */
  uint16_t co_firstlineno;
  int16_t co_firsttraceable; /* INTERP: int _co_firsttraceable */
  uint16_t co_code;          /* OBJECT: PyCodeObject.co_code (bytes); INTERP: co_code_adaptive */
  uint16_t str_state;        /* PyASCIIObject.state */
  uint16_t str_ascii_data;   /* sizeof(PyASCIIObject) */
  uint16_t str_compact_data; /* sizeof(PyCompactUnicodeObject) */
  uint32_t str_ready;        /* PyASCIIObject.state.ready bit (up to 3.11), 0 when none */
} lgi_pylayout_t;

/* Same in every version: PyObject.ob_type, PyVarObject.ob_size (Include/object.h),
 * PyBytesObject.ob_sval (Include/cpython/bytesobject.h), state bits. */
#define LGI_PY_OB_TYPE 8
#define LGI_PY_OB_SIZE 16
#define LGI_PY_BYTES_SVAL 32
#define LGI_PY_STR_LENGTH 16 /* PyASCIIObject.length */
#define LGI_PY_STR_KIND(st) (((st) >> 2) & 7u)
#define LGI_PY_STR_COMPACT 0x20u
#define LGI_PY_STR_ASCII 0x40u

static const lgi_pylayout_t lgi_pylayouts[] = {
    {
        .minor = 9, /* checked against 3.9.18 */
        .model = LGI_PYF_OBJECT,
        .lasti_bytes = 1, /* 3.9 f_lasti: byte offset (PyFrame_GetLineNumber) */
        .owner_cstack = -1,
        .owner_generator = -1,
        .ts_cframe = -1,
        .ts_frame = 24, /* cpython/pystate.h: PyThreadState.frame */
        .f_back = 24,   /* cpython/frameobject.h: PyFrameObject.f_back */
        .f_code = 32,   /*   .f_code */
        .f_instr = 104, /*   int f_lasti */
        .f_owner = -1,
        .co_filename = 104, /* cpython/code.h: PyCodeObject.co_filename */
        .co_name = 112,     /*   .co_name */
        .co_qualname = -1,
        .co_firstlineno = 40, /*   int co_firstlineno */
        .co_firsttraceable = -1,
        .co_code = 48,          /*   PyObject *co_code (bytes) */
        .str_state = 32,        /* cpython/unicodeobject.h: PyASCIIObject.state */
        .str_ascii_data = 48,   /*   sizeof(PyASCIIObject) */
        .str_compact_data = 72, /*   sizeof(PyCompactUnicodeObject) */
        .str_ready = 0x80,      /*   state.ready */
    },
    {
        .minor = 10, /* checked against 3.10.13 */
        .model = LGI_PYF_OBJECT,
        .lasti_bytes = 2, /* 3.10 f_lasti: code units (PyFrame_GetLineNumber: *2) */
        .owner_cstack = -1,
        .owner_generator = -1,
        .ts_cframe = -1,
        .ts_frame = 24, /* cpython/pystate.h: PyThreadState.frame */
        .f_back = 24,   /* cpython/frameobject.h: PyFrameObject.f_back */
        .f_code = 32,   /*   .f_code */
        .f_instr = 96,  /*   int f_lasti */
        .f_owner = -1,
        .co_filename = 104, /* cpython/code.h: PyCodeObject.co_filename */
        .co_name = 112,     /*   .co_name */
        .co_qualname = -1,
        .co_firstlineno = 40, /*   int co_firstlineno */
        .co_firsttraceable = -1,
        .co_code = 48,          /*   PyObject *co_code (bytes) */
        .str_state = 32,        /* cpython/unicodeobject.h: PyASCIIObject.state */
        .str_ascii_data = 48,   /*   sizeof(PyASCIIObject) */
        .str_compact_data = 72, /*   sizeof(PyCompactUnicodeObject) */
        .str_ready = 0x80,      /*   state.ready */
    },
    {
        .minor = 11, /* checked against 3.11.2 (Debian) and 3.11.7 */
        .model = LGI_PYF_INTERP,
        .lasti_bytes = 2,
        .owner_cstack = -1,       /* 3.11 has no C-stack entry frames in the chain */
        .owner_generator = 1,     /* internal/pycore_frame.h: FRAME_OWNED_BY_GENERATOR */
        .ts_cframe = 56,          /* cpython/pystate.h: PyThreadState.cframe */
        .ts_frame = 8,            /*   _PyCFrame.current_frame (after uint8_t use_tracing) */
        .f_back = 48,             /* internal/pycore_frame.h: _PyInterpreterFrame.previous */
        .f_code = 32,             /*   .f_code */
        .f_instr = 56,            /*   _Py_CODEUNIT *prev_instr */
        .f_owner = 69,            /*   char owner */
        .co_filename = 112,       /* cpython/code.h: PyCodeObject.co_filename */
        .co_name = 120,           /*   .co_name */
        .co_qualname = 128,       /*   .co_qualname */
        .co_firstlineno = 72,     /*   int co_firstlineno */
        .co_firsttraceable = 168, /*  int _co_firsttraceable */
        .co_code = 184,           /*   char co_code_adaptive[] */
        .str_state = 32,          /* cpython/unicodeobject.h: PyASCIIObject.state */
        .str_ascii_data = 48,     /*   sizeof(PyASCIIObject) */
        .str_compact_data = 72,   /*   sizeof(PyCompactUnicodeObject) */
        .str_ready = 0x80,        /*   state.ready */
    },
    {
        .minor = 12, /* checked against 3.12.1 */
        .model = LGI_PYF_INTERP,
        .lasti_bytes = 2,
        .owner_cstack = 3,        /* internal/pycore_frame.h: FRAME_OWNED_BY_CSTACK */
        .owner_generator = 1,     /*   FRAME_OWNED_BY_GENERATOR */
        .ts_cframe = 56,          /* cpython/pystate.h: PyThreadState.cframe */
        .ts_frame = 0,            /*   _PyCFrame.current_frame (use_tracing is gone) */
        .f_back = 8,              /* internal/pycore_frame.h: _PyInterpreterFrame.previous */
        .f_code = 0,              /*   .f_code (moved first) */
        .f_instr = 56,            /*   _Py_CODEUNIT *prev_instr */
        .f_owner = 70,            /*   char owner */
        .co_filename = 112,       /* cpython/code.h: PyCodeObject.co_filename */
        .co_name = 120,           /*   .co_name */
        .co_qualname = 128,       /*   .co_qualname */
        .co_firstlineno = 68,     /*   int co_firstlineno */
        .co_firsttraceable = 176, /*  int _co_firsttraceable */
        .co_code = 192,           /*   char co_code_adaptive[] */
        .str_state = 32,          /* cpython/unicodeobject.h: PyASCIIObject.state */
        .str_ascii_data = 40,     /*   sizeof(PyASCIIObject) (no wstr) */
        .str_compact_data = 56,   /*   sizeof(PyCompactUnicodeObject) */
        .str_ready = 0,           /*   no ready bit: strings are always ready */
    },
    {
        .minor = 13, /* checked against 3.13.0 */
        .model = LGI_PYF_INTERP,
        .lasti_bytes = 2,
        .owner_cstack = 3,        /* internal/pycore_frame.h: FRAME_OWNED_BY_CSTACK */
        .owner_generator = 1,     /*   FRAME_OWNED_BY_GENERATOR */
        .ts_cframe = -1,          /* _PyCFrame is gone */
        .ts_frame = 72,           /* cpython/pystate.h: PyThreadState.current_frame */
        .f_back = 8,              /* internal/pycore_frame.h: _PyInterpreterFrame.previous */
        .f_code = 0,              /*   PyObject *f_executable */
        .f_instr = 56,            /*   _Py_CODEUNIT *instr_ptr */
        .f_owner = 70,            /*   char owner */
        .co_filename = 112,       /* cpython/code.h: PyCodeObject.co_filename */
        .co_name = 120,           /*   .co_name */
        .co_qualname = 128,       /*   .co_qualname */
        .co_firstlineno = 68,     /*   int co_firstlineno */
        .co_firsttraceable = 184, /*  int _co_firsttraceable */
        .co_code = 200,           /*   char co_code_adaptive[] */
        .str_state = 32,          /* cpython/unicodeobject.h: PyASCIIObject.state */
        .str_ascii_data = 40,     /*   sizeof(PyASCIIObject) */
        .str_compact_data = 56,   /*   sizeof(PyCompactUnicodeObject) */
        .str_ready = 0,           /*   no ready bit */
    },
};

/* The entry for 3.minor, NULL when there is none. */
static inline const lgi_pylayout_t *lgi_pylayout_find(unsigned major, unsigned minor) {
  if (major != 3) return 0;
  for (unsigned i = 0; i < sizeof lgi_pylayouts / sizeof lgi_pylayouts[0]; i++)
    if (lgi_pylayouts[i].minor == minor) return &lgi_pylayouts[i];
  return 0;
}

#endif
