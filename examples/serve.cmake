# SPDX-License-Identifier: MIT
# examples/serve: an inference-style HTTP server using the breaker API (issue #3).
# Linked against libleakguard.so (the `leakguard` target) so the lg_* calls resolve;
# it runs without `leakguard run` too (the API is a no-op at level normal).
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
add_executable(serve ${CMAKE_CURRENT_LIST_DIR}/serve/serve.c)
target_compile_options(serve PRIVATE -O2 -g)
set_target_properties(serve PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/examples
  BUILD_RPATH ${CMAKE_BINARY_DIR}/lib)
target_link_libraries(serve PRIVATE leakguard PkgConfig::MHD Threads::Threads)
# --isolate: lg_isolate_call (libleakguard_isolate.so, issue #15).
target_link_libraries(serve PRIVATE leakguard_isolate)
