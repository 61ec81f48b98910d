# SPDX-License-Identifier: MIT
# Pattern classifier: helper libraries, dataset generator, trainer, evaluator and the
# regen-classifier-model target (issue #4, docs/classifier.md). Included from
# tools/CMakeLists.txt; paths are rooted at the source tree (CMAKE_SOURCE_DIR in the
# root build, computed from this file's location so a private build works too).
get_filename_component(LGC_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# Deterministic floating point for the classifier and its tools (no FMA contraction).
set(LGC_FP_FLAGS -ffp-contract=off)

# Classifier alone (features + inference + generated model): libm only.
add_library(lgclassify STATIC
  ${LGC_ROOT}/src/analysis/classify.c
  ${LGC_ROOT}/src/analysis/classify_model.c)
target_include_directories(lgclassify PUBLIC ${LGC_ROOT}/include ${LGC_ROOT}/src)
target_compile_options(lgclassify PRIVATE ${LGC_FP_FLAGS})
target_link_libraries(lgclassify PUBLIC m)

# `classify` command (cmd_classify.c) and the CSV reader (src/analysis/csv.c), for the
# evaluator and the tests.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LGC_CJSON REQUIRED IMPORTED_TARGET libcjson)
if(NOT TARGET lgcsv)
  add_library(lgcsv STATIC ${LGC_ROOT}/src/analysis/csv.c)
  target_include_directories(lgcsv PUBLIC ${LGC_ROOT}/src)
  target_link_libraries(lgcsv PUBLIC m)
endif()
add_library(lgclassify_cli STATIC ${LGC_ROOT}/src/cli/cmd_classify.c)
target_link_libraries(lgclassify_cli PUBLIC lgclassify lgcsv PkgConfig::LGC_CJSON)

# Synthetic labelled curves.
add_library(lgclassify_gen STATIC ${LGC_ROOT}/tools/classify/gen.c)
target_include_directories(lgclassify_gen PUBLIC ${LGC_ROOT}/tools/classify ${LGC_ROOT}/include)
target_compile_options(lgclassify_gen PRIVATE ${LGC_FP_FLAGS})
target_link_libraries(lgclassify_gen PUBLIC m)

add_executable(lg-gen-dataset ${LGC_ROOT}/tools/classify/gen_main.c)
target_link_libraries(lg-gen-dataset PRIVATE lgclassify_gen lgclassify)

# The trainer gets its own copy of the feature code without lg_classify(), so that it
# never depends on the (possibly stale or half-written) generated model.
add_executable(lg-train ${LGC_ROOT}/tools/classify/train.c ${LGC_ROOT}/src/analysis/classify.c)
target_compile_definitions(lg-train PRIVATE LGI_CLASSIFY_NO_MODEL)
target_compile_options(lg-train PRIVATE ${LGC_FP_FLAGS})
target_link_libraries(lg-train PRIVATE lgclassify_gen)

add_executable(lg-eval-classifier ${LGC_ROOT}/tools/classify/eval.c)
target_compile_definitions(lg-eval-classifier PRIVATE
  LG_RECORDED_SRC_DIR="${LGC_ROOT}/tools/classify-data/recorded")
target_link_libraries(lg-eval-classifier PRIVATE lgclassify_gen lgclassify_cli)

set_target_properties(lg-gen-dataset lg-train lg-eval-classifier PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

# Regenerates the committed model from scratch (generator + trainer, deterministic).
set(LGC_TRAIN_ARGS --train 420000 --val 3500 --epochs 120 --seed 1)
add_custom_target(regen-classifier-model
  COMMAND lg-train ${LGC_TRAIN_ARGS} --out ${LGC_ROOT}/src/analysis/classify_model.c
  DEPENDS lg-train
  WORKING_DIRECTORY ${LGC_ROOT}
  COMMENT "Training the pattern classifier -> src/analysis/classify_model.c"
  VERBATIM)

# Programs that produce each memory shape for real (recorded series, tools/classify-data).
file(GLOB LGC_SCENARIOS ${LGC_ROOT}/tools/classify/scenarios/*.c)
foreach(src ${LGC_SCENARIOS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(lgc-scn-${name} ${src})
  target_link_libraries(lgc-scn-${name} PRIVATE m)
  set_target_properties(lgc-scn-${name} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin OUTPUT_NAME lgc-scn-${name})
endforeach()
