# SPDX-License-Identifier: MIT
# `import leakguard`: the CPython extension (src/python) and the sitecustomize hook
# (python/sitecustomize.py) that `leakguard run` puts first on PYTHONPATH so that
# scripts which never import leakguard still get holders explained at exit.
# Built once per CPython 3.9-3.13 found at configure time (src/python/interpreters.cmake),
# each module under its ABI-tagged name (leakguard.cpython-39-x86_64-linux-gnu.so, ...)
# in ONE directory, ${CMAKE_BINARY_DIR}/python, so one PYTHONPATH entry serves every
# version; installed into ${libdir}/leakguard/python (which `leakguard run` puts first on
# PYTHONPATH: there the copy of the same install wins) and, so that `import leakguard`
# works outside `leakguard run` (leakguard.isolated in a server), into each interpreter's
# site directory under the prefix (LG_PY_<minor>_SITE, src/python/interpreters.cmake).
option(LG_PYTHON "Build the leakguard Python extension" ON)
if(NOT LG_PYTHON)
  return()
endif()
include(${CMAKE_CURRENT_LIST_DIR}/interpreters.cmake)
if(NOT LG_PY_MINORS)
  message(WARNING "leakguard: no CPython 3.9-3.13 with headers found (apt install python3-dev): "
                  "the leakguard Python module is not built")
  return()
endif()

set(LG_PYTHON_DIR ${CMAKE_BINARY_DIR}/python)
set(LG_PYTHON_SOURCES
  ${CMAKE_SOURCE_DIR}/src/python/leakguardmodule.c
  ${CMAKE_SOURCE_DIR}/src/python/api.c
  ${CMAKE_SOURCE_DIR}/src/python/explain.c
  ${CMAKE_SOURCE_DIR}/src/python/holders.c
  ${CMAKE_SOURCE_DIR}/src/python/blocks.c
  ${CMAKE_SOURCE_DIR}/src/python/graph.c
  ${CMAKE_SOURCE_DIR}/src/python/naming.c
  ${CMAKE_SOURCE_DIR}/src/python/torch.c
  ${CMAKE_SOURCE_DIR}/src/python/cuda.c
  ${CMAKE_SOURCE_DIR}/src/python/watch.c
  ${CMAKE_SOURCE_DIR}/src/python/isolate.c
  ${CMAKE_BINARY_DIR}/gen/isolate_py.c
  $<TARGET_OBJECTS:lg_isolate_obj>)
# leakguard.isolated's Python half, compiled in (run at import, src/python/isolate.c).
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/gen/isolate_py.c
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/gen
  COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_SOURCE_DIR}/src/python/isolate.py
          -DOUT=${CMAKE_BINARY_DIR}/gen/isolate_py.c -DNAME=lgpy_isolate_py -P ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
  DEPENDS ${CMAKE_SOURCE_DIR}/src/python/isolate.py ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
  COMMENT "Embedding src/python/isolate.py")

add_custom_command(
  OUTPUT ${LG_PYTHON_DIR}/sitecustomize.py
  COMMAND ${CMAKE_COMMAND} -E make_directory ${LG_PYTHON_DIR}
  COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/python/sitecustomize.py
          ${LG_PYTHON_DIR}/sitecustomize.py
  DEPENDS ${CMAKE_SOURCE_DIR}/python/sitecustomize.py
  COMMENT "leakguard: python/sitecustomize.py")
# Its bytecode, for each interpreter: `leakguard run` sets PYTHONDONTWRITEBYTECODE, so
# without a .pyc beside it every recorded Python program compiled the hook again at
# start-up (~3 ms of `python3 -c pass`, BENCHMARKS.md "Less per process"). Checked by
# the source's hash, not its time stamp: a copy or an install leaves it valid, an edit
# of the source makes Python compile it again.
set(_lg_pycs "")
foreach(_m IN LISTS LG_PY_MINORS)
  set(_pyc ${LG_PYTHON_DIR}/__pycache__/sitecustomize.cpython-3${_m}.pyc)
  add_custom_command(
    OUTPUT ${_pyc}
    COMMAND ${LG_PY_${_m}_EXE} -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)"
            ${LG_PYTHON_DIR}/sitecustomize.py ${_pyc}
    DEPENDS ${LG_PYTHON_DIR}/sitecustomize.py
    COMMENT "leakguard: sitecustomize.py compiled for Python 3.${_m}"
    VERBATIM)
  list(APPEND _lg_pycs ${_pyc})
  install(FILES ${_pyc} DESTINATION ${CMAKE_INSTALL_LIBDIR}/leakguard/python/__pycache__)
