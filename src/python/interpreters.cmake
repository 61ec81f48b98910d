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
#   LG_PY_<minor>_SITE              where `cmake --install` puts its module for `import
#                                   leakguard` outside `leakguard run` (below), or empty
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

# Site directories, asked of each interpreter (src/python/sitedir.py) for
# CMAKE_INSTALL_PREFIX and kept relative to it (so `cmake --install --prefix P` and
# DESTDIR move them along): Debian's /usr/bin/python3 with prefix /usr/local ->
# lib/python3.11/dist-packages, with /usr -> lib/python3/dist-packages, with another
# prefix -> lib/python3.11/site-packages under it (then on PYTHONPATH by hand). Another
# interpreter gets its module in its site directory when that lies under the prefix
# (a pyenv Python installed with the prefix it was built for); with
# LG_PYTHON_INSTALL_OWN_SITE also when it does not: into its own site directory, absolute
# (pyenv's ~/.pyenv/versions/3.X.Y/lib/python3.X/site-packages), whatever the prefix.
# LG_PYTHON_INSTALL_DIR overrides /usr/bin/python3's.
option(LG_PYTHON_INSTALL_OWN_SITE
  "Also install each other CPython's module into that interpreter's own site directory (outside the prefix)" OFF)
foreach(_m IN LISTS LG_PY_MINORS)
  execute_process(COMMAND ${LG_PY_${_m}_EXE} ${CMAKE_CURRENT_LIST_DIR}/sitedir.py ${CMAKE_INSTALL_PREFIX}
                  OUTPUT_VARIABLE _out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _lg_rc)
  string(REPLACE "\n" ";" _out "${_out}")
  list(LENGTH _out _n)
  set(LG_PY_${_m}_SITE "")
  if(_lg_rc EQUAL 0 AND _n EQUAL 3)
    list(GET _out 0 _under)
    list(GET _out 1 _pp)
    list(GET _out 2 _own)
    if(NOT _under STREQUAL "-")
      set(LG_PY_${_m}_SITE ${_under})
    elseif(LG_PY_${_m}_SUFFIX STREQUAL LG_PY_DEFAULT_SUFFIX)
      set(LG_PY_${_m}_SITE ${_pp})
    elseif(LG_PYTHON_INSTALL_OWN_SITE)
      set(LG_PY_${_m}_SITE ${_own})
    endif()
  else()
    message(WARNING "leakguard: ${LG_PY_${_m}_EXE} could not say where its packages go")
  endif()
  if(LG_PY_${_m}_SUFFIX STREQUAL LG_PY_DEFAULT_SUFFIX AND LG_PYTHON_INSTALL_DIR)
    set(LG_PY_${_m}_SITE ${LG_PYTHON_INSTALL_DIR})
  endif()
  set(LG_PY_${_m}_SITE "${LG_PY_${_m}_SITE}" CACHE INTERNAL "")
  if(LG_PY_${_m}_SITE)
    message(STATUS "leakguard: CPython 3.${_m}'s module installs into ${LG_PY_${_m}_SITE}")
  endif()
endforeach()
