# SPDX-License-Identifier: MIT
# liblgpool (issue #16, docs/pool.md): the generational caching allocator on host
# memory and on the stand-in CUDA driver (tests/cuda.cmake builds it). Included from
# tests/CMakeLists.txt.   ctest -L pool
set(LGP_T ${CMAKE_CURRENT_SOURCE_DIR}/pool)
add_executable(test_pool ${LGP_T}/test_pool.c)
target_link_libraries(test_pool PRIVATE lg_pool_static lgc_standin_cuda PkgConfig::CMOCKA)
target_compile_options(test_pool PRIVATE ${LG_SAN_FLAGS})
# The test exports lg_subscribe for the pool's dlsym(RTLD_DEFAULT) to find.
set_target_properties(test_pool PROPERTIES ENABLE_EXPORTS ON)
add_test(NAME pool_unit COMMAND test_pool)
set_tests_properties(pool_unit PROPERTIES LABELS "pool;unit" TIMEOUT 60
  ENVIRONMENT "LD_LIBRARY_PATH=${LGC_DRIVER_DIR}")

# The pluggable-allocator ABI of liblgpool.so, its environment and site profile.
add_executable(test_pool_abi ${LGP_T}/test_pool_abi.c)
target_include_directories(test_pool_abi PRIVATE ${LG_INC_public})
target_link_libraries(test_pool_abi PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(test_pool_abi PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(test_pool_abi lgpool lgc_standin_cuda)
add_test(NAME pool_abi COMMAND test_pool_abi $<TARGET_FILE:lgpool> ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(pool_abi PROPERTIES LABELS "pool" TIMEOUT 60
  ENVIRONMENT "LD_LIBRARY_PATH=${LGC_DRIVER_DIR}")

# The site profile keyed by Python lines, recorded by `leakguard run` and replayed
# through liblgpool.so's ABI from ctypes, on every CPython 3.9-3.13 found
# (src/python/interpreters.cmake; a version absent here has no test, and the
# configure step says which were found).
include(${CMAKE_SOURCE_DIR}/src/python/interpreters.cmake)
foreach(m ${LG_PY_MINORS})
  add_test(NAME pool_py_profile_3.${m}
           COMMAND ${LG_PY_${m}_EXE} ${LGP_T}/py_profile.py --leakguard $<TARGET_FILE:leakguard-cli>
                   --lgpool $<TARGET_FILE:lgpool> --work ${CMAKE_CURRENT_BINARY_DIR}/pool_py_profile)
  set_tests_properties(pool_py_profile_3.${m} PROPERTIES LABELS "pool;python" TIMEOUT 120)
endforeach()
