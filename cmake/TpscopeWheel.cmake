# SPDX-License-Identifier: Apache-2.0
# The Python wheel (pyproject.toml builds it with scikit-build-core): the binding, libtpscope.so, the
# tpscope binary, the headers and the CMake package, laid out inside the package folder as an install
# prefix: tpscope/lib/libtpscope.so.0, tpscope/bin/tpscope, tpscope/include/tpscope/,
# tpscope/lib/cmake/tpscope/ (tpscope.cmake_prefix_path names it for find_package). NCCL and cuBLAS are
# not bundled: they come from NVIDIA's wheels, which pip installs beside tpscope in site-packages (torch
# depends on the same ones), found through a RUNPATH relative to $ORIGIN; where those wheels are not
# beside the package, the loader's own path.
#
# The two binaries are linked again from the objects the rest of the build compiles (the library's
# objects, the CLI's static libraries), with that RUNPATH, a single library file named by its SONAME
# (a wheel holds no symlinks), and main.cc compiled once more: a wheel built in an existing build
# folder (`-Cbuild-dir=build`) costs two links, not a second compile of the CUDA code. Everything here
# is EXCLUDE_FROM_ALL and in the install component `wheel`, so a plain build or `cmake --install` neither
# builds nor installs it.
set(TPSCOPE_WHEEL_RPATH "$ORIGIN/../../nvidia/nccl/lib;$ORIGIN/../../nvidia/cu13/lib")

add_library(tpscope_wheel_library SHARED EXCLUDE_FROM_ALL ${TPSCOPE_LIBRARY_OBJECTS})
get_target_property(_tps_cli_sources tpscope_cli SOURCES)
add_executable(tpscope_wheel_cli EXCLUDE_FROM_ALL ${_tps_cli_sources})
# The same link as tpscope and tpscope_cli, read from those targets so the two cannot drift apart.
foreach(_tps_pair "tpscope;tpscope_wheel_library" "tpscope_cli;tpscope_wheel_cli")
  list(GET _tps_pair 0 _tps_from)
  list(GET _tps_pair 1 _tps_to)
  foreach(_tps_property LINK_LIBRARIES LINK_OPTIONS LINK_DEPENDS)
    get_target_property(_tps_value ${_tps_from} ${_tps_property})
    if(_tps_value)
      set_property(TARGET ${_tps_to} PROPERTY ${_tps_property} "${_tps_value}")
    endif()
  endforeach()
endforeach()
target_include_directories(tpscope_wheel_library INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${TPSCOPE_GENERATED_DIR}> $<INSTALL_INTERFACE:tpscope/include>)
set_target_properties(tpscope_wheel_library PROPERTIES
  OUTPUT_NAME tpscope SOVERSION ${PROJECT_VERSION_MAJOR} EXPORT_NAME tpscope
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/wheel/lib INSTALL_RPATH "${TPSCOPE_WHEEL_RPATH}")
set_target_properties(tpscope_wheel_cli PROPERTIES
  OUTPUT_NAME tpscope RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/wheel/bin INSTALL_RPATH "${TPSCOPE_WHEEL_RPATH}")
add_custom_target(tpscope_wheel DEPENDS tpscope_wheel_library tpscope_wheel_cli)

# tpscope.__version__, from project(VERSION) like every other version string.
configure_file(${PROJECT_SOURCE_DIR}/cmake/tpscope_version.py.in ${CMAKE_BINARY_DIR}/wheel/_version.py @ONLY)

set(_tps_wheel COMPONENT wheel EXCLUDE_FROM_ALL)
install(TARGETS tpscope_wheel_library EXPORT tpscopeWheelTargets
  LIBRARY DESTINATION tpscope/lib NAMELINK_SKIP ${_tps_wheel})
install(TARGETS tpscope_wheel_cli RUNTIME DESTINATION tpscope/bin ${_tps_wheel})
install(DIRECTORY include/tpscope DESTINATION tpscope/include ${_tps_wheel} PATTERN meter.h EXCLUDE)
install(FILES ${TPSCOPE_GENERATED_DIR}/tpscope/version.h DESTINATION tpscope/include/tpscope ${_tps_wheel})
install(EXPORT tpscopeWheelTargets FILE tpscopeTargets.cmake NAMESPACE tpscope::
  DESTINATION tpscope/lib/cmake/tpscope ${_tps_wheel})
install(FILES ${CMAKE_BINARY_DIR}/tpscopeConfig.cmake ${CMAKE_BINARY_DIR}/tpscopeConfigVersion.cmake
  DESTINATION tpscope/lib/cmake/tpscope ${_tps_wheel})
install(FILES ${CMAKE_BINARY_DIR}/wheel/_version.py DESTINATION tpscope ${_tps_wheel})

