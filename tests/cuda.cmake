# SPDX-License-Identifier: MIT
# GPU memory tests (issue #9), without a GPU: a stand-in driver (libcuda.so.1) and a
# stand-in NVML. Included from tests/CMakeLists.txt.
#   ctest -L cuda               all of them
#   ctest -L cuda-toolkit       the real libcudart (nvcc) against the stand-in driver
# The stand-in driver lands alone in ${LGC_DRIVER_DIR}, which the tests put on
# LD_LIBRARY_PATH so that dlopen("libcuda.so.1") finds it.
set(LGC_SRC ${CMAKE_CURRENT_SOURCE_DIR}/cuda)
set(LGC_OUT ${CMAKE_BINARY_DIR}/tests/cuda)
set(LGC_DRIVER_DIR ${LGC_OUT}/driver)

# -Bsymbolic: the stand-in's own calls (cuMemAllocHost_v2 -> cuMemHostAlloc) bind
# inside it, as in the real driver; an interposer that caught them would double count
# and a test could pass for the wrong reason.
add_library(lgc_standin_cuda SHARED ${LGC_SRC}/standin_cuda.c ${LGC_SRC}/standin_mem.c ${LGC_SRC}/standin_procs.c)
set_target_properties(lgc_standin_cuda PROPERTIES OUTPUT_NAME cuda SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${LGC_DRIVER_DIR} C_VISIBILITY_PRESET hidden)
target_link_options(lgc_standin_cuda PRIVATE -Wl,-Bsymbolic)
target_link_libraries(lgc_standin_cuda PRIVATE Threads::Threads ${CMAKE_DL_LIBS})

# A stand-in CUPTI for --cuda-um (tests/cuda/standin_cupti.c), alone in its directory.
add_library(lgc_standin_cupti SHARED ${LGC_SRC}/standin_cupti.c)
set_target_properties(lgc_standin_cupti PROPERTIES OUTPUT_NAME cupti
  LIBRARY_OUTPUT_DIRECTORY ${LGC_OUT}/cupti C_VISIBILITY_PRESET hidden)
target_link_libraries(lgc_standin_cupti PRIVATE Threads::Threads)

# A library with the name of PyTorch's CUDA allocator library (the report's notice).
add_library(lgc_fake_c10_cuda SHARED ${LGC_SRC}/fake_c10_cuda.c)
set_target_properties(lgc_fake_c10_cuda PROPERTIES OUTPUT_NAME c10_cuda LIBRARY_OUTPUT_DIRECTORY ${LGC_OUT}/torchlike)

# Unit tests of the GPU tables and report (tests/unit/test_cuda_store.c).
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
add_executable(test_cuda_store ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cuda_store.c)
target_link_libraries(test_cuda_store PRIVATE lgcore PkgConfig::CMOCKA)
target_compile_options(test_cuda_store PRIVATE ${LG_SAN_FLAGS})
target_link_options(test_cuda_store PRIVATE ${LG_SAN_FLAGS})
add_test(NAME cuda_unit_store COMMAND test_cuda_store)
set_tests_properties(cuda_unit_store PROPERTIES LABELS "cuda;unit" TIMEOUT 60)