endforeach()
add_custom_target(leakguard_python_site ALL DEPENDS ${LG_PYTHON_DIR}/sitecustomize.py ${_lg_pycs})
# `leakguard_python`: every module of the build plus the hook.
add_custom_target(leakguard_python ALL)
add_dependencies(leakguard_python leakguard_python_site)

foreach(_m IN LISTS LG_PY_MINORS)
  set(_t leakguard_python_3${_m})
  # isolate.py's bytecode, compiled by this interpreter (run at import from it, not
  # compiled there again: src/python/isolate.c)
  set(_pyc_bin ${CMAKE_BINARY_DIR}/gen/isolate.cpython-3${_m}.marshal)
  set(_pyc_c ${CMAKE_BINARY_DIR}/gen/isolate_pyc_3${_m}.c)
  add_custom_command(OUTPUT ${_pyc_c}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/gen
    COMMAND ${LG_PY_${_m}_EXE} -c "import marshal, sys; src = open(sys.argv[1]).read(); open(sys.argv[2], 'wb').write(marshal.dumps(compile(src, 'leakguard/isolate.py', 'exec', dont_inherit=True)))"
            ${CMAKE_SOURCE_DIR}/src/python/isolate.py ${_pyc_bin}
    COMMAND ${CMAKE_COMMAND} -DIN=${_pyc_bin} -DOUT=${_pyc_c} -DNAME=lgpy_isolate_pyc -DSIZE=1
            -P ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    DEPENDS ${CMAKE_SOURCE_DIR}/src/python/isolate.py ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "leakguard: isolate.py compiled for Python 3.${_m}"
    VERBATIM)
  add_library(${_t} MODULE ${LG_PYTHON_SOURCES} ${_pyc_c})
  set_target_properties(${_t} PROPERTIES
    PREFIX ""
    OUTPUT_NAME leakguard
    SUFFIX ${LG_PY_${_m}_SUFFIX}
    LIBRARY_OUTPUT_DIRECTORY ${LG_PYTHON_DIR}
    C_VISIBILITY_PRESET hidden)
  # Only this interpreter's headers: nothing else in the build includes Python.h.
  target_include_directories(${_t} SYSTEM PRIVATE ${LG_PY_${_m}_INCLUDE})
  # The python layer sees core (region.h: the contract with the recorder) only.
  target_include_directories(${_t} PRIVATE ${LG_INC_python} ${LG_INC_core} ${LG_INC_public})
  # No link to libpython (the interpreter provides its symbols) nor to libleakguard
  # (the recorder's symbols are looked up at run time).
  # libseccomp: leakguard.isolated (src/python/isolate.c, src/isolate).
  target_link_libraries(${_t} PRIVATE ${CMAKE_DL_LIBS} PkgConfig::SECCOMP m)
  target_compile_options(${_t} PRIVATE -fno-strict-aliasing)
  target_compile_definitions(${_t} PRIVATE LG_VERSION="${PROJECT_VERSION}")
  add_dependencies(leakguard_python ${_t})
  install(TARGETS ${_t} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/leakguard/python)
  if(LG_PY_${_m}_SITE)
    install(TARGETS ${_t} LIBRARY DESTINATION ${LG_PY_${_m}_SITE})
  endif()
endforeach()
# The exit hook goes into leakguard's own directory, which `leakguard run` puts first on
# the target's PYTHONPATH (in dist-packages it would be shadowed by Debian's
# sitecustomize, and would load into every Python program on the system).
install(FILES python/sitecustomize.py DESTINATION ${CMAKE_INSTALL_LIBDIR}/leakguard/python)
