# SPDX-License-Identifier: MIT
# OOM guard tests (issue #3). Included from tests/CMakeLists.txt.
#   ctest -L guard              all of them
#   ctest -L guard-unit         level transitions, config, source readers (cmocka)
#   ctest -L guard-cgroup       real memory cgroups (root; SKIP when cgroups cannot be made)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
set(LGG_TDIR ${CMAKE_CURRENT_SOURCE_DIR})

foreach(t test_guard_levels test_guard_config)
  add_executable(${t} ${LGG_TDIR}/unit/${t}.c)
  target_link_libraries(${t} PRIVATE lgcore PkgConfig::CMOCKA)
  target_compile_options(${t} PRIVATE ${LG_SAN_FLAGS})
  target_link_options(${t} PRIVATE ${LG_SAN_FLAGS})
  target_compile_definitions(${t} PRIVATE LGG_TEST_DATA="${LGG_TDIR}/guard/data")
  add_test(NAME guard_${t} COMMAND ${t})
  set_tests_properties(guard_${t} PROPERTIES LABELS "guard;guard-unit")
endforeach()

# memory behaviours (hold, leak, cache) and a stand-in NVML library
add_executable(guard_mem ${LGG_TDIR}/guard/guard_mem.c)
add_library(guard_fake_nvml SHARED ${LGG_TDIR}/guard/guard_fake_nvml.c)
set_target_properties(guard_fake_nvml PROPERTIES OUTPUT_NAME fake_nvml)

set(LGG_IT --leakguard $<TARGET_FILE:leakguard-cli> --mem $<TARGET_FILE:guard_mem>)
add_test(NAME guard_oom_kill_by_growth
  COMMAND ${Python3_EXECUTABLE} ${LGG_TDIR}/guard/oom.py ${LGG_IT} --runs 10)
add_test(NAME guard_oom_threshold_only
  COMMAND ${Python3_EXECUTABLE} ${LGG_TDIR}/guard/oom.py ${LGG_IT} --runs 3 --rate 40 --no-control
          --config ${LGG_TDIR}/guard/data/threshold_only.ini)
add_test(NAME guard_signal_policy
  COMMAND ${Python3_EXECUTABLE} ${LGG_TDIR}/guard/signal_policy.py ${LGG_IT})
add_test(NAME guard_publish
  COMMAND ${Python3_EXECUTABLE} ${LGG_TDIR}/guard/publish.py ${LGG_IT})
# RESOURCE_LOCK: deploy_prometheus_scrape's `guard --system` publishes "normal" to every
# region on the machine, this test's target's too (seen at -j2: level 0 read back after
# its own guard's emergency, the sequence bumped twice)
set_tests_properties(guard_publish PROPERTIES LABELS "guard" SKIP_RETURN_CODE 77 TIMEOUT 60
                     RESOURCE_LOCK system_guard)
# a run's guard tells only its own processes, never another run's (dry run or not)
add_test(NAME guard_run_scope
  COMMAND ${Python3_EXECUTABLE} ${LGG_TDIR}/guard/scope.py ${LGG_IT})
set_tests_properties(guard_run_scope PROPERTIES LABELS "guard" SKIP_RETURN_CODE 77 TIMEOUT 60
                     RESOURCE_LOCK system_guard)
add_test(NAME guard_bad_input
  COMMAND ${Python3_EXECUTABLE} ${LGG_TDIR}/guard/badinput.py ${LGG_IT}
          --fake-nvml $<TARGET_FILE:guard_fake_nvml>)
# Not RUN_SERIAL: the guard must beat the kernel's OOM killer beside any load (the
# flake hunt runs them beside two CPU hogs and the rest of the suite).
set_tests_properties(guard_oom_kill_by_growth guard_oom_threshold_only guard_signal_policy
  PROPERTIES LABELS "guard;guard-cgroup" SKIP_RETURN_CODE 77 TIMEOUT 180)
set_tests_properties(guard_bad_input PROPERTIES LABELS "guard;bad-input" SKIP_RETURN_CODE 77 TIMEOUT 120)
