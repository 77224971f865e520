# Writes OUT (a header defining NVLLM_GIT_REV) from the git revision of SRC, at build time, so
# that `nvllm --version` and bench reports name the commit the binary was built from (with
# "-dirty" for uncommitted changes). The file is rewritten only when the text changes.
execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR rev STREQUAL "")
  set(rev "")
else()
  execute_process(COMMAND git diff --quiet HEAD WORKING_DIRECTORY ${SRC} RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty)
    set(rev "${rev}-dirty")
  endif()
endif()
set(text "#define NVLLM_GIT_REV \"${rev}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
