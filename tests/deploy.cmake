# SPDX-License-Identifier: MIT
# Monitoring files and the Prometheus endpoint end to end (issue #3). Included from
# tests/CMakeLists.txt.
#   deploy_check            promtool check/test rules, dashboard JSON, docs agree
#   deploy_prometheus_scrape a real Prometheus (Debian package) scrapes the exporter
#                            on loopback; values checked through its HTTP API
get_filename_component(LGD_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
add_test(NAME deploy_check COMMAND ${Python3_EXECUTABLE} ${LGD_ROOT}/tests/deploy/check_deploy.py --root ${LGD_ROOT})
set_tests_properties(deploy_check PROPERTIES TIMEOUT 120 LABELS "deploy;metrics")

add_executable(metrics_fixture ${LGD_ROOT}/tests/deploy/metrics_fixture.c)
target_link_libraries(metrics_fixture PRIVATE lgcore)
target_compile_options(metrics_fixture PRIVATE ${LG_SAN_FLAGS})
add_test(NAME deploy_prometheus_scrape
         COMMAND ${Python3_EXECUTABLE} ${LGD_ROOT}/tests/deploy/prometheus_scrape.py
                 --fixture $<TARGET_FILE:metrics_fixture>
                 --leakguard $<TARGET_FILE:leakguard-cli> --scenario $<TARGET_FILE:churn_leak>)
set_tests_properties(deploy_prometheus_scrape PROPERTIES TIMEOUT 150 LABELS "deploy;metrics")

