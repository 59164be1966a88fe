# SPDX-License-Identifier: Apache-2.0
# CPack runs this (CPACK_PRE_BUILD_SCRIPTS) on the package's staged files, to drop what `cmake --install`
# takes from the build machine: the binaries' RUNPATH (its CUDA toolkit's folder) and tpscope.pc's -L
# folders for the static link. Installed from the package, the binaries find NCCL and cuBLAS on the
# loader's path, and a static link finds NCCL and the CUDA runtime on the linker's, as Debian's policy
# has it.
file(GLOB_RECURSE _files LIST_DIRECTORIES false "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
set(_elf 0)
set(_pc 0)
foreach(f IN LISTS _files)
  if(IS_SYMLINK "${f}")
    continue()
  endif()
  file(READ "${f}" _magic LIMIT 4 HEX)
  if(_magic STREQUAL "7f454c46")  # an ELF file
    file(RPATH_REMOVE FILE "${f}")
    math(EXPR _elf "${_elf} + 1")
  elseif(f MATCHES "/pkgconfig/tpscope\\.pc$")
    file(READ "${f}" _text)
    string(REGEX REPLACE " -L/[^ \n]*" "" _text "${_text}")
    file(WRITE "${f}" "${_text}")
    math(EXPR _pc "${_pc} + 1")
  endif()
endforeach()
if(_elf EQUAL 0 OR NOT _pc EQUAL 1)
  message(FATAL_ERROR "pre-build.cmake: ${_elf} ELF files and ${_pc} tpscope.pc under '${CPACK_TEMPORARY_INSTALL_DIRECTORY}'")
endif()
