# SPDX-License-Identifier: MIT
# `leakguard attach` (issue #14, docs/attach.md): tests/attach/attach_test.py drives the
# CLI against tests/attach/target.c. Included from tests/CMakeLists.txt.
get_filename_component(LGA_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
add_executable(attach_target ${LGA_ROOT}/tests/attach/target.c)
# -fno-builtin: GCC would drop a malloc/free pair whose block does not escape.
target_compile_options(attach_target PRIVATE -O1 -fno-builtin -fno-omit-frame-pointer)
target_link_libraries(attach_target PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_library(attach_leaky SHARED ${LGA_ROOT}/tests/attach/leaky.c)
target_compile_options(attach_leaky PRIVATE -O1 -fno-builtin)
add_executable(attach_idle ${LGA_ROOT}/tests/attach/idle.c)
target_compile_options(attach_idle PRIVATE -O1 -fno-builtin -fno-omit-frame-pointer)
target_link_libraries(attach_idle PRIVATE Threads::Threads)
add_executable(attach_futex ${LGA_ROOT}/tests/attach/futex_idle.c)
target_compile_options(attach_futex PRIVATE -O1 -fno-builtin -fno-omit-frame-pointer)
target_link_libraries(attach_futex PRIVATE Threads::Threads)
add_executable(attach_static ${LGA_ROOT}/tests/attach/static_sleeper.c)
target_link_options(attach_static PRIVATE -static)
set(LGA_ARGS --cli $<TARGET_FILE:leakguard-cli> --target $<TARGET_FILE:attach_target>
    --leaky $<TARGET_FILE:attach_leaky> --static $<TARGET_FILE:attach_static>
    --idle $<TARGET_FILE:attach_idle> --futex $<TARGET_FILE:attach_futex>)
# "cycles": 3 short attach/detach cycles and a long one here (CI time);
# bench/attach_bench.sh runs 50 and measures the stop times.
if(LG_SANITIZE)
  list(APPEND LGA_ARGS --cycles 1) # the sanitized CLI is slower: CI time
endif()
foreach(case cycles first_stop got loaders kill_cli fork dlopen_lib mmap preattach errors python python_blocked python_torch other_user
             idle futex futex_loader metrics guard)
  add_test(NAME attach_${case} COMMAND ${Python3_EXECUTABLE} ${LGA_ROOT}/tests/attach/attach_test.py ${case} ${LGA_ARGS})
  set_tests_properties(attach_${case} PROPERTIES TIMEOUT 120 LABELS "attach")
endforeach()
# Holders after attach on every CPython 3.9-3.13 found (src/python/interpreters.cmake;
# a version absent here has no test, and the configure step says which were found).
include(${CMAKE_SOURCE_DIR}/src/python/interpreters.cmake)
foreach(m ${LG_PY_MINORS})
  add_test(NAME attach_python_holders_3.${m} COMMAND ${Python3_EXECUTABLE} ${LGA_ROOT}/tests/attach/attach_test.py
                                                     python_holders --python ${LG_PY_${m}_EXE} ${LGA_ARGS})
  set_tests_properties(attach_python_holders_3.${m} PROPERTIES TIMEOUT 120 LABELS "attach;python")
  # small objects (pymalloc's arenas) after attach: CPython's allocators wrapped, then put back
  add_test(NAME attach_python_small_3.${m} COMMAND ${Python3_EXECUTABLE} ${LGA_ROOT}/tests/attach/attach_test.py
                                                   python_small --python ${LG_PY_${m}_EXE} ${LGA_ARGS})
  set_tests_properties(attach_python_small_3.${m} PROPERTIES TIMEOUT 120 LABELS "attach;python")
endforeach()
add_dependencies(attach_target leakguard-cli)
