# SPDX-License-Identifier: Apache-2.0
# Writes the git revision of SOURCE_DIR to OUTPUT as a header (cmake -DSOURCE_DIR=... -DOUTPUT=... -P this).
# Run at every build by the tpscope_git_revision target (cmake/TpscopeVersion.cmake), so a record names
# the commit that was built, not the one CMake configured: the 12-digit commit, with "-dirty" when a
# tracked file differs from it (untracked files are not part of any build until a tracked file names
# them), or "unknown" outside a git checkout. The file is rewritten only when that text changes, so
# an unchanged revision recompiles nothing.
if(NOT SOURCE_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "TpscopeGitRevision.cmake needs -DSOURCE_DIR=... -DOUTPUT=...")
endif()
if(NOT GIT_EXECUTABLE)
  find_program(GIT_EXECUTABLE git)
endif()
set(_revision "unknown")
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE _sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _sha)
    set(_revision ${_sha})
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                    OUTPUT_VARIABLE _changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0 OR _changes)
      string(APPEND _revision "-dirty")
    endif()
  endif()
endif()
set(_text "// SPDX-License-Identifier: Apache-2.0\n// Generated at build time by cmake/TpscopeGitRevision.cmake; do not edit.\n#pragma once\n#define TPSCOPE_GIT_REVISION \"${_revision}\"\n")
set(_old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} _old)
endif()
if(NOT _old STREQUAL _text)
  file(WRITE ${OUTPUT} "${_text}")
endif()
