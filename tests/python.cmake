# SPDX-License-Identifier: MIT
# Python / PyTorch tests (issue #5): the `leakguard` extension on its own, and the
# seed leak patterns and controls run under `leakguard run` with Debian's python3-torch.
#   ctest --test-dir BUILD -L python
# A case can be run by hand, e.g.
#   /usr/bin/python3 tests/python/run_case.py --leakguard BUILD/bin/leakguard \
#     --pydir BUILD/python --script leak_list_history.py --expect leak --holder history --keep
# (tests/ is configured before src/python/python.cmake: test for the headers it needs)
execute_process(COMMAND /usr/bin/python3 -c
                  "import sysconfig,os,sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'],'Python.h')))"
                RESULT_VARIABLE LG_PYDEV_RC OUTPUT_QUIET ERROR_QUIET)
if(NOT LG_PYDEV_RC EQUAL 0 OR (DEFINED LG_PYTHON AND NOT LG_PYTHON))
  message(STATUS "leakguard: no Python headers (python3-dev): Python tests skipped")
  return()
endif()

set(LG_PY_DIR ${CMAKE_SOURCE_DIR}/tests/python)
set(LG_PY_COMMON --leakguard $<TARGET_FILE:leakguard-cli> --pydir ${CMAKE_BINARY_DIR}/python)

add_test(NAME python_module
         COMMAND /usr/bin/python3 ${LG_PY_DIR}/test_module.py ${LG_PY_COMMON})
set_tests_properties(python_module PROPERTIES TIMEOUT 300 LABELS "python" SKIP_RETURN_CODE 77)

execute_process(COMMAND /usr/bin/python3 -c "import torch"
                RESULT_VARIABLE LG_TORCH_RC OUTPUT_QUIET ERROR_QUIET)
if(NOT LG_TORCH_RC EQUAL 0)
  message(STATUS "leakguard: python3-torch not installed: PyTorch tests skipped (scripts/deps.sh)")
  return()
endif()

function(lg_py name)
  add_test(NAME python_${name}
           COMMAND /usr/bin/python3 ${LG_PY_DIR}/run_case.py ${LG_PY_COMMON} ${ARGN})
  # 77: the report has no Python frames yet (recorder without issue #5 part 1)
  set_tests_properties(python_${name} PROPERTIES TIMEOUT 300 LABELS "python;torch"
                       SKIP_RETURN_CODE 77)
endfunction()

# --- the three seed leaks: rank 1 is the # LEAK-SITE line, the holder names the root
lg_py(list_history   --script leak_list_history.py --expect leak
                     --holder "__main__.history (list)" --kind tensor)
lg_py(total_loss     --script leak_total_loss.py --expect leak
                     --holder "__main__.total_loss" --kind autograd-graph --holder-any)
lg_py(tensor_cache   --script leak_tensor_cache.py --expect leak
                     --holder "__main__._cache (dict)" --kind tensor)
# --- controls
lg_py(ok_item        --script ok_item.py --expect no-leak)
lg_py(ok_detached    --script ok_detached.py --expect no-leak)
lg_py(ok_lru         --script ok_lru.py --expect no-leak)
# --- threads, forked workers, abnormal exits
lg_py(threads        --script leak_threads.py --expect leak
                     --holder "__main__.results (list)" --kind tensor)
lg_py(fork           --script leak_fork.py "--args=--mode fork" --expect leak --child
                     --holder "__main__.seen (list)" --kind tensor)
lg_py(dataloader     --script leak_fork.py "--args=--mode dataloader" --expect leak --child
                     --no-holders)
lg_py(raise          --script leak_raise.py "--args=--exit raise" --expect leak --status 1
                     --holder "__main__.history (list)" --kind tensor)
lg_py(os_exit        --script leak_raise.py "--args=--exit _exit" --expect leak --status 3
                     --no-holders)
# os._exit skips the exit-time explain: the holders can only come from --explain-at-step
lg_py(explain_at_step --script leak_raise.py "--args=--exit _exit" --expect leak --status 3
                     --run-arg=--explain-at-step=30 --holder "__main__.history (list)" --kind tensor)
# backward() every step: only the graph's nodes stay (a few KiB per step), allocated
# by whichever op of the step creates the largest ones
lg_py(total_loss_backward --script leak_total_loss.py "--args=--backward" --expect leak
                     --marker "LEAK-SITE|LEAK-NODES|LEAK-HOLDER" --sample 1024 --seconds 6
                     --holder "__main__.total_loss" --kind autograd-graph --holder-any)
