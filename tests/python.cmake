# SPDX-License-Identifier: MIT
# Python tests.
#   ctest --test-dir BUILD -L python          all of them
#   ctest --test-dir BUILD -L pyver           every CPython 3.9-3.13 (issue #12)
#   ctest --test-dir BUILD -R python_3.12_    one version
#
# 1. Per CPython version (issue #12), for X in 9..13, each its own test:
#      python_3.X_layout    src/capture/pylayout.h against that version's headers
#      python_3.X_frames    the recorder's frame reader against sys._getframe()
#      python_3.X_module    the extension on its own (tests/python/test_module.py)
#      python_3.X_import_sample  imports sampled in a full recording, exact again after
#                           (tests/python/import_sample_check.py)
#      python_3.X_chain_malloc, _chain_pymalloc  the Python chain cache: each object at
#                           its own file and caller (tests/python/chain_check.py)
#      python_3.X_pymalloc  sampled mode keeps pymalloc, wrapped: objects sampled at their
#                           line; full mode and a user's PYTHONMALLOC left alone
#                           (tests/python/pymalloc_check.py)
#      python_3.X_<case>    a pure-Python scenario under `leakguard run`: rank 1 is the
#                           line marked # LEAK-SITE, the holder chain has the right root
#    The interpreters are found at run time (tests/python/pyinterp.py: pyenv, then
#    /usr/bin/python3.X); an absent one makes its tests print which and exit 77
#    (skipped). Headers found at configure time (src/python/interpreters.cmake) build
#    the layout test and the module; an interpreter present without them fails.
#      python_unsupported_version   CPython < 3.9: native frames only, one line
# 2. Debian's /usr/bin/python3 (3.11) with python3-torch (issue #5): the extension on its
#    own, and the seed leak patterns and controls. Always registered: without
#    python3-dev or python3-torch they fail, saying which is missing.
# A case can be run by hand, e.g.
#   /usr/bin/python3 tests/python/run_case.py --leakguard BUILD/bin/leakguard \
#     --pydir BUILD/python --script leak_list_history.py --expect leak --holder history --keep
#   /usr/bin/python3 tests/python/run_case.py --python 3.12 --leakguard BUILD/bin/leakguard \
#     --pydir BUILD/python --script pure_sessions.py --expect leak --holder "__main__.sessions"
if(DEFINED LG_PYTHON AND NOT LG_PYTHON)
  message(STATUS "leakguard: LG_PYTHON=OFF: Python tests not registered")
  return()
endif()
include(${CMAKE_SOURCE_DIR}/src/python/interpreters.cmake)

set(LG_PY_DIR ${CMAKE_SOURCE_DIR}/tests/python)
set(LG_PY_COMMON --leakguard $<TARGET_FILE:leakguard-cli> --pydir ${CMAKE_BINARY_DIR}/python)
set(LG_PY_DRIVER ${Python3_EXECUTABLE})
if(NOT LG_PY_DRIVER)
  set(LG_PY_DRIVER python3)
endif()

