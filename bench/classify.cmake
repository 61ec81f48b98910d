# SPDX-License-Identifier: MIT
# Pattern classifier benchmark (issue #4): ns per lg_classify() on a 512-sample series
# and the classifier's code+data size. Not a ctest. Run: build/bin/classify-bench
get_filename_component(LGC_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
add_executable(classify-bench ${LGC_ROOT}/bench/classify_bench.c)
target_link_libraries(classify-bench PRIVATE lgclassify lgclassify_gen)
target_compile_definitions(classify-bench PRIVATE
  LGC_OBJECTS="$<JOIN:$<TARGET_OBJECTS:lg_classify>;$<TARGET_OBJECTS:lg_classify_model>,:>")
set_target_properties(classify-bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
