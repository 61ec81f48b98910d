# SPDX-License-Identifier: MIT
# Recorder benchmark (issue #2): allocation churn + two micro-benchmarks that justify
# the transport (shared memory vs pipe) and the stack capture (cache + libunwind).
# Not ctests. Driver: bench/run_recorder.sh; results: bench/RECORDER_RESULTS.md.
# Built the usual way: -O2 -g, no special flags (binaries in ${CMAKE_BINARY_DIR}/bench).
get_filename_component(LGR_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(LGR_OUT ${CMAKE_BINARY_DIR}/bench)

add_executable(churn ${LGR_ROOT}/bench/churn.c)
target_compile_options(churn PRIVATE -O2 -g)
target_link_libraries(churn PRIVATE Threads::Threads)

add_executable(micro_transport ${LGR_ROOT}/bench/micro_transport.c)
target_compile_options(micro_transport PRIVATE -O2 -g)
target_link_libraries(micro_transport PRIVATE Threads::Threads)

add_executable(micro_unwind ${LGR_ROOT}/bench/micro_unwind.c)
target_compile_options(micro_unwind PRIVATE -O2 -g)
target_link_libraries(micro_unwind PRIVATE PkgConfig::UNWIND Threads::Threads)

# The recorder's cost per malloc/free pair against the live heap (issue #32):
# bench/heap_scaling.py.
add_executable(heap_scaling ${LGR_ROOT}/bench/heap_scaling.c)
target_compile_options(heap_scaling PRIVATE -O2 -g)

# An allocation-heavy C++ HTTP server (issue #32): bench/server_bench.py.
add_executable(cxx_router ${LGR_ROOT}/bench/cxx_router.cpp)
target_compile_options(cxx_router PRIVATE -O2 -g)
target_link_libraries(cxx_router PRIVATE Threads::Threads)

set_target_properties(churn micro_transport micro_unwind heap_scaling cxx_router PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${LGR_OUT})