# ---------------------------------------------------------------- 1. every version
function(lg_pyver minor name)
  add_test(NAME python_3.${minor}_${name}
           COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/run_case.py ${LG_PY_COMMON} --python 3.${minor}
                   ${ARGN})
  set_tests_properties(python_3.${minor}_${name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "python;pyver")
endfunction()

foreach(m 9 10 11 12 13)
  if(LG_PY_${m}_INCLUDE)
    add_executable(test_pylayout_3${m} ${LG_PY_DIR}/test_pylayout.c)
    target_include_directories(test_pylayout_3${m} SYSTEM PRIVATE ${LG_PY_${m}_INCLUDE})
    target_include_directories(test_pylayout_3${m} PRIVATE ${LG_INC_capture} ${LG_INC_core} ${LG_INC_public})
    add_test(NAME python_3.${m}_layout COMMAND test_pylayout_3${m})
  else()
    # skipped where the interpreter is absent too, failed where it is here
    add_test(NAME python_3.${m}_layout COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/pyinterp.py --no-headers 3.${m})
  endif()
  set_tests_properties(python_3.${m}_layout PROPERTIES SKIP_RETURN_CODE 77 LABELS "python;pyver")

  add_test(NAME python_3.${m}_frames
           COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/frames_check.py --python 3.${m}
                   --lib $<TARGET_FILE:lg_pyframes_probe>)
  set_tests_properties(python_3.${m}_frames PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "python;pyver")

  # the module on its own: no-op mode, step/tag/snapshot, explain() chains and bounds,
  # the sitecustomize hook
  add_test(NAME python_3.${m}_module
           COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/test_module.py ${LG_PY_COMMON} --python 3.${m})
  set_tests_properties(python_3.${m}_module PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "python;pyver")
  lg_pyver(${m} sessions  --script pure_sessions.py --expect leak
                          --holder "__main__.sessions (dict)" --kind object)
  # the holder of a list in a running function's local is its frame: explained at a
  # step while the function runs (it ends with os._exit: nothing runs at exit)
  lg_pyver(${m} local     --script pure_local.py --expect leak --run-arg=--explain-at-step=240
                          --holder "frame serve():history (list)" --kind object)
  lg_pyver(${m} classattr --script pure_classattr.py --expect leak
                          --holder "__main__.Registry" --kind object)
  # full recording: sampled at 64 KiB, 8 KiB blocks give a live estimate in 64 KiB steps,
  # and that noise on a 512 KiB plateau was once read as growth (ASan build, 3.12)
  lg_pyver(${m} deque     --script pure_deque.py --expect no-leak --sample 0)
  # a program that only imports, the whole run: start-up, never a leak
  lg_pyver(${m} imports   --script pure_imports.py --expect no-leak --sample 0)
  lg_pyver(${m} threads   --script pure_threads.py --expect leak
                          --holder "__main__.results (list)" --kind object)
  lg_pyver(${m} fork      --script pure_fork.py --expect leak --child
                          --holder "__main__.seen (list)" --kind object)
  # sampled mode keeps pymalloc (wrapped); full mode and a user's PYTHONMALLOC do not
  add_test(NAME python_3.${m}_pymalloc
           COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/pymalloc_check.py ${LG_PY_COMMON} --python 3.${m})
  set_tests_properties(python_3.${m}_pymalloc PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "python;pyver")
  # imports sampled in a full recording, and recorded in full again right after
  add_test(NAME python_3.${m}_import_sample
           COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/import_sample_check.py ${LG_PY_COMMON} --python 3.${m})
  set_tests_properties(python_3.${m}_import_sample PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "python;pyver")
  # the per-thread chain cache: code objects reusing dead ones' addresses, two callers
  # under PYTHONMALLOC=malloc (the key's code fingerprints) and pymalloc (code deaths)
  foreach(alloc malloc pymalloc)
    add_test(NAME python_3.${m}_chain_${alloc}
             COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/chain_check.py ${LG_PY_COMMON} --python 3.${m} --allocator ${alloc})
    set_tests_properties(python_3.${m}_chain_${alloc} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                         LABELS "python;pyver")
  endforeach()
endforeach()

add_test(NAME python_unsupported_version
         COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/unsupported_check.py ${LG_PY_COMMON})
set_tests_properties(python_unsupported_version PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "python;pyver")

# ---------------------------------------------------------------- 2. Debian's python3 + torch
# Registered whatever is installed: without python3-dev (no module for /usr/bin/python3)
# or python3-torch, the drivers fail saying which is missing (scripts/deps.sh installs
# both); a test that is not there would pass unnoticed.
add_test(NAME python_module
         COMMAND /usr/bin/python3 ${LG_PY_DIR}/test_module.py ${LG_PY_COMMON})
set_tests_properties(python_module PROPERTIES TIMEOUT 300 LABELS "python")

function(lg_py name)
  add_test(NAME python_${name}
           COMMAND /usr/bin/python3 ${LG_PY_DIR}/run_case.py ${LG_PY_COMMON} --needs torch ${ARGN})
  set_tests_properties(python_${name} PROPERTIES TIMEOUT 300 LABELS "python;torch")
endfunction()
# The same, judging the run recorded in tests/fixtures/python_NAME (issue #30; what the
# report makes of the data: verdict, rank, holders, the leak entries, every format),
# scripts/record-fixtures.sh records it again. Needs neither torch nor the interpreter.
function(lg_pyfx name)
  add_test(NAME fixture_python_${name}
           COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/run_case.py ${LG_PY_COMMON} --needs torch
                   --fixture python_${name} ${ARGN})
  set_tests_properties(fixture_python_${name} PROPERTIES TIMEOUT 120 LABELS "fixture;python;torch")
endfunction()

# --- one scenario per leak pattern (issues #5, #10): rank 1 is the # LEAK-SITE line, the
# holder names the root, the leak is one entry of `leaks` (two at most for an autograd
# graph whose ops split), flagged while the program runs within 3 s of its first step.
# lg_pyfx: judged on a recorded run (tests/fixtures); lg_py: live, for what only a live
# run shows (explains while it runs, a frame's locals, processes, exits, ranks)
lg_pyfx(list_history   --script leak_list_history.py --expect leak --leaks 1 --detected-within 3
                     --holder "__main__.history (list)" --kind tensor --native-first
                     --fix "store `t.detach\\(\\)`.* in `history`.*deque")
# explained again while it runs each time its memory doubled, not only when flagged
lg_py(list_history_explains --script leak_list_history.py --expect leak --leaks 1 --seconds 8
                     --live-explains 2 --holder "__main__.history (list)" --kind tensor)
lg_py(total_loss     --script leak_total_loss.py --expect leak --leaks 2 --detected-within 3
                     --holder "__main__.total_loss" --kind autograd-graph --holder-any --native-first)
lg_pyfx(tensor_cache   --script leak_tensor_cache.py --expect leak --leaks 1 --detected-within 3
                     --holder "__main__._cache (dict)" --kind tensor --native-first
                     --fix "^bound `_cache`: evict old keys")
# a list in a function's locals: only an explanation made while the function runs can
# name it (the collector asks for one when it flags the site)
lg_py(local_list     --script leak_local_list.py --expect leak --leaks 1 --detected-within 3
                     --seconds 6 --holder "frame train():activations (list)" --kind tensor --native-first)
lg_pyfx(model_attr     --script leak_model_attr.py --expect leak --leaks 1 --detected-within 3
                     --holder "__main__.model (Net)" --kind tensor --native-first
                     --fix "in `model.seen`")
lg_pyfx(lru_unbounded  --script leak_lru_unbounded.py --expect leak --leaks 1 --detected-within 3
                     --holder "__main__.embed (_lru_cache_wrapper)" --kind tensor
                     --fix "lru_cache\\(maxsize=N\\)")
# the allocation's innermost Python line is torch's (Linear.forward): the site is the
# script's own line that called the model, torch's line its library_site (issue #34)
lg_py(layer_outputs  --script leak_layer_outputs.py --expect leak --leaks 1 --detected-within 3
                     --holder "__main__.outputs (list)" --kind tensor --library-site linear.py
                     --fix "in `outputs`")
# a temporary list made and dropped every step beside a dict of lists that grows: one
# leak at the append, the temporary's line never a growing site (issue #34 item 5),
# sampled (the default here) and in full
lg_py(temporaries    --script leak_dict_lists.py --expect leak --leaks 1 --never-growing TEMP)
lg_py(temporaries_full --script leak_dict_lists.py --sample 0 --expect leak --leaks 1 --never-growing TEMP)
# the line that keeps it (issue #34 item 2): the holder's own growth site, recorded in
# full mode (sampled mode records a container's buffer only when it is sampled): a
# list's item array at its append, a tensor bound to a name where it was made
lg_py(kept_list      --script leak_layer_outputs.py --sample 0 --expect leak --leaks 1
                     --holder "__main__.outputs (list)" --kind tensor --kept-at LEAK-KEPT appended)
lg_py(kept_name      --script leak_total_loss.py --sample 0 --expect leak --leaks 2
                     --holder "__main__.total_loss" --kind autograd-graph --holder-any
                     --kept-at LEAK-HOLDER bound --chain-within 2 --holder-bytes-within 10)
# two DDP ranks (torch.multiprocessing + gloo), rank 1 leaks: the report says which rank
lg_py(ddp            --script leak_ddp.py --expect leak --child --leaks 1 --leak-rank 1
                     --seconds 6 --holder "frame worker():kept (list)" --kind tensor --detected-within 3 --all-statuses
                     --fix "^only rank 1 grows: in the code that runs on rank 1 alone, .* in `kept`")
# --- controls
lg_pyfx(ok_item        --script ok_item.py --expect no-leak)
# `import torch` and friends only: 60-90 MiB under imports, then the exit. How many of
# its sites look like leaks before the start-up rule varies from run to run (0 to 50
# here), so the rule itself is asserted on a recorded curve (unit_test_report,
# test_report_startup_import); this run asserts no false alarm.
lg_pyfx(ok_imports     --script ok_imports.py --expect no-leak --sample 0)
lg_pyfx(ok_detached    --script ok_detached.py --expect no-leak)
lg_pyfx(ok_lru         --script ok_lru.py --expect no-leak)
lg_pyfx(ok_deque       --script ok_deque.py --expect no-leak)
# a full lru_cache whose entries get bigger: a curve that looks like a leak, held by a
# cache at its maxsize (holder-aware verdict)
lg_pyfx(ok_lru_varsize --script ok_lru_varsize.py --expect no-leak --bounded --seconds 6)
# the same with a deque(maxlen) whose entries get bigger
lg_pyfx(ok_deque_varsize --script ok_deque_varsize.py --expect no-leak --bounded --seconds 6)
# a dict of 16 keys whose values get longer every step: a leak, not a bounded dict (the
# bound of a dict whose length stopped growing is checked in python_*module)
lg_pyfx(dict_grow      --script leak_dict_grow.py --expect leak --leaks 1
                     --holder "__main__.history (dict)" --kind tensor --detected-within 3)
# --- threads, forked workers, abnormal exits
lg_py(threads        --script leak_threads.py --expect leak
                     --holder "__main__.results (list)" --kind tensor)
lg_py(fork           --script leak_fork.py "--args=--mode fork" --expect leak --child
                     --holder "__main__.seen (list)" --kind tensor --all-statuses)
lg_py(dataloader     --script leak_fork.py "--args=--mode dataloader" --expect leak --child
                     --no-holders --all-statuses)
lg_py(raise          --script leak_raise.py "--args=--exit raise" --expect leak --status 1
                     --holder "__main__.history (list)" --kind tensor)
lg_py(os_exit        --script leak_raise.py "--args=--exit _exit" --expect leak --status 3
                     --no-holders)
# the main thread never runs Python code (it waits in join(), the worker ends the process
# with os._exit): no explain request can be answered, and the report says so (issue #30)
add_test(NAME python_unanswered
         COMMAND /usr/bin/python3 ${LG_PY_DIR}/run_case.py ${LG_PY_COMMON} --script leak_unanswered.py
                 --expect leak --no-holders --no-holder "got no answer.*ended before it answered")
set_tests_properties(python_unanswered PROPERTIES TIMEOUT 300 LABELS "python")
# os._exit skips the exit-time explain: the holders can only come from --explain-at-step
lg_py(explain_at_step --script leak_raise.py "--args=--exit _exit" --expect leak --status 3
                     --run-arg=--explain-at-step=30 --holder "__main__.history (list)" --kind tensor)
# backward() every step: only the graph's nodes stay (a few KiB per step), allocated
# by whichever op of the step creates the largest ones
# It is the smallest leak of the suite (0.4 % of the process in 6 s): 12 s of steps give
# the detector enough snapshots to call it steady even from an ASan collector on a
# loaded machine (one snapshot every 0.4 s there)
lg_pyfx(total_loss_backward --script leak_total_loss.py "--args=--backward" --expect leak --leaks 2
                     --marker "LEAK-SITE|LEAK-NODES|LEAK-HOLDER" --sample 1024 --seconds 12
                     --holder "__main__.total_loss" --kind autograd-graph --holder-any --detected-within 3
                     --fix "^accumulate `loss.item\\(\\)`")

# --- the same verdicts on runs recorded beside two CPU hogs (issue #10: a verdict must
# not depend on a quiet machine; the fixtures hold what a loaded machine records): leaks
# of each kind of holder, and the controls
lg_pyfx(list_history_hog --script leak_list_history.py --expect leak --leaks 1 --detected-within 3
                       --holder "__main__.history (list)" --kind tensor --hog 2)
lg_pyfx(local_list_hog   --script leak_local_list.py --expect leak --leaks 1 --seconds 6
                       --holder "frame train():activations (list)" --kind tensor --hog 2)
lg_pyfx(total_loss_backward_hog --script leak_total_loss.py "--args=--backward" --expect leak --leaks 2
                       --marker "LEAK-SITE|LEAK-NODES|LEAK-HOLDER" --sample 1024 --seconds 12
                       --holder "__main__.total_loss" --kind autograd-graph --holder-any --hog 2)
lg_pyfx(ok_lru_varsize_hog --script ok_lru_varsize.py --expect no-leak --bounded --seconds 6 --hog 2)
lg_pyfx(ok_deque_varsize_hog --script ok_deque_varsize.py --expect no-leak --bounded --seconds 6 --hog 2)
lg_pyfx(ok_imports_hog   --script ok_imports.py --expect no-leak --sample 0 --hog 2)

# steps without code changes: a step at each step of the first torch optimizer unless
# the program calls leakguard.step() itself; --steps off (issue #34, item 8)
add_test(NAME python_auto_steps
         COMMAND /usr/bin/python3 ${LG_PY_DIR}/auto_steps_check.py ${LG_PY_COMMON})
set_tests_properties(python_auto_steps PROPERTIES TIMEOUT 300 LABELS "python;torch" SKIP_RETURN_CODE 77)

# issue #35: a leaking script through a pyenv shim (~80 process images): the helpers
# start lazily and store nothing, the script's leak is found at its line, the report is
# named after it. Skipped where pyenv has no python3 shim.
add_test(NAME python_pyenv_shim COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/shim_check.py
                                        --leakguard $<TARGET_FILE:leakguard-cli>)
set_tests_properties(python_pyenv_shim PROPERTIES TIMEOUT 120 LABELS "python" SKIP_RETURN_CODE 77)
# issue #35: a lazily started interpreter that turns its gc off still gets the module
# (its set-up waits on a gc callback otherwise): its leak is held by __main__.keep.
add_test(NAME python_lazy_gc_off COMMAND ${LG_PY_DRIVER} ${LG_PY_DIR}/lazy_gc_off.py
                                         --leakguard $<TARGET_FILE:leakguard-cli>)
set_tests_properties(python_lazy_gc_off PROPERTIES TIMEOUT 120 LABELS "python")
