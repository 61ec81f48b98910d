# SPDX-License-Identifier: MIT
# The CPython interpreters the `leakguard` extension is built for (issue #12): every
# CPython 3.9 to 3.13 found at configure time whose headers are installed, one module
# per ABI tag (EXT_SUFFIX), all in one directory.
#
# Candidates, first wins for an ABI tag:
#   1. LG_PYTHON_INTERPRETERS (a list of executables, optional),
#   2. /usr/bin/python3 (Debian's 3.11, the one python3-torch is for),
#   3. pyenv's (`pyenv versions --bare`, `pyenv prefix V`), newest patch release first,
#   4. /usr/bin/python3.X and /usr/local/bin/python3.X.
# Results, as INTERNAL cache entries so that tests/ (configured first) and
# src/python/python.cmake see the same ones:
#   LG_PY_MINORS                    e.g. "11;9;10;12;13" (3.X found with headers)
#   LG_PY_<minor>_EXE / _INCLUDE / _SUFFIX / _VERSION
#   LG_PY_DEFAULT_SUFFIX            the ABI tag of /usr/bin/python3 (dist-packages install)
# Runs once per configure.
get_property(_lg_py_done GLOBAL PROPERTY LG_PY_DISCOVERED)
if(_lg_py_done)
  return()
endif()
set_property(GLOBAL PROPERTY LG_PY_DISCOVERED 1)

set(LG_PYTHON_INTERPRETERS "" CACHE STRING
    "Extra CPython executables to build the leakguard module for (list)")

set(_lg_cands ${LG_PYTHON_INTERPRETERS})
if(EXISTS /usr/bin/python3)
  list(APPEND _lg_cands /usr/bin/python3)
endif()
find_program(LG_PYENV pyenv HINTS $ENV{PYENV_ROOT}/bin $ENV{HOME}/.pyenv/bin)
if(LG_PYENV)
  execute_process(COMMAND ${LG_PYENV} versions --bare --skip-aliases
                  OUTPUT_VARIABLE _lg_vs ERROR_QUIET RESULT_VARIABLE _lg_rc)
  if(_lg_rc EQUAL 0)
    string(REGEX MATCHALL "3\\.[0-9]+\\.[0-9]+" _lg_vs "${_lg_vs}")
    list(SORT _lg_vs COMPARE NATURAL ORDER DESCENDING)
    foreach(_v IN LISTS _lg_vs)
      execute_process(COMMAND ${LG_PYENV} prefix ${_v} OUTPUT_VARIABLE _p
                      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _lg_rc)
      string(REGEX MATCH "^3\\.[0-9]+" _mm "${_v}")
      if(_lg_rc EQUAL 0 AND EXISTS ${_p}/bin/python${_mm})
        list(APPEND _lg_cands ${_p}/bin/python${_mm})
      endif()
    endforeach()
  endif()
endif()
foreach(_m 9 10 11 12 13)
  foreach(_d /usr/bin /usr/local/bin)
    if(EXISTS ${_d}/python3.${_m})
      list(APPEND _lg_cands ${_d}/python3.${_m})
    endif()
  endforeach()
endforeach()

set(_lg_minors "")
set(_lg_suffixes "")
set(LG_PY_DEFAULT_SUFFIX "" CACHE INTERNAL "")
foreach(_exe IN LISTS _lg_cands)
  execute_process(
    COMMAND ${_exe} -c "import sys,sysconfig,os;i=sysconfig.get_paths()['include'];print('%d;%d;%s;%s;%d;%s;%d'%(sys.version_info[0],sys.version_info[1],sysconfig.get_config_var('EXT_SUFFIX') or '',i,os.path.exists(os.path.join(i,'Python.h')),sys.version.split()[0],bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))"
    OUTPUT_VARIABLE _out OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _lg_rc)
  if(NOT _lg_rc EQUAL 0)
    continue()
  endif()
  list(LENGTH _out _n)
  if(NOT _n EQUAL 7)
    continue()
  endif()
  list(GET _out 0 _maj)
  list(GET _out 1 _min)
  list(GET _out 2 _suf)
  list(GET _out 3 _inc)
  list(GET _out 4 _hdr)
  list(GET _out 5 _ver)
  list(GET _out 6 _ft)
  if(_exe STREQUAL "/usr/bin/python3")
    set(LG_PY_DEFAULT_SUFFIX "${_suf}" CACHE INTERNAL "")
  endif()
  if(NOT _maj EQUAL 3 OR _min LESS 9 OR _min GREATER 13 OR _ft OR NOT _suf)
    continue() # outside 3.9-3.13, or free-threaded (docs/python.md)
  endif()
  if(_suf IN_LIST _lg_suffixes OR _min IN_LIST _lg_minors)
    continue()
  endif()
  if(NOT _hdr)
    message(STATUS "leakguard: ${_exe} (CPython ${_ver}) has no headers: no leakguard module for it")
    continue()
  endif()
  list(APPEND _lg_suffixes ${_suf})
  list(APPEND _lg_minors ${_min})
  set(LG_PY_${_min}_EXE ${_exe} CACHE INTERNAL "")
  set(LG_PY_${_min}_INCLUDE ${_inc} CACHE INTERNAL "")
  set(LG_PY_${_min}_SUFFIX ${_suf} CACHE INTERNAL "")
  set(LG_PY_${_min}_VERSION ${_ver} CACHE INTERNAL "")
  message(STATUS "leakguard: CPython ${_ver} (${_exe}): module leakguard${_suf}")
endforeach()
set(LG_PY_MINORS "${_lg_minors}" CACHE INTERNAL "")
