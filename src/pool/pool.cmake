# SPDX-License-Identifier: MIT
# liblgpool (docs/pool.md): the generational caching allocator, beside the layers (it
# sees the public header, and capture's header-only Python frame reader for its site
# profile's Python lines). liblgpool.so for torch's CUDAPluggableAllocator and C
# programs; lg_pool_static for the tests and the replay benchmark. Not sanitized in the
# shared library (it is loaded into other programs); the static one follows LG_SANITIZE.
lg_layer_dir(pool)
set(LGP_SOURCES src/pool/pool.c src/pool/backend.c src/pool/profile.c src/pool/abi.c)
add_library(lgpool SHARED ${LGP_SOURCES})
target_include_directories(lgpool PRIVATE ${LG_INC_pool} ${LG_INC_capture} ${LG_INC_public})
set_target_properties(lgpool PROPERTIES C_VISIBILITY_PRESET hidden OUTPUT_NAME lgpool
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_link_libraries(lgpool PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
target_link_options(lgpool PRIVATE -Wl,--no-undefined)
add_library(lg_pool_static STATIC ${LGP_SOURCES})
target_include_directories(lg_pool_static PUBLIC ${LG_INC_public})
target_include_directories(lg_pool_static PRIVATE ${LG_INC_pool} ${LG_INC_capture})
target_compile_options(lg_pool_static PRIVATE ${LG_SAN_FLAGS})
target_link_options(lg_pool_static PUBLIC ${LG_SAN_FLAGS})
target_link_libraries(lg_pool_static PUBLIC Threads::Threads ${CMAKE_DL_LIBS})
install(TARGETS lgpool LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
