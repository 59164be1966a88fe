# SPDX-License-Identifier: Apache-2.0
# Version header with the git revision, written at configure time. The configure step depends on
# git's HEAD and the branch it points to, so a build after a commit re-runs it and the binaries never
# print the revision of an older configure.
set(TPSCOPE_GIT_SHA "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _sha)
    set(TPSCOPE_GIT_SHA ${_sha})
  endif()
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --absolute-git-dir WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _git_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND EXISTS "${_git_dir}/HEAD")
    set(_deps "${_git_dir}/HEAD")
    execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref -q HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                    OUTPUT_VARIABLE _ref OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_ref AND EXISTS "${_git_dir}/${_ref}")
      list(APPEND _deps "${_git_dir}/${_ref}")
    endif()
    if(EXISTS "${_git_dir}/packed-refs")
      list(APPEND _deps "${_git_dir}/packed-refs")
    endif()
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_deps})
  endif()
endif()
set(TPSCOPE_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${PROJECT_SOURCE_DIR}/src/common/version.h.in ${TPSCOPE_GENERATED_DIR}/tpscope/version.h @ONLY)
