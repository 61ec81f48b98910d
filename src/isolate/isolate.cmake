# SPDX-License-Identifier: MIT
# Isolated calls (issue #15, docs/isolate.md): lg_isolate_call() and the Python
# module's leakguard.isolated. Not a layer of the data flow: a runtime feature of the
# target process that needs the public header and core/region.h, the protocol contract
# (its calls are counted in the region when the process is recorded; no recorder code).
#   lg_isolate_obj      position-independent, hidden, never sanitized: linked into
#                       libleakguard_isolate.so and into every Python module
#   lg_isolate          the same sources as a static library, sanitized in LG_SANITIZE
#                       builds, for the C tests and the benchmark
#   leakguard_isolate   libleakguard_isolate.so, the C API (-lleakguard_isolate)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
lg_layer_dir(isolate)
set(LG_ISOLATE_SOURCES src/isolate/isolate.c src/isolate/seccomp.c src/isolate/pool.c
                        src/isolate/cgroup.c)
add_library(lg_isolate_obj OBJECT ${LG_ISOLATE_SOURCES})
target_include_directories(lg_isolate_obj PRIVATE ${LG_INC_isolate} ${LG_INC_core} ${LG_INC_public})
set_target_properties(lg_isolate_obj PROPERTIES POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
lg_layer(isolate SOURCES ${LG_ISOLATE_SOURCES} LINKS PkgConfig::SECCOMP Threads::Threads m)
target_include_directories(lg_isolate PRIVATE ${LG_INC_core})
add_library(leakguard_isolate SHARED $<TARGET_OBJECTS:lg_isolate_obj>)
target_include_directories(leakguard_isolate PUBLIC ${LG_INC_public})
target_link_libraries(leakguard_isolate PRIVATE PkgConfig::SECCOMP Threads::Threads m)
target_link_options(leakguard_isolate PRIVATE -Wl,--no-undefined)
set_target_properties(leakguard_isolate PROPERTIES C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
install(TARGETS leakguard_isolate LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
