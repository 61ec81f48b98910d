# SPDX-License-Identifier: MIT
# The recorder's Python frame reader (src/capture/python.c) as a ctypes-loadable
# library: tests/python/frames_check.py checks it on every CPython found, and
# bench/py_frames.sh times it (per version, against malloc/free and a native unwind
# measured in the same run).
add_library(lg_pyframes_probe SHARED
  ${CMAKE_SOURCE_DIR}/bench/pyframes_probe.c
  $<TARGET_OBJECTS:lg_capture_python>)
target_include_directories(lg_pyframes_probe PRIVATE ${LG_INC_capture} ${LG_INC_core} ${LG_INC_public})
set_target_properties(lg_pyframes_probe PROPERTIES
  C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_compile_options(lg_pyframes_probe PRIVATE -O2 -fno-omit-frame-pointer)
target_link_libraries(lg_pyframes_probe PRIVATE PkgConfig::UNWIND ${CMAKE_DL_LIBS})
