# SPDX-License-Identifier: MIT
# Isolated calls (issue #15, docs/isolate.md).
#   isolate_c              lg_isolate_call: outcomes, exact bytes, named calls, bad input
#   isolate_cgroup         budgets in per-child memory cgroups (skipped where none can be made)
#   isolate_metrics        the calls' counters and histogram on `run --metrics`
#   isolate_py_<case>      leakguard.isolated on /usr/bin/python3 (tests/isolate/test_isolate.py)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
add_executable(test_isolate ${CMAKE_CURRENT_SOURCE_DIR}/isolate/test_isolate.c)
target_link_libraries(test_isolate PRIVATE lg_isolate PkgConfig::CMOCKA Threads::Threads)
target_compile_options(test_isolate PRIVATE ${LG_SAN_FLAGS})
add_test(NAME isolate_c COMMAND test_isolate)
set_tests_properties(isolate_c PROPERTIES LABELS isolate TIMEOUT 120)
# Budgets enforced by per-child memory cgroups: skipped (77) where none can be made.
add_test(NAME isolate_cgroup COMMAND test_isolate cgroup)
set_tests_properties(isolate_cgroup PROPERTIES LABELS isolate TIMEOUT 120 SKIP_RETURN_CODE 77)

# The isolated calls of a recorded program on `leakguard run --metrics` (item 4). The
# program links the shared library (never sanitized: it runs under the preload library).
add_executable(iso_metrics ${CMAKE_CURRENT_SOURCE_DIR}/isolate/iso_metrics.c)
target_link_libraries(iso_metrics PRIVATE leakguard_isolate)
add_test(NAME isolate_metrics
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/isolate/iso_metrics.py
                 --leakguard $<TARGET_FILE:leakguard-cli> --prog $<TARGET_FILE:iso_metrics>)
set_tests_properties(isolate_metrics PROPERTIES LABELS "isolate;metrics" TIMEOUT 180)
if(NOT (DEFINED LG_PYTHON AND NOT LG_PYTHON))
  add_test(NAME isolate_metrics_py
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/isolate/iso_metrics.py
                   --leakguard $<TARGET_FILE:leakguard-cli> --pydir ${CMAKE_BINARY_DIR}/python)
  set_tests_properties(isolate_metrics_py PROPERTIES LABELS "isolate;metrics;python" TIMEOUT 180)
endif()

# The issue's Python tests, on Debian's /usr/bin/python3 (python3-torch). The Python
# module is never sanitized: the same in both builds.
if(NOT (DEFINED LG_PYTHON AND NOT LG_PYTHON))
  foreach(c state forbidden budget timeout threads torch run pool)
    add_test(NAME isolate_py_${c}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/isolate/test_isolate.py
                     --pydir ${CMAKE_BINARY_DIR}/python --leakguard $<TARGET_FILE:leakguard-cli> ${c})
    # Generous: each request is a fork and several wake-ups, slow on a loaded machine
    # (a state run took 52 s at load average 23 on 2 cores, 180+ s with a CPU hog added).
    set_tests_properties(isolate_py_${c} PROPERTIES LABELS "isolate;python" TIMEOUT 600)
  endforeach()
  include(${CMAKE_SOURCE_DIR}/src/python/interpreters.cmake)
  # The pool on every other CPython the module is built for (src/python/interpreters.cmake):
  # each forks from a thread it does not know, and 3.9 to 3.11.7 have gh-112275.
  foreach(m ${LG_PY_MINORS})
    if(NOT LG_PY_${m}_EXE STREQUAL "/usr/bin/python3")
      add_test(NAME isolate_py_pool_3.${m}
               COMMAND ${LG_PY_${m}_EXE} ${CMAKE_CURRENT_SOURCE_DIR}/isolate/test_isolate.py
                       --pydir ${CMAKE_BINARY_DIR}/python pool)
      set_tests_properties(isolate_py_pool_3.${m} PROPERTIES LABELS "isolate;python" TIMEOUT 600)
    endif()
  endforeach()
endif()
