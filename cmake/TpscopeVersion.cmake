# SPDX-License-Identifier: Apache-2.0
# The version header (installed: the release number only) is written at configure time. The git revision
# is not: it changes with every commit and every edit, so a custom target rewrites an internal header
# with it at every build (cmake/TpscopeGitRevision.cmake), and only when it changed, so that builds stay
# incremental. Code reads the revision through tpsGetGitRevision().
find_package(Git QUIET)
set(TPSCOPE_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${PROJECT_SOURCE_DIR}/src/common/version.h.in ${TPSCOPE_GENERATED_DIR}/tpscope/version.h @ONLY)
set(TPSCOPE_GIT_REVISION_HEADER ${TPSCOPE_GENERATED_DIR}/git_revision.h)
add_custom_target(tpscope_git_revision
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${TPSCOPE_GIT_REVISION_HEADER}
          -DGIT_EXECUTABLE=${GIT_EXECUTABLE} -P ${PROJECT_SOURCE_DIR}/cmake/TpscopeGitRevision.cmake
  BYPRODUCTS ${TPSCOPE_GIT_REVISION_HEADER}
  COMMENT "Git revision" VERBATIM)
