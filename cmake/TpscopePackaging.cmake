# SPDX-License-Identifier: Apache-2.0
# The Debian package, made from this build by `cpack -G DEB` (run in the build folder): what
# `cmake --install` installs (the CLI, libtpscope.so and .a, headers, the CMake package, tpscope.pc)
# under /usr, and the exporter as a service: tpscope-meter.service runs `tpscope meter --serve` on
# 127.0.0.1:9400, its options in /etc/default/tpscope-meter (packaging/debian/ has the files and the
# maintainer scripts, which enable the unit as Debian enables a package's services). The package's own
# files are the install component `deb`, EXCLUDE_FROM_ALL, so `cmake --install` leaves them out.
#
# NCCL and cuBLAS come from NVIDIA's packages (libnccl2, libcublas-<major>-<minor>) or a CUDA toolkit
# on the loader's path: they are Recommends, not Depends, since a toolkit installed outside dpkg serves
# as well; dpkg-shlibdeps gives the Depends on Debian's own libraries. The packaged binaries keep no
# RUNPATH and tpscope.pc no -L folder of the build machine (packaging/debian/pre-build.cmake): a Debian
# system finds libraries on its loader's and linker's paths.
set(_tps_deb COMPONENT deb EXCLUDE_FROM_ALL)
set(_tps_deb_dir ${PROJECT_SOURCE_DIR}/packaging/debian)
install(FILES ${_tps_deb_dir}/tpscope-meter.service DESTINATION lib/systemd/system ${_tps_deb})
install(FILES ${_tps_deb_dir}/tpscope-meter.default DESTINATION /etc/default RENAME tpscope-meter ${_tps_deb})
# Debian's changelog of a native package: the version and where its changes are written.
string(TIMESTAMP _tps_deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)  # SOURCE_DATE_EPOCH when set
set(TPSCOPE_DEB_MAINTAINER "tpscope maintainers <maintainers@users.noreply.a-seed-6c6b8e92.example>"
    CACHE STRING "The Debian package's Maintainer field")
file(WRITE ${CMAKE_BINARY_DIR}/deb/changelog
  "tpscope (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
  "  * tpscope ${PROJECT_VERSION}; its changes are in /usr/share/doc/tpscope/CHANGELOG.md.\n\n"
  " -- ${TPSCOPE_DEB_MAINTAINER}  ${_tps_deb_date}\n")
execute_process(COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/deb/changelog COMMAND_ERROR_IS_FATAL ANY)
install(FILES ${_tps_deb_dir}/copyright ${CMAKE_BINARY_DIR}/deb/changelog.gz ${PROJECT_SOURCE_DIR}/README.md
              ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION share/doc/tpscope ${_tps_deb})
install(FILES ${_tps_deb_dir}/lintian-overrides DESTINATION share/lintian/overrides RENAME tpscope ${_tps_deb})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tpscope)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${TPSCOPE_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};tpscope;Unspecified;/;${CMAKE_BINARY_DIR};tpscope;deb;/")
set(CPACK_PRE_BUILD_SCRIPTS ${_tps_deb_dir}/pre-build.cmake)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tpscope_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "tensor-parallel AllReduce and a GPU interconnect meter
tpscope is a tensor-parallel AllReduce library for the GPUs of one host
(host-staged, peer-to-peer and NCCL backends behind one C API), and the tools
to see what it costs: the tpscope command measures the GPUs' PCIe and NVLink
bytes, runs a synthetic transformer and the four-arm study. This package has
the command, libtpscope with its headers, CMake package and pkg-config module,
and tpscope-meter.service, which serves the meter's byte counters to
Prometheus on 127.0.0.1:9400.")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libnccl2, libcublas-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${_tps_deb_dir}/postinst ${_tps_deb_dir}/prerm ${_tps_deb_dir}/postrm
    ${_tps_deb_dir}/conffiles ${_tps_deb_dir}/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
