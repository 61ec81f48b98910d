# SPDX-License-Identifier: MIT
# Isolated calls' added latency (issue #15): bench/isolate_bench.c; results in BENCHMARKS.md.
#   BUILD/bench/isolate_bench --caller-mb 100 ; BUILD/bench/isolate_bench --caller-mb 1024
add_executable(isolate_bench ${CMAKE_CURRENT_SOURCE_DIR}/isolate_bench.c)
target_link_libraries(isolate_bench PRIVATE lg_isolate)
