# SPDX-License-Identifier: Apache-2.0
# cmake/TpscopeGitRevision.cmake on a scratch repository (cmake -DSCRIPT=... -DWORK=... -P this): the
# commit it names, "-dirty" for an edited tracked file and not for an untracked one, a new commit
# named, "unknown" outside git, and an unchanged revision leaves the header untouched.
find_program(GIT git)
if(NOT GIT)
  message("git is not installed; nothing to check")
  return()
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/repo ${WORK}/plain)
set(out ${WORK}/git_revision.h)
function(git)
  execute_process(COMMAND ${GIT} -c user.name=t -c user.email=t@t -c commit.gpgsign=false ${ARGN}
                  WORKING_DIRECTORY ${WORK}/repo RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "git ${ARGN} failed")
  endif()
endfunction()
function(generate dir)
  # The ceiling keeps git from finding a repository above WORK (a build tree inside a checkout).
  execute_process(COMMAND ${CMAKE_COMMAND} -E env GIT_CEILING_DIRECTORIES=${WORK}
                          ${CMAKE_COMMAND} -DSOURCE_DIR=${dir} -DOUTPUT=${out} -P ${SCRIPT} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${SCRIPT} failed")
  endif()
endfunction()
function(expect revision)
  file(READ ${out} text)
  if(NOT text MATCHES "#define TPSCOPE_GIT_REVISION \"${revision}\"\n")
    message(FATAL_ERROR "expected revision ${revision}, the header says:\n${text}")
  endif()
endfunction()
function(head var)
  execute_process(COMMAND ${GIT} rev-parse HEAD WORKING_DIRECTORY ${WORK}/repo OUTPUT_VARIABLE sha
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(SUBSTRING ${sha} 0 12 sha)
  set(${var} ${sha} PARENT_SCOPE)
endfunction()

git(init -q)
file(WRITE ${WORK}/repo/a.txt "one\n")
git(add a.txt)
git(commit -q -m one)
head(first)
generate(${WORK}/repo)
expect(${first})

# Unchanged: the header keeps its time stamp (nothing that includes it recompiles).
file(TIMESTAMP ${out} before "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
generate(${WORK}/repo)
file(TIMESTAMP ${out} after "%s")
if(NOT before STREQUAL after)
  message(FATAL_ERROR "the header was rewritten although the revision did not change")
endif()

file(WRITE ${WORK}/repo/untracked.txt "x\n")
generate(${WORK}/repo)
expect(${first})

file(WRITE ${WORK}/repo/a.txt "two\n")
generate(${WORK}/repo)
expect(${first}-dirty)

git(commit -q -am two)
head(second)
if(second STREQUAL first)
  message(FATAL_ERROR "the second commit has the first one's revision")
endif()
generate(${WORK}/repo)
expect(${second})

generate(${WORK}/plain)
expect(unknown)
