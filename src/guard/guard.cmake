# SPDX-License-Identifier: MIT
# The OOM guard (issue #3): engine sources in lgcore, `leakguard guard` in the CLI.
# Included from the root CMakeLists.txt.
pkg_check_modules(INIH REQUIRED IMPORTED_TARGET inih)
set(LGG_SOURCES
  ${CMAKE_SOURCE_DIR}/src/guard/levels.c
  ${CMAKE_SOURCE_DIR}/src/guard/config.c
  ${CMAKE_SOURCE_DIR}/src/guard/sources.c
  ${CMAKE_SOURCE_DIR}/src/guard/regions.c
  ${CMAKE_SOURCE_DIR}/src/guard/engine.c)
target_sources(lgcore PRIVATE ${LGG_SOURCES})
target_sources(leakguard-cli PRIVATE ${CMAKE_SOURCE_DIR}/src/cli/cmd_guard.c)
target_link_libraries(lgcore PUBLIC PkgConfig::INIH ${CMAKE_DL_LIBS})
# The metrics exporter (src/output/metrics.c) is written in parallel: export guard
# metrics and serve --metrics only once it exists in the tree.
if(EXISTS ${CMAKE_SOURCE_DIR}/src/output/metrics.c)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/guard/engine.c
    ${CMAKE_SOURCE_DIR}/src/cli/cmd_guard.c PROPERTIES COMPILE_DEFINITIONS LGG_HAVE_METRICS=1)
endif()
install(FILES ${CMAKE_SOURCE_DIR}/deploy/leakguard-guard.service
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/systemd/system OPTIONAL)
