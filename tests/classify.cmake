# SPDX-License-Identifier: MIT
# Pattern classifier tests (issue #4). Included from tests/CMakeLists.txt; uses the
# lgclassify* libraries defined in tools/classify.cmake.
get_filename_component(LGC_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)

add_executable(test_classify ${LGC_ROOT}/tests/unit/test_classify.c)
target_link_libraries(test_classify PRIVATE lgclassify lgclassify_gen PkgConfig::CMOCKA)
target_compile_options(test_classify PRIVATE ${LG_SAN_FLAGS})
target_link_options(test_classify PRIVATE ${LG_SAN_FLAGS})
add_test(NAME classify_unit COMMAND test_classify)

# The command line: exit statuses and the exact one-line errors.
add_test(NAME classify_cli_errors
  COMMAND sh ${LGC_ROOT}/tests/unit/classify_cli.sh $<TARGET_FILE:leakguard-cli>
          ${LGC_ROOT}/tools/classify-data/recorded)
set_tests_properties(classify_cli_errors PROPERTIES LABELS "cli")
# The real CLI on a recorded curve: JSON with the expected class and all 7 names.
add_test(NAME classify_cli_json
  COMMAND $<TARGET_FILE:leakguard-cli> classify --format json
          ${LGC_ROOT}/tools/classify-data/recorded/linear-1.csv)
set_tests_properties(classify_cli_json PROPERTIES PASS_REGULAR_EXPRESSION
  "^{\"class\":\"linear-leak\",\"probabilities\":{\"stable\":[0-9.e-]+,\"linear-leak\":[0-9.e-]+,\"accelerating-leak\":[0-9.e-]+,\"step-leak\":[0-9.e-]+,\"plateau\":[0-9.e-]+,\"sawtooth\":[0-9.e-]+,\"fragmentation\":[0-9.e-]+}}")
# Real recorded curves: a connection leak snapshotted at every step marker after a
# start-up rise and a plugin's leak that starts after 1 s (the round-3 model called
# both step-leak), and start-up tables, a steady loop and a teardown to zero (an early
# round-4 model, before the teardown rule, called it an accelerating leak).
foreach(case "scn-cxx_cycle-9-proc:linear-leak" "scn-dlopen_late-9-proc:linear-leak"
             "scn-startup_tables-3-proc:plateau")
  string(REPLACE ":" ";" parts "${case}")
  list(GET parts 0 file)
  list(GET parts 1 class)
  add_test(NAME classify_cli_${file}
    COMMAND $<TARGET_FILE:leakguard-cli> classify ${LGC_ROOT}/tools/classify-data/recorded/${file}.csv)
  set_tests_properties(classify_cli_${file} PROPERTIES PASS_REGULAR_EXPRESSION "^${class}\n")
endforeach()
# A file that is not a curve: classify_cli_errors (the exact line, exit status 2).
