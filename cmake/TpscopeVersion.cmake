# SPDX-License-Identifier: Apache-2.0
# Version header with the git revision, written at configure time.
set(TPSCOPE_GIT_SHA "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _sha)
    set(TPSCOPE_GIT_SHA ${_sha})
  endif()
endif()
set(TPSCOPE_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${PROJECT_SOURCE_DIR}/src/common/version.h.in ${TPSCOPE_GENERATED_DIR}/tpscope/version.h @ONLY)
