# SPDX-License-Identifier: MIT
# `import leakguard`: the CPython extension (src/python) and the sitecustomize hook
# (python/sitecustomize.py) that `leakguard run` puts first on PYTHONPATH so that
# scripts which never import leakguard still get holders explained at exit.
# Built against Debian's /usr/bin/python3 (3.11), the interpreter python3-torch is for.
# Everything lands in ${CMAKE_BINARY_DIR}/python (importable from the build tree) and
# is installed into /usr/bin/python3's dist-packages directory for the install prefix.
option(LG_PYTHON "Build the leakguard Python extension" ON)
if(NOT LG_PYTHON)
  return()
endif()

if(EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
if(NOT Python3_Development.Module_FOUND)
  message(WARNING "leakguard: Python headers not found (apt install python3-dev): "
                  "the leakguard Python module is not built")
  return()
endif()

set(LG_PYTHON_DIR ${CMAKE_BINARY_DIR}/python)
Python3_add_library(leakguard_python MODULE WITH_SOABI
  ${CMAKE_SOURCE_DIR}/src/python/leakguardmodule.c
  ${CMAKE_SOURCE_DIR}/src/python/explain.c
  ${CMAKE_SOURCE_DIR}/src/python/blocks.c
  ${CMAKE_SOURCE_DIR}/src/python/graph.c
  ${CMAKE_SOURCE_DIR}/src/python/naming.c
  ${CMAKE_SOURCE_DIR}/src/python/torch.c)
set_target_properties(leakguard_python PROPERTIES
  OUTPUT_NAME leakguard
  LIBRARY_OUTPUT_DIRECTORY ${LG_PYTHON_DIR}
  C_VISIBILITY_PRESET hidden)
# No link to libleakguard: the recorder's symbols are looked up at run time.
target_link_libraries(leakguard_python PRIVATE ${CMAKE_DL_LIBS})
target_compile_options(leakguard_python PRIVATE -fno-strict-aliasing)

add_custom_command(
  OUTPUT ${LG_PYTHON_DIR}/sitecustomize.py
  COMMAND ${CMAKE_COMMAND} -E make_directory ${LG_PYTHON_DIR}
  COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/python/sitecustomize.py
          ${LG_PYTHON_DIR}/sitecustomize.py
  DEPENDS ${CMAKE_SOURCE_DIR}/python/sitecustomize.py
  COMMENT "leakguard: python/sitecustomize.py")
add_custom_target(leakguard_python_site ALL DEPENDS ${LG_PYTHON_DIR}/sitecustomize.py)
add_dependencies(leakguard_python leakguard_python_site)

# Debian: prefix /usr -> lib/python3/dist-packages, other prefixes (/usr/local) ->
# lib/python3.X/dist-packages; both are on /usr/bin/python3's sys.path.
if(NOT LG_PYTHON_INSTALL_DIR)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(LG_PYTHON_INSTALL_DIR lib/python3/dist-packages)
  else()
    set(LG_PYTHON_INSTALL_DIR
        lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/dist-packages)
  endif()
endif()
install(TARGETS leakguard_python LIBRARY DESTINATION ${LG_PYTHON_INSTALL_DIR})
# The exit hook goes into leakguard's own directory, which `leakguard run` puts first on
# the target's PYTHONPATH (in dist-packages it would be shadowed by Debian's
# sitecustomize, and would load into every Python program on the system).
install(FILES python/sitecustomize.py DESTINATION ${CMAKE_INSTALL_LIBDIR}/leakguard/python)
install(TARGETS leakguard_python LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/leakguard/python)
