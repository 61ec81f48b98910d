# SPDX-License-Identifier: MIT
# Pattern classifier: helper libraries, dataset generator, trainer, evaluator and the
# regen-classifier-model target (issue #4, docs/classifier.md). Included from
# tools/CMakeLists.txt; paths are rooted at the source tree (CMAKE_SOURCE_DIR in the
# root build, computed from this file's location so a private build works too).
get_filename_component(LGC_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# The classifier's objects (lg_classify: features and inference; lg_classify_model:
# lg_classify() and the generated model), the CSV reader and what `leakguard classify`
# does below its command line (classify_file.c) are the analysis layer's (root
# CMakeLists.txt), compiled once with -ffp-contract=off. Tools and tests link no CLI
# code.
set(LGC_FP_FLAGS -ffp-contract=off)
add_library(lgclassify INTERFACE)
target_link_libraries(lgclassify INTERFACE lg_analysis)

# Synthetic labelled curves.
add_library(lgclassify_gen STATIC ${LGC_ROOT}/tools/classify/gen.c)
target_include_directories(lgclassify_gen PUBLIC ${LGC_ROOT}/tools/classify ${LGC_ROOT}/include)
target_compile_options(lgclassify_gen PRIVATE ${LGC_FP_FLAGS})
target_link_libraries(lgclassify_gen PUBLIC m)

add_executable(lg-gen-dataset ${LGC_ROOT}/tools/classify/gen_main.c)
target_link_libraries(lg-gen-dataset PRIVATE lgclassify_gen lgclassify)

# The trainer links the feature code without lg_classify() and the model, so that it
# never depends on the (possibly stale or half-written) generated model it writes.
add_executable(lg-train ${LGC_ROOT}/tools/classify/train.c $<TARGET_OBJECTS:lg_classify>)
target_include_directories(lg-train PRIVATE ${LG_INC_analysis} ${LG_INC_public})
target_link_libraries(lg-train PRIVATE lgclassify_gen m)

add_executable(lg-eval-classifier ${LGC_ROOT}/tools/classify/eval.c)
target_compile_definitions(lg-eval-classifier PRIVATE
  LG_RECORDED_SRC_DIR="${LGC_ROOT}/tools/classify-data/recorded")
target_link_libraries(lg-eval-classifier PRIVATE lgclassify_gen lgclassify)

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
