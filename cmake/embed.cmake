# SPDX-License-Identifier: MIT
# Writes OUT, a C file defining `const char NAME[]` with the bytes of IN and a final
# NUL: the HTML page's CSS and script (src/output/html/) live in files of their own and
# are compiled into the report (cmake -DIN=... -DOUT=... -DNAME=... -P embed.cmake), and
# isolate.py's bytecode into the Python module.
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* generated from ${IN} by cmake/embed.cmake */\nconst char ${NAME}[] = {\n${bytes}0x00};\n")
# -DSIZE=1: also `const unsigned long NAME_size`, the bytes without the final NUL (for
# binary contents)
if(SIZE)
  file(APPEND "${OUT}" "const unsigned long ${NAME}_size = sizeof ${NAME} - 1;\n")
endif()
