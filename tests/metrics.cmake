# SPDX-License-Identifier: MIT
# Prometheus exporter unit tests (issue #3): exposition bytes and the HTTP endpoint.
# Included from tests/CMakeLists.txt.
get_filename_component(LGM_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
add_executable(test_metrics ${LGM_ROOT}/tests/unit/test_metrics.c)
target_link_libraries(test_metrics PRIVATE lgcore PkgConfig::CMOCKA)
target_compile_options(test_metrics PRIVATE ${LG_SAN_FLAGS})
target_compile_definitions(test_metrics PRIVATE LG_SOURCE_DIR="${LGM_ROOT}")
add_test(NAME unit_test_metrics COMMAND test_metrics)
set_tests_properties(unit_test_metrics PROPERTIES TIMEOUT 60 LABELS "unit;metrics")
