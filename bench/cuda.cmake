# SPDX-License-Identifier: MIT
# GPU memory cost (issue #9): a cuMemAlloc/cuMemFree pair bare, preloaded, recorded.
# Not a ctest. Driver: bench/cuda_cost.sh; figures in BENCHMARKS.md. Linked with the
# stand-in driver of the tests (tests/cuda); on a GPU, LD_LIBRARY_PATH picks the real one.
if(TARGET lgc_standin_cuda)
  add_executable(cuda_cost ${CMAKE_CURRENT_LIST_DIR}/cuda_cost.c)
  target_compile_options(cuda_cost PRIVATE -O2 -g)
  target_link_libraries(cuda_cost PRIVATE lgc_standin_cuda)
  set_target_properties(cuda_cost PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
