# SPDX-License-Identifier: Apache-2.0
# CPack runs this (CPACK_PRE_BUILD_SCRIPTS) on the package's staged files: the binaries lose the RUNPATH
# that `cmake --install` gives them (the CUDA toolkit's folder of the build machine). Installed from
# the package, they find NCCL and cuBLAS on the loader's path, as Debian's policy has it.
file(GLOB_RECURSE _files LIST_DIRECTORIES false "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
set(_dropped 0)
foreach(f IN LISTS _files)
  if(IS_SYMLINK "${f}")
    continue()
  endif()
  file(READ "${f}" _magic LIMIT 4 HEX)
  if(_magic STREQUAL "7f454c46")  # an ELF file
    file(RPATH_REMOVE FILE "${f}")
    math(EXPR _dropped "${_dropped} + 1")
  endif()
endforeach()
if(_dropped EQUAL 0)
  message(FATAL_ERROR "drop-run-paths.cmake: no ELF file under '${CPACK_TEMPORARY_INSTALL_DIRECTORY}'")
endif()
