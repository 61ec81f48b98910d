# SPDX-License-Identifier: MIT
# liblgpool's trace replay (issue #16): bench/pool_replay.sh drives it; figures in
# BENCHMARKS.md. Not a ctest.
add_library(pool_trace SHARED ${CMAKE_CURRENT_LIST_DIR}/pool_trace.c)
set_target_properties(pool_trace PROPERTIES C_VISIBILITY_PRESET hidden LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
target_include_directories(pool_trace PRIVATE ${LG_INC_capture})
target_link_libraries(pool_trace PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
add_executable(pool_replay ${CMAKE_CURRENT_LIST_DIR}/pool_replay.c)
target_compile_options(pool_replay PRIVATE -O2)
target_link_libraries(pool_replay PRIVATE lg_pool_static)
set_target_properties(pool_replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
