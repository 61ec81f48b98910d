# SPDX-License-Identifier: MIT
# Monitoring files and the Prometheus endpoint end to end (issue #3), and the install
# (issue #35). Included from tests/CMakeLists.txt.
#   deploy_check            promtool check/test rules, dashboard JSON, docs agree
#   deploy_prometheus_scrape a real Prometheus (Debian package) scrapes the exporter
#                            on loopback; values checked through its HTTP API
#   deploy_install          a clean `cmake --install` into a temporary DESTDIR, used from there
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
# Its `leakguard guard --system` publishes a level to every recorded process on the
# machine: guard_publish, which checks the level its own guard published, locks it out.
set_tests_properties(deploy_prometheus_scrape PROPERTIES TIMEOUT 150 LABELS "deploy;metrics"
                     RESOURCE_LOCK system_guard)


# A clean install (issue #35): `cmake --install` into a temporary DESTDIR, then the
# installed binary, man page and Python module used from there alone, with nothing
# pointing to the build tree (tests/deploy/install.py). The module's site directory is
# the one the install rule uses (LG_PY_<minor>_SITE, src/python/interpreters.cmake).
include(${CMAKE_SOURCE_DIR}/src/python/interpreters.cmake)
set(LGD_PY_SITE "")
set(LGD_PY_SUFFIXES "")
if(NOT DEFINED LG_PYTHON OR LG_PYTHON)
  foreach(_m IN LISTS LG_PY_MINORS)
    list(APPEND LGD_PY_SUFFIXES ${LG_PY_${_m}_SUFFIX})
    if(LG_PY_${_m}_SUFFIX STREQUAL LG_PY_DEFAULT_SUFFIX)
      set(LGD_PY_SITE ${LG_PY_${_m}_SITE})
    endif()
  endforeach()
endif()
add_test(NAME deploy_install
         COMMAND ${Python3_EXECUTABLE} ${LGD_ROOT}/tests/deploy/install.py
                 --cmake ${CMAKE_COMMAND} --source ${CMAKE_SOURCE_DIR} --build ${CMAKE_BINARY_DIR} --prefix ${CMAKE_INSTALL_PREFIX}
                 --bindir ${CMAKE_INSTALL_BINDIR} --libdir ${CMAKE_INSTALL_LIBDIR}
                 --mandir ${CMAKE_INSTALL_MANDIR} --includedir ${CMAKE_INSTALL_INCLUDEDIR}
                 --pysite=${LGD_PY_SITE} --pysuffix=${LG_PY_DEFAULT_SUFFIX} "--pysuffixes=${LGD_PY_SUFFIXES}"
                 --version ${PROJECT_VERSION} --example $<TARGET_FILE:leaky>)
set_tests_properties(deploy_install PROPERTIES TIMEOUT 120 LABELS "deploy;install")