function(lgc_program name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS;DEFS" ${ARGN})
  add_executable(${name} ${P_SOURCES})
  target_compile_options(${name} PRIVATE -O2 -g)
  target_compile_definitions(${name} PRIVATE ${P_DEFS})
  target_link_libraries(${name} PRIVATE ${P_LIBS} ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${LGC_OUT})
endfunction()

lgc_program(cuda_ways SOURCES ${LGC_SRC}/cuda_ways.c)                 # dlsym, cuGetProcAddress
lgc_program(cuda_lcuda SOURCES ${LGC_SRC}/cuda_ways.c LIBS lgc_standin_cuda DEFS LINKED)  # -lcuda
lgc_program(cuda_probe SOURCES ${LGC_SRC}/cuda_probe.c)               # no driver at all
lgc_program(cuda_scen SOURCES ${LGC_SRC}/cuda_scen.c LIBS lgc_standin_cuda)
# The static CUDA runtime's shape: its "runtime" part without debug information.
lgc_program(cuda_rtsim SOURCES ${LGC_SRC}/cuda_rtsim.c ${LGC_SRC}/cuda_rtsim_rt.c LIBS lgc_standin_cuda)
set_source_files_properties(${LGC_SRC}/cuda_rtsim_rt.c PROPERTIES COMPILE_OPTIONS "-g0")
add_dependencies(cuda_ways lgc_standin_cuda)
add_dependencies(cuda_scen lgc_standin_cupti lgc_fake_c10_cuda)

set(LGC_T ${Python3_EXECUTABLE} ${LGC_SRC}/cuda_test.py --leakguard $<TARGET_FILE:leakguard-cli>
  --bin ${LGC_OUT} --src ${LGC_SRC} --driver-dir ${LGC_DRIVER_DIR}
  --fake-nvml $<TARGET_FILE:guard_fake_nvml> --pydir ${CMAKE_BINARY_DIR}/python
  --cupti $<TARGET_FILE:lgc_standin_cupti> --c10 $<TARGET_FILE:lgc_fake_c10_cuda>)
# The real libcudart (CUDA toolkit) against the stand-in driver: nvcc-built, with the
# static runtime (nvcc's default) and the shared one. Without a toolkit the two tests
# say so and are skipped (exit 77).
find_program(LGC_NVCC nvcc PATHS /usr/local/cuda/bin NO_DEFAULT_PATH)
if(LGC_NVCC)
  get_filename_component(LGC_CUDA_ROOT ${LGC_NVCC} DIRECTORY)
  get_filename_component(LGC_CUDA_ROOT ${LGC_CUDA_ROOT} DIRECTORY)
  add_custom_command(OUTPUT ${LGC_OUT}/cudart_route_static
    COMMAND ${LGC_NVCC} -g -O2 -cudart static -o ${LGC_OUT}/cudart_route_static ${LGC_SRC}/cudart_route.cu
    DEPENDS ${LGC_SRC}/cudart_route.cu COMMENT "nvcc: cudart_route (static libcudart)")
  add_custom_command(OUTPUT ${LGC_OUT}/cudart_route_shared
    COMMAND ${LGC_NVCC} -g -O2 -cudart shared -Xlinker -rpath=${LGC_CUDA_ROOT}/lib64
            -o ${LGC_OUT}/cudart_route_shared ${LGC_SRC}/cudart_route.cu
    DEPENDS ${LGC_SRC}/cudart_route.cu COMMENT "nvcc: cudart_route (shared libcudart)")
  add_custom_target(lgc_cudart_route ALL DEPENDS ${LGC_OUT}/cudart_route_static ${LGC_OUT}/cudart_route_shared)
else()
  message(STATUS "cuda tests: nvcc not found in /usr/local/cuda/bin: the real-libcudart tests will be skipped")
endif()
foreach(v static shared)
  add_test(NAME cuda_cudart_${v} COMMAND ${LGC_T} --case cudart --variant ${v} --nvcc "${LGC_NVCC}")
  set_tests_properties(cuda_cudart_${v} PROPERTIES LABELS "cuda;cuda-toolkit" TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()

# scripts/gpu-check.sh end to end on the stand-in (about 2 minutes: nvcc builds).
add_test(NAME cuda_gpu_check COMMAND ${LGC_T} --case gpu_check)
set_tests_properties(cuda_gpu_check PROPERTIES LABELS "cuda;gpu-check" TIMEOUT 900 SKIP_RETURN_CODE 77)
foreach(case ways probe async vmm managed pinned ctx threads fork arrays notes live metrics nvml
             no_nvml kvcache workspace pool ring python um um_off torch_notice rtsim_named rtsim_anon entries pressure torch_stats storages)
  add_test(NAME cuda_${case} COMMAND ${LGC_T} --case ${case})
  set_tests_properties(cuda_${case} PROPERTIES LABELS "cuda" TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
