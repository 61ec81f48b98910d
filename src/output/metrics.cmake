# SPDX-License-Identifier: MIT
# The Prometheus exporter (src/output/metrics.c) in lgcore, served by libmicrohttpd.
# Included from the root CMakeLists.txt after lgcore is defined.
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
target_sources(lgcore PRIVATE ${CMAKE_SOURCE_DIR}/src/output/metrics.c)
target_link_libraries(lgcore PUBLIC PkgConfig::MHD)
